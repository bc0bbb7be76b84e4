#!/usr/bin/env python3
"""One short job, many rounds: the CPU time a preloaded library adds to it, for BENCHMARKS.md.

Usage: tests/benches/agent-pairs.py ROUNDS LIBRARY[:VAR=VALUE...][,LIBRARY...] COMMAND [ARGS...]
  e.g. tests/benches/agent-pairs.py 150 old.so,target/release/libfsprof_agent.so gcc -O2 -c unit0.c -o /dev/null
       tests/benches/agent-pairs.py 150 target/release/libfsprof_agent.so:FSPROF_BUILTINS=0 gcc ...

Each round runs COMMAND once without a preload and once with LD_PRELOAD of each configuration
(a library, and environment variables set for its runs only), in a shuffled order, and takes the
CPU time (user + system) of the command and its children. Prints, per configuration, the median
CPU time against the one without a preload, and the median over rounds of the paired ratio with
its 25th and 75th percentiles. A job of a single gcc compile (33 ms) over 150 rounds narrows the
quartiles to about 2.5 points on a noisy host, where agent-programs.sh, with fewer rounds of
longer jobs, spans 10.
"""
import os
import random
import resource
import statistics
import subprocess
import sys

rounds, configs, command = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
configs = [None] + configs
cpu = {config: [] for config in configs}
for _ in range(rounds):
    for config in random.sample(configs, len(configs)):
        env = dict(os.environ)
        if config is not None:
            library, *variables = config.split(":")
            env["LD_PRELOAD"] = os.path.abspath(library)
            env.update(variable.split("=", 1) for variable in variables)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[config].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
alone = statistics.median(cpu[None])
print(f"{rounds} rounds of: {' '.join(command)}")
print(f"alone: median {alone * 1e3:.2f} ms CPU")
for config in configs[1:]:
    ratios = sorted(a / b for a, b in zip(cpu[config], cpu[None]) if b > 0)
    quantile = lambda p: ratios[round(p * (len(ratios) - 1))]
    median = statistics.median(cpu[config])
    print(
        f"{config}: median {median * 1e3:.2f} ms CPU; paired ratio {statistics.median(ratios):.3f}"
        f" ({quantile(0.25):.3f} .. {quantile(0.75):.3f})"
    )
