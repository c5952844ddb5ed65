#!/usr/bin/env bash
# The fluid network against op by op: tree all-reduce on fabrics whose hosts both send and receive several flows at
# once (one-GPU hosts, a torus, 8-GPU servers on rails), timed by `collbench sweep --mode fluid` and `--mode exact`
# (SimGrid's max-min). Prints per fabric and size both times and the fluid one's error. simulator/README.md, `fluid`,
# quotes this table; the whole run takes about 10 s here.
#
#   bench/fluid-vs-exact.sh [--sizes 32M,128M] [--jobs N]
#
# Environment: COLLBENCH (the collbench binary; default: on PATH, else build/release/tools/collbench, else
# build/ci/tools/collbench).
# Exit status: 0, 1 when a sweep failed, 2 for bad arguments.
set -euo pipefail

usage() { sed -n '2,11p' "$0"; }
sizes=32M,128M
jobs=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fluid-vs-exact.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/collbench-binary.sh
source "$here/bench/collbench-binary.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# 16 servers x 8 GPUs on rails (two levels), tree with one and four channels.
rails="$work/rails16.json"
printf '{"format": "collbench-topology", "version": 1, "generator": "multi_node", "params": {"nodes": 16, "radix": 16}}\n' \
  >"$rails"

run() {  # mode, output, then sweep arguments
  local mode="$1" out="$2"
  shift 2
  "$collbench" sweep --mode "$mode" --sizes "$sizes" --algo tree --csv "$out" ${jobs:+-j "$jobs"} "$@" >/dev/null
}
failed() { echo "fluid-vs-exact.sh: the $1 sweep failed" >&2; exit 1; }
for mode in fluid exact; do
  run "$mode" "$work/$mode-one.csv" --topology fat-tree-k8,dragonfly-small,torus-4x4x4 || failed "$mode"
  run "$mode" "$work/$mode-x1.csv" --topology "$rails" || failed "$mode"
  run "$mode" "$work/$mode-x4.csv" --topology "$rails" --channels 4 || failed "$mode"
done

python3 - "$work" <<'EOF'
import csv, os, sys
work = sys.argv[1]
def rows(path):
    with open(path) as f:
        return {(os.path.basename(r["topology"]), r["bytes"]): float(r["time_us"]) for r in csv.DictReader(f)}
print(f"{'fabric':<22} {'size(B)':>11} {'exact us':>12} {'fluid us':>12} {'error':>8}")
for part, label in (("one", ""), ("x1", " x1"), ("x4", " x4")):
    exact, fluid = rows(f"{work}/exact-{part}.csv"), rows(f"{work}/fluid-{part}.csv")
    for key in exact:
        name = key[0].replace(".json", "") + label
        print(f"{name:<22} {key[1]:>11} {exact[key]:12.1f} {fluid[key]:12.1f} {100 * (fluid[key] / exact[key] - 1):+7.1f}%")
EOF
