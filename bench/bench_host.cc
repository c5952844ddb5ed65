// Google Benchmark driver: host threads backend x algorithm x size x ranks. Manual time is the backend's own
// per-iteration clock (steady clock after a start barrier); algbw/busbw are reported as byte rates.
//   build/release/bench/bench_host --benchmark_out=host.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <map>
#include <memory>

#include "collbench/algorithms.h"
#include "collbench/reference.h"
#include "host_backend.h"

namespace {

using namespace collbench;

Backend& backendFor(int n) {
  static std::map<int, std::unique_ptr<Backend>> cache;
  auto& b = cache[n];
  if (!b) b = host::makeThreadsBackend(n);
  return *b;
}

void runCollective(benchmark::State& state, const AlgorithmInfo* algo) {
  const int n = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(state.range(1));
  const CollectiveSpec spec{algo->collective, n, bytes / sizeof(float), DType::F32, ReduceOp::Sum};
  const Schedule schedule = algo->build(spec, {});
  RankBufferSet bufs(spec, false);
  bufs.fill();
  Backend& backend = backendFor(n);
  backend.run(schedule, bufs.views(), RunOptions{1, 1, 60.0});
  constexpr int kItersPerSample = 5;
  for (auto _ : state) {
    state.SetIterationTime(backend.run(schedule, bufs.views(), RunOptions{kItersPerSample, 0, 60.0}).seconds);
  }
  const double moved = static_cast<double>(std::max(spec.inputBytes(), spec.outputBytes()));
  state.counters["algbw"] = benchmark::Counter(moved, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] =
      benchmark::Counter(moved * busBandwidthFactor(algo->collective, n), benchmark::Counter::kIsIterationInvariantRate);
}

const bool kRegistered = [] {
  for (const auto& a : algorithms()) {
    if (a.native || a.collective == Collective::Barrier) continue;
    auto* b = benchmark::RegisterBenchmark(fmt::format("host/{}/{}", toString(a.collective), a.name).c_str(),
                                           runCollective, &a);
    b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"ranks", "bytes"});
    for (int n : {2, 4}) {
      for (std::int64_t bytes = 8; bytes <= (256 << 20); bytes *= 32) b->Args({n, bytes});
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
