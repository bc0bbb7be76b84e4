#!/usr/bin/env bash
# Runs a command inside a CPU-limited cgroup, as a crowded CI host limits its jobs: everything
# the command starts (a test binary, `fsprof run` and its program) shares QUOTA of every 100 ms
# of CPU (default 80 ms: 0.8 CPU) and waits, throttled, for the rest. fsprof is throttled with
# them: the cgroup gives no real-time budget, so it runs at normal priority there (the profile
# says `sampler_priority`). Needs root; cgroup v1 (`/sys/fs/cgroup/cpu`) or v2.
#
#   tests/benches/throttled.sh [-q QUOTA_US] COMMAND [ARGS...]
#   tests/benches/throttled.sh target/release/deps/builtins-HASH --test-threads 1
#
# BENCHMARKS.md, "A thread throttled as it wakes", says what it found.
set -euo pipefail
quota=80000
if [ "${1:-}" = "-q" ]; then
  quota=$2
  shift 2
fi
[ $# -gt 0 ] || { sed -n 2,10p "$0" >&2; exit 2; }
if [ -d /sys/fs/cgroup/cpu ]; then
  group=/sys/fs/cgroup/cpu/fsprof-throttled
  mkdir -p "$group"
  echo 100000 >"$group/cpu.cfs_period_us"
  echo "$quota" >"$group/cpu.cfs_quota_us"
else
  group=/sys/fs/cgroup/fsprof-throttled
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
  mkdir -p "$group"
  echo "$quota 100000" >"$group/cpu.max"
fi
echo $$ >"$group/cgroup.procs"
exec "$@"
