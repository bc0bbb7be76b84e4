#!/bin/bash
# Built-in features from the agent against the rules alone, side by side (issue 38's parity
# table): each built-in test target under `fsprof run --rate 1000 --agent` and under `fsprof run
# --rate 1000` (the defaults: nothing preloaded, the built-in rules over the native stacks),
# ROUNDS times each, alternating. Prints, per target and built-in feature, medians of its share
# of the running time (and its blocked time) each way and, where the program's truth names the
# feature (the programs that time their libc calls, blocked or not), the program's measure and
# the report's share timed the same way ((ms + blocked) / (total + all built-in blocked time));
# and the top instance each way.
#
#   tests/benches/parity.sh [ROUNDS]      (from the workspace root, after
#                                          `cargo build --release --workspace --all-targets`)
set -euo pipefail
rounds=${1:-1}
repo=$(pwd)
bin=$repo/target/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin/libfsprof_agent.so" "$work/"
for name in builtins contended coordinator epoll_server full_pipe cancel longjmp forks; do
    link=""
    grep -q '"fsprof.h"' "tests/c/$name.c" && link="-lfsprof_agent"
    gcc -O2 -g -Wall -pthread -I agent/include -I tests/c "tests/c/$name.c" -o "$work/$name" \
        -L"$work" -Wl,-rpath,'$ORIGIN' $link
done
# target: the command after `--` (SECS and --truth FILE are added).
targets=(
    "c-builtins|$work/builtins"
    "contended|$work/contended"
    "coordinator|$work/coordinator"
    "epoll_server|$work/epoll_server"
    "full_pipe|$work/full_pipe"
    "cancel|$work/cancel"
    "longjmp|$work/longjmp"
    "forks|$work/forks"
    "rust-builtins|$bin/builtins"
    "pool|$bin/fsprof-target pool"
)
for round in $(seq 1 "$rounds"); do
    for entry in "${targets[@]}"; do
        label=${entry%%|*}
        command=${entry#*|}
        for mode in agent rules; do
            out=$work/$label-$mode-$round
            flag=""
            [ "$mode" = agent ] && flag=--agent
            # shellcheck disable=SC2086
            "$bin/fsprof" run $flag --rate 1000 -o "$out" -- $command 3 --truth "$out.truth.json" \
                > /dev/null 2> "$out.stderr" || echo "$label $mode: fsprof failed (see $out.stderr)"
            "$bin/fsprof" report "$out" --format json > "$out.json"
        done
    done
done
python3 - "$work" "$rounds" "${targets[@]}" <<'EOF_PY'
import json, sys, statistics
work, rounds, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
BUILTIN = {"output", "input", "allocation", "locks", "waiting", "sleep", "poll", "process", "files"}
def load(label, mode, r):
    base = f"{work}/{label}-{mode}-{r}"
    try:
        return json.load(open(base + ".json")), json.load(open(base + ".truth.json"))
    except Exception:
        return None, None
print("| target | feature | truth % | agent: timed %, % (blocked ms) | rules: timed %, % (blocked ms) | top instance, agent / rules |")
print("|---|---|---|---|---|---|")
for entry in targets:
    label = entry.split("|")[0]
    runs = {m: [load(label, m, r) for r in range(1, rounds + 1)] for m in ("agent", "rules")}
    names = set()
    for m in runs:
        for report, _ in runs[m]:
            if report:
                names |= {f["name"] for f in report["features"] if f["name"] in BUILTIN}
    for name in sorted(names):
        cells, tops = [], []
        truths = []
        for m in ("agent", "rules"):
            shares, blocked, timed, top = [], [], [], "-"
            for report, truth in runs[m]:
                if not report:
                    continue
                f = next((f for f in report["features"] if f["name"] == name), None)
                shares.append(f["percent"] if f else 0.0)
                blocked.append(f.get("blocked_ms", 0.0) if f else 0.0)
                whole = report["total_ms"] + report.get("blocked_ms", 0.0)
                timed.append((f["ms"] + f.get("blocked_ms", 0.0)) * 100 / whole if f and whole else 0.0)
                if f and f["instances"]:
                    top = f["instances"][0]["payload"][:60]
                t = truth.get("features", {}).get(name) if truth else None
                if t is not None and truth.get("total_ms"):
                    truths.append(t["ms"] * 100 / truth["total_ms"])
            known = bool(truth and truth.get("features", {}).get(name))
            timed_cell = f"{statistics.median(timed):.2f}, " if known and timed else ""
            cells.append(f"{timed_cell}{statistics.median(shares):.2f} ({statistics.median(blocked):.0f})" if shares else "-")
            tops.append(top)
        truth_cell = f"{statistics.median(truths):.2f}" if truths else ""
        print(f"| {label} | {name} | {truth_cell} | {cells[0]} | {cells[1]} | {tops[0]} / {tops[1]} |")
EOF_PY
