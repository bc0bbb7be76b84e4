#!/usr/bin/env bash
# Wall time of real programs with and without the agent preloaded (LD_PRELOAD of
# libfsprof_agent.so, no profiler attached: the marks are pushed and popped all the same), for
# BENCHMARKS.md. Run from the workspace root after `cargo build --release --workspace`.
# Usage: [AGENT=path/to/libfsprof_agent.so] tests/benches/agent-programs.sh [ROUNDS]
#
# Each round runs every program alone and with the agent, in a shuffled order; the script prints
# per program the median wall time of each and the median of the rounds' ratios (with the agent
# / alone, paired within a round, which cancels the host's drift). Programs (inputs generated in
# a temporary directory): a C loop of 20 M strdup+free (malloc called from inside libc: ns per
# iteration as the program measures them), `gcc -O2 -c` of a 300-line C file, `make -j2` of 12
# such files, `sqlite3` running a query script, `git log -p` of this repository, `xz -T2` of
# 12 MB of text, and `python3` running a script (through pyenv's wrapper script if that is what
# `python3` is).
set -euo pipefail
rounds=${1:-7}
agent=${AGENT:-$PWD/target/release/libfsprof_agent.so}
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

cat > strdup.c <<'EOF_C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < 20000000; i++) { char *p = strdup("hello, world"); free(p); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 20000000);
    return 0;
}
EOF_C
gcc -O2 strdup.c -o strdup

# A 300-line C file: functions with loops, structs and calls for the optimiser to chew on.
python3 - <<'EOF_PY'
for n in range(12):
    lines = ["#include <stdio.h>", "#include <string.h>", "struct s { int a[16]; double d; };"]
    for f in range(24):
        lines += [
            f"static int f{n}_{f}(struct s *p, int k) {{",
            "    int t = 0;",
            "    for (int i = 0; i < 16; i++) {",
            f"        t += p->a[i] * (k + {f}) ^ (t >> 3);",
            "        if (t % 7 == 3) p->d += t / 3.0;",
            "    }",
            f"    return t + (k > 0 ? f{n}_{max(f - 1, 0)}(p, k - 1) : 0);" if f else "    return t;",
            "}",
            "",
            "",
            "",
            "",
        ]
    lines.append(f"int entry{n}(void) {{ struct s v; memset(&v, 0, sizeof v); return f{n}_23(&v, 5); }}")
    open(f"unit{n}.c", "w").write("\n".join(lines) + "\n")
objs = " ".join(f"unit{n}.o" for n in range(12))
open("Makefile", "w").write(f"all: {objs}\n%.o: %.c\n\tgcc -O2 -c $< -o $@\n")
# 12 MB of text for xz, and a query script for sqlite3, and a Python script.
import random
random.seed(7)
words = ["feature", "profiler", "sample", "mark", "stack", "thread", "region", "agent"]
with open("text.txt", "w") as out:
    while out.tell() < 12_000_000:
        out.write(" ".join(random.choice(words) for _ in range(12)) + f" {random.random()}\n")
open("queries.sql", "w").write("""
create table t(a integer, b text);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 300000)
insert into t select i, hex(randomblob(8)) from n;
create index ti on t(b);
select count(*), sum(a) from t where b like 'A%';
select substr(b, 1, 2) k, count(*) from t group by k order by 2 desc limit 5;
""")
open("script.py", "w").write("""
import json
data = [{"id": i, "name": "item%d" % i, "tags": ["x"] * (i % 5)} for i in range(200000)]
text = json.dumps(data)
back = json.loads(text)
print(len(text), sum(len(d["tags"]) for d in back), sorted(str(i) for i in range(100000))[-1])
""")
EOF_PY

run() {
  case $1 in
    strdup) ./strdup ;;
    gcc) gcc -O2 -c unit0.c -o /dev/null ;;
    make) make -s -j2 -B all >/dev/null ;;
    sqlite3) rm -f db && sqlite3 db < queries.sql >/dev/null ;;
    git) for _ in 1 2 3 4 5; do git -C "$repo" log -p >/dev/null; done ;;
    xz) xz -T2 -c text.txt >/dev/null ;;
    python3) python3 script.py >/dev/null ;;
  esac
}

programs="strdup gcc make sqlite3 git xz python3"
for round in $(seq "$rounds"); do
  for job in $(for p in $programs; do echo "$p:alone"; echo "$p:agent"; done | shuf); do
    program=${job%%:*}
    config=${job##*:}
    preload=
    [ "$config" = agent ] && preload=$agent
    start=$(date +%s%N)
    out=$(LD_PRELOAD=$preload run "$program" | tail -1)
    end=$(date +%s%N)
    if [ "$program" = strdup ]; then value=$out; else value=$(( (end - start) / 1000000 )); fi
    echo "$program $config $round $value"
  done
done > runs
python3 - runs <<'EOF_PY'
import collections, statistics, sys
times = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    program, config, round_, value = line.split()
    times[program].setdefault(config, {})[round_] = float(value)
print(f"{'program':<10} {'alone':>10} {'agent':>10} {'ratio (median of rounds)':>26}")
for program, configs in times.items():
    rounds = sorted(set(configs["alone"]) & set(configs["agent"]))
    ratios = [configs["agent"][r] / configs["alone"][r] for r in rounds]
    unit = "ns/iter" if program == "strdup" else "ms"
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"{program:<10} {statistics.median(configs['alone'].values()):>8.1f}{unit[:2]} "
          f"{statistics.median(configs['agent'].values()):>8.1f}{unit[:2]} "
          f"{statistics.median(ratios):>10.3f} ({q[0]:.3f} .. {q[2]:.3f})")
EOF_PY
