#!/usr/bin/env bash
# Many threads, and threads born and gone fast, for BENCHMARKS.md (issue 15): fsprof attached
# for SECONDS at 1000 Hz to `fsprof-target thousand` (500 threads busy, three fifths of their
# CPU time in a `validation` mark, and 500 asleep; its truth is taken over the stretch fsprof
# sampled) and to `fsprof-target births` (a thread born every 100 µs at best, each 50 µs in the
# mark and 50 µs outside; its truth counts each thread's time from its birth, and the spawner's):
# the feature's share against the target's own timing, the ticks achieved, and fsprof's CPU time (user + system). Run from
# the workspace root after `cargo build --release --workspace`.
# Usage: tests/benches/crowds.sh [SECONDS]
set -euo pipefail
seconds=${1:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for scenario in ${SCENARIOS:-thousand births}; do
  target/release/fsprof-target "$scenario" $((seconds + 5)) --truth "$tmp/$scenario.truth" \
    --ready "$tmp/$scenario.ready" >/dev/null &
  pid=$!
  while [ ! -e "$tmp/$scenario.ready" ]; do sleep 0.05; done
  sleep 0.5 # every thread started
  /usr/bin/time -f "%U %S" -o "$tmp/$scenario.time" target/release/fsprof attach "$pid" \
    --rate 1000 --duration "$seconds" -o "$tmp/$scenario" 2>/dev/null
  wait "$pid"
  python3 - "$scenario" "$tmp/$scenario" "$tmp/$scenario.truth" "$tmp/$scenario.time" "$seconds" <<'EOF_PY'
import json, sys
scenario, out, truth_path, time_path, seconds = sys.argv[1:]
meta = json.load(open(out + "/profile.json"))["meta"]
report = json.loads(__import__("subprocess").run(
    ["target/release/fsprof", "report", "--format", "json", out], capture_output=True, text=True, check=True).stdout)
truth = json.load(open(truth_path))
share = next((f["percent"] for f in report["features"] if f["name"] == "validation"), 0.0)
true_share = truth["features"]["validation"]["ms"] * 100 / truth["total_ms"]
try:
    # The truth of the stretch fsprof sampled, where the target keeps it over time.
    series = [tuple(map(int, line.split())) for line in open(truth_path + ".series")]
    start = meta["start_unix_ns"]
    end = start + meta["duration_ns"]
    near = lambda t: min(series, key=lambda row: abs(row[0] - t))
    (_, in0, all0), (_, in1, all1) = near(start), near(end)
    true_share = (in1 - in0) * 100 / (all1 - all0)
except FileNotFoundError:
    pass
user, system = map(float, open(time_path).read().split()[-2:])
extra = ", ".join(f"{k} {v:.0f}" for k, v in truth.get("extra", {}).items())
print(f"{scenario}: validation {share:.2f}% (truth {true_share:.2f}%); ticks {meta['ticks']} in {meta['duration_ns'] / 1e9:.1f} s "
      f"({meta['ticks'] / (meta['duration_ns'] / 1e9):.0f}/s asked 1000), stretched {meta['stretched_ticks']}; "
      f"fsprof CPU {user + system:.1f} s ({(user + system) * 100 / float(seconds):.0f}% of a core); {extra}")
EOF_PY
done
