#!/usr/bin/env bash
# What `fsprof run` with its defaults costs real programs, before and after the default stopped
# preloading the agent (issue 38): each program alone, under `fsprof run --agent` (the former
# default) and under `fsprof run` (nothing put into the program; the built-in features from its
# native stacks), for BENCHMARKS.md. Run from the workspace root after `cargo build --release
# --workspace --all-targets`.
# Usage: [FSPROF=path/to/fsprof] [JOBS="xz sqlite3"] tests/benches/defaults-cost.sh [ROUNDS]
#
# The programs are those of real-programs.sh (gcc, make -j2, sqlite3, git log -p, xz -T2,
# python3, a tokio server under loopback load, awk building a large associative array, a C loop
# of strdup+free). Each round runs every program in each configuration in a shuffled order; the
# script prints per program the median wall time of each and the medians of the rounds' ratios
# to the program alone (paired within a round, which cancels the host's drift).
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
configs = {
    "alone": [],
    "--agent": [fsprof, "run", "--agent", "-o", "out", "--"],
    "defaults": [fsprof, "run", "-o", "out", "--"],
}
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
walls = {}
for _ in range(rounds):
    order = [(p, c) for p in jobs for c in configs]
    random.shuffle(order)
    for program, config in order:
        shutil.rmtree("out", ignore_errors=True)
        start = time.monotonic()
        done = subprocess.run(configs[config] + ["bash", "-c", jobs[program]], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - start
        if done.returncode != 0:
            print(f"{program} {config}: exit {done.returncode}", file=sys.stderr)
        walls.setdefault((program, config), []).append(wall * 1e3)
print(f"{rounds} rounds; median wall ms; ratio to alone = median over rounds, paired within a round")
print(f"{'program':<8} {'alone':>9} {'--agent':>9} {'ratio':>7} {'defaults':>9} {'ratio':>7}")
for program in jobs:
    alone = walls[(program, "alone")]
    cells = [f"{statistics.median(alone):>9.0f}"]
    for config in ("--agent", "defaults"):
        runs = walls[(program, config)]
        ratio = statistics.median(b / a for a, b in zip(alone, runs))
        cells.append(f"{statistics.median(runs):>9.0f} {ratio:>7.3f}")
    print(f"{program:<8} " + " ".join(cells))
EOF_PY
