#!/usr/bin/env bash
# Starves every running `fsprof run` of its CPU, as a host that steals much of a VM's time
# does: stops each (SIGSTOP) for STOP seconds in every STOP+GAP (default 0.08 and 0.2), until
# /tmp/starve.stop exists, then lets them all go on. Run it beside a test binary or a
# `fsprof run` (BENCHMARKS: "A starved fsprof"):
#
#   tests/benches/starve-fsprof.sh & target/release/deps/builtins-HASH; touch /tmp/starve.stop
#
# The programs fsprof profiles are never stopped (the perf backend reads them without stops).
set -u
rm -f /tmp/starve.stop
trap 'pkill -CONT -f "fsprof run"' EXIT
while [ ! -e /tmp/starve.stop ]; do
  pkill -STOP -f "fsprof run"
  sleep "${STOP:-0.08}"
  pkill -CONT -f "fsprof run"
  sleep "${GAP:-0.2}"
done
