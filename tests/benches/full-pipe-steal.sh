#!/usr/bin/env bash
# full-pipe-steal.sh: `full_pipe`'s producer (tests/c/full_pipe.c: 4 ms in `produce`, then a
# write that blocks on a slow reader; it ends waiting for the reader) under each FSPROF, side by
# side: the report's `produce` share of the producer against the truth's range, the time the
# producer's end added in `waitpid` (the built-in `process`), and the share of the CPUs' time the
# hypervisor stole during the run (steal against time run, from /proc/stat). Meant for a machine
# whose hypervisor steals: where the shares stay put without steal, this shows what it moves
# (thirty-seventh session: produce 4.5-6 points low and 62 ms in `process` before 7c38d36).
# Usage: tests/benches/full-pipe-steal.sh ROUNDS FSPROF...
# Needs gcc and target/release/libfsprof_agent.so (cargo build --release --workspace).
set -euo pipefail
rounds=$1
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$repo/target/release/libfsprof_agent.so" "$work/"
gcc -O2 -g -pthread -I "$repo/agent/include" -I "$repo/tests/c" "$repo/tests/c/full_pipe.c" \
  -o "$work/full_pipe" -L "$work" -lfsprof_agent -Wl,-rpath,"$work"
cpu() { awk '/^cpu /{print $9, $2+$3+$4+$7+$8}' /proc/stat; }
for round in $(seq "$rounds"); do
  for fsprof in $(shuf -e "$@"); do
    rm -rf "$work/out"
    before=$(cpu)
    "$fsprof" run --agent --rate 2000 -o "$work/out" -- "$work/full_pipe" 3 --truth "$work/truth.json" > /dev/null 2>&1
    after=$(cpu)
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['meta']['pid'])" "$work/out/profile.json")
    "$fsprof" report "$work/out" --process "$pid" --format json > "$work/report.json"
    python3 - "$fsprof" "$work/report.json" "$work/truth.json" "$before $after" <<'PY'
import json, sys
fsprof, report, truth = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
s0, r0, s1, r1 = map(int, sys.argv[4].split())
ms = lambda name: sum(f["ms"] for f in report["features"] if f["name"] == name)
share = sum(f["percent"] for f in report["features"] if f["name"] == "produce")
produce, total = truth["features"]["produce"]["ms"], truth["total_ms"]
unsure = truth["extra"].get("woken_wait_ms", 0)
print(f"{fsprof}: produce {share:.2f}% (truth {100 * produce / (total + unsure):.2f}-{100 * produce / total:.2f}%), "
      f"process {ms('process'):.0f} ms; stolen {100 * (s1 - s0) / max(1, r1 - r0):.0f}% of the time run")
PY
  done
done
