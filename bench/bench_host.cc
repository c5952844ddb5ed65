// Google Benchmark driver: host threads backend x algorithm x size x ranks. Manual time is the backend's own
// per-iteration clock (steady clock after a start barrier); algbw/busbw are reported as byte rates.
// Also the reduction kernels alone (reduce/<dtype>/<op>/bytes): GBps counts the bytes the kernel reads and writes
// (two operands in, one result out), so at sizes past the caches it is comparable to memory bandwidth.
//   build/release/bench/bench_host --benchmark_out=host.json --benchmark_out_format=json
//   build/release/bench/bench_host --benchmark_filter='^reduce/'
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backends/host.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"

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
  state.counters["busbw"] = benchmark::Counter(moved * busBandwidthFactor(algo->collective, n),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

/// dst = dst (op) src over `bytes` of each operand, as a RecvReduce into the output does.
void runKernel(benchmark::State& state, DType dtype, ReduceOp op) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / dtypeSize(dtype);
  std::vector<std::byte> dst(bytes), src(bytes);
  // Operands >= 1 never make denormals (which would slow the float kernels down), whatever the iteration count:
  // sums saturate or wrap, products reach infinity or wrap to 0, both of which cost the same as finite values.
  for (std::size_t i = 0; i < count; ++i) {
    storeFromDouble(dtype, dst.data(), i, 1.0);
    storeFromDouble(dtype, src.data(), i, 1.0 + static_cast<double>(i % 3));
  }
  for (auto _ : state) {
    reduceElements(dtype, op, dst.data(), dst.data(), src.data(), count);
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] =
      benchmark::Counter(3.0 * static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

const bool kRegistered = [] {
  for (DType t : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      auto* b = benchmark::RegisterBenchmark(fmt::format("reduce/{}/{}", toString(t), toString(op)).c_str(), runKernel,
                                             t, op);
      // Three operands that fit L1 (32 KiB here), fit L2 (512 KiB per core here), and exceed the L3 (32 MiB).
      b->ArgNames({"bytes"})->Arg(8 << 10)->Arg(128 << 10)->Arg(64 << 20)->Unit(benchmark::kMicrosecond);
    }
  }
  for (const auto& a : algorithms()) {
    if (a.native || a.collective == Collective::Barrier || a.traits.needsSwitchReduction) continue;
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
