#!/usr/bin/env bash
# A deep program nobody here wrote: rustc -O compiling a generated 40-function crate (nested
# expressions, so its parser, type checker and code generator recurse), under fsprof run with
# each backend; prints the share of native stacks unwound to the thread's root, and how many of
# them perf unwound through the words the BPF walk read at the sample (native/walk.rs) or
# completed from an image of the outer stack (native/complete.rs). For BENCHMARKS.md.
# Large modules' functions' tables are kept in fsprof's cache directory (native/functions_cache.rs),
# so every run after the first reads rustc's from there; with `cold`, each run gets an empty
# cache directory of its own (XDG_CACHE_HOME), as a first run has.
# Run from the workspace root after `cargo build --release --workspace`.
# Usage: [FSPROF=path/to/fsprof] tests/benches/deep-rustc.sh [RUNS] [cold]
set -euo pipefail
runs=${1:-3}
cold=${2:-}
fsprof=${FSPROF:-$PWD/target/release/fsprof}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python3 - <<'EOF_PY'
def expr(depth, k):
    if depth == 0:
        return f"(x ^ {k})"
    return f"({expr(depth - 1, k + 1)} + {expr(depth - 1, k + 2)} * (x >> {depth % 7}))"
with open("generated.rs", "w") as out:
    for f in range(40):
        out.write(f"pub fn f{f}(x: u64) -> u64 {{ let y = {expr(7, f)}; y.wrapping_mul({f + 3}) }}\n")
    out.write("pub fn all(x: u64) -> u64 { " + " ^ ".join(f"f{f}(x)" for f in range(40)) + " }\n")
EOF_PY
for backend in perf ptrace; do
  for run in $(seq "$runs"); do
    rm -rf "out-$backend" cache
    if [ "$cold" = cold ]; then mkdir cache && export XDG_CACHE_HOME=$PWD/cache; fi
    "$fsprof" run --backend "$backend" --rate 1000 -o "out-$backend" -- \
      rustc -O --crate-type lib --emit=obj -o /dev/null generated.rs > /dev/null 2>&1
    python3 - "out-$backend/profile.json" "$backend" <<'EOF_PY'
import json, sys
meta = json.load(open(sys.argv[1]))["meta"]
captured, complete = meta["native_captured"], meta["native_complete"]
print(f"{sys.argv[2]:6} {complete}/{captured} stacks to the root ({100 * complete / max(captured, 1):.1f}%), "
      f"{meta.get('native_walked', 0)} through the walk's words, "
      f"{meta.get('native_completed', 0)} completed from an image, {meta['duration_ns'] / 1e9:.2f} s")
EOF_PY
  done
done
