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
# A template-heavy C++ file for g++ (one cc1plus of a few seconds), and CPU-bound JavaScript.
open("templates.cpp", "w").write("""
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>
template <int N> struct fib { static constexpr long v = fib<N - 1>::v + fib<N - 2>::v; };
template <> struct fib<1> { static constexpr long v = 1; };
template <> struct fib<0> { static constexpr long v = 0; };
std::map<std::string, std::function<long(long)>> table() {
    std::map<std::string, std::function<long(long)>> t;
    t["a"] = [](long x) { return x + fib<40>::v; };
    t["b"] = [](long x) { return x * 3; };
    return t;
}
long count(const std::vector<std::string> &lines) {
    std::regex re("([a-z]+)=([0-9]+)");
    long n = 0;
    for (auto &l : lines) { std::smatch m; if (std::regex_search(l, m, re)) n += std::stol(m[2]); }
    return n + table()["a"](n);
}
""")
open("cpu.js", "w").write("""
let s = 0;
const m = new Map();
for (let i = 0; i < 3000000; i++) { m.set("k" + (i % 50000), i); s += JSON.stringify({ i }).length; }
const a = Array.from({ length: 400000 }, (_, i) => (i * 7919) % 100003).sort((x, y) => x - y);
console.log(s, m.size, a[a.length - 1]);
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

# The interpreter itself, not a version manager's shim (pyenv's runs some 25 processes first).
python=$(python3 -c 'import sys; print(sys.executable)')
cat > jobs.txt <<EOF_JOBS
strdup ./strdup
gcc for i in 1 2 3 4 5 6 7 8 9 10; do gcc -O2 -c unit0.c -o /dev/null; done
make for i in 1 2 3; do make -s -j2 -B all >/dev/null; done
sqlite3 rm -f db && sqlite3 db < queries.sql >/dev/null
git for i in 1 2 3 4 5; do git -C "$repo" log -p >/dev/null; done
xz xz -T2 -3 -c text.txt >/dev/null
python3 "$python" script.py >/dev/null
awk awk 'BEGIN { for (i = 0; i < 3000000; i++) a["key" i] = i; n = 0; for (k in a) n += a[k]; print n }'
tokio ./tokio-server serve 8 >port & read p <port; env -u LD_PRELOAD ./tokio-server load \$p 8 10000; wait
EOF_JOBS
# The programs of issue 39 besides: python3 with four threads handing work around (about 20k
# context switches a second), g++ of a template-heavy file, and node and ripgrep where installed.
cat >> jobs.txt <<EOF_JOBS
pythreads "$python" "$repo/tests/benches/cost-model/pyswitch.py" 20000 >/dev/null
g++ g++ -O2 -c templates.cpp -o /dev/null
EOF_JOBS
if command -v node >/dev/null; then echo "node node cpu.js >/dev/null" >> jobs.txt; fi
# redis under its own benchmark (Debian's redis-server and redis-tools), on a Unix socket of
# this directory: the server's one event loop, the benchmark's twenty connections.
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
  echo "redis redis-server --port 0 --unixsocket \$PWD/redis.sock --save '' --appendonly no >/dev/null & until redis-cli -s redis.sock ping >/dev/null 2>&1; do sleep 0.02; done; redis-benchmark -s redis.sock -n 100000 -c 20 -t set,get,incr,lpush -q >/dev/null; redis-cli -s redis.sock shutdown nosave >/dev/null 2>&1; wait" >> jobs.txt
fi
# Over the crates cargo fetched (some 160 MB of source here): ripgrep's threads walk the tree.
if command -v rg >/dev/null && [ -d "${CARGO_HOME:-$HOME/.cargo}/registry/src" ]; then
  echo "rg for i in \$(seq 15); do rg -c '\\w+Error\\w*::\\w+' \"\${CARGO_HOME:-\$HOME/.cargo}/registry/src\" >/dev/null; done" >> jobs.txt
fi

