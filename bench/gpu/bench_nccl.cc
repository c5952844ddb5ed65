// Google Benchmark driver: GPU backend x algorithm x size x ranks. Backend "nccl" (one rank per GPU, one process)
// runs NCCL's own collective (algorithm "nccl") and collbench's schedules (ncclSend/ncclRecv groups plus reduce
// kernels); "cuda-1gpu" runs the schedules with every rank on GPU 0 (device copies and kernels), which gives
// multi-rank numbers on a one-GPU machine. Manual time is the backend's CUDA-event time of its timed loop (events on
// each rank's stream; RunResult::seconds, the mean per collective); the host-to-device copies of the inputs before
// the loop are not timed. Counters algbw/busbw are byte rates. Without a device, or with fewer GPUs than ranks, a
// benchmark is skipped with the reason (the probe's "no CUDA device ..." or "needs N GPUs").
//   build/release/bench/bench_nccl --benchmark_out=nccl.json --benchmark_out_format=json
//   build/release/bench/bench_nccl --benchmark_filter='nccl/all_reduce/(nccl|ring)/ranks:8'
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "collbench/algorithms.h"
#include "collbench/backends/nccl.h"
#include "collbench/error.h"
#include "collbench/reference.h"

namespace {

using namespace collbench;

/// Collectives per benchmark iteration (one run() call, one CUDA-event interval around all of them).
constexpr int kCollectivesPerIteration = 20;
/// Fixed iterations: the untimed host-to-device copies of every run() would otherwise make adaptive counts slow.
constexpr int kIterations = 10;
constexpr double kTimeoutSeconds = 120;
constexpr int kRankCounts[] = {1, 2, 4, 8};
constexpr const char* kBackends[] = {"nccl", "cuda-1gpu"};

/// One backend per (name, ranks), kept for the whole run (communicator setup is not what is measured).
Backend& backendFor(const std::string& name, int n) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<Backend>> cache;
  auto& b = cache[{name, n}];
  if (!b) b = name == "nccl" ? nccl::makeNcclBackend(n) : nccl::makeSingleGpuBackend(n);
  return *b;
}

void runCollective(benchmark::State& state, std::string backendName, const AlgorithmInfo* algo, int n) {
  const nccl::DeviceProbe& probe = nccl::probeDevices();
  if (probe.count == 0) {
    state.SkipWithError(probe.reason.c_str());
    return;
  }
  if (backendName == "nccl" && probe.count < n) {
    state.SkipWithError(fmt::format("needs {} GPUs, this machine has {}", n, probe.count).c_str());
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const CollectiveSpec spec{algo->collective, n, bytes / sizeof(float), DType::F32, ReduceOp::Sum};
  RankBufferSet bufs(spec, false);
  bufs.fill();
  std::string label;
  try {
    Backend& backend = backendFor(backendName, n);
    const Schedule schedule = buildSchedule(spec, algo->name);
    backend.run(schedule, bufs.views(), RunOptions{1, 1, kTimeoutSeconds});
    for (auto _ : state) {
      const RunResult r = backend.run(schedule, bufs.views(), RunOptions{kCollectivesPerIteration, 0, kTimeoutSeconds});
      state.SetIterationTime(r.seconds);
      label = r.algorithm;
    }
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetLabel(label);
  const double moved = static_cast<double>(std::max(spec.inputBytes(), spec.outputBytes()));
  state.counters["algbw"] = benchmark::Counter(moved, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(moved * busBandwidthFactor(algo->collective, n),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

const bool kRegistered = [] {
  for (const std::string backend : kBackends) {
    for (const auto& a : algorithms()) {
      if (a.collective == Collective::Barrier || a.traits.needsSwitchReduction) continue;
      // Native calls: NCCL's own on the nccl backend only (gloo_* and mpi belong to other backends).
      if (a.native && (backend != "nccl" || a.name != nccl::kNativeAlgorithm)) continue;
      for (int n : kRankCounts) {
        if (backend == "cuda-1gpu" && n == 1) continue;  // nothing to move
        auto* b = benchmark::RegisterBenchmark(
            fmt::format("{}/{}/{}/ranks:{}", backend, toString(a.collective), a.name, n).c_str(), runCollective,
            backend, &a, n);
        b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"bytes"})->Iterations(kIterations);
        for (std::int64_t bytes = 8; bytes <= (std::int64_t{256} << 20); bytes *= 32) b->Args({bytes});
      }
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
