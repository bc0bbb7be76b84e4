#!/usr/bin/env bash
# Report time with the built-in catalog of feature rules on a large profile (issue 38): records
# rustc -O compiling regex-syntax (from the cargo registry, else a generated crate) at 2000 Hz,
# then times `fsprof report` on the saved profile ROUNDS times with the catalog (the default)
# and with --no-builtin-rules, printing wall seconds and peak memory of each, and the profile's
# size (samples, distinct frames and stacks). The rules are matched once per distinct frame,
# so the catalog's cost should follow the frames, not the samples.
# Run from the workspace root after `cargo build --release`.
# Usage: tests/benches/report-time.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
fsprof=$PWD/target/release/fsprof
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$(ls -d "$HOME"/.cargo/registry/src/*/regex-syntax-0.8.* 2>/dev/null | tail -1 || true)
if [ -n "$src" ]; then
  features=()
  for f in std unicode unicode-age unicode-bool unicode-case unicode-gencat unicode-perl unicode-script unicode-segment; do
    features+=(--cfg "feature=\"$f\"")
  done
  crate=("$src/src/lib.rs" "${features[@]}")
else
  python3 - "$tmp/gen.rs" <<'EOF_PY'
import sys
def expr(depth, k):
    if depth == 0:
        return f"(x ^ {k})"
    return f"({expr(depth - 1, k + 1)} + {expr(depth - 1, k + 2)} * (x >> {depth % 7}))"
with open(sys.argv[1], "w") as out:
    for f in range(80):
        out.write(f"pub fn f{f}(x: u64) -> u64 {{ let y = {expr(8, f)}; y.wrapping_mul({f + 3}) }}\n")
EOF_PY
  crate=("$tmp/gen.rs")
fi
"$fsprof" run --rate 2000 -o "$tmp/profile" -- rustc --edition 2021 --crate-type lib \
  -C opt-level=3 -C codegen-units=1 -g "${crate[@]}" -o "$tmp/out.rlib" 2>"$tmp/run.err" >/dev/null
grep -m1 "samples of" "$tmp/run.err"
python3 - "$tmp/profile/profile.json" <<'EOF_PY'
import json, sys
p = json.load(open(sys.argv[1]))
print(f"profile: {len(p['native_frames'])} distinct frames, {len(p['native_stacks'])} distinct native stacks, "
      f"{len(p['samples'])} sample groups")
EOF_PY
for round in $(seq "$rounds"); do
  for opt in "" "--no-builtin-rules"; do
    /usr/bin/time -f "round $round ${opt:-catalog}: %e s wall, %M KiB peak" \
      "$fsprof" report $opt -o "$tmp/report" "$tmp/profile" >/dev/null 2>"$tmp/time.err"
    tail -1 "$tmp/time.err"
  done
done
