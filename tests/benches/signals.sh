#!/usr/bin/env bash
# What timer signals cost a program under fsprof (issue 40, part 3): a C loop of fixed work
# interrupted by SIGALRM every INTERVAL us (default 100: 10 kHz), whose handler counts it; it
# prints the loop's own time. Each round runs it alone, under `fsprof run` at the defaults and
# with `--backend ptrace` (and under BASE, another fsprof, with `--backend ptrace`, where
# given), in an order rotated each round; the script prints each configuration's times and the
# median of its ratios to alone (paired within a round). Run from the workspace root after
# `cargo build --release --workspace`.
# Usage: [FSPROF=path/to/fsprof] [BASE=path/to/fsprof] [INTERVAL=us] tests/benches/signals.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
fsprof=${FSPROF:-$PWD/target/release/fsprof}
interval=${INTERVAL:-100}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/sigloop.c" <<'EOF_C'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
static volatile sig_atomic_t hits;
static void on_alarm(int s) { (void)s; hits++; }
int main(int argc, char **argv) {
  long us = atol(argv[1]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, 0);
  struct itimerval it = {{0, us}, {0, us}};
  setitimer(ITIMER_REAL, &it, 0);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  volatile unsigned long x = 0;
  for (unsigned long i = 0; i < 1000000000UL; i++) x += i;
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.4f %ld\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, (long)hits);
  return 0;
}
EOF_C
gcc -O2 -o "$tmp/sigloop" "$tmp/sigloop.c"
configs=(alone defaults ptrace)
[ -n "${BASE:-}" ] && configs+=(base-ptrace)
for round in $(seq "$rounds"); do
  n=${#configs[@]}
  for k in $(seq 0 $((n - 1))); do
    config=${configs[$(((k + round) % n))]}
    case $config in
      alone) out=$("$tmp/sigloop" "$interval") ;;
      defaults) out=$("$fsprof" run -o "$tmp/out" -- "$tmp/sigloop" "$interval" 2> /dev/null) ;;
      ptrace) out=$("$fsprof" run --backend ptrace -o "$tmp/out" -- "$tmp/sigloop" "$interval" 2> /dev/null) ;;
      base-ptrace) out=$(timeout 300 "$BASE" run --backend ptrace -o "$tmp/out" -- "$tmp/sigloop" "$interval" 2> /dev/null || echo "300 0") ;;
    esac
    echo "$round $config $out"
  done
done | python3 -c '
import sys, statistics
rows = [line.split() for line in sys.stdin]
times = {}
for round_, config, seconds, hits in rows:
    times.setdefault(config, {})[round_] = float(seconds)
alone = times["alone"]
for config, by_round in times.items():
    ratios = [t / alone[r] for r, t in by_round.items() if r in alone]
    shown = " ".join("%.2f" % t for t in by_round.values())
    print(f"{config}: {shown} s; median ratio to alone {statistics.median(ratios):.3f}")
'
