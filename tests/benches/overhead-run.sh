#!/bin/bash
# Target slowdown under `fsprof run` (default 1000 Hz, agent preloaded): fizzbuzz 10M alone and
# under fsprof, interleaved in shuffled rounds; with BEFORE=path/to/another/fsprof, under that
# build too, in the same rounds (a change's before and after, side by side). Prints per
# configuration the median wall time, the median of the rounds' ratios to the run alone, and
# fsprof's median CPU time (user + system) and peak RSS.
# Usage: [BEFORE=/path/to/fsprof] tests/benches/overhead-run.sh [ROUNDS]
# Run from anywhere after `cargo build --release --workspace`.
cd "$(dirname "$0")/../.." || exit 1
rounds=${1:-5}
python3 - "$rounds" "${BEFORE:-}" <<'EOF_PY'
import os, random, statistics, subprocess, sys, tempfile, time
rounds, before = int(sys.argv[1]), sys.argv[2]
fizzbuzz = "target/release/fizzbuzz"
configs = {"alone": None, "fsprof": "target/release/fsprof"}
if before:
    configs["before"] = before
runs = {name: [] for name in configs}
out = tempfile.mkdtemp()
for _ in range(rounds):
    order = list(configs)
    random.shuffle(order)
    for name in order:
        fsprof = configs[name]
        command = [fizzbuzz] if fsprof is None else [
            "/usr/bin/time", "-f", "%U %S %M", "-o", out + "/time", fsprof, "run", "-o", out + "/p", "--", fizzbuzz]
        start = time.monotonic()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        wall = time.monotonic() - start
        cpu, rss = 0.0, 0
        if fsprof is not None:
            user, system, rss = open(out + "/time").read().split()[-3:]
            cpu, rss = float(user) + float(system), int(rss)
        runs[name].append((wall, cpu, rss))
print(f"{rounds} rounds; medians; ratio = median over rounds of (config / alone, paired within a round)")
for name in configs:
    walls = [r[0] for r in runs[name]]
    ratios = [r[0] / a[0] for r, a in zip(runs[name], runs["alone"])]
    line = f"{name:<7} wall {statistics.median(walls):7.3f} s  ratio {statistics.median(ratios):.3f}"
    if name != "alone":
        line += (f"  fsprof CPU {statistics.median(r[1] for r in runs[name]):.2f} s"
                 f"  peak RSS {statistics.median(r[2] for r in runs[name]) / 1024:.1f} MiB")
    print(line)
EOF_PY
