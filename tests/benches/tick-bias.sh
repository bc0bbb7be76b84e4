#!/usr/bin/env bash
# tick-bias.sh: whether a profiler's samples of a thread that runs and sleeps in a steady
# rhythm (tick-bias/rhythm.c: 700 us in spin_hashing, a 500 us sleep, 300 us in spin_unmarked)
# fall where its CPU time went: the error of spin_hashing's share, in points, by the samples'
# count and by the time they stand for in the report. A CPU's timer ticks on the CPU's clock,
# not on the thread's time, so what a sample stands for matters there (issue 39, twenty-eighth
# session: `Sampler::calibrate`).
# Usage: [ROUNDS=5] [SECS=10] [RATE=250] tests/benches/tick-bias.sh FSPROF... [perf]
# Each FSPROF (a path to an fsprof binary) runs `fsprof run --rate RATE` of rhythm in turn, in
# a new random order each round; `perf` runs `perf record -a -e cpu-clock` at the same period
# (no weights: by count only). Prints each run, then each one's mean and standard deviation.
set -euo pipefail
rounds=${ROUNDS:-5}
secs=${SECS:-10}
rate=${RATE:-250}
src=$(cd "$(dirname "$0")" && pwd)/tick-bias
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fno-omit-frame-pointer -o "$work/rhythm" "$src/rhythm.c"
cd "$work"
period=$(python3 -c "print(int(0.95e9 / $rate))")
for round in $(seq "$rounds"); do
  for who in $(shuf -e "$@"); do
    if [ "$who" = perf ]; then
      perf record -q -a -e cpu-clock -c "$period" -k CLOCK_MONOTONIC -o perf.data -- ./rhythm "$secs" 2> /dev/null
      echo "$who: $(python3 "$src/shares.py" . perf.data)"
    else
      "$who" run --rate "$rate" -o prof -- ./rhythm "$secs" > /dev/null 2>&1
      echo "$who: $(python3 "$src/shares.py" prof)"
    fi
  done
done | tee results.txt
python3 - <<'PY'
import statistics
runs = {}
for line in open("results.txt"):
    who, rest = line.split(": ", 1)
    parts = rest.split()
    runs.setdefault(who, []).append((float(parts[2]), float(parts[-1]) if "time" in rest else None))
for who, values in runs.items():
    count = [c for c, _ in values]
    line = f"{who}: by count mean {statistics.mean(count):+.2f} sd {statistics.pstdev(count):.2f}"
    times = [t for _, t in values if t is not None]
    if times:
        line += f"; by time mean {statistics.mean(times):+.2f} sd {statistics.pstdev(times):.2f}"
    print(line + f" ({len(values)} runs)")
PY
