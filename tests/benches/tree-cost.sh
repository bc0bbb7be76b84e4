#!/usr/bin/env bash
# What following a program's children costs, for BENCHMARKS.md: `make -s -j2 -B all` of
# real-programs.sh's 12 small C files (31 processes: make, 12 `sh -c`, 12 gcc drivers, their cc1
# and as) alone, under `fsprof run --no-follow` and under `fsprof run` (children followed), in a
# shuffled order each round. Prints the medians of make's own wall time (timed inside the job,
# so fsprof's work after the program exits is not in it) and of the CPU time of everything (the
# job and, under fsprof, fsprof). Run from the workspace root after `cargo build --release
# --workspace`.
# Usage: tests/benches/tree-cost.sh [ROUNDS] [RATE]
set -euo pipefail
rounds=${1:-10}
rate=${2:-250}
repo=$PWD
fsprof=$repo/target/release/fsprof
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
. "$repo/tests/benches/real-programs.sh" > /dev/null
cat > job.sh <<'EOF_SH'
#!/bin/sh
s=$(date +%s%N); make -s -j2 -B all; e=$(date +%s%N); echo "$(( (e - s) / 1000 ))" > "$1"
EOF_SH
chmod +x job.sh
python3 - "$rounds" "$rate" "$fsprof" <<'EOF_PY'
import os, random, resource, shutil, statistics, subprocess, sys
rounds, rate, fsprof = int(sys.argv[1]), sys.argv[2], sys.argv[3]
configs = {
    "alone": [],
    "fsprof run --no-follow": [fsprof, "run", "--rate", rate, "--no-follow", "-o", "out", "--"],
    "fsprof run": [fsprof, "run", "--rate", rate, "-o", "out", "--"],
}
wall = {name: [] for name in configs}
cpu = {name: [] for name in configs}
for _ in range(rounds):
    for name in random.sample(list(configs), len(configs)):
        shutil.rmtree("out", ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(configs[name] + ["./job.sh", "took"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall[name].append(int(open("took").read()) / 1e3)
        cpu[name].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3)
print(f"{rounds} rounds at {rate} Hz; medians (25th .. 75th percentile)")
for name in configs:
    q = lambda v: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    w, c = q(wall[name]), q(cpu[name])
    print(f"{name:24} make's wall {statistics.median(wall[name]):6.0f} ms ({w[0]:.0f} .. {w[2]:.0f})"
          f"   CPU of all {statistics.median(cpu[name]):6.0f} ms ({c[0]:.0f} .. {c[2]:.0f})")
EOF_PY
