#!/usr/bin/env bash
# Issue 37's measure: the README's test command on fresh clones of one commit, one run after
# another, each quiet or beside one busy process (`yes > /dev/null`).
#
#   tests/benches/fresh-clones.sh COMMIT LABEL[:busy] [LABEL[:busy] ...]
#
# Each run: `git clone` of this repository at COMMIT into /tmp/fc-LABEL, `rm -rf
# ~/.cache/fsprof`, then `cargo test --release --workspace --no-fail-fast` with
# CARGO_TARGET_DIR=/tmp/fc-target (shared after the first run, so that later runs compile only
# the workspace's crates). Its log goes to /tmp/fresh-LABEL.log; a line per run to stdout:
# label, commit, exit status, seconds, the failed tests. Between runs it waits while
# /tmp/fresh-clones.pause exists and stops if /tmp/fresh-clones.stop does (for work that must
# not overlap a run). Do nothing else on the machine during a quiet run.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
commit="${1:?usage: fresh-clones.sh COMMIT LABEL[:busy]...}"
shift
for run in "$@"; do
  while [ -e /tmp/fresh-clones.pause ]; do sleep 10; done
  [ -e /tmp/fresh-clones.stop ] && { echo "stopped before $run"; exit 0; }
  label="${run%%:*}"
  clone="/tmp/fc-$label"
  log="/tmp/fresh-$label.log"
  rm -rf "$clone" ~/.cache/fsprof
  git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$commit" || exit 1
  busy=""
  if [ "$run" != "$label" ]; then
    yes > /dev/null &
    busy=$!
  fi
  start=$(date +%s)
  (cd "$clone" && CARGO_TARGET_DIR=/tmp/fc-target cargo test --release --workspace --no-fail-fast) > "$log" 2>&1
  rc=$?
  [ -n "$busy" ] && kill "$busy"
  failed=$(grep -E '^test .* FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | tr '\n' ' ')
  echo "$label $commit rc=$rc $(( $(date +%s) - start ))s failed: ${failed:-none}"
done
