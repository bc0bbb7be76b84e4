#!/usr/bin/env bash
# `fsprof what-if` against the truth, for BENCHMARKS.md: for each ground-truth program of
# tests/src/bin/whatif.rs (batch, pipeline, server) and two of its features at 20% and 50%,
# the gain `what-if` predicts (the median of RUNS runs of each experiment) against the gain the knob
# really buys (the program alone with the feature's work cut, 2 * RUNS rounds of every setting, each
# knob run against its round's run without the knob, the median over the rounds); then what an experiment run costs the program: its wall time alone, under the agent
# with nothing selected (an experiment's baseline: timers, looks at the marks, waits watched)
# and under the agent with experiments off, medians of RUNS rounds. The `latency` rows: the
# server with `--progress request`, its requests' mean latency (the client's own measure with
# the knob) in place of its run time; there the experiments take turns within one run of
# RUNS * 8000 requests, 2 * RUNS rounds of stretches. Every truth takes 2 * RUNS rounds (with
# RUNS the server's 20% rows moved 4 points between runs on a noisy host). The `rate` rows: how much more often the
# requests would end (`ends/s`), against one over the same latency (a closed loop).
# The `barrier` rows: tests/c/whatif_barrier.c (two C threads meeting at a pthread barrier each
# phase; its knob is an argument `FEATURE=PERCENT`), built here with gcc.
# Run from the workspace root after `cargo build --release --workspace --all-targets`.
# Usage: tests/benches/what-if.sh [RUNS]
set -euo pipefail
runs=${1:-5}
repo=$PWD
fsprof=${FSPROF:-$repo/target/release/fsprof}
whatif=$repo/target/release/whatif
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$(dirname "$fsprof")/libfsprof_agent.so" "$tmp/"
gcc -O2 -g -pthread -I agent/include -I tests/c tests/c/whatif_barrier.c -o "$tmp/whatif_barrier" \
    -L"$tmp" -Wl,-rpath,'$ORIGIN' -lfsprof_agent
python3 - "$runs" "$fsprof" "$whatif" "$tmp" <<'EOF_PY'
import json, mmap, os, statistics, struct, subprocess, sys, time
runs, fsprof, whatif, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
barrier = os.path.join(tmp, "whatif_barrier")
programs = {
    "batch": ["parse", "check"],
    "pipeline": ["decode", "render"],
    "server": ["prepare", "handle"],
    "barrier": ["solve", "check"],
}

def command(mode):
    """The program of `mode`: a mode of the ground-truth binary, or the C barrier program."""
    return [barrier] if mode == "barrier" else [whatif, mode]

def knob(mode, feature, percent):
    return [f"{feature}={percent}"] if mode == "barrier" else ["--cheaper", f"{feature}={percent}"]
speedups = [20, 50]

def timed(command, env=None, fds=()):
    start = time.monotonic()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, pass_fds=fds)
    return time.monotonic() - start

def latency(command):
    """The server's own mean request latency (`latency_ns` on its stderr), ns."""
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True)
    return next(int(l.split()[1]) for l in done.stderr.splitlines() if l.startswith("latency_ns"))

def compare(label, mode, features, options, measure, extra=(), rounds=runs, rate=False):
    """`what-if` with `options` on `mode` (and `extra` arguments) against the knob's truth by
    `measure` (of `mode` alone), row by row; with `rate`, rows of the progress point's rate too
    (a closed loop of requests, one after another: its rate is one over its mean latency)."""
    out = os.path.join(tmp, label)
    args = [fsprof, "what-if", *options, "--speedups", ",".join(map(str, speedups)),
            "--runs", str(rounds), "-o", out]
    for feature in features:
        args += ["--feature", feature]
    subprocess.run(args + ["--", *command(mode), *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.load(open(os.path.join(out, "what-if.json")))["summary"]
    settings = [None] + [(f, s) for f in features for s in speedups]
    truth = {setting: [] for setting in settings}
    for _ in range(2 * runs):
        for setting in settings:
            cut = [] if setting is None else knob(mode, *setting)
            truth[setting].append(measure(command(mode) + cut))
    # Each knob run against its own round's run without the knob (a machine slowed for a few
    # seconds moves both), then the median over the rounds, as the e2e tests take their truth.
    def paired(setting, gain):
        return statistics.median(gain(b, k) for b, k in zip(truth[None], truth[setting]))
    rows = []
    for curve in summary["curves"]:
        feature = curve["candidate"]["feature"]
        for point in curve["points"]:
            setting = (feature, point["speedup"])
            real = paired(setting, lambda b, k: (b - k) * 100 / b)
            rows.append((label, feature, point["speedup"], real, point["median"]))
            if rate:
                real = paired(setting, lambda b, k: (b / k - 1) * 100)
                rows.append(("rate", feature, point["speedup"], real, point["rate_gain"]))
    for label, feature, speedup, real, guess in sorted(rows, key=lambda row: row[0] == "rate"):
        print(f"{label:9} {feature:8} {speedup:>6}% {real:>+6.1f}% {guess:>+8.1f}% {guess - real:>+6.1f}")

print(f"{runs} runs each; gains in percent of the baseline's time")
print(f"{'program':9} {'feature':8} {'speedup':>7} {'real':>7} {'predicted':>9} {'off by':>7}")
for mode, features in programs.items():
    compare(mode, mode, features, [], timed)
# The server's requests as the progress point: the predicted shortening of a request mark's
# mean latency against the mean latency the client measures itself with the knob; and how much
# more often they would end (`ends/s`) against one over that latency.
compare("latency", "server", programs["server"], ["--progress", "request"], latency,
        [str(runs * 8000)], 2 * runs, rate=True)

agent = subprocess.run([fsprof, "agent"], capture_output=True, text=True, check=True).stdout.strip()

def experiment_env():
    fd = os.memfd_create("fsprof-whatif", 0)
    os.ftruncate(fd, 17 * 4096)
    page = mmap.mmap(fd, 17 * 4096)
    # The control page of fsprof_shim::whatif: magic, version (CONTROL_VERSION), period
    # (what-if's 1 ms unless PERIOD_NS says), no candidate, a baseline as the experiment.
    page[0:40] = b"FSPROFWI" + struct.pack("<QQQQ", 3, int(os.environ.get("PERIOD_NS", "1000000")), 0, 0)
    env = dict(os.environ, LD_PRELOAD=agent, FSPROF_WHATIF=str(fd), FSPROF_BUILTINS="0")
    return env, fd

print(f"\nwhat an experiment run costs (medians of {runs} rounds, ms)")
print(f"{'program':9} {'alone':>7} {'agent, off':>10} {'experiment':>10} {'ratio':>6}")
for mode in programs:
    alone, off, on = [], [], []
    for _ in range(runs):
        # FSPROF_BUILTINS=0: the barrier program links the agent, whose built-in features
        # would be marked otherwise (the Rust programs have no agent alone).
        alone.append(timed(command(mode), dict(os.environ, FSPROF_BUILTINS="0")))
        off.append(timed(command(mode), dict(os.environ, LD_PRELOAD=agent, FSPROF_BUILTINS="0")))
        env, fd = experiment_env()
        on.append(timed(command(mode), env, (fd,)))
        os.close(fd)
    a, o, e = (statistics.median(v) * 1000 for v in (alone, off, on))
    print(f"{mode:9} {a:>7.1f} {o:>10.1f} {e:>10.1f} {e / a:>6.3f}")
EOF_PY
