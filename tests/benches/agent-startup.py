#!/usr/bin/env python3
"""What preloading a library adds to every process start, for BENCHMARKS.md.

Usage: tests/benches/agent-startup.py LIBRARY BATCHES PROGRAM [ARGS...]
  e.g. tests/benches/agent-startup.py target/release/libfsprof_agent.so 15 /bin/true

Each batch starts PROGRAM 20 times without a preload and 20 times with LD_PRELOAD=LIBRARY, in a
shuffled order; prints the median µs per start of each and the difference.
"""
import os
import random
import statistics
import subprocess
import sys
import time

library, batches, program = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
starts = {"alone": [], "preloaded": []}
for _ in range(batches):
    for config in random.sample(list(starts), 2):
        env = dict(os.environ)
        if config == "preloaded":
            env["LD_PRELOAD"] = os.path.abspath(library)
        begin = time.perf_counter()
        for _ in range(20):
            subprocess.run(program, env=env, stdout=subprocess.DEVNULL, check=False)
        starts[config].append((time.perf_counter() - begin) / 20 * 1e6)
for config, values in starts.items():
    print(f"{config}: median {statistics.median(values):.0f} us per start")
added = statistics.median(starts["preloaded"]) - statistics.median(starts["alone"])
print(f"added: {added:.0f} us per start")
