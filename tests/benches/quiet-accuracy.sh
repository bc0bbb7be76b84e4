#!/usr/bin/env bash
# Accuracy of `fsprof run` on a scenario of the ground-truth target, with no load: RUNS runs of
# `fsprof-target SCENARIO SECS` (SECS 3 unless set), each printing every feature's error in percentage points (report
# minus truth). For a before/after comparison, give each build's fsprof. With SCENARIO
# `blocking`, prints instead each blocking instance's reported time (running and blocked) against
# what the target measured, in percent.
# Usage: tests/benches/quiet-accuracy.sh FSPROF RUNS SCENARIO [fsprof run options...]
#   e.g. tests/benches/quiet-accuracy.sh target/release/fsprof 5 requests --rate 1000
#        SECS=12 FSPROF_CLOCK=tick tests/benches/quiet-accuracy.sh target/release/fsprof 3 mixed
# Run from the repository root after `cargo build --release --workspace`.
set -euo pipefail
fsprof=$1 runs=$2 scenario=$3 secs=${SECS:-3}
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for _ in $(seq "$runs"); do
  "$fsprof" run "$@" -o "$dir/out" -- target/release/fsprof-target "$scenario" "$secs" --truth "$dir/truth.json" > /dev/null 2>&1
  python3 - "$dir" "$scenario" <<'PY'
import json, subprocess, sys
d, scenario = sys.argv[1], sys.argv[2]
t = json.load(open(d + "/truth.json"))
r = json.loads(subprocess.check_output(["target/release/fsprof", "report", d + "/out", "--format", "json"]))
features = {f["name"]: f for f in r["features"]}
if scenario == "blocking":
    out = []
    for name, instance in (("wait", "short"), ("wait", "long"), ("queue", "recv")):
        measured = t["features"][name]["instances"][instance]
        reported = sum(i["ms"] + i.get("blocked_ms", 0) for i in features[name]["instances"] if i["payload"] == instance)
        out.append(f"{name}/{instance} {(reported - measured) * 100 / measured:+.2f}%")
    print("  " + "  ".join(out))
else:
    errs = {n: f["percent"] - t["features"][n]["ms"] * 100 / t["total_ms"] for n, f in features.items() if n in t["features"]}
    print("  " + "  ".join(f"{k} {v:+.2f}" for k, v in sorted(errs.items())))
PY
done
