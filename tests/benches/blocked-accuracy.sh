#!/bin/bash
# blocked-accuracy.sh: a thread blocked inside a mark, sampled with native stacks.
# `fsprof-target sleepy 3` loops: 700 µs of work in [hashing], 500 µs of thread::sleep in [io],
# 300 µs of work outside marks, and writes what it measured itself (truth.json). For each
# backend (BACKENDS, default "perf ptrace"; "nonative" means --no-native), RUNS runs (default 6),
# interleaved; each prints the io and hashing shares against the truth, the pauses and how many
# blocked samples were read without a stop. Run from anywhere after
# `cargo build --release --workspace`, as root for the perf backend.
set -u
cd "$(dirname "$0")/../.."
BIN=$(realpath "${BIN:-target/release}")
RUNS=${RUNS:-6}
BACKENDS=${BACKENDS:-"perf ptrace"}
WORK=$(mktemp -d /tmp/blocked-accuracy.XXXXXX)
echo "load: $(uptime)"
for r in $(seq 1 "$RUNS"); do
  for b in $BACKENDS; do
    case $b in nonative) opts=(--no-native) ;; *) opts=(--backend "$b") ;; esac
    rm -rf "$WORK/out"
    "$BIN/fsprof" run "${opts[@]}" -o "$WORK/out" -- "$BIN/fsprof-target" sleepy 3 --truth "$WORK/truth.json" > /dev/null 2>&1
    "$BIN/fsprof" report "$WORK/out" --format json > "$WORK/report.json"
    python3 - "$WORK" "$b" <<'PY'
import json, sys
work, backend = sys.argv[1], sys.argv[2]
report = json.load(open(work + "/report.json"))
truth = json.load(open(work + "/truth.json"))
meta = json.load(open(work + "/out/profile.json"))["meta"]
shares = {f["name"]: f["percent"] for f in report["features"]}
cells = []
for name in ("io", "hashing"):
    measured = 100 * truth["features"][name]["ms"] / truth["total_ms"]
    cells.append(f"{name} {shares.get(name, 0):.2f}% vs {measured:.2f}% ({shares.get(name, 0) - measured:+.2f})")
extra = " ".join(f"{k}={meta.get(k, '-')}" for k in ("pause_p50_us", "pause_p99_us", "native_blocked", "native_blocked_skipped", "late_ticks"))
print(f"{backend:8} " + "; ".join(cells) + "; " + extra)
PY
  done
done
rm -rf "$WORK"
