#!/usr/bin/env bash
# Per-call cost of the agent's interposition (no profiler attached: the marks are pushed and
# popped all the same). Run from the workspace root after `cargo build --release --workspace`.
# Usage: [AGENT=path/to/libfsprof_agent.so] tests/benches/agent-overhead.sh [PROCESSES]
#
# tests/c/callcost.c measures, inside one process, each case through libc's own definition and
# through the one the program binds to, batch against batch (see its header);
# tests/src/bin/rust-callcost.rs does the same for calls Rust's standard library makes. Both run
# under five configurations, in a shuffled order in each round:
#   alone  no preload: both sides are libc's, so the difference is the method's noise;
#   nop    a preloaded interposer of write(2) that only forwards the call (built here): what
#          interposing costs before anything is marked;
#   ret    LD_PRELOAD=libfsprof_agent.so, its system-call wrappers in their call-and-`ret` form
#          (FSPROF_AGENT_RETURN=ret);
#   jump   the same in their jump form (FSPROF_AGENT_RETURN=jump). Which form the agent picks
#          by itself on this host is printed first (see agent/src/builtin/syscall_wrappers.rs);
#   off    the agent preloaded with FSPROF_BUILTINS=0: its interposing functions forward every
#          call unmarked (what a call costs before the mark's push and pop).
# Each process's figure is the median of its paired differences; a process's figure moves with
# where its pages happen to land (by a few ns on write), so the script runs PROCESSES of each and
# prints the median across them, with the spread (the 25th and 75th percentiles).
set -euo pipefail
processes=${1:-15}
agent=${AGENT:-$PWD/target/release/libfsprof_agent.so}
rust_callcost=$PWD/target/release/rust-callcost
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 tests/c/callcost.c -o "$tmp/callcost" -ldl
cat > "$tmp/nop.c" <<'EOF_C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
static ssize_t (*real)(int, const void *, size_t);
__attribute__((constructor)) static void init(void) { real = dlsym(RTLD_NEXT, "write"); }
ssize_t write(int fd, const void *b, size_t n) { ssize_t r = real(fd, b, n); __asm__ volatile("" ::: "memory"); return r; }
EOF_C
gcc -O2 -shared -fPIC -o "$tmp/nop.so" "$tmp/nop.c" -ldl
if grep -qs "Safe RET" /sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow; then
  echo "the agent's own choice on this host: jump"
else
  echo "the agent's own choice on this host: ret"
fi
for round in $(seq "$processes"); do
  for config in $(printf 'alone\nnop\nret\njump\noff\n' | shuf); do
    case $config in
      alone) preload= ;;
      nop) preload=$tmp/nop.so ;;
      ret|jump|off) preload=$agent ;;
    esac
    for program in "$tmp/callcost" "$rust_callcost"; do
      builtins=1
      [ "$config" = off ] && builtins=0
      FSPROF_BUILTINS=$builtins FSPROF_AGENT_RETURN=$config LD_PRELOAD=$preload "$program" \
        | sed "s/^/$config $round /"
    done
  done
done > "$tmp/runs"
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
added = collections.defaultdict(list)
per_call = collections.defaultdict(list)
for line in open(sys.argv[1]):
    config, _round, case, libc, bound, diff, _q25, _q75 = line.split()
    added[(config, case)].append(float(diff))
    per_call[case].append(float(libc))
def spread(values):
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):+6.2f} ({q[0]:+6.2f} .. {q[2]:+6.2f})"
print(f"ns added per iteration: median over processes of each process's median paired difference (25th .. 75th percentile)")
print(f"{'case':<12} {'libc ns':>8}  {'alone (noise)':>24}  {'nop interposer':>24}  {'agent, ret form':>24}  {'agent, jump form':>24}  {'agent, off':>24}")
for case in ["write", "malloc+free", "mutex", "fputc", "futex-wake"]:
    cells = [spread(added[(config, case)]) for config in ["alone", "nop", "ret", "jump", "off"]]
    print(f"{case:<12} {statistics.median(per_call[case]):8.2f}  " + "  ".join(f"{c:>24}" for c in cells))
print("The standard library's calls (tests/src/bin/rust-callcost.rs): its own work around each call is the")
print("'alone' column; the others are less that median (the agent's share alone)")
for case in ["rust-alloc", "rust-write", "rust-futex"]:
    base = statistics.median(added[("alone", case)])
    cells = [spread(added[("alone", case)])] + [spread([v - base for v in added[(config, case)]]) for config in ["nop", "ret", "jump", "off"]]
    print(f"{case:<12} {statistics.median(per_call[case]):8.2f}  " + "  ".join(f"{c:>24}" for c in cells))
EOF_PY
