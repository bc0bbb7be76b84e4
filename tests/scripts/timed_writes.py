"""A Python program that times its own os.write calls, for the end-to-end test of the agent's
built-in `output` feature under an unmodified python3.

    python3 timed_writes.py SECONDS TRUTH_FILE

First it runs /bin/true three times with subprocess.run (which vfork()s, then exec()s in the
child: a wrapper that marked the child's exec in the parent's memory would leave the parent's
thread marked for good), timing each run. Then for SECONDS it alternates pure-Python work
(summing numbers, 0.4-4 ms) with os.write of 8 MiB to a temporary file (rewound each time),
timing each os.write with perf_counter. (Writes of 1 MiB, 70 µs each, read 10 to 15% short
under fsprof and under `perf record -e task-clock` alike on an Intel VM, whose timer lands a
sample some 10 to 20 µs late, after many a write had returned; writes of 0.6 ms, 3%.) It writes {"total_ms": T, "features": {"output": {"ms":
M, "instances": {}}, "process": {"ms": P, "instances": {}}}} where T is the wall time of both
parts (one thread, never blocked outside os.write and the runs). Python's call overhead around
os.write is included in M (a few hundred nanoseconds per call, against tens of microseconds of
write); P includes subprocess.run's own Python work (a few hundred microseconds a run)."""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

seconds = float(sys.argv[1])
truth_path = sys.argv[2]
chunk = b"x" * (8 << 20)
rng = random.Random(7)
fd, path = tempfile.mkstemp(prefix="fsprof-py-")
os.unlink(path)
output = 0.0
start = time.perf_counter()
for _ in range(3):
    subprocess.run(["/bin/true"], check=True)
process = time.perf_counter() - start
loop_start = time.perf_counter()
while time.perf_counter() - loop_start < seconds:
    until = time.perf_counter() + rng.uniform(400e-6, 4000e-6)
    total = 0
    while time.perf_counter() < until:
        total += sum(range(50))
    t0 = time.perf_counter()
    os.write(fd, chunk)
    t1 = time.perf_counter()
    output += t1 - t0
    os.lseek(fd, 0, os.SEEK_SET)
elapsed = time.perf_counter() - start
with open(truth_path + ".tmp", "w") as f:
    json.dump({"total_ms": elapsed * 1e3,
               "features": {"output": {"ms": output * 1e3, "instances": {}},
                            "process": {"ms": process * 1e3, "instances": {}}}}, f)
os.rename(truth_path + ".tmp", truth_path)
