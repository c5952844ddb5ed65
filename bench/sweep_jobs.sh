#!/usr/bin/env bash
# -j N against -j 1 for the same `collbench tune` grid on the simulator (docs/sweeps.md): wall time of each, the
# speed-up, and whether the two tables are equal apart from provenance. CPU-bound (every point is simulations), so
# the speed-up is what the cores give; on a machine shared with other work, repeat and take the best of each.
#
#   bench/sweep_jobs.sh [--jobs N] [--repeat R] [-- extra tune flags]
#
# Default grid: h100-4x8-rail, ranks 8,16,24,32, 1 KiB..256 MiB by 4, tune's default chunks and channels (40 points,
# ~17 s of CPU). Measured on this project's 2-vCPU VM, otherwise idle (load 0.4), `bench/sweep_jobs.sh --repeat 2`:
# -j 1 17.19-17.42 s, -j 2 9.03-9.07 s (1.90x), tables equal apart from provenance. With two compilers of other
# builds on the same cores (load ~2.8) it was 18.8 s against 13.6 s (1.37x): the workers split the work, and the
# cores that others leave free bound the speed-up.
# Environment: COLLBENCH (the collbench binary; default: on PATH, else build/ci/tools/collbench).
# Exit status: 0, 1 when the tables differ or a run failed, 2 for bad arguments.
set -euo pipefail

jobs=2 repeat=3
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) jobs="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
cb="${COLLBENCH:-$(command -v collbench || echo build/ci/tools/collbench)}"
grid=(tune --backend sim --topology h100-4x8-rail -g 8,16,24,32 -b 1K -e 256M -f 4)
[[ ${#extra[@]} -gt 0 ]] && grid+=("${extra[@]}")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

# Seconds of wall time of one run, its table in $dir/<name>.json.
timed() {
  local name="$1" j="$2" start end
  start=$(date +%s.%N)
  "$cb" "${grid[@]}" -j "$j" -o "$dir/$name.json" --force >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}

best1="" bestn=""
for ((r = 1; r <= repeat; ++r)); do
  t1=$(timed one 1)
  tn=$(timed many "$jobs")
  printf 'run %d: -j 1 %.2f s, -j %d %.2f s, speed-up %.2fx\n' "$r" "$t1" "$jobs" "$tn" "$(echo "$t1 / $tn" | bc -l)"
  if [[ -z "$best1" ]] || (($(echo "$t1 < $best1" | bc -l))); then best1=$t1; fi
  if [[ -z "$bestn" ]] || (($(echo "$tn < $bestn" | bc -l))); then bestn=$tn; fi
done
printf 'best: -j 1 %.2f s, -j %d %.2f s, speed-up %.2fx (%s cores)\n' "$best1" "$jobs" "$bestn" \
  "$(echo "$best1 / $bestn" | bc -l)" "$(nproc)"
if diff <(grep -v '"provenance"' "$dir/one.json") <(grep -v '"provenance"' "$dir/many.json") >/dev/null; then
  echo "tables: equal apart from provenance"
else
  echo "tables: DIFFER"
  exit 1
fi
