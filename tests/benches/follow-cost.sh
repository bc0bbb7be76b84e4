#!/usr/bin/env bash
# What fsprof's own process spends while it follows a program's children: the CPU time (user +
# system, all its threads) it used from its start to the end of the job, read by the job itself
# from its parent's /proc/PID/stat as it ends (before fsprof names frames and writes the
# report), and the job's own wall time; for several fsprof builds side by side, in rounds
# whose order rotates. On a machine whose CPUs the job keeps busy (make -j2 on 2 CPUs), that
# CPU is taken from the job. Run from the workspace root after `cargo build --release`.
# Usage: tests/benches/follow-cost.sh ROUNDS JOB FSPROF...   (JOB: gcc, make or pythreads)
set -euo pipefail
rounds=$1 job=$2
shift 2
# The builds' paths, absolute: the rounds run in a temporary directory.
bins=()
for bin in "$@"; do bins+=("$(realpath "$bin")"); done
set -- "${bins[@]}"
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
. "$repo/tests/benches/real-programs.sh" >/dev/null 2>&1
command=$(grep "^$job " jobs.txt | cut -d' ' -f2-)
[ -n "$command" ] || { echo "no job $job in real-programs.sh" >&2; exit 2; }
cat > job.sh <<EOS
start=\$(date +%s%N)
$command
end=\$(date +%s%N)
echo "\$(( (end - start) / 1000000 )) \$(awk '{print (\$14 + \$15) * 10}' /proc/\$PPID/stat)" > "\$RESULT"
EOS
for round in $(seq "$rounds"); do
  n=$#
  for i in $(seq 0 $((n - 1))); do
    index=$(( (i + round) % n + 1 ))
    bin=${!index}
    RESULT="$tmp/r" "$bin" run -o out -- sh job.sh >/dev/null 2>&1 || true
    echo "$index $(cat "$tmp/r")" >> results
  done
done
python3 - "$@" <<'EOF_PY'
import statistics, sys
rows = [l.split() for l in open("results")]
print("build                      job wall ms (median, range)   fsprof CPU ms while it ran (median, range)")
for i, name in enumerate(sys.argv[1:], 1):
    wall = [int(r[1]) for r in rows if int(r[0]) == i]
    cpu = [int(r[2]) for r in rows if int(r[0]) == i]
    print(f"{name[-26:]:26} {statistics.median(wall):7.0f} ({min(wall)}-{max(wall)})       {statistics.median(cpu):7.0f} ({min(cpu)}-{max(cpu)})")
EOF_PY
