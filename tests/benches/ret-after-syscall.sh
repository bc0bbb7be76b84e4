#!/usr/bin/env bash
# What a do-nothing interposer of write(2) costs, by how it returns: the floor under the agent's
# cost on `write` (BENCHMARKS.md, "Agent: cost of an interposed libc call"). Each variant is
# preloaded under tests/c/callcost.c, which measures write through libc's definition and through
# the interposer's, batch against batch in one process. Run from the workspace root.
# Usage: tests/benches/ret-after-syscall.sh [PROCESSES]
#   tail    `return real(...)` compiled as a jump: the interposer adds no return of its own;
#   call    calls the real write and returns (the agent's shape): one more `ret` after the
#           system call;
#   call2   the same through two nested functions: two more;
#   jmpret  calls the real write, then returns with `pop; jmp` instead of `ret`, which the return
#           stack buffer does not predict (not usable: it unbalances that buffer; a probe only).
set -euo pipefail
processes=${1:-9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 tests/c/callcost.c -o "$tmp/callcost" -ldl
cat > "$tmp/variant.c" <<'EOF_C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
__attribute__((used)) static ssize_t (*real)(int, const void *, size_t);
__attribute__((constructor)) static void init(void) { real = dlsym(RTLD_NEXT, "write"); }
#define KEEP() __asm__ volatile("" ::: "memory")
#if defined(TAIL)
ssize_t write(int fd, const void *b, size_t n) { return real(fd, b, n); }
#elif defined(CALL)
ssize_t write(int fd, const void *b, size_t n) { ssize_t r = real(fd, b, n); KEEP(); return r; }
#elif defined(CALL2)
__attribute__((noinline)) static ssize_t inner(int fd, const void *b, size_t n) {
    ssize_t r = real(fd, b, n); KEEP(); return r; }
ssize_t write(int fd, const void *b, size_t n) { ssize_t r = inner(fd, b, n); KEEP(); return r; }
#elif defined(JMPRET)
__asm__(".globl write\n.type write,@function\nwrite:\n"
        "  sub $8, %rsp\n  call *real(%rip)\n  add $8, %rsp\n  pop %rcx\n  jmp *%rcx\n");
#endif
EOF_C
variants="tail call call2 jmpret"
for v in $variants; do
  gcc -O2 -shared -fPIC -D"${v^^}" -o "$tmp/$v.so" "$tmp/variant.c" -ldl
done
for round in $(seq "$processes"); do
  for v in $(printf '%s\n' $variants | shuf); do
    LD_PRELOAD=$tmp/$v.so "$tmp/callcost" | awk -v v="$v" '$1 == "write" { print v, $4 }'
  done
done > "$tmp/runs"
python3 - "$tmp/runs" <<'EOF_PY'
import collections, statistics, sys
added = collections.defaultdict(list)
for line in open(sys.argv[1]):
    variant, diff = line.split()
    added[variant].append(float(diff))
print("ns added to write(2): median over processes (25th .. 75th percentile)")
for variant, values in added.items():
    q = statistics.quantiles(values, n=4)
    print(f"{variant:<8} {statistics.median(values):+6.2f} ({q[0]:+6.2f} .. {q[2]:+6.2f})")
EOF_PY
