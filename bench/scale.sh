#!/usr/bin/env bash
# Simulator cost versus GPU count: 1 GiB all-reduce on multi_node fabrics of 8-GPU servers (rail-optimized, the
# generator's defaults: two levels up to 256 servers, three above; radix 128 from 16384 servers, which radix-64
# switches cannot join in three levels), one `collbench sim --json` per algorithm and size under /usr/bin/time.
# Prints per run: GPUs, algorithm, method, simulated time, wall seconds of the whole command and its peak RSS (the
# largest of collbench and its simulating child).
#
#   bench/scale.sh [--gpus "64 256 1024 ..."] [--algos "ring:8 ring:1 tree hierarchical auto"] [--bytes 1G]
#                  [--timeout S]
#
# An algorithm `name:C` runs with --channels C. Runs past --timeout seconds (default 600) read TIMEOUT; failures
# FAIL with their last error line.
# Environment: COLLBENCH (the collbench binary; default: on PATH, else build/release/tools/collbench, else
# build/ci/tools/collbench).
# Exit status: 0, or 1 when any run failed or timed out, 2 for bad arguments.
set -euo pipefail

usage() { sed -n '2,16p' "$0"; }
gpus="64 256 1024 2048 4096 8192 16384"
algos="ring:8 ring:1 tree hierarchical auto"
bytes=1G
limit=600
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpus) gpus="$2"; shift 2 ;;
    --algos) algos="$2"; shift 2 ;;
    --bytes) bytes="$2"; shift 2 ;;
    --timeout) limit="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "scale.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for g in $gpus; do
  if ! [[ "$g" =~ ^[0-9]+$ ]] || (( g < 8 || g % 8 != 0 )); then
    echo "scale.sh: --gpus: '$g' is not a multiple of 8 (8-GPU servers)" >&2
    exit 2
  fi
done

here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/collbench-binary.sh
source "$here/bench/collbench-binary.sh"
[[ -x /usr/bin/time ]] || { echo "scale.sh: needs /usr/bin/time (GNU time) for the peak RSS" >&2; exit 2; }

# From this many servers on, radix-64 switches need a fourth level (topologies/README.md, multi_node).
radix128_servers=16384
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
printf '%-7s %-18s %-19s %14s %9s %9s\n' gpus algorithm method sim_us wall_s rss_MB
for g in $gpus; do
  servers=$((g / 8))
  radix=64
  (( servers >= radix128_servers )) && radix=128
  topo="$work/mn$servers.json"
  printf '{"format": "collbench-topology", "version": 1, "generator": "multi_node", "params": {"nodes": %d, "radix": %d}}\n' \
    "$servers" "$radix" >"$topo"
  for a in $algos; do
    name="${a%%:*}" channels=1
    [[ "$a" == *:* ]] && channels="${a##*:}"
    label="$name"
    (( channels > 1 )) && label="$name x$channels"
    set +e
    timeout "$limit" /usr/bin/time -f '%e %M' -o "$work/time" "$collbench" sim --topology "$topo" --algo "$name" \
      --channels "$channels" --bytes "$bytes" --json >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    if (( rc == 124 )); then
      printf '%-7s %-18s %-19s %14s %9s %9s\n' "$g" "$label" - - "TIMEOUT" -
      status=1
      continue
    fi
    if (( rc != 0 )); then
      printf '%-7s %-18s %-19s %14s %9s %9s  %s\n' "$g" "$label" - - FAIL - "$(tail -n 1 "$work/err")"
      status=1
      continue
    fi
    read -r wall rss_kb <"$work/time"
    python3 - "$work/out" "$g" "$label" "$wall" "$rss_kb" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
method = doc["method"] + ("" if doc["exact"] else "~")
chosen = doc["algorithm"]
label = sys.argv[3] if sys.argv[3].split()[0] != "auto" else "auto:" + chosen
print(f"{sys.argv[2]:<7} {label:<18} {method:<19} {doc['time_us']:14.3f} {float(sys.argv[4]):9.2f} "
      f"{int(sys.argv[5]) / 1024:9.0f}")
EOF
  done
done
echo "(~: the method could not prove its result exact; see its note)"
exit $status
