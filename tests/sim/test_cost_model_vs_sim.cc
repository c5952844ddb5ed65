// The cost model against the simulator on flat topologies (issue #11): the closed forms equal simulated times for
// the step algorithms (ring, recursive doubling, Rabenseifner, direct, hierarchical, reduce-scatter, all-gather,
// chains) and stay within kPipelinedTol for the pipelined double binary tree. This suite only builds with the
// simulator (tests/CMakeLists.txt builds tests/sim only when collbench_sim exists).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
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

TEST_P(CostModelVsSim, FlatTopology) {
  const Case& k = GetParam();
  const Topology t = flatWithReduce(k.n, k.hostsOf);
  const CostModel model(t, k.n);
  AlgoParams p = k.params;
  p.rankHost = model.rankHost();
  const std::size_t es = 4;
  const bool perRank = k.coll == Collective::ReduceScatter || k.coll == Collective::AllGather;
  const CollectiveSpec spec{k.coll, k.n, perRank ? k.bytes / es / k.n : k.bytes / es, DType::F32};
  const Estimate e = model.estimate(spec, k.algo, p);
  ASSERT_TRUE(e.supported) << e.note;
  const sim::Simulator s(t, k.n);
  const double simUs = s.run(buildSchedule(spec, k.algo, p)).seconds * 1e6;
  const double tol = k.algo == "tree" ? kPipelinedTol : kExactTol;
  EXPECT_NEAR(e.terms.us, simUs, tol * simUs) << "model " << e.terms.us << " us, simulated " << simUs << " us";
}

INSTANTIATE_TEST_SUITE_P(Flat, CostModelVsSim, ::testing::ValuesIn(cases()), [](const auto& paramInfo) {
  const Case& k = paramInfo.param;
  return fmt::format("{}_{}_n{}_{}B_c{}_ch{}_h{}", toString(k.coll), k.algo, k.n, k.bytes, k.params.chunkBytes,
                     k.params.channels, k.hostsOf);
});

}  // namespace
}  // namespace collbench
