#!/usr/bin/env bash
# Accuracy of `fsprof run` on a scenario of the ground-truth target (SCENARIO, default `sleepy`;
# e.g. `mixed`, one thread, or `pair`, two), alone and with N other busy processes competing for
# the CPUs. Prints, per run, the error of each feature's share in percentage points (report minus
# truth), and the worst error of any feature or instance. Usage: accuracy-under-load.sh [RUNS] [BUSY]
# Run from the repository root after `cargo build --release --workspace`. Set AS="setpriv
# --reuid=65534 --regid=65534 --clear-groups" (as root) to measure fsprof without the privilege of
# real-time scheduling. LOAD is the busy command (default: a shell loop), e.g. LOAD="yes > /dev/null".
# FSPROF is the fsprof to measure (default: target/release/fsprof), e.g. an earlier build; ARGS
# more options of `fsprof run` (e.g. ARGS="--rate 1000").
set -euo pipefail
runs=${1:-5}
busy=${2:-2}
fsprof=${FSPROF:-target/release/fsprof}
dir=$(mktemp -d)
chmod 777 "$dir"
loads=()
# Each load runs in its own session; kill the whole group, not just the shell.
trap 'for p in "${loads[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
measure() {
  for i in $(seq "$runs"); do
    ${AS:-} "$fsprof" run ${ARGS:-} -o "$dir/out" -- target/release/fsprof-target "${SCENARIO:-sleepy}" 3 --truth "$dir/truth.json" 2>/dev/null
    python3 - "$dir" <<'PY'
import json, subprocess, sys
d = sys.argv[1]
t = json.load(open(d + "/truth.json"))
r = json.loads(subprocess.check_output(["target/release/fsprof", "report", d + "/out", "--format", "json"]))
timed = [f for f in r["features"] if f["name"] in t["features"]]  # built-ins are not timed
errs = {f["name"]: f["percent"] - t["features"][f["name"]]["ms"] * 100 / t["total_ms"] for f in timed}
worst = max([abs(e) for e in errs.values()] + [abs(i["percent"] - t["features"][f["name"]]["instances"].get(i["payload"], 0) * 100 / t["total_ms"]) for f in timed for i in f["instances"]])
late = r["meta"]["late_ticks"] * 100 / max(r["meta"]["ticks"], 1)
shown = sorted(errs.items())[:4]
print("  " + "  ".join(f"{k} {v:+.2f}" for k, v in shown) + f"  worst {worst:.2f}  (late samples {late:.1f}%, sampler {r['meta']['sampler_priority']})")
PY
  done
}
echo "quiet machine:"
measure
echo "with $busy busy processes:"
for _ in $(seq "$busy"); do
  setsid bash -c "${LOAD:-while :; do :; done}" &
  loads+=($!)
done
measure
