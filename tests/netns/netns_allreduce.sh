#!/usr/bin/env bash
# Real-network harness (issue #6, part 6): N network namespaces, one per rank, joined by veth pairs through a bridge
# (in a namespace of its own, so the host's network is never touched), every port shaped with tc (tbf for the rate,
# netem for the delay when the kernel has it). `collbench perf --backend gloo` runs one rank per namespace, with
# TF_CONFIG naming each rank's own address, and `collbench sim` runs the same all-reduce on the equivalent topology
# (generator "flat": every rank one link of the same bandwidth and latency to a non-blocking switch). Prints
# measured vs simulated time per size and rank count, and fails when the error exceeds --tolerance.
#
#   tests/netns/netns_allreduce.sh [-n "2 4"] [-b 1M] [-e 64M] [-f 4] [-i ITERS] [-w WARMUP] [--algo ring]
#                                  [--rate 1gbit] [--delay-us 500] [--burst 128kb] [--queue-ms 20] [--mtu 1500]
#                                  [--model CM02|LV08] [--tolerance 15] [--quick] [--keep DIR] [--collbench PATH]
#
# --delay-us is the one-way delay added between two ranks (half on each of the two shaped ports a packet crosses;
# needs sch_netem). --quick: 2 and 4 ranks, 1M..4M, 3 iterations (what ctest runs). Exit status: 0 all within
# tolerance, 1 a run failed or missed the tolerance, 2 bad usage, 77 skipped (not root, no ip/tc, namespaces or
# veth unavailable: the reason is printed). Every namespace is removed on every exit path (trap).
set -euo pipefail

ranks="2 4" minb=1M maxb=64M factor=4 iters=5 warmup=1 algo=ring
rate=1gbit delay_us=500 burst=128kb queue_ms=20 mtu=1500 model=CM02 tolerance=15 keep="" cb="${COLLBENCH:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) ranks="$2"; shift 2 ;;
    -b) minb="$2"; shift 2 ;;
    -e) maxb="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -i) iters="$2"; shift 2 ;;
    -w) warmup="$2"; shift 2 ;;
    --algo) algo="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay-us) delay_us="$2"; shift 2 ;;
    --burst) burst="$2"; shift 2 ;;
    --queue-ms) queue_ms="$2"; shift 2 ;;
    --mtu) mtu="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --tolerance) tolerance="$2"; shift 2 ;;
    --quick) ranks="2 4" minb=1M maxb=4M iters=3 warmup=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    --collbench) cb="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "netns_allreduce.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

skip() { echo "SKIP: $*"; exit 77; }
here="$(cd "$(dirname "$0")/../.." && pwd)"
if [[ -z "$cb" ]]; then
  cb="$(command -v collbench || true)"
  [[ -n "$cb" ]] || cb="$here/build/release/tools/collbench"
fi
[[ -x "$cb" ]] || { echo "netns_allreduce.sh: no collbench binary at '$cb' (--collbench or COLLBENCH)" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || skip "network namespaces need root (running as uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v tc >/dev/null || skip "no 'tc' command (iproute2)"

# Rate in bits/s, for the topology's bandwidth.
rate_bps() {
  local v="${1,,}" n unit
  n="${v%%[a-z]*}" unit="${v#"$n"}"
  case "$unit" in
    gbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e9 }' ;; mbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e6 }' ;;
    kbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e3 }' ;; bit|"") echo "$n" ;;
    *) echo "netns_allreduce.sh: --rate '$1': use <n>gbit, mbit, kbit or bit" >&2; exit 2 ;;
  esac
}
bps="$(rate_bps "$rate")"

prefix="cbns$$x"
maxn=0
for n in $ranks; do ((n > maxn)) && maxn=$n; done
((maxn >= 2 && maxn <= 8)) || { echo "netns_allreduce.sh: -n takes rank counts 2..8" >&2; exit 2; }
work="${keep:-$(mktemp -d /tmp/collbench-netns.XXXXXX)}"
mkdir -p "$work"
pids=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for ns in $(ip netns list 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 { print $1 }'); do
    ip netns del "$ns" 2>/dev/null || true
  done
  [[ -n "$keep" ]] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Probe: can this machine create namespaces and veth pairs at all?
ip netns add "${prefix}sw" 2>"$work/probe.err" || skip "cannot create a network namespace: $(head -1 "$work/probe.err")"
ip -n "${prefix}sw" link add br0 type bridge 2>"$work/probe.err" ||
  skip "cannot create a bridge: $(head -1 "$work/probe.err")"
ip -n "${prefix}sw" link set br0 up
ip -n "${prefix}sw" link set lo up

netem=yes
shape() {  # shape <ns> <dev> <delay_us for this port>
  local ns="$1" dev="$2" d="$3" queue_bytes
  queue_bytes=$(awk -v b="$bps" -v q="$queue_ms" 'BEGIN { printf "%.0f", b / 8 * q / 1000 }')
  if [[ "$netem" == yes ]] && ((d > 0)); then
    if ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "${d}us" limit 100000 2>/dev/null; then
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" burst "$burst" \
        limit "$queue_bytes"
      return
    fi
    netem=no
  fi
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" limit "$queue_bytes"
}

for ((i = 0; i < maxn; ++i)); do
  ns="${prefix}$i"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name "p$i" netns "${prefix}sw" 2>"$work/probe.err" ||
    skip "cannot create a veth pair: $(head -1 "$work/probe.err")"
  ip -n "${prefix}sw" link set "p$i" mtu "$mtu" master br0
  ip -n "${prefix}sw" link set "p$i" up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 mtu "$mtu" up
  ip -n "$ns" link set lo up
  # Both directions: the rank's own port (egress towards the switch) and the switch's port towards the rank, so a
  # packet crosses two shaped queues, like the simulator's two links (up at the sender, down at the receiver).
  shape "$ns" eth0 $((delay_us / 2))
  shape "${prefix}sw" "p$i" $((delay_us / 2))
done
tc_note="MTU $mtu, tbf rate $rate burst $burst queue ${queue_ms} ms on both ports of every rank"
if [[ "$netem" == yes ]] && ((delay_us > 0)); then
  tc_note+=", netem delay $((delay_us / 2)) us per port"
elif ((delay_us > 0)); then
  tc_note+="; NO netem in this kernel (sch_netem missing): the requested ${delay_us} us delay is not added, the"
  tc_note+=" topology uses the bare path's latency instead"
  delay_us=0
fi

# One-way latency of the bare path as the ranks see it: a TCP ping-pong of one byte, median of 200, halved (python3;
# without it, 10 us is assumed, which at these sizes is far below 1% of the time).
base_us=10
if command -v python3 >/dev/null; then
  cat >"$work/rtt.py" <<'EOF'
import socket, statistics, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(1)
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (b := c.recv(1)): c.sendall(b)
else:
    for _ in range(200):
        try: c = socket.create_connection((host, port)); break
        except OSError: time.sleep(0.02)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); rtt = []
    for _ in range(200):
        t = time.perf_counter(); c.sendall(b"x"); c.recv(1); rtt.append(time.perf_counter() - t)
    print(round(statistics.median(rtt) * 1e6 / 2))
EOF
  ip netns exec "${prefix}1" python3 "$work/rtt.py" server 10.77.0.2 29999 &
  pids+=($!)
  base_us="$(ip netns exec "${prefix}0" python3 "$work/rtt.py" client 10.77.0.2 29999 || echo 10)"
  wait "${pids[-1]}" 2>/dev/null || true
  pids=()
fi
# The simulator's path rank -> switch -> rank is two links: each gets half of the one-way latency.
link_latency_us=$(awk -v b="$base_us" -v d="$delay_us" 'BEGIN { printf "%.3f", (b + d) / 2 }')
bandwidth_GBps=$(awk -v b="$bps" 'BEGIN { printf "%.6f", b / 8 / 1e9 }')
# TCP over IPv4 with timestamps carries mtu - 52 payload bytes per frame of mtu + 14 bytes (tbf counts the Ethernet
# header, not the preamble or gap a real wire adds). The ACKs travelling the other way share the shaped ports too,
# but veth coalesces segments (GRO), so a bulk flow sends few of them. The ranks' port byte counters check this after
# each run ("# wire:" lines: bytes sent per payload byte, (mtu + 14) / (mtu - 52) = 1.046 for framing alone).
payload_GBps=$(awk -v b="$bps" -v m="$mtu" 'BEGIN { printf "%.6f", b / 8 / 1e9 * (m - 52) / (m + 14) }')

echo "# collbench netns: $("$cb" --version 2>/dev/null | head -1), kernel $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# network: $tc_note; bare one-way latency ${base_us} us (TCP ping-pong)"
echo "# simulator: generator flat (one link per rank to a switch, 2 links per path), $model;"
echo "#   sim_wire: bandwidth_GBps $bandwidth_GBps, latency_us $link_latency_us per link"
echo "# perf: --backend gloo --algo $algo -b $minb -e $maxb -f $factor -n $iters -w $warmup; times in us"
echo "# sim_wire: the shaped link as configured (line rate, bare latency above). Nothing fitted."
echo "# sim_tcp:  the same link as TCP uses it: payload rate $payload_GBps GB/s (MSS $((mtu - 52)) B per $((mtu + 14)) B"
echo "#           frame that tbf counts) and the bare latency."
echo "#           Nothing fitted: a prediction from the link's configuration and TCP's framing."
echo "# sim_fit:  sim_tcp with the per-link latency fitted so that the simulator gives the measured time of an 8-byte"
echo "#           all-reduce of the same run (collbench's own per-message cost; no size of the table is used for it)."
echo "# measured: the smaller of perf's out-of-place and in-place times (the same schedule run twice; on a shared machine"
echo "#           the smaller is the less disturbed). error% = (sim - measured) / measured; --tolerance ($tolerance%)"
echo "#           applies to sim_fit."

# wire_bytes <n>: bytes and packets the ranks' own ports (eth0 egress) have sent, summed: "bytes pkts".
wire_bytes() {
  local i b=0 k=0 line
  for ((i = 0; i < $1; ++i)); do
    line=$(ip netns exec "${prefix}$i" tc -s qdisc show dev eth0 | awk '/Sent/ { b += $2; p += $4 } END { printf "%.0f %.0f\n", b, p }')
    b=$((b + ${line% *})) k=$((k + ${line#* }))
  done
  echo "$b $k"
}

# run_perf <n> <tag> <perf args...>: one rank per namespace; rank 0's table in $work/<tag>_<n>_0.out. Fails (1)
# naming the ranks that failed, or when rank 0's check reports wrong values.
run_perf() {
  local n="$1" tag="$2" workers="" token tf failed="" i
  shift 2
  for ((i = 0; i < n; ++i)); do workers+="${workers:+,}\"10.77.0.$((i + 1)):29500\""; done
  token="netns-$$-$n-$RANDOM"
  pids=()
  for ((i = 0; i < n; ++i)); do
    tf="{\"cluster\":{\"worker\":[$workers]},\"task\":{\"type\":\"worker\",\"index\":$i}}"
    ip netns exec "${prefix}$i" env TF_CONFIG="$tf" COLLBENCH_CLUSTER_TOKEN="$token" COLLBENCH_TIMEOUT_SECONDS=120 \
      "$cb" perf --backend gloo --algo "$algo" "$@" >"$work/${tag}_${n}_$i.out" 2>"$work/${tag}_${n}_$i.err" &
    pids+=($!)
  done
  for ((i = 0; i < n; ++i)); do wait "${pids[$i]}" || failed+=" $i"; done
  pids=()
  if [[ -n "$failed" ]]; then
    echo "netns_allreduce.sh: $n ranks ($tag): rank(s)$failed failed:" >&2
    for i in $failed; do sed "s/^/[rank $i] /" "$work/${tag}_${n}_$i.err" | tail -5 >&2; done
    return 1
  fi
  if ! grep -q "Out of bounds values : 0 OK" "$work/${tag}_${n}_0.out"; then
    echo "netns_allreduce.sh: $n ranks ($tag): wrong results:" >&2
    cat "$work/${tag}_${n}_0.out" >&2
    return 1
  fi
}

# sim_us <topology> <bytes>: simulated all-reduce time in us.
sim_us() {
  "$cb" sim --topology "$1" --algo "$algo" --bytes "$2" --model "$model" --json |
    sed -n 's/.*"time_us": *\([0-9.e+-]*\).*/\1/p'
}

# topology <file> <n> <bandwidth_GBps> <latency_us per link>
topology() {
  printf '{"format": "collbench-topology", "version": 1, "name": "netns-flat-%s", "description": "%s", "generator": "flat", "params": {"n": %s, "bandwidth_GBps": %s, "latency_us": %s}}\n' \
    "$2" "equivalent of the shaped namespaces: $tc_note" "$2" "$3" "$4" >"$1"
}

printf "%6s %12s %12s %12s %8s %12s %8s %12s %8s\n" ranks bytes measured_us sim_wire_us error% sim_tcp_us error% \
  sim_fit_us error%
status=0
for n in $ranks; do
  if ! run_perf "$n" latency -b 8 -e 8 -n 200 -w 20; then
    status=1
    continue
  fi
  before=$(wire_bytes "$n")
  if ! run_perf "$n" perf -b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup"; then
    status=1
    continue
  fi
  after=$(wire_bytes "$n")
  # What the ring moved: every rank sends 2 (n-1)/n of each size per all-reduce (warmup + iters + the checked one,
  # out of place and in place); the barriers, headers and heartbeats around them are a few kilobytes.
  app=$(awk '!/^#/ && NF >= 13 { s += $1 } END { printf "%.0f", s }' "$work/perf_${n}_0.out")
  awk -v b0="${before% *}" -v p0="${before#* }" -v b1="${after% *}" -v p1="${after#* }" -v s="$app" -v n="$n" \
    -v w="$warmup" -v it="$iters" -v m="$mtu" 'BEGIN {
      bytes = b1 - b0; payload = s * 2 * (n - 1) / n * n * 2 * (w + it + 1)
      printf "# wire: %d ranks sent %.0f bytes for %.0f payload bytes: %.4f bytes per payload byte (framing alone:", n,
        bytes, payload, bytes / payload
      printf " %.4f)\n", (m + 14) / (m - 52) }'
  wire="$work/flat-$n-wire.json" tcp="$work/flat-$n-tcp.json" fit="$work/flat-$n-fit.json"
  topology "$wire" "$n" "$bandwidth_GBps" "$link_latency_us"
  topology "$tcp" "$n" "$payload_GBps" "$link_latency_us"
  # The simulated time of 8 bytes is a + b * latency: two simulations give a and b, the measured time gives latency.
  t8=$(awk '!/^#/ && NF >= 13 { print $6; exit }' "$work/latency_${n}_0.out")
  topology "$work/l0.json" "$n" "$payload_GBps" 0
  topology "$work/l1.json" "$n" "$payload_GBps" 1
  s0=$(sim_us "$work/l0.json" 8) s1=$(sim_us "$work/l1.json" 8)
  app_latency_us=$(awk -v t="$t8" -v a="$s0" -v b="$s1" 'BEGIN { l = (t - a) / (b - a); printf "%.3f", (l > 0 ? l : 0) }')
  topology "$fit" "$n" "$payload_GBps" "$app_latency_us"
  echo "# $n ranks: 8-byte all-reduce ${t8} us -> sim_fit latency_us ${app_latency_us} per link"
  while read -r bytes measured; do
    sw=$(awk -v s="$(sim_us "$wire" "$bytes")" 'BEGIN { printf "%.1f", s }')
    st=$(awk -v s="$(sim_us "$tcp" "$bytes")" 'BEGIN { printf "%.1f", s }')
    sf=$(awk -v s="$(sim_us "$fit" "$bytes")" 'BEGIN { printf "%.1f", s }')
    ew=$(awk -v s="$sw" -v m="$measured" 'BEGIN { printf "%+.1f", (s - m) * 100 / m }')
    et=$(awk -v s="$st" -v m="$measured" 'BEGIN { printf "%+.1f", (s - m) * 100 / m }')
    ef=$(awk -v s="$sf" -v m="$measured" 'BEGIN { printf "%+.1f", (s - m) * 100 / m }')
    printf "%6s %12s %12s %12s %8s %12s %8s %12s %8s\n" "$n" "$bytes" "$measured" "$sw" "$ew" "$st" "$et" "$sf" "$ef"
    echo "$n $bytes $measured $sw $ew $st $et $sf $ef" >>"$work/table.txt"
    if awk -v e="$ef" -v t="$tolerance" 'BEGIN { exit !(e > t || -e > t) }'; then status=1; fi
  done < <(awk '!/^#/ && NF >= 13 { print $1, ($6 < $10 ? $6 : $10) }' "$work/perf_${n}_0.out")
done
if ((status != 0)); then
  echo "# FAIL: a run failed or |sim_fit error| > $tolerance% (logs: ${keep:-rerun with --keep DIR})"
else
  echo "# OK: every sim_fit time within $tolerance% of the measured one"
fi
exit "$status"
