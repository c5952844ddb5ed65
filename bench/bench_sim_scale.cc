// Simulator scale: 1 GiB all-reduce (ring, Rabenseifner, tree) on 256..8192 ranks of a k = 32 fat tree (8192
// single-GPU hosts, 50 GB/s links, H100 reduce rate), and multi_node generation up to 16384 x 8 GPUs
// (--benchmark_filter=topology; bench/scale.sh times whole simulations on 8-GPU servers). Manual time is the host wall
// time of one simulation (fork, platform and all); counters give the simulated time, the schedule ops represented per
// wall second, the SimGrid activities actually run, and the peak RSS of the simulating process.
//   build/release/bench/bench_sim_scale --benchmark_out=sim_scale.json --benchmark_out_format=json
//   build/release/bench/bench_sim_scale --benchmark_filter='ring'     # the 1 s / 30 s targets
// simulator/README.md ("Scale") has the measured table. Each simulation runs in a forked child; rss_MB is that
// child's peak (/usr/bin/time -v reports the largest of the process and its children).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace {

using namespace collbench;

// The largest rank count benchmarked; the fat tree is built once for it and smaller runs use its first ranks.
constexpr int kFatTreeK = 32;  // k^3 / 4 = 8192 hosts
constexpr std::size_t kBytes = std::size_t{1} << 30;

// From this many 8-NIC servers on, radix-64 switches need a fourth level; the generator bench uses radix 128 there
// (NVIDIA Quantum-X800 switches have 144 ports of XDR 800 Gb/s).
constexpr long long kRadix128Servers = 16384;

const Topology& fatTree() {
  static const Topology t = generateTopology("fat_tree", fmt::format(R"({{"k": {}}})", kFatTreeK));
  return t;
}

void simulate(benchmark::State& state, const char* algo, bool fromSchedule) {
  const int n = static_cast<int>(state.range(0));
  const CollectiveSpec spec{Collective::AllReduce, n, kBytes / sizeof(float), DType::F32};
  const sim::Simulator simulator(fatTree(), n);
  sim::SimResult r;
  for (auto _ : state) {
    if (fromSchedule) {
      // The Backend::run path: the schedule is built (not timed) and simulated as given.
      const Schedule s = buildSchedule(spec, algo);
      r = simulator.run(s);
    } else {
      r = simulator.runAlgorithm(spec, algo);
    }
    state.SetIterationTime(r.wallSeconds);
  }
  state.counters["sim_ms"] = r.seconds * 1e3;
  state.counters["ops"] = static_cast<double>(r.ops);
  state.counters["ops_per_s"] = r.wallSeconds > 0 ? static_cast<double>(r.ops) / r.wallSeconds : 0;
  // CPU time of the simulating process: the fair figure on a shared machine, where wall time waits for the CPU.
  state.counters["ops_per_cpu_s"] = r.cpuSeconds > 0 ? static_cast<double>(r.ops) / r.cpuSeconds : 0;
  state.counters["activities"] = static_cast<double>(r.simulatedActivities);
  state.counters["cpu_s"] = r.cpuSeconds;
  state.counters["rss_MB"] = static_cast<double>(r.peakRssBytes) / (1 << 20);
  state.counters["exact"] = r.exact ? 1 : 0;
  state.SetLabel(r.method);
}

// Generating and routing a multi_node fabric of `servers` x 8 GPUs (three levels from 512 servers on; radix 128
// from 16384, which radix-64 switches cannot join in three levels). Wall time per generation and the router's first
// cross-pod route; counters give the node and link counts, which grow linearly with the servers.
void generate(benchmark::State& state) {
  const long long servers = state.range(0);
  const std::string params =
      fmt::format(R"({{"nodes": {}, "radix": {}}})", servers, servers >= kRadix128Servers ? 128 : 64);
  std::size_t nodes = 0, links = 0, hops = 0;
  for (auto _ : state) {
    const Topology t = generateTopology("multi_node", params);
    const Router r(t);
    hops = r.route(0, static_cast<int>(t.ranks.size()) - 1).size();
    nodes = t.nodes.size();
    links = t.links.size();
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["links"] = static_cast<double>(links);
  state.counters["hops"] = static_cast<double>(hops);
}

const bool kRegistered = [] {
  benchmark::RegisterBenchmark("topology/multi_node", generate)
      ->Unit(benchmark::kSecond)
      ->Iterations(1)
      ->ArgName("servers")
      ->Arg(128)
      ->Arg(2048)
      ->Arg(16384);
  for (const char* algo : {"ring", "rabenseifner", "tree"}) {
    auto* b = benchmark::RegisterBenchmark(fmt::format("sim/all_reduce/{}/1GiB", algo).c_str(),
                                           [algo](benchmark::State& s) { simulate(s, algo, false); });
    b->UseManualTime()->Unit(benchmark::kSecond)->Iterations(1)->ArgName("ranks");
    for (int n : {256, 1024, 4096, 8192}) b->Arg(n);
  }
  auto* b = benchmark::RegisterBenchmark("sim/all_reduce/ring/1GiB/from_schedule",
                                         [](benchmark::State& s) { simulate(s, "ring", true); });
  b->UseManualTime()->Unit(benchmark::kSecond)->Iterations(1)->ArgName("ranks")->Arg(256)->Arg(1024);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
