#!/usr/bin/env bash
# Ours vs peer libraries' own all-reduce, measured in one run on this machine: collbench's host threads backend
# (`perf --backend host -g N`, the default) or its gloo process backend (`perf --backend gloo` under
# `collbench launch -n N`), against Gloo's own allreduce (`--algo gloo_ring`, ..., under `collbench launch`) and
# Open MPI's MPI_Allreduce (`perf --algo mpi`: the collbench-mpi-allreduce driver under mpirun). Prints, per rank
# count and size, each one's busbw and the ratio ours / peer, computed from the out-of-place times (time_us; the
# busbw factor is the same on both sides, so busbw ratio = peer time / our time).
#
#   bench/compare.sh [--ours-backend host|gloo] [--ranks "2 4"] [-b 1M] [-e 256M] [-f 4] [--iters N] [--warmup W]
#                    [--ours ALGO] [--peers "gloo_ring mpi"] [--channels C] [--chunk-bytes B] [--keep DIR]
#
# Defaults: the issue's comparison (host threads backend, 2 and 4 ranks, 1 MiB..256 MiB, --ours auto, peers
# gloo_ring and mpi). Open MPI uses shared memory between local ranks by default, which is the right peer for the
# host backend; with --ours-backend gloo it is run over loopback TCP like Gloo ("--mca btl self,tcp"). Set
# COLLBENCH_MPIRUN_ARGS to override either (exported as is; "" means mpirun's defaults).
# Environment: COLLBENCH (the collbench binary; default: on PATH, else build/release/tools/collbench).
# Exit status: 0, or 1 when any run failed (its column reads FAIL and its error is printed), 2 for bad arguments.
set -euo pipefail

usage() { sed -n '2,19p' "$0"; }
ours_backend=host
ranks="2 4"
minb=1M maxb=256M factor=4 iters=20 warmup=2
ours=auto peers="gloo_ring mpi"
extra=()
keep=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ours-backend) ours_backend="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    -b) minb="$2"; shift 2 ;;
    -e) maxb="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --ours) ours="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --channels) extra+=(--channels "$2"); shift 2 ;;
    --chunk-bytes) extra+=(--chunk-bytes "$2"); shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$ours_backend" in
  host|gloo) ;;
  *) echo "compare.sh: --ours-backend must be host or gloo, got '$ours_backend'" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "${COLLBENCH:-}" ]]; then
  COLLBENCH="$(command -v collbench || true)"
  [[ -n "$COLLBENCH" ]] || COLLBENCH="$here/build/release/tools/collbench"
fi
[[ -x "$COLLBENCH" ]] || { echo "compare.sh: no collbench binary at '$COLLBENCH' (set COLLBENCH)" >&2; exit 2; }
if [[ -z "${COLLBENCH_MPIRUN_ARGS+set}" ]]; then
  if [[ "$ours_backend" == gloo ]]; then COLLBENCH_MPIRUN_ARGS="--mca btl self,tcp"; else COLLBENCH_MPIRUN_ARGS=""; fi
fi
export COLLBENCH_MPIRUN_ARGS

work="${keep:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

common=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c 0)
failed=0

# run <name> <ranks> <backend> <algo>: the table's data rows as "size time_us" (out-of-place) in
# $work/<name>_<ranks>.rows; on failure the file is absent, the error is printed and failed=1.
run() {
  local name="$1" n="$2" backend="$3" algo="$4" out="$work/$1_$2.txt" err="$work/$1_$2.err" status=0
  if [[ "$algo" == mpi ]]; then
    "$COLLBENCH" perf --algo mpi -g "$n" "${common[@]}" >"$out" 2>"$err" || status=$?
  elif [[ "$backend" == gloo ]]; then
    "$COLLBENCH" launch -n "$n" -- "$COLLBENCH" perf --backend gloo --algo "$algo" "${common[@]}" "${extra[@]}" \
      >"$out" 2>"$err" || status=$?
  else
    "$COLLBENCH" perf --backend host -g "$n" --algo "$algo" "${common[@]}" "${extra[@]}" >"$out" 2>"$err" ||
      status=$?
  fi
  if [[ $status -ne 0 ]]; then
    echo "compare.sh: $name ($backend, $algo) at $n ranks failed with status $status:" >&2
    tail -5 "$err" >&2
    failed=1
    return
  fi
  sed -e 's/^\[rank 0\] //' "$out" | awk '!/^#/ && !/^\[rank/ && NF >= 13 { print $1, $6 }' >"$work/$1_$2.rows"
}

# busbw GB/s of an all-reduce of <size> bytes in <time_us> on <n> ranks: size / time x 2(n-1)/n.
busbw() { awk -v s="$1" -v t="$2" -v n="$3" 'BEGIN { printf "%.3g", (t > 0 ? s / (t * 1e3) * 2 * (n - 1) / n : 0) }'; }

echo "# collbench compare: $("$COLLBENCH" --version) on $(hostname), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ours: perf --backend $ours_backend --algo $ours ${extra[*]}; peers: $peers; $minb..$maxb x$factor," \
     "-n $iters -w $warmup"
echo "# mpirun extra args: '${COLLBENCH_MPIRUN_ARGS}'; busbw in GB/s from out-of-place time_us; ratio = ours / peer busbw"
for n in $ranks; do
  run ours "$n" "$ours_backend" "$ours"
  for p in $peers; do run "$p" "$n" gloo "$p"; done
  header=$(printf "%6s %12s %10s" ranks size ours)
  for p in $peers; do header+=$(printf " %18s %7s" "$p" ratio); done
  echo "$header"
  if [[ ! -f "$work/ours_$n.rows" ]]; then
    echo "$(printf "%6s %12s %10s" "$n" - FAIL)"
    continue
  fi
  while read -r size t; do
    line=$(printf "%6s %12s %10s" "$n" "$size" "$(busbw "$size" "$t" "$n")")
    for p in $peers; do
      if [[ ! -f "$work/${p}_$n.rows" ]]; then
        line+=$(printf " %18s %7s" FAIL -)
        continue
      fi
      pt=$(awk -v s="$size" '$1 == s { print $2 }' "$work/${p}_$n.rows")
      if [[ -z "$pt" ]]; then
        line+=$(printf " %18s %7s" "no row" -)
      else
        ratio=$(awk -v o="$t" -v q="$pt" 'BEGIN { printf "%.2f", (o > 0 ? q / o : 0) }')
        line+=$(printf " %18s %7s" "$(busbw "$size" "$pt" "$n")" "$ratio")
      fi
    done
    echo "$line"
  done <"$work/ours_$n.rows"
done
exit "$failed"
