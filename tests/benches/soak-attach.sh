#!/usr/bin/env bash
# A long `fsprof attach` on a busy multi-threaded program whose threads come and go (the
# `churn` target: two threads at a time, each living 10-60 ms and marking), for BENCHMARKS.md:
# fsprof's resident memory and CPU time every 5 s, as a CSV and an SVG plot. Run from the
# workspace root after `cargo build --release --workspace`.
# Usage: [SCENARIO=churn] tests/benches/soak-attach.sh [SECONDS] [OUT_DIR] (SCENARIO: a scenario of
# fsprof-target, e.g. stress: two threads marking as fast as they can, for as long)
set -euo pipefail
seconds=${1:-600}
out=${2:-$PWD/target/soak}
mkdir -p "$out"
target/release/fsprof-target "${SCENARIO:-churn}" $((seconds + 30)) >/dev/null &
target_pid=$!
trap 'kill $target_pid 2>/dev/null || true' EXIT
sleep 1
target/release/fsprof attach "$target_pid" --duration "$seconds" -o "$out/profile" 2>"$out/fsprof.stderr" &
fsprof_pid=$!
echo "seconds,rss_kb,cpu_s" > "$out/soak.csv"
ticks=$(getconf CLK_TCK)
start=$(date +%s.%N)
while kill -0 "$fsprof_pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$fsprof_pid/status" 2>/dev/null || true)
  cpu=$(awk -v t="$ticks" '{ sub(/.*\) /, ""); split($0, f, " "); print (f[12] + f[13]) / t }' "/proc/$fsprof_pid/stat" 2>/dev/null || true)
  [ -n "$rss" ] && echo "$(echo "$(date +%s.%N) - $start" | bc),$rss,$cpu" >> "$out/soak.csv"
  sleep 5
done
wait "$fsprof_pid" || true
python3 - "$out/soak.csv" "$out/soak.svg" <<'EOF_PY'
import csv, sys
rows = [(float(r["seconds"]), float(r["rss_kb"]) / 1024, float(r["cpu_s"])) for r in csv.DictReader(open(sys.argv[1]))]
w, h, pad = 900, 360, 50
t_max = max(r[0] for r in rows) or 1
def poly(values, v_max, colour):
    pts = " ".join(f"{pad + t / t_max * (w - 2 * pad):.1f},{h - pad - v / v_max * (h - 2 * pad):.1f}" for t, v in values)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>'
rss_max = max(r[1] for r in rows) * 1.2
cpu = [(rows[i][0], (rows[i][2] - rows[i - 1][2]) / max(rows[i][0] - rows[i - 1][0], 1e-9) * 100) for i in range(1, len(rows))]
cpu_max = max((c for _, c in cpu), default=1) * 1.2 or 1
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
       f'<rect width="{w}" height="{h}" fill="white"/>',
       f'<text x="{pad}" y="20">fsprof attach soak: resident memory (blue, MiB, top {rss_max:.0f}) and CPU (red, % of a core per 5 s, top {cpu_max:.1f}) over {t_max:.0f} s</text>',
       f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
       f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
       poly([(t, r) for t, r, _ in rows], rss_max, "blue"), poly(cpu, cpu_max, "red"),
       f'<text x="{w - pad - 40}" y="{h - pad + 20}">{t_max:.0f} s</text></svg>']
open(sys.argv[2], "w").write("\n".join(svg))
first, last = rows[0], rows[-1]
print(f"samples {len(rows)}; RSS {first[1]:.1f} MiB at {first[0]:.0f} s, max {max(r[1] for r in rows):.1f}, {last[1]:.1f} MiB at {last[0]:.0f} s; CPU {last[2]:.1f} s over {last[0]:.0f} s ({last[2] / last[0] * 100:.1f}% of a core)")
EOF_PY
tail -3 "$out/profile/report.txt" 2>/dev/null || true
