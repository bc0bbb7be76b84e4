#!/usr/bin/env bash
# Per-call cost of the agent's interposition: tests/c/callcost.c alone and under
# LD_PRELOAD=target/release/libfsprof_agent.so, in interleaved rounds (no profiler attached:
# the marks are pushed and popped all the same). Run from the workspace root after
# `cargo build --release --workspace`. Usage: [AGENT=path/to/libfsprof_agent.so] tests/benches/agent-overhead.sh [ROUNDS]
# A third configuration, "nop", preloads an interposer of write(2) that only forwards the call
# (built here): what interposing costs before anything is marked.
set -euo pipefail
rounds=${1:-5}
agent=${AGENT:-$PWD/target/release/libfsprof_agent.so}
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
done > "$tmp/runs"
# Per case: each configuration's median, and the median over rounds of (configuration - alone)
# in the same round (paired: the host is shared and drifts between rounds).
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    config, round_, case, ns = line.split()
    runs[(config, case)][round_] = float(ns)
print(f"{'case':<12} {'alone':>8} {'nop':>16} {'agent':>16}   (ns per iteration: median, paired added)")
for case in ["write", "malloc+free", "mutex", "fputc"]:
    alone = runs[("alone", case)]
    cells = [f"{statistics.median(alone.values()):8.2f}"]
    for config in ["nop", "agent"]:
        mine = runs[(config, case)]
        added = statistics.median(mine[r] - alone[r] for r in alone)
        cells.append(f"{statistics.median(mine.values()):8.2f} ({added:+5.1f})")
    print(f"{case:<12} " + " ".join(cells))
EOF_PY
