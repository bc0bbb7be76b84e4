"""shares.py DIR [perf.data]: the error, in points, of spin_hashing's share of rhythm's CPU time
(events.txt in the current directory, its truth) by the samples' count and by their time, from
fsprof's DIR/profile.json; or, with perf.data, by the count of `perf record -a`'s samples of it
(CLOCK_MONOTONIC), which fall in one phase or the other by their time."""
import bisect
import json
import subprocess
import sys

began = [tuple(map(int, line.split())) for line in open("events.txt")]
end = began[-1][0]
began = began[:-1]
starts = [b[0] for b in began]
nexts = starts[1:] + [end]
hashing = sum(b[1] - b[0] for b in began)
unmarked = sum(n - b[2] for b, n in zip(began, nexts))
truth = 100 * hashing / (hashing + unmarked)

if len(sys.argv) > 2:
    out = subprocess.run(["perf", "script", "-i", sys.argv[2], "-F", "comm,time", "--ns"],
                         capture_output=True, text=True).stdout
    count = {"h": 0, "u": 0}
    for line in out.splitlines():
        comm, time = line.split()
        if comm != "rhythm":
            continue
        t = int(round(float(time.rstrip(":")) * 1e9))
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and began[i][0] <= t < began[i][1]:
            count["h"] += 1
        elif i >= 0 and began[i][2] <= t < nexts[i]:
            count["u"] += 1
    n = count["h"] + count["u"]
    print(f"by count {100 * count['h'] / n - truth:+.2f} (n={n})")
    sys.exit()

profile = json.load(open(sys.argv[1] + "/profile.json"))
frames, stacks = profile["native_frames"], profile["native_stacks"]
count, time = {"h": 0, "u": 0}, {"h": 0, "u": 0}
for sample in profile["samples"]:
    if sample.get("native") is None:
        continue
    names = {frames[f]["function"] for f in stacks[sample["native"]]["frames"]}
    kind = "h" if "spin_hashing" in names else "u" if "spin_unmarked" in names else None
    if kind:
        count[kind] += sample["count"]
        time[kind] += sample["active_ns"]
n = count["h"] + count["u"]
print(f"by count {100 * count['h'] / n - truth:+.2f} (n={n})  "
      f"by time {100 * time['h'] / (time['h'] + time['u']) - truth:+.2f}")
