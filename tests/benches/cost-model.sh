#!/usr/bin/env bash
# cost-model.sh: what fsprof costs a program, event by event (issue 39's cost model): one
# sample, one context switch, one process, one thread, many threads. Each part runs a small
# program of fixed work (sources in cost-model/) alone and under fsprof in several
# configurations, interleaved in a new random order each round, and prints the program's own
# elapsed time (it times itself), fsprof's and the program's CPU together, and, where it may
# (root: kernel.bpf_stats_enabled), each BPF program's runs and nanoseconds per run.
#
# Parts (PARTS=, default all):
#   samples    spin 2 threads of a hash loop: alone | default (per-CPU events for the program)
#              | percpu (FSPROF_PER_CPU=1, the same for one process) | r1000 (--rate 1000) |
#              nonative | perf1000 (`perf record -F 1000 --call-graph dwarf`, where perf is
#              installed); with TICK=1 also clock (samples on fsprof's own cpu-clock per CPU,
#              FSPROF_CLOCK=clock, where the defaults take them at the scheduler's tick) and
#              perf250; also the CPU time of spin's parent (fsprof, perf)
#              while spin ran
#   ticks      where the samples' cost goes: spin 2 threads, longer (about 2.5 s): alone | default
#              | percpu | nonative | r125 | perf250 (`perf record -F 250 --call-graph dwarf`) |
#              ptick, ptick2 (`perf record -e task-clock` at fsprof's default tick rate and half
#              of it, no stacks: what a tick costs); the program's elapsed and CPU time (the
#              latter includes the kernel's work in interrupts on its threads); not in the
#              default PARTS
#   segments   where in the run the cost falls: spin 2 threads, each reading its CPU time at
#              every tenth of its steps: alone | default | r1000 | perf250 | perf1000 (and
#              base, base1000 with BASE); per
#              tenth, the threads' CPU time against alone's (the kernel's work per sample is
#              the same in every tenth; a profiler's start shows in the first); not in the
#              default PARTS
#   preempted  spin 2 threads beside a busy loop on every CPU (so preempted every few ms):
#              alone | default | r1000, by the program's CPU time (the kernel's copies of a
#              preempted thread's stack, at most one per period, are made on it); not in the
#              default PARTS
#   switches   pingpong: two threads hand a byte through pipes 200k times (400k switches):
#              alone | default | percpu | agent | nonative | ptrace; and pyswitch (python3: 4
#              threads, two ping-pong pairs with json and hashing, ~20k switches/s): alone |
#              default | percpu | agent | nonative
#   processes  forks: fork and exec /bin/true 500 times: alone | default | percpu | agent |
#              nofollow | nonative
#   threads    births: 20000 short threads one after another: alone | default | percpu |
#              agent | nonative
#   crowds     fsprof attach for 4 s to spin with 2, 16, 64 and 1000 threads (fsprof's own CPU,
#              ticks, perf samples lost, threads with samples); fsprof run on spin 1000
#   mechanisms what one context switch costs, mechanism by mechanism: pingpong with both
#              threads pinned to one CPU (every switch is between them; fsprof runs on
#              another): alone | default | nonative | perf record of the command (per-task
#              task-clock events, as fsprof's per-thread ones): ptask, with dwarf stacks ptaskdw
#              | perf record -a (one cpu-clock event per CPU): pcpu, pcpudw, with CPU-wide
#              switch records pcpusw, with a sample at every switch (-e context-switches -c 1)
#              pcpucs | a BPF program run at every switch (bpftrace, where installed): on a
#              per-CPU context-switch software event bpfcs, on the sched_switch tracepoint
#              bpftp; then evcost, the same hand-offs with one kind of perf event opened on
#              each thread (task-clock sampling or counting, a context-switch event counting or
#              sampling every switch) or one cpu-clock event on the CPU: nanoseconds per switch
#              each; not in the default PARTS (needs root and a second CPU)
#   torch      a small PyTorch training loop under fsprof run, if python3 has torch
#   self       where fsprof's own CPU goes: fsprof attached for 22 s to spin with 2 and 64
#              threads at the defaults, itself profiled by a second fsprof at 1 kHz (its
#              function view by self time); not in the default PARTS
#
# Run from the workspace root after `cargo build --release --workspace` (needs gcc, python3;
# root for the BPF figures):  tests/benches/cost-model.sh
# Knobs: BIN (dir with fsprof; default target/release), ROUNDS (3), PARTS, WORK (temp dir),
# CONFIGS (the configurations `samples` runs, e.g. "alone default r1000 perf1000"), BPF_STATS=no
# (as root, no BPF run times: their statistics cost each program run two clock reads, and
# their reader wakes every 100 ms beside fsprof's configurations only; for the bars' figures),
# BASE (a dir with another fsprof, an earlier build say: then `samples` and `switches` also run
# a `base` configuration, that fsprof at the defaults, for a before and after in one run;
# `samples` also `base1000`, that fsprof at --rate 1000).
# The slowdowns are medians against the same run's `alone`: on a machine with as many cores
# as the program has threads they show the work done on the program's own CPU (the kernel's,
# for fsprof's events); on a smaller one fsprof's own CPU time competes with the program too.
# Each part that runs rounds also prints the differences issue 39's bars are about (the defaults
# against alone, `--rate 1000` against perf at 1 kHz, a base build against this one), paired
# within rounds, with 95% intervals by bootstrap (paired.py): an interval that holds 0 is a
# difference the run did not resolve.
set -u
cd "$(dirname "$0")/../.."
BIN=$(realpath "${BIN:-target/release}")
[ -n "${BASE:-}" ] && BASE=$(realpath "$BASE")
SRC=$(realpath tests/benches/cost-model)
ROUNDS=${ROUNDS:-3}
PARTS=${PARTS:-"samples switches processes threads crowds torch"}
WORK=${WORK:-$(mktemp -d /tmp/cost-model.XXXXXX)}
mkdir -p "$WORK"
echo "work dir: $WORK; bin: $BIN${BASE:+; base: $BASE}"
echo "machine: nproc $(nproc);$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); kernel $(uname -r); $(uptime)"
for p in spin pingpong forks births bpfstat evcost; do
  gcc -O2 -g -pthread -o "$WORK/$p" "$SRC/$p.c" || exit 1
done
BPF=no
if [ "${BPF_STATS:-yes}" != no ] && [ "$(id -u)" = 0 ] && sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null; then
  BPF=yes
  trap 'sysctl -qw kernel.bpf_stats_enabled=0' EXIT
fi
echo "BPF run times: $BPF"

bpf_summary() { # the last line of each BPF program in $WORK/bpf
  python3 - "$WORK/bpf" <<'PY'
import sys
last = {}
for line in open(sys.argv[1]):
    _, prog, _, runs, ns = line.split()
    last[prog] = (int(runs), int(ns))
rows = sorted(v for v in last.values() if v[0])
if rows:
    print("  bpf: %d programs ran, %.1f ms in all; runs/ns per run: %s" % (
        len(rows), sum(ns for _, ns in rows) / 1e6, " ".join(f"{r}/{ns // r}" for r, ns in rows)))
PY
}
meta() { # meta PROFILE_DIR: what the profile says of its own sampling
  python3 - "$1" <<'PY'
import json, sys
p = json.load(open(sys.argv[1] + "/profile.json")); m = p["meta"]
seen = {s["thread"] for s in p["samples"]}
print(f"  threads {len(p['threads'])}, with samples {len(seen)}; ticks {m['ticks']} in {m['duration_ns'] / 1e9:.2f} s "
      f"(late {m['late_ticks']}, stretched {m['stretched_ticks']}); perf samples lost {m.get('perf_lost', 0)}")
PY
}
TIMEFORMAT='%R %U %S'
one() { # one CONFIG COMMAND...: the command alone or under fsprof run
  local config=$1 flags
  shift
  case $config in
    alone) "$@" | grep -h elapsed; return ;;
    perf1000 | perf250)
      perf record -q -F "${config#perf}" --call-graph dwarf -o "$WORK/perf.data" -- "$@" 2> /dev/null | grep -h elapsed
      return ;;
    ptick | ptick2) # perf's task-clock ticks alone, at fsprof's default tick rate (and half)
      local every=475000
      [ "$config" = ptick2 ] && every=950000
      perf record -q -e task-clock -c $every -o "$WORK/perf.data" -- "$@" 2> /dev/null | grep -h elapsed
      return ;;
    ptask | ptaskdw | pcpu | pcpudw | pcpusw | pcpucs)
      local how
      case $config in
        ptask) how="-e task-clock -F 250" ;;
        ptaskdw) how="-e task-clock -F 250 --call-graph dwarf,16384" ;;
        pcpu) how="-a -e cpu-clock -F 250" ;;
        pcpudw) how="-a -e cpu-clock -F 250 --call-graph dwarf,16384" ;;
        pcpusw) how="-a -e cpu-clock -F 250 --switch-events" ;;
        pcpucs) how="-a -e context-switches -c 1" ;;
      esac
      # shellcheck disable=SC2086
      perf record -q $how -o "$WORK/perf.data" -- "$@" 2> /dev/null | grep -h elapsed
      return ;;
    bpfcs | bpftp)
      local probe='software:cs:1 { }'
      [ "$config" = bpftp ] && probe='tracepoint:sched:sched_switch { }'
      bpftrace -e "$probe" > /dev/null 2>&1 & local bt=$!
      # Attached once its programs are loaded (their descriptors open), and a moment more.
      for _ in $(seq 100); do
        ls -l /proc/$bt/fd 2> /dev/null | grep -q bpf-prog && break
        sleep 0.1
      done
      sleep 1
      "$@" | grep -h elapsed
      kill -INT $bt; wait $bt 2> /dev/null
      return ;;
    default) flags= ;;
    tick | clock) flags= ;;
    percpu) flags= ;;
    base) flags= ;;
    base1000) flags="--rate 1000" ;;
    r1000) flags="--rate 1000" ;;
    r125) flags="--rate 125" ;;
    agent) flags=--agent ;;
    nonative) flags=--no-native ;;
    nofollow) flags=--no-follow ;;
    ptrace) flags="--backend ptrace" ;;
  esac
  local bp=
  if [ $BPF = yes ]; then "$WORK/bpfstat" 0.1 > "$WORK/bpf" & bp=$!; fi
  # shellcheck disable=SC2086
  local bin=$BIN
  case $config in base*) bin=$BASE ;; esac
  local design=
  [ "$config" = percpu ] && design=1
  local clock=
  case $config in tick | clock) clock=$config ;; esac
  { time env FSPROF_PER_CPU=$design FSPROF_CLOCK=$clock "$bin/fsprof" run $flags -o "$WORK/p-$config" -- "$@" > "$WORK/out" 2> "$WORK/err"; } 2> "$WORK/time"
  if [ -n "$bp" ]; then sleep 0.05; kill $bp; wait $bp 2>/dev/null; bpf_summary; fi
  grep -h elapsed "$WORK/out"
  read -r wall user sys < "$WORK/time"
  echo "  fsprof and program: wall $wall s, CPU $(awk "BEGIN{print $user + $sys}") s"
  grep -h "stopped following" "$WORK/err" | head -1
}
rounds() { # rounds NAME "CONFIGS" COMMAND...: ROUNDS rounds, then medians against alone
  local name=$1 configs=$2
  shift 2
  echo "== $name: $*"
  : > "$WORK/$name.tsv"; : > "$WORK/$name-cpu.tsv"; : > "$WORK/$name-parent.tsv"
  for r in $(seq "$ROUNDS"); do
    for c in $(echo $configs | tr ' ' '\n' | shuf); do
      echo "round $r $c"
      one "$c" "$@" | tee "$WORK/one"
      sed -n "s/.* ${METRIC:-elapsed}=\([0-9.]*\).*/\1/p" "$WORK/one" | head -1 | sed "s/^/$c\t/" >> "$WORK/$name.tsv"
      sed -n "s/.* cpu=\([0-9.]*\).*/\1/p" "$WORK/one" | head -1 | sed "s/^/$c\t/" >> "$WORK/$name-cpu.tsv"
      sed -n "s/.* parent_cpu=\([0-9.]*\).*/\1/p" "$WORK/one" | head -1 | sed "s/^/$c\t/" >> "$WORK/$name-parent.tsv"
    done
  done
  medians "$WORK/$name.tsv" alone ${SWITCHES:-}
  paired "$WORK/$name.tsv"
  if [ -z "${METRIC:-}" ] && [ -s "$WORK/$name-cpu.tsv" ]; then
    echo "  the program's CPU time (its threads', with the kernel's work in their interrupts):"
    medians "$WORK/$name-cpu.tsv" alone
    paired "$WORK/$name-cpu.tsv"
  fi
  if [ -s "$WORK/$name-parent.tsv" ]; then
    echo "  the CPU time of the program's parent (fsprof, perf, the shell) while the program ran:"
    python3 - "$WORK/$name-parent.tsv" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    config, value = line.split()
    runs.setdefault(config, []).append(1000 * float(value))
for config, values in sorted(runs.items()):
    print(f"  {config}: median {statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})")
PY
  fi
}
paired() { # paired TSV: the differences the bars are about, each with its 95% interval (paired.py)
  python3 tests/benches/paired.py "$1" alone default-alone r1000-alone r1000-perf1000 \
    default-perf250 base-default base1000-r1000 clock-alone default-clock
}
medians() { # medians TSV BASE [SWITCHES]: each configuration's median, against BASE's (and per switch)
  python3 - "$@" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    config, value = line.split()
    runs.setdefault(config, []).append(float(value))
base = statistics.median(runs[sys.argv[2]])
switches = float(sys.argv[3]) if len(sys.argv) > 3 else 0
for config, values in sorted(runs.items()):
    m = statistics.median(values)
    per = f", {(m - base) * 1e9 / switches:+.0f} ns per switch" if switches else ""
    print(f"  {config}: median {m:.3f} s ({min(values):.3f}-{max(values):.3f}), {100 * (m / base - 1):+.1f}%{per}")
PY
}

for part in $PARTS; do
  case $part in
    samples)
      configs="alone default percpu r1000 nonative"
      command -v perf > /dev/null && configs="$configs perf1000"
      [ -n "${BASE:-}" ] && configs="$configs base base1000"
      [ -n "${TICK:-}" ] && configs="$configs clock perf250"
      rounds spin2 "${CONFIGS:-$configs}" "$WORK/spin" 2 500000000 ;;
    ticks)
      configs="alone default percpu nonative r125"
      command -v perf > /dev/null && configs="$configs perf250 ptick ptick2"
      rounds spin2-ticks "$configs" "$WORK/spin" 2 1500000000 ;;
    segments)
      # Where in the run a configuration's cost falls: each thread's CPU time in each tenth of
      # its steps (spin's SPIN_SEGMENTS), summed over the threads, against alone's.
      configs="alone default r1000"
      command -v perf > /dev/null && configs="$configs perf250 perf1000"
      [ -n "${BASE:-}" ] && configs="$configs base base1000"
      echo "== segments: spin 2 500000000, the threads' CPU time in each tenth of their steps"
      : > "$WORK/segments.tsv"
      for r in $(seq "$ROUNDS"); do
        for c in $(echo $configs | tr ' ' '\n' | shuf); do
          echo "round $r $c"
          one "$c" env SPIN_SEGMENTS=10 "$WORK/spin" 2 500000000 > "$WORK/one"
          sed -n "s/.* segments=\([0-9.,]*\).*/\1/p" "$WORK/one" | head -1 | sed "s/^/$c\t/" >> "$WORK/segments.tsv"
        done
      done
      python3 - "$WORK/segments.tsv" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    config, values = line.split()
    runs.setdefault(config, []).append([float(v) for v in values.split(",")])
alone = [statistics.median(column) for column in zip(*runs["alone"])]
print("  per tenth, the median against alone's (%), then the whole run's:")
for config, rows in sorted(runs.items()):
    medians = [statistics.median(column) for column in zip(*rows)]
    tenths = " ".join(f"{100 * (m / a - 1):+5.1f}" for m, a in zip(medians, alone))
    print(f"  {config:9s} {tenths}   {100 * (sum(medians) / sum(alone) - 1):+5.1f}")
PY
      ;;
    preempted)
      busy=()
      for _ in $(seq "$(nproc)"); do yes > /dev/null & busy+=($!); done
      METRIC=cpu rounds spin2-preempted "alone default r1000" "$WORK/spin" 2 200000000
      kill "${busy[@]}"
      wait "${busy[@]}" 2> /dev/null ;;
    switches)
      extra=${BASE:+ base}
      rounds pingpong "alone default percpu agent nonative ptrace$extra" "$WORK/pingpong" 200000
      rounds pyswitch "alone default percpu agent nonative$extra" python3 "$SRC/pyswitch.py" 40000 ;;
    processes) rounds forks "alone default percpu agent nofollow nonative" "$WORK/forks" 500 ;;
    mechanisms)
      configs="alone default nonative"
      command -v perf > /dev/null && configs="$configs ptask ptaskdw pcpu pcpudw pcpusw pcpucs"
      command -v bpftrace > /dev/null && configs="$configs bpfcs bpftp"
      # The tracepoint needs tracefs (not mounted on some hosts).
      [ -e /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing 2> /dev/null
      SWITCHES=300000 rounds pingpong-one-cpu "$configs" taskset -c "$(($(nproc) - 1))" "$WORK/pingpong" 150000
      echo "== evcost: the same hand-offs, with one kind of perf event on each thread (or the CPU)"
      : > "$WORK/evcost.tsv"
      for r in $(seq "$ROUNDS"); do
        for mode in $(shuf -e none tsample tcount cscount cssample cpuclock); do
          "$WORK/evcost" "$mode" 150000 | tee -a "$WORK/evcost.log" |
            sed -n "s/.*elapsed=\([0-9.]*\).*/$mode\t\1/p" >> "$WORK/evcost.tsv"
        done
      done
      medians "$WORK/evcost.tsv" none 300000 ;;
    threads) rounds births "alone default percpu agent nonative" "$WORK/births" 20000 ;;
    crowds)
      echo "== crowds: fsprof attach --duration 4 at the defaults"
      cores=$(nproc)
      # spin's steps a second on one CPU of this machine (340M on one host, 690M on another).
      rate=$("$WORK/spin" 1 200000000 | sed 's/.*elapsed=\([0-9.]*\).*/\1/' | awk '{print int(2e8 / $1)}')
      for n in 2 16 64 1000; do
        # About 24 s of work, killed after the attach: with 8 s, spin 1000 had mostly exited
        # before fsprof attached (the shell's `sleep 0.5` took about 2 s beside 1000 busy
        # threads), and the attach recorded 0 to 2 threads for 0.00 s. Even so, fsprof's start
        # beside them can take seconds (its share of 2 CPUs among 1000 threads): read the 1000
        # row's ticks and duration before its losses.
        iters=$(python3 -c "print(int($rate * 24 * min($cores, $n) / $n))")
        "$WORK/spin" "$n" "$iters" > /dev/null & pid=$!
        sleep 0.5
        # fsprof's own CPU as its /proc entry last showed it (read every 50 ms; bash's `time` would add the spin
        # process if the shell reaped it meanwhile).
        "$BIN/fsprof" attach "$pid" --duration 4 -o "$WORK/att$n" > /dev/null 2> "$WORK/err" & fsprof=$!
        started=$(date +%s.%N); cpu=0
        while kill -0 "$fsprof" 2> /dev/null; do
          cpu=$(awk '{print ($14 + $15) / 100}' /proc/$fsprof/stat 2> /dev/null || echo "$cpu")
          sleep 0.05
        done
        wait "$fsprof"
        wall=$(awk "BEGIN{print $(date +%s.%N) - $started}"); user=$cpu; sys=0
        echo "spin $n threads: fsprof wall $wall s, CPU $(awk "BEGIN{print $user + $sys}") s"
        meta "$WORK/att$n"
        kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
      done
      echo "== crowds: fsprof run on spin 1000"
      "$BIN/fsprof" run -o "$WORK/run1000" -- "$WORK/spin" 1000 $((340000000 * 5 * $(nproc) / 1000)) 2> "$WORK/err"
      meta "$WORK/run1000" ;;
    self)
      for n in 2 64; do
        "$WORK/spin" "$n" $((340000000 * 30 * (n < $(nproc) ? n : $(nproc)) / n)) > /dev/null & pid=$!
        sleep 0.3
        "$BIN/fsprof" attach "$pid" --duration 22 -o "$WORK/inner$n" > /dev/null 2>&1 & inner=$!
        # Its CPU as its /proc entry last showed it (it may end before the outer one does).
        echo "?" > "$WORK/inner-cpu"
        while kill -0 "$inner" 2> /dev/null; do
          cpu=$(awk '{print ($14 + $15) / 100}' /proc/$inner/stat 2> /dev/null) && echo "$cpu" > "$WORK/inner-cpu"
          sleep 0.2
        done &
        sleep 3
        "$BIN/fsprof" attach "$inner" --rate 1000 --duration 15 -o "$WORK/outer$n" > /dev/null 2>&1
        echo "== self: fsprof on spin $n, its CPU so far $(cat "$WORK/inner-cpu") s (attached about 18 s)"
        "$BIN/fsprof" report "$WORK/outer$n" | sed -n '/Functions by self time/,/^$/p' | head -30
        wait "$inner"; kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
      done ;;
    torch)
      if python3 -c "import torch" 2> /dev/null; then
        echo "== torch: a training loop nobody marked"
        "$BIN/fsprof" run -o "$WORK/torch" -- python3 "$SRC/train.py" 8 > "$WORK/out" 2> "$WORK/err"
        tail -1 "$WORK/out"
        "$BIN/fsprof" report "$WORK/torch" | head -30
        meta "$WORK/torch"
      else
        echo "== torch: skipped (python3 has no torch)"
      fi ;;
  esac
done
