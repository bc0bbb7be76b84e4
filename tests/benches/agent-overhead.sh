#!/usr/bin/env bash
# Per-call cost of the agent's interposition: tests/c/callcost.c alone and under
# LD_PRELOAD=target/release/libfsprof_agent.so, in interleaved rounds (no profiler attached:
# the marks are pushed and popped all the same). Run from the workspace root after
# `cargo build --release --workspace`. Usage: tests/benches/agent-overhead.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
agent=$PWD/target/release/libfsprof_agent.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -pthread tests/c/callcost.c -o "$tmp/callcost"
for round in $(seq "$rounds"); do
  "$tmp/callcost" | sed "s/^/alone $round /"
  LD_PRELOAD=$agent "$tmp/callcost" | sed "s/^/agent $round /"
done | awk '{ key = $1 " " $3; v[key] = v[key] " " $4 } END { for (k in v) print k ":" v[k] }' | sort
