#!/usr/bin/env bash
# Wall time of real programs with and without the agent preloaded (LD_PRELOAD of
# libfsprof_agent.so, no profiler attached: the marks are pushed and popped all the same), for
# BENCHMARKS.md. Run from the workspace root after `cargo build --release --workspace`.
# Usage: [AGENT=path/to/libfsprof_agent.so] tests/benches/agent-programs.sh [ROUNDS]
#
# Each round runs every program alone and with the agent, in a shuffled order; the script prints
# per program the median wall and CPU times of each and the median of the rounds' ratios (with
# the agent / alone, paired within a round, which cancels the host's drift). Programs (inputs generated in
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

# One job per program, each long enough to measure (a few hundred ms at least): the short ones
# repeated inside the job.
cat > jobs.txt <<EOF_JOBS
strdup ./strdup
gcc for i in 1 2 3 4 5 6 7 8 9 10; do gcc -O2 -c unit0.c -o /dev/null; done
make for i in 1 2 3; do make -s -j2 -B all >/dev/null; done
sqlite3 rm -f db && sqlite3 db < queries.sql >/dev/null
git for i in 1 2 3 4 5; do git -C "$repo" log -p >/dev/null; done
xz xz -T2 -3 -c text.txt >/dev/null
python3 python3 script.py >/dev/null
EOF_JOBS

# Each round runs every job alone and with the agent, in a shuffled order, and takes each run's
# wall time and CPU time (user + system of the job and its children, from wait4): the CPU time
# is what the agent adds to, and moves less with the host's other load than the wall time.
python3 - "$rounds" "$agent" jobs.txt <<'EOF_PY'
import os, random, statistics, sys, time
rounds, agent, jobs_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jobs = dict(line.rstrip("\n").split(" ", 1) for line in open(jobs_file) if line.strip())
runs = {}  # (program, config) -> list of (wall, cpu) or per-iteration ns
for round_ in range(rounds):
    order = [(p, c) for p in jobs for c in ("alone", "agent")]
    random.shuffle(order)
    for program, config in order:
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        if config == "agent":
            env["LD_PRELOAD"] = agent
        start = time.monotonic()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(w, 1)
            os.execve("/bin/bash", ["bash", "-c", jobs[program]], env)
        os.close(w)
        out = os.read(r, 1 << 16).decode()
        while os.read(r, 1 << 16):
            pass
        os.close(r)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        cpu = usage.ru_utime + usage.ru_stime
        if program == "strdup":
            value = (float(out.split()[-1]), float(out.split()[-1]))
        else:
            value = (wall * 1e3, cpu * 1e3)
        runs.setdefault((program, config), []).append(value)
print(f"{rounds} rounds; medians; ratio = median over rounds of (with agent / alone), paired within a round (25th .. 75th percentile)")
print(f"{'program':<8} {'alone wall':>11} {'agent wall':>11} {'wall ratio':>24} {'alone cpu':>10} {'agent cpu':>10} {'cpu ratio':>24}")
for program in jobs:
    alone, agent_runs = runs[(program, "alone")], runs[(program, "agent")]
    cells = []
    for k in (0, 1):
        ratios = [b[k] / a[k] for a, b in zip(alone, agent_runs)]
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        unit = "ns" if program == "strdup" else "ms"
        cells.append(f"{statistics.median(x[k] for x in alone):>9.1f}{unit} {statistics.median(x[k] for x in agent_runs):>9.1f}{unit} "
                     f"{statistics.median(ratios):>7.3f} ({q[0]:.3f} .. {q[2]:.3f})")
    print(f"{program:<8} " + "  ".join(cells))
print("strdup: ns per iteration (a strdup and a free) as the program measures them, in both columns")
EOF_PY
