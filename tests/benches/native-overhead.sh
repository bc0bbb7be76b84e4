#!/bin/bash
# native-overhead.sh: what fsprof's native stacks cost the target (perf backend, the default where
# allowed, and the ptrace backend), next to marks-only fsprof and perf; the profiler's own CPU and
# memory; unwind completeness.
#
# Parts (PARTS=, default "1 2 3"):
#   1  Slowdown + pauses. Targets, each a fixed amount of work:
#        spin1     a C hash loop (compiled here from the source below, gcc -O2 -g), 1 thread
#        spin2     the same, 2 threads (as many as the machine's cores on the reference VM)
#        fizzbuzz  the demo, FIZZ_N lines to /dev/null (syscall-heavy, ~5M marks/s)
#        empty     spin with no work: the tool's own start and stop cost (perf's is ~0.4 s)
#      Configurations, interleaved within each round in a new random order (RUNS rounds, default 5):
#        alone | nonative: fsprof run --no-native | native: fsprof run (defaults: perf backend
#        where allowed, default rate) | native-HZ: fsprof run --rate HZ | ptrace: fsprof run
#        --backend ptrace | perf-dwarf: perf record -F 1000 --call-graph dwarf | perf-dwarf-HZ:
#        the same at HZ | perf-dwarf16k: perf record -F 1000 --call-graph dwarf,16384 (the stack
#        fsprof copies per sample) | perf-fp: perf record -F 1000 -g (frame pointers)
#      Measured: wall time of the whole command (date +%s%N; includes the tool's start and the
#      writing of its output), and for spin* also the target's own elapsed time (it prints it).
#      From each native fsprof run's profile.json meta: pause_p50_us, pause_p99_us, ticks,
#      native_captured, native_complete, native_not_stopped, native_moved.
#      Summary: medians, min-max, slowdown = median(under tool) / median(alone) - 1; paired
#      slowdowns (each run against the same round's run alone); and fsprof - perf, round by
#      round, with a bootstrap 95% interval of its median.
#   2  fsprof's own CPU and max RSS: `fsprof attach PID --duration D` (native mode) on
#      `fsprof-target threads` (4 threads), under /usr/bin/time -v, for D = 15 and D = 60.
#   3  Unwind completeness (native_complete / native_captured) for fizzbuzz, fsprof-chain 3,
#      python3 (a 30M-iteration generator sum), and ripgrep if RG= names an rg binary
#      (built without frame pointers, with line tables: see BENCHMARKS.md); RG_ARGS= its args.
#
# Run (from anywhere; needs root or ptrace rights, perf, gcc, python3):
#   cargo build --release --workspace && tests/benches/native-overhead.sh
#   BIN=/tmp/bench-bin RUNS=7 PARTS="1" tests/benches/native-overhead.sh
# Knobs: BIN (dir with fsprof, fizzbuzz, fsprof-target, fsprof-chain; default target/release),
#   RUNS (5), PARTS ("1 2 3"), TARGETS ("empty spin1 spin2 fizzbuzz"), SPIN_ITERS (per thread, 750M,
#   about 2 s), FIZZ_N (10000000), CONFIGS ("alone nonative native perf-dwarf perf-fp"),
#   LONG (60) and SHORT (15) for part 2, RG and RG_ARGS for part 3, WORK (temp dir).
# Raw lines go to $WORK/raw.tsv; the summary to stdout. Measure on a quiet machine: kill stray
# load first and check `uptime` (the script prints the load average before each part).
set -u
cd "$(dirname "$0")/../.."
BIN=$(realpath "${BIN:-target/release}")
RUNS=${RUNS:-5}
PARTS=${PARTS:-"1 2 3"}
TARGETS=${TARGETS:-"empty spin1 spin2 fizzbuzz"}
CONFIGS=${CONFIGS:-"alone nonative native ptrace perf-dwarf perf-fp"}
SPIN_ITERS=${SPIN_ITERS:-750000000}
FIZZ_N=${FIZZ_N:-10000000}
LONG=${LONG:-60}
SHORT=${SHORT:-15}
RG=${RG:-}
RG_ARGS=${RG_ARGS:-}
WORK=${WORK:-$(mktemp -d /tmp/native-overhead.XXXXXX)}
mkdir -p "$WORK"
RAW=$WORK/raw.tsv
echo "work dir: $WORK; bin: $BIN"
echo "machine: nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); kernel $(uname -r); $(rustc --version 2>/dev/null)"

meta() { # meta DIR KEY... -> values, space separated
  python3 - "$@" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1] + "/profile.json"))["meta"]
print(" ".join(str(m.get(k, "-")) for k in sys.argv[2:]))
EOF
}

build_spin() {
  cat > "$WORK/spin.c" <<'EOF'
// spin THREADS ITERS_PER_THREAD: a fixed amount of CPU work (an FNV-like hash loop) per thread.
// Prints the result, then its own elapsed time in seconds (from start to the last join).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static uint64_t iters;
__attribute__((noinline)) static uint64_t mix(uint64_t h, uint64_t i) {
  h ^= i; h *= 0x100000001b3ULL; h ^= h >> 29; return h;
}
__attribute__((noinline)) static uint64_t inner(uint64_t h, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) h = mix(h, i);
  return h;
}
__attribute__((noinline)) static uint64_t work(uint64_t seed) {
  uint64_t h = seed;
  for (uint64_t k = 0; k < iters / 1000; k++) h = inner(h, 1000);
  return h;
}
static void *thr(void *a) { return (void *)(uintptr_t)work((uintptr_t)a); }
int main(int argc, char **argv) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int t = argc > 1 ? atoi(argv[1]) : 1;
  iters = argc > 2 ? strtoull(argv[2], 0, 10) : 300000000ULL;
  pthread_t th[64]; uint64_t x = 0;
  for (int i = 0; i < t && i < 64; i++) pthread_create(&th[i], 0, thr, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < t && i < 64; i++) { void *r; pthread_join(th[i], &r); x ^= (uintptr_t)r; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%llx\nself_s %.4f\n", (unsigned long long)x,
         (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
  return 0;
}
EOF
  gcc -O2 -g -pthread -o "$WORK/spin" "$WORK/spin.c" || exit 1
}

target_cmd() {
  case $1 in
    spin1) echo "$WORK/spin 1 $SPIN_ITERS" ;;
    spin2) echo "$WORK/spin 2 $SPIN_ITERS" ;;
    fizzbuzz) echo "$BIN/fizzbuzz $FIZZ_N" ;;
    empty) echo "$WORK/spin 1 0" ;; # the tool's own start and stop cost
  esac
}

run_one() { # run_one TARGET CONFIG ROUND -> one raw line
  local t=$1 c=$2 r=$3 cmd out=$WORK/out-$1-$2-$3 s e self extra="-"
  cmd=$(target_cmd "$t")
  local so=$WORK/stdout; [ "$t" = fizzbuzz ] && so=/dev/null
  rm -rf "$out" "$WORK/perf.data"
  s=$(date +%s%N)
  case $c in
    alone) $cmd > "$so" ;;
    nonative) "$BIN/fsprof" run --no-native -o "$out" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    native) "$BIN/fsprof" run -o "$out" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    ptrace) "$BIN/fsprof" run --backend ptrace -o "$out" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    perf-dwarf) perf record -q -F 1000 --call-graph dwarf -o "$WORK/perf.data" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    perf-fp) perf record -q -F 1000 -g -o "$WORK/perf.data" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    native-*) "$BIN/fsprof" run --rate "${c#native-}" -o "$out" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    perf-dwarf16k) perf record -q -F 1000 --call-graph dwarf,16384 -o "$WORK/perf.data" -- $cmd > "$so" 2> "$WORK/stderr" ;;
    perf-dwarf-*) perf record -q -F "${c#perf-dwarf-}" --call-graph dwarf -o "$WORK/perf.data" -- $cmd > "$so" 2> "$WORK/stderr" ;;
  esac
  e=$(date +%s%N)
  self=-; [ "$so" = /dev/null ] || self=$(awk '/^self_s/ {print $2}' "$so")
  case $c in native|native-*|ptrace)
    extra=$(meta "$out" pause_p50_us pause_p99_us ticks native_captured native_complete native_not_stopped native_moved | tr ' ' ',') ;;
  esac
  case $c in nonative|native|native-*|ptrace) rm -rf "$out" ;; esac
  printf '%s\t%s\t%s\t%.4f\t%s\t%s\n' "$t" "$c" "$r" "$(echo "($e - $s) / 1000000000" | bc -l)" "$self" "$extra" | tee -a "$RAW"
}

part1() {
  echo "== part 1: slowdown and pauses ($RUNS rounds); $(uptime)"
  build_spin
  printf 'target\tconfig\tround\twall_s\tself_s\tp50,p99,ticks,captured,complete,not_stopped,moved\n' | tee -a "$RAW"
  for t in $TARGETS; do run_one "$t" alone 0 > /dev/null; done # warm-up, not counted
  for r in $(seq 1 "$RUNS"); do
    for t in $TARGETS; do
      # A new order each round: a fixed one would give each configuration the same neighbour
      # (and the host's state after it) every round.
      for c in $(printf '%s\n' $CONFIGS | shuf); do run_one "$t" "$c" "$r"; done
    done
  done
  python3 - "$RAW" <<'EOF'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("target")]
rows = [r for r in rows if r[2] != "0"]
targets = list(dict.fromkeys(r[0] for r in rows)); configs = list(dict.fromkeys(r[1] for r in rows))
def col(t, c, i):
    return [float(r[i]) for r in rows if r[0] == t and r[1] == c and r[i] != "-"]
# the tool's fixed cost (start, stop, writing its output), from the runs with no work; not
# subtracted for perf, whose ~1.1 s with no work mostly overlaps a longer target's run
fixed = {c: st.median(col("empty", c, 3)) - st.median(col("empty", "alone", 3)) for c in configs} if "empty" in targets else {}
print("\n| target | config | wall median (min-max) s | slowdown (wall) | wall minus tool's fixed cost | self median (min-max) s | slowdown (self) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for t in targets:
    base_w = st.median(col(t, "alone", 3)); sb = col(t, "alone", 4); base_s = st.median(sb) if sb else None
    for c in configs:
        w = col(t, c, 3); s = col(t, c, 4)
        ws = f"{st.median(w):.3f} ({min(w):.3f}-{max(w):.3f})"
        sw = f"{(st.median(w)/base_w-1)*100:+.1f}%" if t != "empty" else "-"
        net = f"{((st.median(w)-fixed[c])/base_w-1)*100:+.1f}%" if fixed and t != "empty" and not c.startswith("perf") else "n/a" if t != "empty" and c.startswith("perf") else (f"{fixed[c]:.3f} s" if fixed else "-")
        ss = f"{st.median(s):.3f} ({min(s):.3f}-{max(s):.3f})" if s else "-"
        sl = f"{(st.median(s)/base_s-1)*100:+.1f}%" if s and base_s and t != "empty" else "-"
        print(f"| {t} | {c} | {ws} | {sw} | {net} | {ss} | {sl} |")
# Paired: each round's run under the tool against the same round's run alone (adjacent in time),
# which cancels most of a shared machine's slow drift; the median of those ratios.
print("\n| target | config | paired slowdown (self), median of rounds | quartiles |")
print("| --- | --- | --- | --- |")
for t in targets:
    for c in configs:
        if c == "alone": continue
        rounds = sorted({r[2] for r in rows if r[0] == t})
        by = {(r[1], r[2]): float(r[4]) for r in rows if r[0] == t and r[4] != "-"}
        rat = sorted(by[(c, k)] / by[("alone", k)] - 1 for k in rounds if (c, k) in by and ("alone", k) in by)
        if not rat: continue
        print(f"| {t} | {c} | {st.median(rat)*100:+.1f}% (n={len(rat)}) | {rat[len(rat)//4]*100:+.1f}% .. {rat[(3*len(rat))//4]*100:+.1f}% |")
# fsprof against perf at the same rate, run by run: the difference of the two paired slowdowns in each round
# (percentage points), its median, and a bootstrap 95% interval of that median.
import random
random.seed(1)
def paired(t, c):
    by = {(r[1], r[2]): float(r[4]) for r in rows if r[0] == t and r[4] != "-"}
    return {k: (by[(c, k)] / by[("alone", k)] - 1) * 100 for (cc, k) in by if cc == c and ("alone", k) in by}
def rate(c):  # samples per second of a configuration (fsprof's default is 250 Hz)
    if c.startswith("native-") or c.startswith("perf-dwarf-"):
        return c.rsplit("-", 1)[1]
    return {"native": "250", "ptrace": "250"}.get(c, "1000")
pairs = [(t, a, b) for t in targets for a in configs for b in configs
         if (a.startswith("native") or a == "ptrace") and b.startswith("perf") and rate(a) == rate(b)]
if pairs:
    print("\n| target | fsprof config - perf config | paired difference, median (points) | 95% interval | mean | n |")
    print("| --- | --- | --- | --- | --- | --- |")
for t, a, b in pairs:
    pa, pb = paired(t, a), paired(t, b)
    d = [pa[k] - pb[k] for k in pa if k in pb]
    if not d: continue
    boots = sorted(st.median(random.choices(d, k=len(d))) for _ in range(2000))
    print(f"| {t} | {a} - {b} | {st.median(d):+.2f} | {boots[50]:+.2f} .. {boots[1949]:+.2f} | {st.mean(d):+.2f} | {len(d)} |")
print("\n| target | config | pause p50 µs, runs (median) | pause p99 µs, runs (median) | complete/captured | not stopped / ticks |")
print("| --- | --- | --- | --- | --- | --- |")
for t, c in [(t, c) for t in targets for c in configs if c in ("native", "ptrace") or c.startswith("native-")]:
    ex = [list(map(int, r[5].split(","))) for r in rows if r[0] == t and r[1] == c and r[5] != "-"]
    if not ex: continue
    p50 = [e[0] for e in ex]; p99 = [e[1] for e in ex]
    cap = sum(e[3] for e in ex); comp = sum(e[4] for e in ex); ns = sum(e[5] for e in ex); ticks = sum(e[2] for e in ex)
    print(f"| {t} | {c} | {' '.join(map(str,p50))} ({st.median(p50)}) | {' '.join(map(str,p99))} ({st.median(p99)}) | {comp}/{cap} = {100*comp/max(cap,1):.2f}% | {ns}/{ticks} |")
EOF
}

part2() {
  echo "== part 2: fsprof attach CPU and max RSS; $(uptime)"
  for d in $SHORT $LONG; do
    local ready=$WORK/ready-$d out=$WORK/attach-$d
    rm -f "$ready"
    "$BIN/fsprof-target" threads $((d + 10)) --ready "$ready" > /dev/null & local tp=$!
    while [ ! -f "$ready" ]; do sleep 0.05; done
    /usr/bin/time -v "$BIN/fsprof" attach "$tp" --duration "$d" -o "$out" 2> "$WORK/attach-$d.err" > /dev/null
    kill "$tp" 2> /dev/null; wait "$tp" 2> /dev/null
    local u sy rss
    u=$(awk -F': ' '/User time/ {print $2}' "$WORK/attach-$d.err")
    sy=$(awk -F': ' '/System time/ {print $2}' "$WORK/attach-$d.err")
    rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$WORK/attach-$d.err")
    echo "duration ${d}s: user ${u}s sys ${sy}s cpu $(echo "scale=2; 100 * ($u + $sy) / $d" | bc)% of a core; maxrss ${rss} KB;" \
      "meta: $(meta "$out" ticks native_captured native_complete native_not_stopped pause_p50_us pause_p99_us);" \
      "unique folded stacks $("$BIN/fsprof" report "$out" --format folded | wc -l)"
  done
}

heaviest() { awk '{print $NF "\t" $0}' | sort -n | cut -f2-; } # folded lines by count (last field)

complete_of() { # complete_of NAME DIR
  echo "$1: $(meta "$2" native_complete native_captured native_not_stopped native_moved ticks pause_p50_us pause_p99_us |
    awk '{printf "complete %d / captured %d = %.2f%%; not_stopped %d, moved %d, ticks %d; pause p50 %s p99 %s us", $1, $2, 100*$1/($2?$2:1), $3, $4, $5, $6, $7}')"
}

part3() {
  echo "== part 3: unwind completeness; $(uptime)"
  rm -rf "$WORK"/c-*
  "$BIN/fsprof" run -o "$WORK/c-fizzbuzz" -- "$BIN/fizzbuzz" > /dev/null 2>&1; complete_of fizzbuzz "$WORK/c-fizzbuzz"
  "$BIN/fsprof" run -o "$WORK/c-chain" -- "$BIN/fsprof-chain" 3 > /dev/null 2>&1; complete_of fsprof-chain "$WORK/c-chain"
  "$BIN/fsprof" run -o "$WORK/c-python" -- python3 -c 'sum(i*i for i in range(30_000_000))' > /dev/null 2>&1; complete_of python3 "$WORK/c-python"
  if [ -n "$RG" ]; then
    # shellcheck disable=SC2086
    set -f; "$BIN/fsprof" run -o "$WORK/c-rg" -- "$RG" $RG_ARGS > /dev/null 2> "$WORK/c-rg.err"; set +f; complete_of ripgrep "$WORK/c-rg"
    echo "ripgrep, heaviest folded stacks:"
    "$BIN/fsprof" report "$WORK/c-rg" --format folded | heaviest | tail -5 | cut -c1-400
  fi
  for d in "$WORK"/c-*/; do
    local n; n=$("$BIN/fsprof" report "$d" --format folded | grep -c '^\[stack truncated\]')
    [ "$n" -gt 0 ] && { echo "truncated stacks in $d (heaviest):"; "$BIN/fsprof" report "$d" --format folded | grep '^\[stack truncated\]' | heaviest | tail -5 | cut -c1-300; }
  done
}

for p in $PARTS; do "part$p"; done
