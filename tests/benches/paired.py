#!/usr/bin/env python3
"""paired.py: how sure a side-by-side run is of a difference (issue 39's bars are a point or
two; this host's rounds scatter by several).

Reads a TSV of "CONFIG<TAB>VALUE" lines written a round at a time (every configuration once per
round, in any order within the round, as cost-model.sh writes them) and prints, for each pair
A-B asked for, the difference of A's value and B's in the same round in points of the round's
BASE value (alone's), as the median and the mean over the rounds, each with a 95% interval by
bootstrap (the rounds resampled with replacement). An interval that holds 0 is a difference this
run does not resolve; one wholly above 0 says A cost more than B.

Usage: paired.py TSV BASE A-B [A-B ...]    e.g. paired.py spin2.tsv alone default-alone r1000-perf1000
Pairs naming a configuration the TSV lacks are skipped. Not here: running anything.
"""

import random
import statistics
import sys

RESAMPLES = 4000


def rounds_of(path):
    lines = [line.split() for line in open(path) if line.strip()]
    configs = len({config for config, _ in lines})
    grouped = [lines[i:i + configs] for i in range(0, len(lines), configs)]
    rounds = [{config: float(value) for config, value in g} for g in grouped]
    return [r for r in rounds if len(r) == configs]


def interval(values, statistic):
    rng = random.Random(1)
    draws = sorted(statistic(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    return draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().split("\n\n")[-1])
    path, base, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    rounds = rounds_of(path)
    for pair in pairs:
        a, b = pair.split("-", 1)
        if not rounds or any(c not in rounds[0] for c in (a, b, base)):
            continue
        points = [100 * (r[a] - r[b]) / r[base] for r in rounds]
        if len(points) < 2:
            continue
        (mlo, mhi), (alo, ahi) = interval(points, statistics.median), interval(points, statistics.mean)
        print(f"  {a} - {b}: median {statistics.median(points):+.2f} points ({mlo:+.2f} to {mhi:+.2f}),"
              f" mean {statistics.mean(points):+.2f} ({alo:+.2f} to {ahi:+.2f}), 95% intervals over"
              f" {len(points)} rounds")


if __name__ == "__main__":
    main()
