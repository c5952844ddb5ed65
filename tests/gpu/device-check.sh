#!/usr/bin/env bash
# One prepared check for a machine with one (or more) GPUs, within TOTAL_BUDGET_S (default 300 s):
#   the gpu tests in three steps (kernels, single-GPU schedules, nccl; gtest JSON each), device copy and reduce-kernel
#   bandwidth per dtype and the native path's overhead over a bare ncclAllReduce loop (bench_gpu_kernels), `collbench
#   perf` on the nccl backend (-g 1, ring schedule and native, checked up to 16 MiB, unchecked at 64-256 MiB) and on
#   cuda-1gpu (-g 4, every algorithm), `collbench launch` of the nccl backend with one process per GPU, and on
#   machines with two or more GPUs our ring schedule against NCCL's ring at 64-256 MiB.
#
#   tests/gpu/device-check.sh [OUT]        OUT: $1, else $OUT, else ./device-check-out
#
# Binaries: the bundle of tests/gpu/prepare-device-bundle.sh (default <repo>/.device-bundle, or
# COLLBENCH_DEVICE_BUNDLE), built on a machine with the project's dev packages; without one, a build here
# (COLLBENCH_BUILD_DIR, default build/device-check; needs those packages). libnccl.so.2 comes from this machine:
# COLLBENCH_NCCL_LIB_DIR, else ldconfig, /usr/local/cuda, the Python packages (nvidia-nccl-cu13). Without it the check
# stops at once with one message saying where it looked.
#
# Output: exactly three files in OUT, so that a device tool returning few files loses nothing: summary.txt (the
# verdicts, targets with pass/fail), device-check.json (steps and parsed results) and logs.tar.gz (every log and raw
# JSON). Work happens in a temporary directory. Every step has its own time budget, cut to what is left of the
# total; a failing or hung step is recorded and the others still run. Exit status: 0 when every step passed.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-$PWD/device-check-out}}
if ! mkdir -p "$out" || ! out=$(cd "$out" && pwd); then
  echo "device-check: cannot create output directory $out" >&2
  exit 1
fi
total_budget=${TOTAL_BUDGET_S:-300}
bundle=${COLLBENCH_DEVICE_BUNDLE:-$repo/.device-bundle}
python=${PYTHON:-python3}
build=${COLLBENCH_BUILD_DIR:-$repo/build/device-check}
start=$SECONDS
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL's own warnings into the step logs
work=$(mktemp -d "${TMPDIR:-/tmp}/collbench-device-check.XXXXXX")
steps_json="$work/steps.jsonl"
: >"$steps_json"
failures=0
notes=()

log() { echo "[device-check $((SECONDS - start))s] $*" | tee -a "$work/device-check.log" >&2; }
note() {
  notes+=("$*")
  log "NOTE: $*"
}

# step NAME BUDGET_S CMD...: runs CMD with stdout+stderr in $work/NAME.log, killed after min(BUDGET, time left).
step() {
  local name=$1 budget=$2
  shift 2
  local left=$((total_budget - (SECONDS - start)))
  if ((left < 5)); then
    log "$name: skipped, the total budget of ${total_budget}s is used up"
    printf '{"step":"%s","status":"skipped","rc":-1,"seconds":0,"budget_s":0,"log":"%s.log"}\n' "$name" "$name" \
      >>"$steps_json"
    failures=$((failures + 1))
    return 1
  fi
  ((budget > left)) && budget=$left
  log "$name: start (budget ${budget}s)"
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$budget" "$@" >"$work/$name.log" 2>&1 </dev/null || rc=$?
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
    tail -n 15 "$work/$name.log" | sed "s/^/[$name] /" >&2
    return 1
  fi
}

# skip NAME REASON: records a step that was not run (not counted as a failure: the reason was, once).
skip() {
  log "$1: skipped ($2)"
  printf '{"step":"%s","status":"skipped","rc":-1,"seconds":0,"budget_s":0,"log":"%s.log"}\n' "$1" "$1" >>"$steps_json"
  echo "skipped: $2" >"$work/$1.log"
}

# Writes summary.txt, device-check.json and logs.tar.gz into $out and exits. The summarizer is standard-library
# python3; if it fails, summary.txt is written from steps.jsonl here.
finish() {
  local elapsed=$((SECONDS - start))
  printf '%s\n' "${notes[@]+"${notes[@]}"}" >"$work/notes.txt"
  if ! "$python" "$repo/tests/gpu/summarize-device-check.py" "$work" "$elapsed" "$failures" \
    >"$work/summarize.log" 2>&1; then
    log "summarizer failed (see summarize.log); writing a plain summary from steps.jsonl"
    {
      echo "collbench device check: $failures step(s) not ok, ${elapsed} s (plain summary: the summarizer failed)"
      cat "$work/notes.txt"
      sed -E 's/^\{"step":"([^"]*)","status":"([^"]*)","rc":(-?[0-9]+),"seconds":([0-9]+).*$/  \1 \2 rc \3 \4 s/' \
        "$steps_json"
      echo "summarizer output:"
      tail -n 20 "$work/summarize.log"
    } >"$work/summary.txt"
    [[ -s $work/device-check.json ]] || echo '{"format": "collbench-device-check", "summarizer_failed": true}' \
      >"$work/device-check.json"
  fi
  cp "$work/summary.txt" "$work/device-check.json" "$out/"
  log "done in ${elapsed}s, $failures step(s) not ok; results in $out"
  tar -czf "$out/logs.tar.gz" -C "$work" . 2>/dev/null || log "could not write logs.tar.gz"
  cat "$out/summary.txt" >&2
  rm -rf "$work"
  exit $((failures == 0 ? 0 : 1))
}

# ---- Environment ----
# shellcheck disable=SC2317  # run through bash -c
environment() {
  echo "## nvidia-smi"
  nvidia-smi || true
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  echo "## nvcc"
  nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null || true
  echo "## system"
  uname -a
  grep PRETTY_NAME /etc/os-release || true
  ldd --version | head -n1
  nproc
  free -g || true
  env | grep -E '^(NCCL_|CUDA_|LD_LIBRARY_PATH)' || true
}
export -f environment
step environment 15 bash -c environment
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
gpus=${gpus:-0}
log "GPUs seen by nvidia-smi: $gpus"

# ---- libnccl.so.2 ----
find_nccl() {
  local d
  for d in ${COLLBENCH_NCCL_LIB_DIR:-} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
    /usr/local/lib; do
    [[ -n $d && -e $d/libnccl.so.2 ]] && { echo "$d"; return; }
  done
  d=$({ command -v ldconfig || echo /sbin/ldconfig; } | head -n1)
  d=$("$d" -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }')
  [[ -n $d && -e $d ]] && { dirname "$d"; return; }
  # The PyTorch venv's nvidia-nccl-cu13 wheel: nvidia/nccl/lib (a namespace package, hence __path__).
  d=$(timeout 20 "$python" -c 'import nvidia.nccl, os
for p in nvidia.nccl.__path__:
    if os.path.exists(os.path.join(p, "lib", "libnccl.so.2")): print(os.path.join(p, "lib")); break' 2>/dev/null)
  [[ -n $d ]] && { echo "$d"; return; }
  d=$(timeout 20 find /opt /usr/local/lib /usr/lib/python3* -name libnccl.so.2 -path '*nvidia*' 2>/dev/null | head -n1)
  [[ -n $d ]] && dirname "$d"
}
nccl_dir=$(find_nccl)
if [[ -z $nccl_dir ]]; then
  note "libnccl.so.2 not found (looked in COLLBENCH_NCCL_LIB_DIR, /usr/local/cuda/lib64, /usr/lib/x86_64-linux-gnu, ldconfig -p, python3's nvidia.nccl, find under /opt and /usr/lib/python3*): every binary links it; set COLLBENCH_NCCL_LIB_DIR to the folder holding it"
  failures=$((failures + 1))
  finish
fi
log "libnccl.so.2 from $nccl_dir"
echo "nccl_lib_dir $nccl_dir" >"$work/facts.txt"

# ---- Binaries: the bundle, else a build here ----
bin=""
if [[ -x $bundle/bin/collbench && -x $bundle/bin/test_gpu && -x $bundle/bin/bench_gpu_kernels ]]; then
  export LD_LIBRARY_PATH="$bundle/lib:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd_report() { for f in "$bundle"/bin/*; do echo "== $f"; ldd "$f"; done; }
  ldd_report >"$work/ldd.log" 2>&1
  if grep -q "GLIBCXX_\|CXXABI_\|GCC_[0-9]" "$work/ldd.log"; then
    # This machine's libstdc++ is older than the build machine's: take the bundled one.
    note "system libstdc++/libgcc_s too old for the bundle; using the bundle's compat/ copies"
    export LD_LIBRARY_PATH="$bundle/compat:$LD_LIBRARY_PATH"
    ldd_report >"$work/ldd.log" 2>&1
  fi
  if grep -q "not found" "$work/ldd.log"; then
    note "the bundle's binaries miss libraries here: $(grep "not found" "$work/ldd.log" | sort -u | tr -s ' \t' ' ' | tr '\n' ';')"
  else
    bin=$bundle/bin
    log "using the bundle $bundle ($(sed -n 's/^commit: //p' "$bundle/MANIFEST" 2>/dev/null))"
    echo "binaries bundle $(sed -n 's/^commit: //p' "$bundle/MANIFEST" 2>/dev/null)" >>"$work/facts.txt"
    if [[ -s $bundle/SOURCES.sha256 ]]; then
      changed=$(cd "$repo" && { sha256sum --quiet -c "$bundle/SOURCES.sha256" 2>/dev/null | grep -c .; })
      if ((${changed:-0} > 0)); then
        note "the bundle was built from another tree: $changed tracked file(s) differ (rerun prepare-device-bundle.sh)"
      fi
    fi
  fi
  cp "$bundle/MANIFEST" "$work/bundle-MANIFEST.txt" 2>/dev/null
fi
if [[ -z $bin ]]; then
  log "no usable bundle at $bundle: building here"
  arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')}
  arch=${arch:-90}
  if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    step configure 60 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLBENCH_WITH_CUDA=ON \
      "-DCOLLBENCH_CUDA_ARCHITECTURES=$arch" -DCOLLBENCH_WITH_SIMGRID=OFF -DCOLLBENCH_WITH_GLOO=OFF \
      -DCOLLBENCH_WITH_MPI=OFF &&
      step build 200 cmake --build "$build" -j"$(nproc)" --target collbench test_gpu bench_gpu_kernels
  fi
  mkdir -p "$work/bin"
  for f in tools/collbench tests/gpu/test_gpu bench/bench_gpu_kernels; do
    [[ -x $build/$f ]] && ln -s "$build/$f" "$work/bin/"
  done
  [[ -x $work/bin/collbench && -x $work/bin/test_gpu && -x $work/bin/bench_gpu_kernels ]] && bin=$work/bin
  export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "binaries built-here" >>"$work/facts.txt"
fi
if [[ -z $bin ]]; then
  note "no binaries: neither a usable bundle nor a build (see configure.log / build.log)"
  failures=$((failures + 1))
  finish
fi
cli=$bin/collbench

# ---- Is there a device? test_gpu's own probe (cudaGetDeviceCount); without one the gpu tests still run, to show
# that they skip with the reason, and everything that needs a device is skipped ----
have_device=1
step device_probe 30 "$bin/test_gpu" --gtest_filter='GpuKernelsBench.*'  # a failure here is a real one: go on
if grep -q '^\[  SKIPPED \]' "$work/device_probe.log"; then
  have_device=0
  note "$(grep -A1 ': Skipped$' "$work/device_probe.log" | tail -n1); device benchmarks and perf runs skipped"
  failures=$((failures + 1))
fi
# runs STEP... only with a device
on_device() {
  if ((have_device)); then
    "$@"
  else
    skip "$2" "no CUDA device"
  fi
}

# ---- The targets first: bandwidth, reduce-kernel speed, native overhead (bench_gpu_kernels) ----
step gtest_host 20 "$bin/test_gpu" --gtest_filter='Host*' --gtest_output="json:$work/gtest_host.json"
on_device step bench_kernels 60 "$bin/bench_gpu_kernels" --benchmark_out="$work/bench_gpu_kernels.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true

# ---- gpu tests: one step per group, each with its own JSON, so that one hang loses only its group ----
gtest() {
  local name=$1 budget=$2 filter=$3
  step "$name" "$budget" "$bin/test_gpu" --gtest_filter="$filter" --gtest_output="json:$work/$name.json"
}
gtest gtest_kernels 60 '*/GpuKernels.*:GpuKernelsDivide.*:GpuKernelsBench.*'
gtest gtest_nccl 45 'GpuNcclOneRank.*:GpuNcclProcess.*:MultiGpu*:*/MultiGpu*:-GpuNcclProcess.SetupTimesOut*'
# Alone: if ncclCommAbort of a setup still waiting for its peer ever hung, it would cost only this step.
gtest gtest_nccl_abort 30 'GpuNcclProcess.SetupTimesOut*'
gtest gtest_1gpu 75 '*/GpuSingle.*:GpuSingleBackend.*:GpuMonitor.*'

# ---- collbench perf ----
checked=(-b 1M -e 16M -f 4 -n 10 -w 2 -c 1 --force)    # -c 1 costs host time: 16 MiB at most
large=(-b 64M -e 256M -f 4 -n 20 -w 3 -c 0 --force)     # timing only
perf() {
  local name=$1 budget=$2
  shift 2
  step "$name" "$budget" "$cli" perf "$@" -J "$work/perf_$name.json"
}
on_device perf nccl_g1_ring 25 all_reduce --backend nccl -g 1 --algo ring "${checked[@]}"
on_device perf nccl_g1_native 25 all_reduce --backend nccl -g 1 --algo nccl "${checked[@]}"
on_device perf nccl_g1_ring_large 20 all_reduce --backend nccl -g 1 --algo ring "${large[@]}"
on_device perf nccl_g1_native_large 20 all_reduce --backend nccl -g 1 --algo nccl "${large[@]}"
for algo in ring tree recursive_doubling rabenseifner direct; do
  on_device perf "cuda1gpu_g4_all_reduce_$algo" 20 all_reduce --backend cuda-1gpu -g 4 --algo "$algo" "${checked[@]}"
done
for coll in reduce_scatter all_gather broadcast reduce; do
  on_device perf "cuda1gpu_g4_${coll}_ring" 20 "$coll" --backend cuda-1gpu -g 4 --algo ring "${checked[@]}"
done
on_device perf cuda1gpu_g4_all_reduce_ring_bf16_avg 20 all_reduce --backend cuda-1gpu -g 4 --algo ring -d bfloat16 -o avg \
  "${checked[@]}"

# ---- One process per GPU (collbench launch: TF_CONFIG world, NCCL id through the store) ----
procs=$((gpus > 1 ? (gpus > 8 ? 8 : gpus) : 1))
on_device step "launch_nccl_n$procs" 30 "$cli" launch -n "$procs" -- "$cli" perf all_reduce --backend nccl -g "$procs" \
  --algo ring -b 1M -e 4M -f 4 -n 5 -w 1 -c 1

# ---- Several GPUs: our ring vs NCCL's ring at 64 MiB and more (target: busbw >= 90%) ----
if ((have_device && gpus >= 2)); then
  n=$((gpus > 8 ? 8 : gpus))
  perf "nccl_g${n}_ring_large" 30 all_reduce --backend nccl -g "$n" --algo ring "${large[@]}"
  step "nccl_g${n}_native_ring_large" 30 env NCCL_ALGO=Ring "$cli" perf all_reduce --backend nccl -g "$n" \
    --algo nccl "${large[@]}" -J "$work/perf_nccl_g${n}_native_ring_large.json"
  perf "nccl_g${n}_ring" 30 all_reduce --backend nccl -g "$n" --algo ring "${checked[@]}"
fi

finish
