#!/usr/bin/env bash
# Gates the simulator's timings against the committed baselines in reports/baselines/: reruns each baseline's
# `collbench perf --backend sim` configuration and runs `collbench gate` on the pair. The simulator is deterministic,
# so any change beyond the tolerance is a real change in an algorithm, the simulator or a topology file, and fails
# whichever way it goes: exit 1 names the rows, "regression" (slower) or "improvement" (faster). After an intended
# change, regenerate the baselines with --update, check that only the rows you meant to change moved (git diff), and
# commit them with the change.
#
# Usage: scripts/gate-baselines.sh [--update] [path/to/collbench]
#   collbench defaults to $COLLBENCH, else build/ci/tools/collbench, else build/release/tools/collbench.
#   GATE_TOLERANCE (default 0.5%) is the relative change allowed per row.
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
if [ "${1:-}" = "--update" ]; then
  update=1
  shift
fi
bin=${1:-${COLLBENCH:-}}
if [ -z "$bin" ]; then
  for b in build/ci/tools/collbench build/release/tools/collbench; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "gate-baselines: no collbench binary (build first, or pass its path)" >&2
  exit 2
fi
# Rounding in the simulator's output is the only expected difference between identical runs; 0.5% leaves room for
# nothing else.
tolerance=${GATE_TOLERANCE:-0.5%}

# name | perf arguments. Sizes 1 KiB .. 256 MiB by 4x cover latency- and bandwidth-bound regimes.
configs=(
  "sim-dgx-h100-8x1-all_reduce-ring|all_reduce --topology dgx-h100-8x1 -g 8 --algo ring"
  "sim-dgx-h100-8x1-all_reduce-tree|all_reduce --topology dgx-h100-8x1 -g 8 --algo tree"
  "sim-dgx-h100-8x1-all_reduce-recursive_doubling|all_reduce --topology dgx-h100-8x1 -g 8 --algo recursive_doubling"
  "sim-dgx-h100-8x1-all_reduce-rabenseifner|all_reduce --topology dgx-h100-8x1 -g 8 --algo rabenseifner"
  "sim-dgx-h100-8x1-all_reduce-direct|all_reduce --topology dgx-h100-8x1 -g 8 --algo direct"
  "sim-dgx-h100-8x1-reduce_scatter-ring|reduce_scatter --topology dgx-h100-8x1 -g 8 --algo ring"
  "sim-dgx-h100-8x1-all_gather-ring|all_gather --topology dgx-h100-8x1 -g 8 --algo ring"
  "sim-dgx-h100-8x1-broadcast-ring|broadcast --topology dgx-h100-8x1 -g 8 --algo ring"
  "sim-h100-4x8-rail-all_reduce-ring|all_reduce --topology h100-4x8-rail -g 32 --algo ring"
  "sim-h100-4x8-rail-all_reduce-hierarchical|all_reduce --topology h100-4x8-rail -g 32 --algo hierarchical"
  "sim-pcie-4gpu-all_reduce-ring|all_reduce --topology pcie-4gpu -g 4 --algo ring"
)
sweep="-b 1K -e 256M -f 4 -n 1 -w 0 -c 0"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  args=${entry#*|}
  base=reports/baselines/$name.json
  if [ "$update" = 1 ]; then
    # shellcheck disable=SC2086
    "$bin" perf $args --backend sim $sweep -J "$base" --force >/dev/null
    echo "gate-baselines: wrote $base"
    continue
  fi
  if [ ! -f "$base" ]; then
    echo "gate-baselines: missing $base (run scripts/gate-baselines.sh --update)" >&2
    status=2
    continue
  fi
  # shellcheck disable=SC2086
  "$bin" perf $args --backend sim $sweep -J "$work/$name.json" >/dev/null
  rc=0
  "$bin" gate --baseline "$base" --current "$work/$name.json" --tolerance "$tolerance" ${GITHUB_STEP_SUMMARY:+--summary "$GITHUB_STEP_SUMMARY"} || rc=$?
  if [ "$rc" -gt "$status" ]; then status=$rc; fi
done
exit "$status"
