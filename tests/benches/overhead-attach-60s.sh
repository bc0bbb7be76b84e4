#!/bin/bash
cd /work/main; B=target/release
$B/fsprof-target threads 70 --ready /tmp/long.ready > /dev/null & T=$!
while [ ! -f /tmp/long.ready ]; do sleep 0.05; done
/usr/bin/time -f "fsprof_user_s %U sys_s %S wall_s %e maxrss_kb %M" $B/fsprof attach $T --duration 60 -o /tmp/long-out 2>/tmp/long.err &
F=$!
for t in 5 30 55; do sleep $((t - ${last:-0})); last=$t; echo "t=${t}s rss_kb $(grep VmRSS /proc/$(pgrep -f 'fsprof attach' | head -1)/status | awk '{print $2}')"; done
wait $F; tail -1 /tmp/long.err; wait $T; echo target_exit $?
