#!/usr/bin/env bash
# Per-call cost of the agent's interposition: tests/c/callcost.c alone and under
# LD_PRELOAD=target/release/libfsprof_agent.so, in interleaved rounds (no profiler attached:
# the marks are pushed and popped all the same). Run from the workspace root after
# `cargo build --release --workspace`. Usage: tests/benches/agent-overhead.sh [ROUNDS]
# A third configuration, "nop", preloads an interposer of write(2) that only forwards the call
# (built here): what interposing costs before anything is marked.
set -euo pipefail
rounds=${1:-5}
agent=$PWD/target/release/libfsprof_agent.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -pthread tests/c/callcost.c -o "$tmp/callcost"
cat > "$tmp/nop.c" <<'EOF_C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
static ssize_t (*real)(int, const void *, size_t);
__attribute__((constructor)) static void init(void) { real = dlsym(RTLD_NEXT, "write"); }
ssize_t write(int fd, const void *b, size_t n) { ssize_t r = real(fd, b, n); __asm__ volatile("" ::: "memory"); return r; }
EOF_C
gcc -O2 -shared -fPIC -o "$tmp/nop.so" "$tmp/nop.c" -ldl
for round in $(seq "$rounds"); do
  "$tmp/callcost" | sed "s/^/alone $round /"
  LD_PRELOAD=$tmp/nop.so "$tmp/callcost" | sed "s/^/nop $round /"
  LD_PRELOAD=$agent "$tmp/callcost" | sed "s/^/agent $round /"
done | awk '{ key = $1 " " $3; v[key] = v[key] " " $4 } END { for (k in v) print k ":" v[k] }' | sort
