#!/usr/bin/env bash
# What fsprof's own process spends on children that sleep (a build's make, sh and gcc driver
# wait for their children most of their lives): a shell starts N `sleep SECONDS` and waits for
# them, under `fsprof run`; fsprof's CPU time (user + system, all its threads, not its
# children's) from its start to the job's end, read by the job from its parent's
# /proc/PID/stat, for each build given, in rounds whose order rotates; medians and ranges.
# Usage: tests/benches/sleeping-children.sh ROUNDS N SECONDS FSPROF...
set -euo pipefail
rounds=$1 n=$2 secs=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/job.sh" <<EOS
i=0
while [ \$i -lt $n ]; do sleep $secs & i=\$((i + 1)); done
wait
awk '{print (\$14 + \$15) * 10}' /proc/\$PPID/stat > "\$RESULT"
EOS
for round in $(seq "$rounds"); do
  count=$#
  for i in $(seq 0 $((count - 1))); do
    index=$(( (i + round) % count + 1 ))
    bin=${!index}
    RESULT="$tmp/r" "$bin" run -o "$tmp/out" -- sh "$tmp/job.sh" >/dev/null 2>&1 || true
    echo "$index $(cat "$tmp/r")" >> "$tmp/results"
  done
done
python3 - "$tmp/results" "$@" <<'EOF_PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0].isdigit()]
print("build                      fsprof CPU ms while it followed the job (median, range)")
for i, name in enumerate(sys.argv[2:], 1):
    cpu = [int(r[1]) for r in rows if int(r[0]) == i]
    print(f"{name:<26} {statistics.median(cpu):6.0f} ({min(cpu)}-{max(cpu)})")
EOF_PY
