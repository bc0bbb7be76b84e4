#!/usr/bin/env bash
# What a context switch of a thread fsprof does not watch costs while fsprof runs: the per-CPU
# design's program at `sched_switch` runs at every switch of the machine. tests/c/switches.c
# (two threads handing a byte through pipes, pinned to CPU 0) runs alone, beside fsprof
# attached to a sleeping process (so nothing of the ping-pong is watched), and beside an empty
# BPF program at the same tracepoint (cost-model/empty_switch_program.c: the floor any program
# there pays; variants 1 and 2 add the pid helper and one kernel read), in a shuffled order
# each round. Prints each configuration's median ns per hand-over (about two switches each).
# Usage: [FSPROF=path] [BASE=path] tests/benches/unwatched-switch.sh [ROUNDS] (root; from the
# workspace root after `cargo build --release --workspace`); BASE, another fsprof (an earlier
# build), adds a configuration `base`: the same beside it, for a before and after in one run.
set -euo pipefail
rounds=${1:-8}
fsprof=${FSPROF:-$PWD/target/release/fsprof}
base=${BASE:-}
tmp=$(mktemp -d)
sleep 1000 >/dev/null 2>&1 & sleeper=$!
trap 'kill $sleeper 2>/dev/null; rm -rf "$tmp"' EXIT
gcc -O2 -pthread tests/c/switches.c -o "$tmp/switches"
gcc -O2 tests/benches/cost-model/empty_switch_program.c -o "$tmp/empty"
for round in $(seq "$rounds"); do
  for config in $(printf '%s\n' alone fsprof empty0 empty1 empty2 ${base:+base} | shuf); do
    beside=
    case $config in
      alone) ;;
      fsprof | base) bin=$fsprof
        [ "$config" = base ] && bin=$base
        "$bin" attach $sleeper --duration 3 -o "$tmp/out-$round" >/dev/null 2>&1 &
        beside=$!; sleep 1 ;;
      empty*) "$tmp/empty" "${config#empty}" 2 & beside=$!; sleep 0.3 ;;
    esac
    printf '%s ' "$config"
    taskset -c 0 "$tmp/switches" 1
    [ -z "$beside" ] || wait $beside
  done
done > "$tmp/runs"
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
ns = collections.defaultdict(list)
for line in open(sys.argv[1]):
    config, value = line.split()[:2]
    ns[config].append(float(value))
alone = statistics.median(ns["alone"])
for config in ["alone", "empty0", "empty1", "empty2", "fsprof", "base"]:
    if config not in ns:
        continue
    m = statistics.median(ns[config])
    print(f"{config:8} median {m:8.1f} ns per hand-over, +{m - alone:6.1f} ({len(ns[config])} runs)")
EOF_PY
