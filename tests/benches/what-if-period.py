#!/usr/bin/env python3
"""What what-if's looks cost the loopback server's requests, by the period of the looks: the
mean request latency `whatif server 3000` measures itself, alone, with the agent preloaded and
experiments off, and in an experiment's baseline (a control page of fsprof_shim::whatif, no
candidate, the progress point `request`) with looks every 1 ms (what-if's period), 10 ms and
1 s; ROUNDS interleaved rounds, medians and sorted runs in ns.

Run from the workspace root after `cargo build --release --workspace --all-targets`.
Usage: tests/benches/what-if-period.py [ROUNDS]"""
import mmap, os, statistics, struct, subprocess, sys

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
fsprof = os.path.abspath("target/release/fsprof")
whatif = os.path.abspath("target/release/whatif")
agent = subprocess.run([fsprof, "agent"], capture_output=True, text=True, check=True).stdout.strip()

def with_page(period):
    # magic, version (CONTROL_VERSION), period, no candidate, a baseline as the experiment
    fd = os.memfd_create("fsprof-whatif", 0)
    os.ftruncate(fd, 17 * 4096)
    mmap.mmap(fd, 17 * 4096)[0:40] = b"FSPROFWI" + struct.pack("<QQQQ", 3, period, 0, 0)
    env = dict(os.environ, LD_PRELOAD=agent, FSPROF_WHATIF=str(fd), FSPROF_BUILTINS="0",
               FSPROF_PROGRESS="request")
    return env, fd

def latency(env=None, fds=()):
    done = subprocess.run([whatif, "server", "3000"], env=env, pass_fds=fds, check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return next(int(l.split()[1]) for l in done.stderr.splitlines() if l.startswith("latency_ns"))

print(f"machine: nproc {os.cpu_count()}; " + next(
    l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")))
runs = {name: [] for name in ["alone", "agent, off", "looks 1 ms", "looks 10 ms", "looks 1 s"]}
for _ in range(rounds):
    runs["alone"].append(latency())
    runs["agent, off"].append(latency(dict(os.environ, LD_PRELOAD=agent, FSPROF_BUILTINS="0")))
    for name, period in [("looks 1 ms", 10**6), ("looks 10 ms", 10**7), ("looks 1 s", 10**9)]:
        env, fd = with_page(period)
        runs[name].append(latency(env, (fd,)))
        os.close(fd)
alone = statistics.median(runs["alone"])
for name, values in runs.items():
    median = statistics.median(values)
    print(f"{name:12} {median:>9.0f} ns  {median / alone:.3f}  {sorted(values)}")
