#!/usr/bin/env bash
# One prepared check for a machine with one (or more) GPUs, finished within 8 minutes:
#   build (Release, CUDA on, kernels for this GPU's architecture), the gpu tests (gtest JSON), device copy and
#   reduce-kernel bandwidth per dtype (bench_gpu_kernels, Google Benchmark JSON), `collbench perf` on the nccl
#   backend (-g 1: schedule and native) and on cuda-1gpu (-g 4, every algorithm), then device-check.json and
#   summary.txt. Everything is written under the output directory: $1, else $OUT, else ./device-check-out.
#
# Every step has its own time budget (and none may run past the global one); a failing step is recorded and the
# script goes on with the steps that do not depend on it. Exit status: 0 when every step passed, 1 otherwise.
#
# Environment: COLLBENCH_BUILD_DIR (default build/device-check), SKIP_BUILD=1 (use an existing build),
# CUDA_ARCH (default: this GPU's compute capability from nvidia-smi, else 80;90), TOTAL_BUDGET_S (default 470).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-$PWD/device-check-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${COLLBENCH_BUILD_DIR:-$repo/build/device-check}
total_budget=${TOTAL_BUDGET_S:-470}
start=$SECONDS
steps_json="$out/steps.jsonl"
: >"$steps_json"
failures=0

log() { echo "[device-check $((SECONDS - start))s] $*" | tee -a "$out/device-check.log" >&2; }

# step NAME BUDGET_S CMD...: runs CMD with stdout+stderr in $out/NAME.log, killed after min(BUDGET, time left).
step() {
  local name=$1 budget=$2
  shift 2
  local left=$((total_budget - (SECONDS - start)))
  if ((left < 5)); then
    log "$name: skipped, global budget of ${total_budget}s used up"
    printf '{"step":"%s","status":"skipped","seconds":0,"log":"%s.log"}\n' "$name" "$name" >>"$steps_json"
    failures=$((failures + 1))
    return 1
  fi
  ((budget > left)) && budget=$left
  log "$name: start (budget ${budget}s)"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$budget" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local dt=$((SECONDS - t0)) status=ok
  if ((rc == 124 || rc == 137)); then
    status=timeout
  elif ((rc != 0)); then
    status=failed
  fi
  log "$name: $status (rc $rc, ${dt}s)"
  printf '{"step":"%s","status":"%s","rc":%d,"seconds":%d,"budget_s":%d,"log":"%s.log"}\n' "$name" "$status" "$rc" \
    "$dt" "$budget" "$name" >>"$steps_json"
  if [[ $status != ok ]]; then
    failures=$((failures + 1))
    tail -n 30 "$out/$name.log" | sed "s/^/[$name] /" >&2 || true
    return 1
  fi
}

environment() {
  nvidia-smi || true
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  /usr/local/cuda/bin/nvcc --version || nvcc --version || true
  grep -m1 NCCL_VERSION_CODE /usr/local/cuda/include/nccl.h || true
  nproc
  free -g || true
  env | grep -E '^(NCCL_|CUDA_)' || true
}

arch=${CUDA_ARCH:-}
if [[ -z $arch ]]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
  arch=${cap:-80;90}
fi

export -f environment
step environment 20 bash -c environment || true

built=1
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  step configure 60 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLBENCH_WITH_CUDA=ON \
    "-DCOLLBENCH_CUDA_ARCHITECTURES=$arch" || built=0
  if ((built)); then
    step build 240 cmake --build "$build" -j"$(nproc)" --target collbench test_gpu bench_gpu_kernels || built=0
  fi
fi
cli="$build/tools/collbench"
tests="$build/tests/gpu/test_gpu"
bench="$build/bench/bench_gpu_kernels"
for f in "$cli" "$tests" "$bench"; do [[ -x $f ]] || built=0; done

if ((built)); then
  # Device-free tests first (they run everywhere), then the one-GPU and multi-GPU ones.
  step gtest_gpu 150 "$tests" --gtest_filter='WavePlan*:*/WavePlan*:Gpu*:*/Gpu*:MultiGpu*:*/MultiGpu*' \
    --gtest_output="json:$out/gtest_gpu.json" --gtest_brief=1 || true
  step bench_kernels 60 "$bench" --benchmark_out="$out/bench_gpu_kernels.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true || true

  sweep=(-b 1M -e 64M -f 4 -n 10 -w 2 -c 1 --force)
  step perf_nccl_g1_schedule 25 "$cli" perf all_reduce --backend nccl -g 1 "${sweep[@]}" \
    -J "$out/perf_nccl_g1_auto.json" || true
  step perf_nccl_g1_native 25 "$cli" perf all_reduce --backend nccl -g 1 --algo nccl "${sweep[@]}" \
    -J "$out/perf_nccl_g1_native.json" || true
  for algo in ring tree recursive_doubling rabenseifner direct; do
    step "perf_1gpu_g4_all_reduce_$algo" 25 "$cli" perf all_reduce --backend cuda-1gpu -g 4 --algo "$algo" \
      "${sweep[@]}" -J "$out/perf_1gpu_g4_all_reduce_$algo.json" || true
  done
  for coll in reduce_scatter all_gather broadcast reduce; do
    step "perf_1gpu_g4_${coll}_ring" 25 "$cli" perf "$coll" --backend cuda-1gpu -g 4 --algo ring "${sweep[@]}" \
      -J "$out/perf_1gpu_g4_${coll}_ring.json" || true
  done
  step perf_1gpu_g4_all_reduce_ring_bf16_avg 25 "$cli" perf all_reduce --backend cuda-1gpu -g 4 --algo ring \
    -d bfloat16 -o avg "${sweep[@]}" -J "$out/perf_1gpu_g4_all_reduce_ring_bf16_avg.json" || true
else
  log "build unavailable: skipping tests, benchmarks and perf runs"
fi

# device-check.json (steps + parsed results) and summary.txt; python3 only reads files written above.
summarize() {
  python3 - "$out" "$((SECONDS - start))" "$failures" <<'EOF'
import glob, json, os, sys
out, elapsed, failures = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
doc = {"format": "collbench-device-check", "version": 1, "elapsed_s": elapsed, "failed_steps": failures,
       "steps": steps}
lines = [f"collbench device check: {len(steps)} steps, {failures} not ok, {elapsed} s"]
def last_line(name):
    try:
        tail = [l.strip() for l in open(os.path.join(out, name)) if l.strip()]
        return tail[-1][:200] if tail else ""
    except OSError:
        return ""
for s in steps:
    note = "" if s["status"] == "ok" else "  " + last_line(s["log"])
    lines.append(f"  {s['step']:<44} {s['status']:<8} {s.get('seconds', 0):>4} s{note}")
try:
    g = json.load(open(os.path.join(out, "gtest_gpu.json")))
    doc["gtest"] = {k: g.get(k) for k in ("tests", "failures", "disabled", "errors", "time")}
    skipped = sum(1 for s in g.get("testsuites", []) for t in s.get("testsuite", []) if t.get("result") == "SKIPPED")
    doc["gtest"]["skipped"] = skipped
    lines.append(f"gtest: {g.get('tests')} tests, {g.get('failures')} failures, {skipped} skipped")
    for s in g.get("testsuites", []):
        for t in s.get("testsuite", []):
            if t.get("failures"):
                lines.append(f"  FAILED {s['name']}.{t['name']}: {t['failures'][0].get('failure', '')[:300]}")
except (OSError, ValueError) as e:
    lines.append(f"gtest: no results ({e})")
try:
    b = json.load(open(os.path.join(out, "bench_gpu_kernels.json")))
    doc["bench"] = []
    lines.append("device bandwidth (GB/s of buffer; traffic counts every byte moved):")
    errors = {}
    for r in b.get("benchmarks", []):
        entry = {k: r.get(k) for k in ("name", "real_time", "time_unit", "GBps", "traffic_GBps", "label",
                                      "error_message")}
        doc["bench"].append(entry)
        name = r["name"].replace("/manual_time", "").replace("/iterations:3", "")
        if r.get("error_occurred"):
            errors.setdefault(r.get("error_message"), []).append(name)
        else:
            lines.append(f"  {name:<40} {r.get('GBps', 0):9.1f} GB/s  traffic {r.get('traffic_GBps', 0):9.1f} GB/s")
    for msg, names in errors.items():
        lines.append(f"  {len(names)} benchmark(s) failed ({names[0]}, ...): {msg}")
except (OSError, ValueError) as e:
    lines.append(f"bench: no results ({e})")
doc["perf"] = {}
lines.append("collbench perf (avg busbw GB/s, #wrong):")
for path in sorted(glob.glob(os.path.join(out, "perf_*.json"))):
    name = os.path.basename(path)[:-5]
    try:
        p = json.load(open(path))
    except ValueError:
        continue
    rows = [{"size": r["size"], "algorithm": r.get("algorithm"),
             "oop_busbw": r["out_of_place"]["busbw_GBps"], "ip_busbw": r["in_place"]["busbw_GBps"],
             "oop_us": r["out_of_place"]["time_us"], "ip_us": r["in_place"]["time_us"]} for r in p.get("results", [])]
    doc["perf"][name] = {"avg_busbw_GBps": p.get("avg_busbw_GBps"), "wrong_total": p.get("wrong_total"),
                         "rows": rows}
    lines.append(f"  {name:<44} {p.get('avg_busbw_GBps', 0):9.2f}  wrong {p.get('wrong_total')}")
json.dump(doc, open(os.path.join(out, "device-check.json"), "w"), indent=2)
open(os.path.join(out, "summary.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
}
summarize 2>&1 | tee -a "$out/device-check.log" || log "summary failed (python3 missing?); see steps.jsonl"
log "done in $((SECONDS - start))s, $failures step(s) not ok; results in $out"
((failures == 0))
