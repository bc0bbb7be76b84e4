# Inputs and jobs for the benchmarks of real programs with the agent (agent-programs.sh,
# agent-calls.sh): sourced from an empty temporary directory with $repo set to the workspace
# root (and the workspace built). Writes the inputs there and jobs.txt: one job per line, its
# name and a bash command, each long enough to measure (a few hundred ms at least): the short
# ones repeated inside the job.
set -euo pipefail
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
# A tokio server (tests/benches/tokio-server) answering 8 connections of 10000 requests each from
# a load without the agent (it is not what is measured).
cargo build -q --release --manifest-path "$repo/tests/benches/tokio-server/Cargo.toml" \
  --target-dir "$repo/target/tokio-server"
cp "$repo/target/tokio-server/release/tokio-server" .
mkfifo port

cat > jobs.txt <<EOF_JOBS
strdup ./strdup
gcc for i in 1 2 3 4 5 6 7 8 9 10; do gcc -O2 -c unit0.c -o /dev/null; done
make for i in 1 2 3; do make -s -j2 -B all >/dev/null; done
sqlite3 rm -f db && sqlite3 db < queries.sql >/dev/null
git for i in 1 2 3 4 5; do git -C "$repo" log -p >/dev/null; done
xz xz -T2 -3 -c text.txt >/dev/null
python3 python3 script.py >/dev/null
awk awk 'BEGIN { for (i = 0; i < 3000000; i++) a["key" i] = i; n = 0; for (k in a) n += a[k]; print n }'
tokio ./tokio-server serve 8 >port & read p <port; env -u LD_PRELOAD ./tokio-server load \$p 8 10000; wait
EOF_JOBS

