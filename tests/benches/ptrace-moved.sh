#!/usr/bin/env bash
# Two builds of fsprof side by side with the ptrace backend on `deep leaves 2` at 1000 Hz: for
# each run, the ptrace samples taken, those whose marks moved between the tick and the stop
# (no stack for them), those not stopped in time, and the pauses (BENCHMARKS.md, issue 37).
# Usage: tests/benches/ptrace-moved.sh ROUNDS OLD_FSPROF NEW_FSPROF   (from the workspace root,
# after `cargo build --release --workspace`)
set -euo pipefail
rounds=$1 old=$2 new=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq "$rounds"); do
  for build in old new; do
    fsprof=$old; [ "$build" = new ] && fsprof=$new
    rm -rf "$tmp/out"
    "$fsprof" run --rate 1000 --backend ptrace -o "$tmp/out" -- \
      target/release/deep leaves 2 --truth "$tmp/truth.json" >/dev/null 2>&1
    python3 - "$build" "$tmp/out/profile.json" <<'EOF_PY'
import json, sys
meta = json.load(open(sys.argv[2]))["meta"]
def field(key):
    for part in [meta] + [v for v in meta.values() if isinstance(v, dict)]:
        if key in part:
            return part[key]
captured, moved = field("native_captured"), field("native_moved")
print(f"{sys.argv[1]}: {captured} captured, {moved} moved ({moved * 100 / max(captured, 1):.1f}%), "
      f"{field('native_not_stopped')} not stopped, pause p50 {field('pause_p50_us')} us, p99 {field('pause_p99_us')} us")
EOF_PY
  done
done
