#!/usr/bin/env bash
# Wall time of real programs with and without the agent preloaded (LD_PRELOAD of
# libfsprof_agent.so, no profiler attached: the marks are pushed and popped all the same), for
# BENCHMARKS.md. Run from the workspace root after `cargo build --release --workspace`.
# Usage: [AGENT=path/to/libfsprof_agent.so] [JOBS="xz sqlite3"] tests/benches/agent-programs.sh [ROUNDS]
# (JOBS: only these programs, by the names the script prints.)
#
# Each round runs every program alone and with the agent, in a shuffled order; the script prints
# per program the median wall and CPU times of each and the median of the rounds' ratios (with
# the agent / alone, paired within a round, which cancels the host's drift). Programs (inputs
# and jobs from real-programs.sh, in a temporary directory): a C loop of 20 M strdup+free
# (malloc called from inside libc: ns per iteration as the program measures them), `gcc -O2 -c`
# of a 300-line C file, `make -j2` of 12 such files, `sqlite3` running a query script, `git log
# -p` of this repository, `xz -T2` of 12 MB of text, `python3` running a script (through pyenv's
# wrapper script if that is what `python3` is), and a tokio server under a loopback load.
set -euo pipefail
rounds=${1:-7}
agent=${AGENT:-$PWD/target/release/libfsprof_agent.so}
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

. "$repo/tests/benches/real-programs.sh"

# Each round runs every job alone and with the agent, in a shuffled order, and takes each run's
# wall time and CPU time (user + system of the job and its children, from wait4): the CPU time
# is what the agent adds to, and moves less with the host's other load than the wall time.
python3 - "$rounds" "$agent" jobs.txt <<'EOF_PY'
import os, random, statistics, sys, time
rounds, agent, jobs_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jobs = dict(line.rstrip("\n").split(" ", 1) for line in open(jobs_file) if line.strip())
if os.environ.get("JOBS"):
    jobs = {name: job for name, job in jobs.items() if name in os.environ["JOBS"].split()}
runs = {}  # (program, config) -> list of (wall, cpu) or per-iteration ns
for round_ in range(rounds):
    order = [(p, c) for p in jobs for c in ("alone", "agent")]
    random.shuffle(order)
    for program, config in order:
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        if config == "agent":
            env["LD_PRELOAD"] = agent
        start = time.monotonic()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(w, 1)
            os.execve("/bin/bash", ["bash", "-c", jobs[program]], env)
        os.close(w)
        out = os.read(r, 1 << 16).decode()
        while os.read(r, 1 << 16):
            pass
        os.close(r)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        cpu = usage.ru_utime + usage.ru_stime
        if program == "strdup":
            value = (float(out.split()[-1]), float(out.split()[-1]))
        else:
            value = (wall * 1e3, cpu * 1e3)
        runs.setdefault((program, config), []).append(value)
print(f"{rounds} rounds; medians; ratio = median over rounds of (with agent / alone), paired within a round (25th .. 75th percentile)")
print(f"{'program':<8} {'alone wall':>11} {'agent wall':>11} {'wall ratio':>24} {'alone cpu':>10} {'agent cpu':>10} {'cpu ratio':>24}")
for program in jobs:
    alone, agent_runs = runs[(program, "alone")], runs[(program, "agent")]
    cells = []
    for k in (0, 1):
        ratios = [b[k] / a[k] for a, b in zip(alone, agent_runs)]
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        unit = "ns" if program == "strdup" else "ms"
        cells.append(f"{statistics.median(x[k] for x in alone):>9.1f}{unit} {statistics.median(x[k] for x in agent_runs):>9.1f}{unit} "
                     f"{statistics.median(ratios):>7.3f} ({q[0]:.3f} .. {q[2]:.3f})")
    print(f"{program:<8} " + "  ".join(cells))
print("strdup: ns per iteration (a strdup and a free) as the program measures them, in both columns")
EOF_PY
