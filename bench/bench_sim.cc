// Google Benchmark driver: simulator backend x shipped topology x algorithm x size. Manual time is the simulated
// time of one collective (what the topology would take), so the rates below are simulated algbw/busbw; the host
// wall time of each simulation is the counter wall_ms.
//   build/release/bench/bench_sim --benchmark_out=sim.json --benchmark_out_format=json
//   build/release/bench/bench_sim --benchmark_filter='h100-4x8-rail/all_reduce/ring'
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace {

using namespace collbench;

/// One single-host and one multi-host shipped topology (topologies/README.md says where their figures come from).
constexpr const char* kTopologies[] = {"dgx-h100-8x1", "h100-4x8-rail"};
/// NCCL's rings use several channels; 8 gives each GPU of a rail-optimized host its own NIC (ringOrder).
constexpr int kChannels = 8;

void simulate(benchmark::State& state, const Topology* topo, const AlgorithmInfo* algo) {
  const int n = static_cast<int>(topo->ranks.size());
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const CollectiveSpec spec{algo->collective, n, bytes / sizeof(float), DType::F32, ReduceOp::Sum};
  AlgoParams params;
  params.channels = algo->name == "ring" ? kChannels : 1;
  params.rankHost = rankHosts(*topo, n);
  const sim::Simulator simulator(*topo, n);
  sim::SimResult r;
  for (auto _ : state) {
    r = simulator.runAlgorithm(spec, algo->name, params);
    state.SetIterationTime(r.seconds);
  }
  const double moved = static_cast<double>(std::max(spec.inputBytes(), spec.outputBytes()));
  state.counters["algbw"] = benchmark::Counter(moved, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(moved * busBandwidthFactor(algo->collective, n),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.counters["wall_ms"] = r.wallSeconds * 1e3;
  state.SetLabel(r.method);
}

const bool kRegistered = [] {
  for (const char* name : kTopologies) {
    const auto* topo = new Topology(loadTopology(name));  // lives as long as the registered benchmarks
    for (const auto& a : algorithms()) {
      if (a.native || a.collective == Collective::Barrier) continue;
      if (a.traits.needsSwitchReduction && hostProfiles(*topo).front().nvlsGBps <= 0) continue;
      if (a.traits.needsHosts &&
          rankHosts(*topo, static_cast<int>(topo->ranks.size())) == std::vector<int>(topo->ranks.size(), 0)) {
        continue;  // one host: nothing to be hierarchical about
      }
      auto* b = benchmark::RegisterBenchmark(fmt::format("sim/{}/{}/{}", name, toString(a.collective), a.name).c_str(),
                                             simulate, topo, &a);
      b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"bytes"})->Iterations(1);
      for (std::int64_t bytes = 1024; bytes <= (std::int64_t{1} << 30); bytes *= 32) b->Args({bytes});
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
