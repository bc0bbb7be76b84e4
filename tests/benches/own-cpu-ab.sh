#!/usr/bin/env bash
# own-cpu-ab.sh: fsprof's own CPU while a two-thread CPU-bound program runs, two builds side by
# side. Each round runs `fsprof run --rate RATE -- spin 2 500000000` under OLD and NEW in a
# random order; spin (cost-model/spin.c) prints its own elapsed and CPU time and its parent's
# CPU time while it ran (`parent_cpu`: fsprof's, start-up and report left out). Prints each
# build's runs sorted and their medians. Quieter than the cost model's `samples` part for this
# one figure: nothing else runs between the two builds' runs.
#
# Usage: tests/benches/own-cpu-ab.sh ROUNDS OLD_FSPROF NEW_FSPROF [RATE]   (RATE: 1000)
set -euo pipefail
rounds=$1 old=$(realpath "$2") new=$(realpath "$3") rate=${4:-1000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -pthread -o "$work/spin" "$(dirname "$0")/cost-model/spin.c"
echo "machine: nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); kernel $(uname -r)"
for _ in $(seq "$rounds"); do
  for version in $(printf 'old\nnew\n' | shuf); do
    bin=$old
    [ "$version" = new ] && bin=$new
    line=$("$bin" run --rate "$rate" -o "$work/out-$version" -- "$work/spin" 2 500000000 2>/dev/null |
      grep -o 'elapsed=.*parent_cpu=[0-9.]*')
    echo "$version $line" >>"$work/runs"
  done
done
for version in old new; do
  for field in elapsed cpu parent_cpu; do
    values=$(grep "^$version " "$work/runs" | grep -o " $field=[0-9.]*" | cut -d= -f2 | sort -n)
    median=$(echo "$values" | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}')
    echo "$version $field: median $median ($(echo $values))"
  done
done
