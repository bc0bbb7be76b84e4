#!/usr/bin/env bash
# What `fsprof run` costs real programs: each program alone and under fsprof in the
# configurations asked for, for BENCHMARKS.md. Run from the workspace root after `cargo build
# --release --workspace --all-targets`.
# Usage: [FSPROF=path/to/fsprof] [JOBS="xz sqlite3"] [CONFIGS="defaults percpu"]
#        tests/benches/defaults-cost.sh [ROUNDS]
#
# Configurations (CONFIGS, default "defaults percpu"): defaults (`fsprof run`: per-CPU perf
# events for the program, per-thread for its children), percpu (per CPU for every process,
# FSPROF_PER_CPU=1), perthread (per thread for every process, FSPROF_PER_CPU=0), agent (`fsprof run --agent`), nofollow
# (`--no-follow`), nonative (`--no-native`), r1000 (`--rate 1000`), tick (samples at the
# scheduler's tick, asked for by name: FSPROF_CLOCK=tick, `native/cpu_wide/tick.rs`), clock
# (samples on fsprof's own cpu-clock per CPU, FSPROF_CLOCK=clock), perf1000 (`perf record -F
# 1000 --call-graph dwarf` of the job, where perf is installed), perf250 (the same at fsprof's
# default rate), base (another fsprof at its
# defaults, BASE=path/to/fsprof: an earlier build, for a before and after in one run), base2
# (a third build, BASE2=path/to/fsprof).
# The programs are those of real-programs.sh (gcc, make -j2, sqlite3, git log -p, xz -T2,
# python3, a tokio server under loopback load, awk building a large associative array, a C loop
# of strdup+free, python3 with threads, g++ of a template-heavy file, node, ripgrep, redis under
# redis-benchmark). Each round
# runs every program in each configuration in a shuffled order; the script prints per program
# the median of each configuration's times and the medians of the rounds' ratios to the program
# alone (paired within a round, which cancels the host's drift). A time is the program's own
# (the job times itself inside what fsprof runs): fsprof's start before it and its report after
# it are not the program's cost, and are printed apart (the whole command's wall time).
# Then each ratio's 95% interval (bootstrap over the rounds): one that holds 1.000 is no
# measured cost, and two that overlap are no measured difference.
set -euo pipefail
rounds=${1:-5}
fsprof=${FSPROF:-$PWD/target/release/fsprof}
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$repo/tests/benches/real-programs.sh"

python3 - "$rounds" "$fsprof" jobs.txt <<'EOF_PY'
import os, random, shutil, statistics, subprocess, sys, time
rounds, fsprof, jobs_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jobs = dict(line.rstrip("\n").split(" ", 1) for line in open(jobs_file) if line.strip())
if os.environ.get("JOBS"):
    jobs = {name: job for name, job in jobs.items() if name in os.environ["JOBS"].split()}
every = {
    "alone": ([], {}),
    "defaults": ([fsprof, "run", "-o", "out", "--"], {}),
    "percpu": ([fsprof, "run", "-o", "out", "--"], {"FSPROF_PER_CPU": "1"}),
    "perthread": ([fsprof, "run", "-o", "out", "--"], {"FSPROF_PER_CPU": "0"}),
    "agent": ([fsprof, "run", "--agent", "-o", "out", "--"], {}),
    "nofollow": ([fsprof, "run", "--no-follow", "-o", "out", "--"], {}),
    "nonative": ([fsprof, "run", "--no-native", "-o", "out", "--"], {}),
    "r1000": ([fsprof, "run", "--rate", "1000", "-o", "out", "--"], {}),
    "tick": ([fsprof, "run", "-o", "out", "--"], {"FSPROF_CLOCK": "tick"}),
    "clock": ([fsprof, "run", "-o", "out", "--"], {"FSPROF_CLOCK": "clock"}),
    "base": ([os.environ.get("BASE", "fsprof-base"), "run", "-o", "out", "--"], {}),
    "base2": ([os.environ.get("BASE2", "fsprof-base2"), "run", "-o", "out", "--"], {}),
    "perf1000": (["perf", "record", "-F", "1000", "--call-graph", "dwarf", "-o", "out/perf.data", "--"], {}),
    "perf250": (["perf", "record", "-F", "250", "--call-graph", "dwarf", "-o", "out/perf.data", "--"], {}),
}
asked = os.environ.get("CONFIGS", "defaults percpu").split()
for base in ("base", "base2"):
    if base in asked and not os.environ.get(base.upper()):
        sys.exit(f"CONFIGS has {base}: set {base.upper()}=path/to/another/fsprof")
for perf in ("perf1000", "perf250"):
    if perf in asked and not shutil.which("perf"):
        sys.exit(f"CONFIGS has {perf}, and perf is not installed")
configs = {name: every[name] for name in ["alone"] + asked}
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
walls = {}
for _ in range(rounds):
    order = [(p, c) for p in jobs for c in configs]
    random.shuffle(order)
    for program, config in order:
        shutil.rmtree("out", ignore_errors=True)
        if config.startswith("perf"):
            os.makedirs("out")
        timed = f"s=$(date +%s%N); ( {jobs[program]}\n); st=$?; e=$(date +%s%N); echo $(( (e - s) / 1000 )) > elapsed; exit $st"
        start = time.monotonic()
        command, extra = configs[config]
        done = subprocess.run(command + ["bash", "-c", timed], env=env | extra,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - start
        if done.returncode != 0:
            print(f"{program} {config}: exit {done.returncode}", file=sys.stderr)
        own = int(open("elapsed").read()) / 1e3
        walls.setdefault((program, config), []).append((own, wall * 1e3))
print(f"{rounds} rounds; medians of the program's own ms; ratio to alone = median over rounds, paired within a round; [the whole command's wall ms]")
print(f"{'program':<9} {'alone':>7} " + " ".join(f"{c:>9} {'ratio':>6}" for c in asked) + "   [wall: " + ", ".join(configs) + "]")
for program in jobs:
    alone = walls[(program, "alone")]
    cells, whole = [f"{statistics.median(a for a, _ in alone):>7.0f}"], []
    for config in asked:
        runs = walls[(program, config)]
        ratio = statistics.median(b[0] / a[0] for a, b in zip(alone, runs))
        cells.append(f"{statistics.median(b for b, _ in runs):>9.0f} {ratio:>6.3f}")
    for config in configs:
        whole.append(f"{statistics.median(w for _, w in walls[(program, config)]):.0f}")
    print(f"{program:<9} " + " ".join(cells) + "   [" + ", ".join(whole) + "]")
# How sure the run is of each ratio: the median of the paired ratios over the rounds resampled
# with replacement (bootstrap), its 95% interval; one that holds 1.000 is no measured cost.
rng = random.Random(1)
print("95% intervals of the ratios (bootstrap over the rounds):")
for program in jobs:
    alone = walls[(program, "alone")]
    spans = []
    for config in asked:
        ratios = [b[0] / a[0] for a, b in zip(alone, walls[(program, config)])]
        draws = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(4000))
        spans.append(f"{config} {draws[100]:.3f}-{draws[3899]:.3f}")
    print(f"{program:<9} " + ", ".join(spans))
EOF_PY
