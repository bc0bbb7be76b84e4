#!/usr/bin/env python3
"""What preloading a library adds to every process start, for BENCHMARKS.md.

Usage: tests/benches/agent-startup.py LIBRARY[,LIBRARY...] BATCHES PROGRAM [ARGS...]
  e.g. tests/benches/agent-startup.py target/release/libfsprof_agent.so 15 /bin/true
       tests/benches/agent-startup.py old/libfsprof_agent.so,target/release/libfsprof_agent.so 15 /bin/true

Each batch starts PROGRAM 20 times without a preload and 20 times with LD_PRELOAD=LIBRARY for each
library given (comma-separated: two builds side by side), in a shuffled order; prints the median
µs per start of each and what each library adds to the start without a preload.
"""
import os
import random
import statistics
import subprocess
import sys
import time

libraries, batches, program = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:]
configs = [None] + [os.path.abspath(library) for library in libraries]
starts = {config: [] for config in configs}
for _ in range(batches):
    for config in random.sample(configs, len(configs)):
        env = dict(os.environ)
        if config is not None:
            env["LD_PRELOAD"] = config
        begin = time.perf_counter()
        for _ in range(20):
            subprocess.run(program, env=env, stdout=subprocess.DEVNULL, check=False)
        starts[config].append((time.perf_counter() - begin) / 20 * 1e6)
alone = statistics.median(starts[None])
print(f"alone: median {alone:.0f} us per start")
for config in configs[1:]:
    median = statistics.median(starts[config])
    print(f"{config}: median {median:.0f} us per start, added {median - alone:.0f} us")
