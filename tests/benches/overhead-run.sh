#!/bin/bash
# Interleaved: fizzbuzz 10M alone vs under fsprof run (default 1000 Hz), 5 rounds each.
cd "$(dirname "$0")/../.."
B=target/release
for i in 1 2 3 4 5; do
  s=$(date +%s.%N); $B/fizzbuzz > /dev/null; e=$(date +%s.%N); echo "alone $(echo "$e - $s" | bc)"
  s=$(date +%s.%N); /usr/bin/time -f "fsprof_cpu %U %S maxrss_kb %M" $B/fsprof run -o /tmp/ovh -- $B/fizzbuzz > /dev/null 2>/tmp/ovh.err; e=$(date +%s.%N); echo "fsprof $(echo "$e - $s" | bc) $(grep fsprof_cpu /tmp/ovh.err)"
done
