#!/usr/bin/env bash
# Two builds of the agent side by side, per call: tests/c/callcost.c (and, with RUST=1,
# target/release/rust-callcost) under LD_PRELOAD of each, in shuffled pairs, PROCESSES of each;
# prints per case the median over processes of the ns added (for rust-callcost, including the
# standard library's own work, which is the same for both builds).
# Usage: tests/benches/agent-ab.sh PROCESSES OLD.so NEW.so   (from the workspace root)
set -euo pipefail
processes=$1 old=$2 new=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 tests/c/callcost.c -o "$tmp/callcost" -ldl
programs=("$tmp/callcost")
[ "${RUST:-0}" = 1 ] && programs+=("$PWD/target/release/rust-callcost")
for _ in $(seq "$processes"); do
  for build in $(printf 'old\nnew\n' | shuf); do
    so=$old
    [ "$build" = new ] && so=$new
    for program in "${programs[@]}"; do
      LD_PRELOAD=$so "$program" | sed "s/^/$build /"
    done
  done
done > "$tmp/runs"
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
added = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build, case, *fields = line.split()
    added[(case, build)].append(float(fields[2]))
for case, build in sorted(added, key=lambda k: (k[0], k[1] != "old")):
    values = added[(case, build)]
    print(f"{case:12} {build:3}  median {statistics.median(values):+7.2f} ns  ({len(values)} processes)")
EOF_PY
