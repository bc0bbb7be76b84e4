#!/usr/bin/env bash
# Two builds of fsprof side by side on the same targets, for BENCHMARKS.md: each round runs every
# (target, backend) under OLD and under NEW in a shuffled order; prints medians of the run's wall
# time, of its CPU (fsprof and the target together), and, from the profiles, the median and 99th
# percentile pause (ptrace) and the share of stacks unwound to the root.
# Usage: tests/benches/native-ab.sh ROUNDS OLD_FSPROF NEW_FSPROF   (from the workspace root,
# after `cargo build --release --workspace`)
set -euo pipefail
rounds=$1 old=$2 new=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$rounds" "$old" "$new" "$PWD/target/release" "$tmp" <<'EOF_PY'
import json, os, random, resource, statistics, subprocess, sys, time
rounds, old, new, bins, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
targets = {
    "fizzbuzz": [f"{bins}/fizzbuzz", "3000000"],
    "deep": [f"{bins}/deep", "leaves", "2", "--truth", f"{tmp}/truth.json"],
}
runs = {}
for _ in range(rounds):
    order = [(t, b, v) for t in targets for b in ("perf", "ptrace") for v in ("old", "new")]
    random.shuffle(order)
    for target, backend, version in order:
        out = f"{tmp}/out"
        subprocess.run(["rm", "-rf", out])
        fsprof = old if version == "old" else new
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        subprocess.run([fsprof, "run", "--rate", "1000", "--backend", backend, "-o", out, "--"]
                       + targets[target], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        meta = json.load(open(f"{out}/profile.json"))["meta"]
        complete = meta["native_complete"] / max(meta["native_captured"], 1)
        runs.setdefault((target, backend, version), []).append(
            (wall, cpu, meta["pause_p50_us"], meta["pause_p99_us"], complete))
print(f"{rounds} rounds; medians")
print(f"{'target':9} {'backend':7} {'build':5} {'wall s':>7} {'CPU s':>7} {'pause p50':>9} {'p99 us':>7} {'to root':>8}")
for (target, backend, version), values in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "old")):
    med = [statistics.median(v[i] for v in values) for i in range(5)]
    print(f"{target:9} {backend:7} {version:5} {med[0]:7.2f} {med[1]:7.2f} {med[2]:9.0f} {med[3]:7.0f} {100 * med[4]:7.1f}%")
EOF_PY
