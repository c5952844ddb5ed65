// The cost model against the simulator (issue #11). Flat topologies: the closed forms equal simulated times for the
// step algorithms (ring, recursive doubling, Rabenseifner, direct, hierarchical, reduce-scatter, all-gather, chains)
// and stay within kPipelinedTol for the pipelined double binary tree. Multi-host (h100-4x8-rail: NVSwitch inside a
// host, one NIC per GPU on rail leaves and spines): rings per channel as ringOrder() lays them over hosts' GPUs and
// NICs are exact too; direct and tree are within the tolerances below. GPU systems (dgx-h100-8x1, dgx-h100-ib400):
// both price transfers with the same wire rule (collbench/wire_rule.h: NCCL's point-to-point protocol latency, wire
// bytes, launch floor), so the same tolerances hold from 8 B to hundreds of MiB. This suite only builds with the
// simulator (tests/CMakeLists.txt builds tests/sim only when collbench_sim exists).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/nccl_model.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

/// Step algorithms: the model follows the simulator's semantics exactly; the one approximation is that every round
/// or chunk is costed at the largest piece of the even partition (pieces differ by one element), 1e-5 here.
constexpr double kExactTol = 1e-4;
/// The tree's steady state is a bound (every connection busy at the most loaded link's share, latency included),
/// measured within 12% of the simulator on flat topologies for the chunk sizes swept here.
constexpr double kPipelinedTol = 0.12;
/// Multi-host: the model costs a flow at its most loaded link's capacity / flows (every flow the link carries is held
/// to the same share), where the simulator's max-min sharing lets flows bottlenecked elsewhere (NVLink vs NIC, leaf
/// vs spine) leave capacity to the others. Rings, recursive doubling, Rabenseifner and hierarchical have one flow per
/// link and direction and stay exact; direct's all-to-all is within 6% (measured up to 5.7% at n=24, 16 MiB..256 MiB),
/// and the tree's steady state, already a bound on one switch, within 16% (measured 15% at n=32, 16 MiB, 4 channels).
constexpr double kMultiHostDirectTol = 0.07;
/// Multi-host rings on several channels: the model charges each step's reductions of all channels at once (sharing the
/// node's reduce rate); the channels' rings enter the hosts at different GPUs, so their steps are offset in time and
/// the reductions overlap only in part: reduce-scatter up to 1.6% pessimistic at 8 channels (0.8% at 4).
constexpr double kMultiHostChannelsTol = 0.02;
constexpr double kMultiHostPipelinedTol = 0.16;
/// ring_bidir's two rings pass blocks of different indices through a port at the same step; where blocks differ by
/// one element the smaller ends first and the simulator's max-min sharing hands the port to the other, which the
/// model (each flow at its share for the largest block) does not: measured at most 0.033% pessimistic.
constexpr double kBidirUnevenBlocksTol = 5e-4;
/// nvls's cost term (first loop's two stages, then the busier link direction per loop) against the simulated pipeline:
/// the bound tests/sim/test_sim_switch.cc holds it to at 1 GiB.
constexpr double kNvlsTol = 0.15;

struct Case {
  Collective coll;
  std::string algo;
  int n;
  std::size_t bytes;
  AlgoParams params;
  int hostsOf;  // ranks per host (flat generator's gpus_per_host), for hierarchical
};

Topology flatWithReduce(int n, int perHost) {
  Topology t = generateTopology(
      "flat", fmt::format(R"({{"n": {}, "bandwidth_GBps": 50, "latency_us": 1, "gpus_per_host": {}}})", n, perHost));
  for (TopoNode& node : t.nodes) {
    if (node.kind == NodeKind::Gpu) node.reduceGBps = 200;
  }
  return t;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::size_t kSizes[] = {4096, (1u << 20) + 12, 64u << 20};
  for (int n : {2, 5, 8}) {
    for (std::size_t b : kSizes) {
      for (const char* a : {"ring", "recursive_doubling", "rabenseifner", "direct"}) {
        out.push_back({Collective::AllReduce, a, n, b, {}, 1});
      }
      out.push_back({Collective::AllReduce, "ring", n, b, AlgoParams{256 * 1024, 2, {}}, 1});
      out.push_back({Collective::AllReduce, "ring_bidir", n, b, {}, 1});
      out.push_back({Collective::AllReduce, "ring_bidir", n, b, AlgoParams{256 * 1024, 2, {}}, 1});
      out.push_back({Collective::AllReduce, "tree", n, b, {}, 1});
      out.push_back({Collective::AllReduce, "tree", n, b, AlgoParams{128 * 1024, 2, {}}, 1});
      out.push_back({Collective::ReduceScatter, "ring", n, b, {}, 1});
      out.push_back({Collective::AllGather, "ring", n, b, {}, 1});
      out.push_back({Collective::Broadcast, "ring", n, b, {}, 1});
      out.push_back({Collective::Reduce, "ring", n, b, AlgoParams{0, 2, {}}, 1});
    }
  }
  out.push_back({Collective::AllReduce, "hierarchical", 8, 1u << 20, {}, 4});
  out.push_back({Collective::AllReduce, "hierarchical", 8, 64u << 20, {}, 2});
  out.push_back({Collective::Barrier, "dissemination", 5, 0, {}, 1});
  return out;
}

class CostModelVsSim : public ::testing::TestWithParam<Case> {};

/// The cost model's and the simulator's time (us) of one f32 collective of `bytes` (per rank for reduce-scatter and
/// all-gather) on `t`.
struct ModelAndSim {
  Estimate model;
  double simUs = 0;
};
ModelAndSim modelAndSim(const Topology& t, const CostModel& model, Collective coll, int n, std::size_t bytes,
                        const std::string& algo, const AlgoParams& p) {
  const std::size_t es = 4;
  const bool perRank = coll == Collective::ReduceScatter || coll == Collective::AllGather;
  const CollectiveSpec spec{coll, n, perRank ? bytes / es / static_cast<std::size_t>(n) : bytes / es, DType::F32};
  ModelAndSim r{model.estimate(spec, algo, p), 0};
  if (r.model.supported) r.simUs = sim::Simulator(t, n).run(buildSchedule(spec, algo, p)).seconds * 1e6;
  return r;
}

TEST_P(CostModelVsSim, FlatTopology) {
  const Case& k = GetParam();
  const Topology t = flatWithReduce(k.n, k.hostsOf);
  const CostModel model(t, k.n);
  AlgoParams p = k.params;
  p.rankHost = model.rankHost();
  const auto [e, simUs] = modelAndSim(t, model, k.coll, k.n, k.bytes, k.algo, p);
  ASSERT_TRUE(e.supported) << e.note;
  const double tol = k.algo == "tree" ? kPipelinedTol : k.algo == "ring_bidir" ? kBidirUnevenBlocksTol : kExactTol;
  EXPECT_NEAR(e.terms.us, simUs, tol * simUs) << "model " << e.terms.us << " us, simulated " << simUs << " us";
}

struct RailCase {
  Collective coll;
  std::string algo;
  int n;
  std::size_t bytes;
  AlgoParams params;
};

std::vector<RailCase> railCases() {
  std::vector<RailCase> out;
  // 12 ranks: 8 + 4 over two hosts (unequal); 16 and 32: two and four full hosts.
  for (int n : {12, 16, 32}) {
    for (std::size_t b : {std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20}) {
      for (const char* a : {"recursive_doubling", "rabenseifner", "direct", "tree"}) {
        out.push_back({Collective::AllReduce, a, n, b, {}});
      }
      out.push_back({Collective::AllReduce, "ring", n, b, {}});
      out.push_back({Collective::AllReduce, "ring", n, b, AlgoParams{0, 4, {}}});
      out.push_back({Collective::AllReduce, "ring", n, b, AlgoParams{2 * 1024 * 1024, 4, {}}});
      out.push_back({Collective::ReduceScatter, "ring", n, b, AlgoParams{0, 4, {}}});
      out.push_back({Collective::AllGather, "ring", n, b, AlgoParams{0, 4, {}}});
      if (n != 12) out.push_back({Collective::AllReduce, "hierarchical", n, b, {}});
    }
  }
  return out;
}

class CostModelVsSimRail : public ::testing::TestWithParam<RailCase> {};

TEST_P(CostModelVsSimRail, MultiHost) {
  const RailCase& k = GetParam();
  const Topology t = loadTopology("h100-4x8-rail");
  const CostModel model(t, k.n);
  AlgoParams p = k.params;
  p.rankHost = rankHosts(t, k.n);  // rings spread over the hosts' GPUs and NICs, as every tool builds them
  const auto [e, simUs] = modelAndSim(t, model, k.coll, k.n, k.bytes, k.algo, p);
  ASSERT_TRUE(e.supported) << e.note;
  const double tol = k.algo == "tree"     ? kMultiHostPipelinedTol
                     : k.algo == "direct" ? kMultiHostDirectTol
                     : p.channels > 1     ? kMultiHostChannelsTol
                                          : kExactTol;
  EXPECT_NEAR(e.terms.us, simUs, tol * simUs) << "model " << e.terms.us << " us, simulated " << simUs << " us";
}

INSTANTIATE_TEST_SUITE_P(H100Rail, CostModelVsSimRail, ::testing::ValuesIn(railCases()), [](const auto& paramInfo) {
  const RailCase& k = paramInfo.param;
  return fmt::format("{}_{}_n{}_{}B_c{}_ch{}", toString(k.coll), k.algo, k.n, k.bytes, k.params.chunkBytes,
                     k.params.channels);
});

INSTANTIATE_TEST_SUITE_P(Flat, CostModelVsSim, ::testing::ValuesIn(cases()), [](const auto& paramInfo) {
  const Case& k = paramInfo.param;
  return fmt::format("{}_{}_n{}_{}B_c{}_ch{}_h{}", toString(k.coll), k.algo, k.n, k.bytes, k.params.chunkBytes,
                     k.params.channels, k.hostsOf);
});

struct GpuCase {
  std::string topology;
  int n;
  std::string algo;
  std::size_t bytes;
};

/// GPU systems: small sizes (NCCL's LL up to 16 KiB per transfer, Simple above) and large ones. Left out, as gaps of
/// the algorithms' own closed forms that the wire rule does not enter (both sides pay the same rule):
/// - sizes below one element per rank on several hosts (ring at 8 B on 16 ranks: the model prices every ring step's
///   block where the simulator elides the 14 empty ones: 112 us vs 35 us);
/// - nvls at 16 MiB and above, where its cost term's pipeline is below the simulated one (no point-to-point flow:
///   only the launch floor, the same on both sides): 69 vs 85 us at 16 MiB on one host, 405 vs 1082 us on two.
std::vector<GpuCase> gpuCases() {
  std::vector<GpuCase> out;
  const std::size_t kSmall[] = {8, 64, 1024, 64 * 1024}, kLarge[] = {std::size_t{16} << 20, std::size_t{128} << 20};
  for (const auto& [topo, n] : {std::pair<std::string, int>{"dgx-h100-8x1", 8}, {"dgx-h100-ib400", 16}}) {
    for (const char* a : {"ring", "tree", "direct", "recursive_doubling", "hierarchical", "nvls"}) {
      for (std::size_t b : kSmall) {
        if (b / 4 >= static_cast<std::size_t>(n)) out.push_back({topo, n, a, b});
      }
      if (std::string(a) == "nvls") continue;
      for (std::size_t b : kLarge) out.push_back({topo, n, a, b});
    }
  }
  // 8 B on one host (2 elements, 8 ranks): the empty blocks cost nothing on either side there.
  for (const char* a : {"ring", "tree", "direct", "recursive_doubling", "nvls"})
    out.push_back({"dgx-h100-8x1", 8, a, 8});
  return out;
}

class CostModelVsSimGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CostModelVsSimGpu, WireRuleOnBothSides) {
  const GpuCase& k = GetParam();
  const Topology t = loadTopology(k.topology);
  const CostModel model(t, k.n);
  AlgoParams p;
  p.rankHost = rankHosts(t, k.n);
  const auto [e, simUs] = modelAndSim(t, model, Collective::AllReduce, k.n, k.bytes, k.algo, p);
  if (!e.supported) {
    // Only NVLS across hosts may be refused (no single switch reduces for all 16 ranks); the simulator agrees.
    ASSERT_EQ(k.algo, "nvls") << e.note;
    ASSERT_GT(k.n, 8);
    return;
  }
  const bool multiHost = k.n > 8;
  // The tree's bound holds each chunk's step latency on its connection: with Simple's 3.4 us per NVLink step its
  // pessimism is the NVSwitch hosts' (h100-4x8-rail's) on one host too: measured 12.9% at 128 MiB on dgx-h100-8x1.
  const double tol = k.algo == "tree"     ? kMultiHostPipelinedTol
                     : k.algo == "direct" ? (multiHost ? kMultiHostDirectTol : kExactTol)
                     : k.algo == "nvls"   ? kNvlsTol
                                          : kExactTol;
  EXPECT_NEAR(e.terms.us, simUs, tol * simUs) << "model " << e.terms.us << " us, simulated " << simUs << " us";
}

INSTANTIATE_TEST_SUITE_P(Gpu, CostModelVsSimGpu, ::testing::ValuesIn(gpuCases()), [](const auto& paramInfo) {
  const GpuCase& k = paramInfo.param;
  std::string topo = k.topology;
  for (char& c : topo) {
    if (c == '-') c = '_';
  }
  return fmt::format("{}_n{}_{}_{}B", topo, k.n, k.algo, k.bytes);
});

/// The selector's regret bound on a GPU system: its choice, simulated, within this of the best collbench algorithm.
constexpr double kSelectorRegretTol = 0.20;

TEST(CostModelVsSim, SelectorOnDgxH100PicksNearTheSimulatedBest) {
  // 8 B .. 512 KiB (x4): where the per-step protocol latency dominates, a many-step algorithm costs what the
  // simulator charges it, so auto's choice is within kSelectorRegretTol of the best algorithm the simulator times.
  const Topology t = loadTopology("dgx-h100-8x1");
  const int n = 8;
  const sim::Simulator simulator(t, n);
  const CostModel model(t, n);
  const std::vector<int> hosts = rankHosts(t, n);
  for (std::size_t bytes = 8; bytes <= (std::size_t{512} << 10); bytes *= 4) {
    SCOPED_TRACE(bytes);
    const CollectiveSpec spec{Collective::AllReduce, n, bytes / 4, DType::F32};
    const Choice c = chooseAlgorithm(spec, SelectorOptions{&t, nullptr, "sim", "auto", ""});
    const double chosen =
        simulator.runAlgorithm(spec, c.algorithm, AlgoParams{c.chunkBytes, c.channels, hosts}).seconds;
    double best = std::numeric_limits<double>::infinity();
    std::string bestName;
    for (const AlgorithmInfo& a : algorithms()) {
      if (a.collective != Collective::AllReduce || a.native || !a.traits.admits(n)) continue;
      const AlgoParams p{0, 1, hosts};
      if (!model.estimate(spec, a.name, p).supported) continue;
      const double simulated = simulator.runAlgorithm(spec, a.name, p).seconds;
      if (simulated < best) {
        best = simulated;
        bestName = a.name;
      }
    }
    EXPECT_LE(chosen, (1 + kSelectorRegretTol) * best)
        << "auto chose " << c.algorithm << " (" << chosen * 1e6 << " us simulated), best " << bestName << " ("
        << best * 1e6 << " us)";
  }
}

TEST(CostModelVsSim, CpuTopologiesPayNoWireTerms) {
  // Ranks that are not GPUs of a known arch: no protocol latency, no wire bytes, no floor (the plain alpha-beta
  // estimate); the same GPU system with its arch cleared prices the same ring without them.
  Topology t = loadTopology("dgx-h100-8x1");
  const CollectiveSpec spec{Collective::AllReduce, 8, 256, DType::F32};
  const double withWire = CostModel(t, 8).estimate(spec, "ring").terms.us;
  for (TopoNode& node : t.nodes) node.arch.clear();
  const CostModel plain(t, 8);
  const double without = plain.estimate(spec, "ring").terms.us;
  const double simulated = sim::Simulator(t, 8).runAlgorithm(spec, "ring").seconds * 1e6;
  EXPECT_NEAR(without, simulated, kExactTol * simulated);
  // 14 LL transfers of 128 B at NCCL's NVLink step latency, and LL's launch floor, on top.
  EXPECT_GT(withWire, without + ncclBaseLatencyUs(NcclAlgorithm::Ring, NcclProtocol::LL));
}

TEST(CostModelVsSim, MemoryTiersApplyPerCall) {
  // The simulator runs each call on its tier's rates, as the model does: ring on one host of 4 ranks, below and
  // above the 4 MiB working-set bound.
  Topology t = classTopology("tiers", 1, 4, {true, 2.0, 10.0}, {}, 25.0, NodeKind::Cpu);
  t.memoryTiers = {{std::size_t{4} << 20, 1.0}, {0, 0.3}};
  const CostModel m(t, 4);
  const sim::Simulator s(t, 4);
  Topology untiered = t;
  untiered.memoryTiers.clear();
  const CostModel plain(untiered, 4);
  for (std::size_t bytes : {std::size_t{256} << 10, std::size_t{1} << 20}) {
    const CollectiveSpec spec{Collective::AllReduce, 4, bytes / 4, DType::F32};
    const double model = m.estimate(spec, "ring").terms.us;
    const double simulated = s.runAlgorithm(spec, "ring").seconds * 1e6;
    EXPECT_NEAR(simulated, model, kExactTol * model) << bytes;
    // Below the bound the plain rates; above it, 0.3x of them: well over twice the untiered time.
    const double untieredUs = plain.estimate(spec, "ring").terms.us;
    if (bytes < (std::size_t{1} << 20)) {
      EXPECT_NEAR(simulated, untieredUs, kExactTol * untieredUs);
    } else {
      EXPECT_GT(simulated, 2.5 * untieredUs);
    }
  }
}

}  // namespace
}  // namespace collbench
