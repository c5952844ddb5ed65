#!/usr/bin/env bash
# Ours vs peer libraries' own all-reduce, measured in one run on this machine's loopback: collbench's process
# backend (`perf --backend gloo --algo <ours>` under `collbench launch`) against Gloo's own allreduce
# (`--algo gloo_ring`, ...) on the same transport, and Open MPI's MPI_Allreduce (`perf --algo mpi`, the
# collbench-mpi-allreduce driver under mpirun). Prints busbw per size and the ours / peer ratio.
#
#   bench/compare.sh [-n "2 4"] [-b 1M] [-e 256M] [-f 4] [-i ITERS] [-w WARMUP] [--ours ring]
#                    [--peers "gloo_ring gloo_ring_chunked mpi"] [--channels C] [--chunk-bytes B] [--keep DIR]
#
# Environment: COLLBENCH (the collbench binary; default: on PATH, else build/release/tools/collbench),
# COLLBENCH_MPIRUN_ARGS (default "--mca btl self,tcp": Open MPI over loopback TCP like Gloo; set it to "" to let
# Open MPI use shared memory). busbw is the out-of-place column of the nccl-tests table (in-place is printed
# by the runs kept with --keep).
set -euo pipefail

ranks="2 4"
minb=1M maxb=256M factor=4 iters=10 warmup=2
ours=ring peers="gloo_ring gloo_ring_chunked mpi"
extra=()
keep=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) ranks="$2"; shift 2 ;;
    -b) minb="$2"; shift 2 ;;
    -e) maxb="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -i) iters="$2"; shift 2 ;;
    -w) warmup="$2"; shift 2 ;;
    --ours) ours="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --channels) extra+=(--channels "$2"); shift 2 ;;
    --chunk-bytes) extra+=(--chunk-bytes "$2"); shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "${COLLBENCH:-}" ]]; then
  COLLBENCH="$(command -v collbench || true)"
  [[ -n "$COLLBENCH" ]] || COLLBENCH="$here/build/release/tools/collbench"
fi
[[ -x "$COLLBENCH" ]] || { echo "compare.sh: no collbench binary at '$COLLBENCH' (set COLLBENCH)" >&2; exit 2; }
export COLLBENCH_MPIRUN_ARGS="${COLLBENCH_MPIRUN_ARGS---mca btl self,tcp}"

work="${keep:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

common=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c 0)

# run <name> <ranks> <algo>: the table's data rows as "size busbw" (out-of-place) in $work/<name>_<ranks>.rows
run() {
  local name="$1" n="$2" algo="$3" out="$work/$1_$2.txt"
  if [[ "$algo" == mpi ]]; then
    "$COLLBENCH" perf --algo mpi -g "$n" "${common[@]}" >"$out" 2>"$work/$1_$2.err" || true
  else
    "$COLLBENCH" launch -n "$n" -- "$COLLBENCH" perf --backend gloo --algo "$algo" "${common[@]}" "${extra[@]}" \
      >"$out" 2>"$work/$1_$2.err" || true
  fi
  sed -e 's/^\[rank 0\] //' "$out" | awk '!/^#/ && NF >= 13 { print $1, $8 }' >"$work/$1_$2.rows"
  if [[ ! -s "$work/$1_$2.rows" ]]; then
    echo "compare.sh: $algo at $n ranks produced no rows (see below)" >&2
    tail -5 "$work/$1_$2.err" >&2
  fi
}

echo "# collbench compare: $("$COLLBENCH" --version) on $(hostname), loopback, $(nproc) cpus"
echo "# ours: --backend gloo --algo $ours ${extra[*]}; peers: $peers; busbw GB/s (out-of-place), ratio = ours/peer"
echo "# mpirun extra args: '${COLLBENCH_MPIRUN_ARGS}'"
for n in $ranks; do
  run ours "$n" "$ours"
  for p in $peers; do run "$p" "$n" "$p"; done
  header=$(printf "%6s %12s %9s" ranks size ours)
  for p in $peers; do header+=$(printf " %11s %7s" "$p" ratio); done
  echo "$header"
  while read -r size bw; do
    line=$(printf "%6s %12s %9s" "$n" "$size" "$bw")
    for p in $peers; do
      pb=$(awk -v s="$size" '$1 == s { print $2 }' "$work/${p}_$n.rows" 2>/dev/null || true)
      if [[ -n "$pb" ]]; then
        line+=$(awk -v o="$bw" -v q="$pb" 'BEGIN { printf " %11s %7s", q, (q > 0 ? sprintf("%.2f", o / q) : "inf") }')
      else
        line+=$(printf " %11s %7s" "-" "-")
      fi
    done
    echo "$line"
  done <"$work/ours_$n.rows"
done
