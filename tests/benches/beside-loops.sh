#!/usr/bin/env bash
# beside-loops.sh: whether a busy thread's time under fsprof stays within the time it ran when
# other busy processes share its CPUs (and, in a virtual machine, the hypervisor takes some):
# `fsprof-chain 3` (two threads, each busy 3 s in its own feature) beside LOOPS shell busy
# loops, at 2000 Hz. Each thread can have run at most its 3 s (plus its start): a reading
# beyond that was counted twice (thirty-sixth session: 3069-3325 ms before cdab827).
# Usage: tests/benches/beside-loops.sh ROUNDS LOOPS FSPROF...
# Needs target/release/fsprof-chain (cargo build --release --workspace --all-targets). Prints
# each run: the binary, both features' ms and the total.
set -euo pipefail
rounds=$1 loops=$2
shift 2
chain=$(cd "$(dirname "$0")/../.." && pwd)/target/release/fsprof-chain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$rounds"); do
  for fsprof in $(shuf -e "$@"); do
    for _ in $(seq "$loops"); do timeout 5 sh -c 'while :; do :; done' & done
    "$fsprof" run --rate 2000 -o "$work/out" -- "$chain" 3 > /dev/null 2>&1
    wait
    echo "$fsprof: $(grep -oE '^[A-Z][a-z]+ accounts for [0-9.]+% of running time \([0-9.]+ / [0-9.]+ ms\)' "$work/out/report.txt" \
      | sed -E 's/^([A-Za-z]+) accounts for [0-9.]+% of running time \(([0-9.]+) \/ ([0-9.]+) ms\)/\1 \2 (total \3)/' | tr '\n' ' ')"
  done
done
