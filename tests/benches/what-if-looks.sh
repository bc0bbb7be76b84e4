#!/usr/bin/env bash
# What one look of `fsprof what-if` costs a thread on this machine (what-if-looks/looks.c):
# ROUNDS rounds of the fixed loop alone and with each kind of timer at PERIOD_NS (1 ms, the
# agent's), modes in a new order each round; prints the median CPU time of each mode, its
# looks, and the cost per look against the loop alone.
# Usage: tests/benches/what-if-looks.sh [ROUNDS] [PERIOD_NS]
set -euo pipefail
rounds=${1:-9} period=${2:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/looks" "$(dirname "$0")/what-if-looks/looks.c"
echo "machine: nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); kernel $(uname -r)"
for _ in $(seq "$rounds"); do
  for mode in $(printf '0\n1\n3\n4\n' | shuf); do
    "$work/looks" "$period" "$mode" >>"$work/runs"
  done
done
python3 - "$work/runs" <<'EOF_PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(int(f[1]), []).append((int(f[3]), float(f[7])))
alone = statistics.median(cpu for _, cpu in runs[0])
names = {0: "alone", 1: "task-clock + signal (the agent's)", 3: "task-clock, no signal", 4: "monotonic timer + signal"}
for mode in sorted(runs):
    cpu = statistics.median(c for _, c in runs[mode])
    looks = statistics.median(l for l, _ in runs[mode])
    per = f"{(cpu - alone) / looks * 1e6:6.1f} us a look" if looks else ""
    print(f"{names[mode]:36} cpu {cpu:.4f} s  looks {looks:5.0f}  {per}")
EOF_PY
