#!/usr/bin/env bash
# What following threads off their CPU costs (issue 18): tests/c/switches.c (two threads handing
# a byte back and forth through pipes, some 400 000 switches a second) alone, under `fsprof run`
# (default settings: agent on, 250 Hz), and under another fsprof build (BEFORE=path/to/fsprof,
# e.g. one built before switches were followed), in shuffled order in each of ROUNDS rounds.
# Prints the median ns per hand-over of each, the switches a second, and the ns added per switch.
# The program runs on CPU 0 alone (`taskset`): its two threads then switch on one CPU, some
# 400 000 times a second, instead of waking each other across CPUs, whose idle wake-ups on a
# virtual machine (tens of microseconds) would set the pace.
# Usage: [BEFORE=/path/to/fsprof] tests/benches/switch-cost.sh [ROUNDS] (from the workspace root,
# after `cargo build --release --workspace`; the perf backend needs root or CAP_PERFMON+CAP_BPF)
set -euo pipefail
rounds=${1:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -pthread tests/c/switches.c -o "$tmp/switches"
configs="alone fsprof"
[ -n "${BEFORE:-}" ] && configs="$configs before"
for round in $(seq "$rounds"); do
  for config in $(printf '%s\n' $configs | shuf); do
    case $config in
      alone) taskset -c 0 "$tmp/switches" 2 ;;
      fsprof) target/release/fsprof run -o "$tmp/out-$round" -- taskset -c 0 "$tmp/switches" 2 2>/dev/null ;;
      before) "$BEFORE" run -o "$tmp/before-$round" -- taskset -c 0 "$tmp/switches" 2 2>/dev/null ;;
    esac | sed "s/^/$config /"
  done
done > "$tmp/runs"
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
ns, rate = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    ns[f[0]].append(float(f[1]))
    rate[f[0]].append(float(f[5]))
alone = statistics.median(ns["alone"])
for config in ns:
    m = statistics.median(ns[config])
    switches = statistics.median(rate[config])
    # Each hand-over is a round trip: the per-switch cost is the added time over the switches
    # made in it (switches per second x seconds per hand-over).
    per_handover = switches * m / 1e9
    added = (m - alone) / per_handover if config != "alone" else 0.0
    print(f"{config:7} {m:8.1f} ns per hand-over ({m / alone:.3f}x), {switches:9.0f} switches/s, "
          f"{per_handover:.2f} switches per hand-over, +{added:.0f} ns per switch")
EOF_PY
