// `--algo nccl --mode exact`: NCCL 2.28's choice simulated through the IR (the registered algorithm of its pattern
// with its channels, protocol and chunk) against the NCCL time model (method "nccl-model"), which was fitted on real
// nccl-tests tables. At bandwidth-bound sizes, where both are the links' rates, they must agree within 15 %.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

sim::SimConfig ncclConfig(sim::SimMode mode, const std::map<std::string, std::string>& env) {
  sim::SimConfig cfg;
  cfg.mode = mode;
  cfg.ncclEnv = parseNcclEnv(env);
  return cfg;
}

struct SystemCase {
  const char* topology;
  int ranks;
  std::vector<std::size_t> sizes;
};

class NcclExactVsModel : public ::testing::TestWithParam<SystemCase> {};

TEST_P(NcclExactVsModel, ForcedRingAgreesWithinFifteenPercentAtLargeSizes) {
  const SystemCase& c = GetParam();
  const Topology t = loadTopology(c.topology);
  const std::map<std::string, std::string> ring = {{"NCCL_ALGO", "Ring"}};
  const sim::Simulator model(t, c.ranks, ncclConfig(sim::SimMode::Auto, ring));
  const sim::Simulator exact(t, c.ranks, ncclConfig(sim::SimMode::Exact, ring));
  for (const std::size_t bytes : c.sizes) {
    SCOPED_TRACE(bytes);
    const CollectiveSpec spec{Collective::AllReduce, c.ranks,
                              countForBytes(Collective::AllReduce, c.ranks, bytes, DType::F32), DType::F32};
    const sim::SimResult m = model.runAlgorithm(spec, "nccl");
    const sim::SimResult e = exact.runAlgorithm(spec, "nccl");
    EXPECT_EQ(m.method, "nccl-model");
    EXPECT_NE(e.method, "nccl-model");
    EXPECT_EQ(e.note.rfind("NCCL 2.28: Ring/Simple", 0), 0u) << e.note;
    EXPECT_NE(e.note.find("simulated as ring"), std::string::npos) << e.note;
    EXPECT_NEAR(e.seconds, m.seconds, 0.15 * m.seconds)
        << "exact " << e.seconds * 1e6 << " us, model " << m.seconds * 1e6 << " us; " << e.note;
  }
}

INSTANTIATE_TEST_SUITE_P(Systems, NcclExactVsModel,
                         // dgx-h100-ib400 at 256 MiB is 17 % apart: each ring step of the schedule stores and
                         // forwards a whole 1 MiB block (NCCL forwards 512 KiB steps as they arrive) and pays the 14
                         // us network step latency on all 30 steps; the schedule pipelines no finer than its chunk.
                         // aws-p5's 16 rings cross the network through each GPU's four EFA NICs, which
                         // aws-ofi-nccl stripes (topologies/README.md): through one of them they ran 7x slower.
                         ::testing::Values(SystemCase{"dgx-h100-8x1", 8, {256u << 20, 512u << 20, 1u << 30}},
                                           SystemCase{"dgx-h100-ib400", 16, {512u << 20, 1u << 30}},
                                           SystemCase{"aws-p5", 16, {1u << 30, 2u << 30}}),
                         [](const auto& p) {
                           std::string name = p.param.topology;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return p.param.ranks == 8 ? name : name + "_" + std::to_string(p.param.ranks);
                         });

// The choice runs as the registered algorithm of its pattern with the choice's channels, protocol and chunk:
// NCCL_PROTO=LL forces Ring/LL, which times exactly as the ring schedule with those parameters.
TEST(NcclExact, ChoiceRunsAsItsScheduleWithItsProtocol) {
  const Topology t = loadTopology("dgx-h100-8x1");
  const CollectiveSpec spec{Collective::AllReduce, 8, (std::size_t{4} << 20) / 4, DType::F32};
  for (const char* proto : {"LL", "LL128", "Simple"}) {
    SCOPED_TRACE(proto);
    const sim::Simulator exact(t, 8, ncclConfig(sim::SimMode::Exact, {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", proto}}));
    const NcclChoice choice = exact.ncclChoice(spec);
    ASSERT_EQ(choice.algorithm, NcclAlgorithm::Ring);
    ASSERT_EQ(toString(choice.protocol), proto);
    const sim::SimResult r = exact.runAlgorithm(spec, "nccl");
    EXPECT_EQ(r.note.rfind(ncclChoiceSummary(choice) + ", simulated as ring", 0), 0u) << r.note;
    AlgoParams p;
    p.channels = choice.channels;
    p.chunkBytes = choice.chunkBytes;
    p.protocol = parseProtocol(proto);
    p.rankHost = rankHosts(t, 8);
    const sim::SimResult direct = sim::Simulator(t, 8).runAlgorithm(spec, "ring", p);
    EXPECT_EQ(r.seconds, direct.seconds);
    EXPECT_EQ(r.method, direct.method);
  }
}

// A choice whose pattern collbench does not generate is refused, naming the algorithm it would need.
TEST(NcclExact, UnregisteredPatternIsUnsupportedNamingIt) {
  const std::vector<std::string> names = algorithmNames(Collective::AllReduce);
  if (std::find(names.begin(), names.end(), "nvls_tree") != names.end()) {
    GTEST_SKIP() << "nvls_tree is registered: NVLSTree runs as a schedule";
  }
  const Topology t = loadTopology("dgx-h100-ib400");
  const CollectiveSpec spec{Collective::AllReduce, 16, (std::size_t{1} << 30) / 4, DType::F32};
  try {
    sim::Simulator(t, 16, ncclConfig(sim::SimMode::Exact, {{"NCCL_ALGO", "NVLSTree"}})).runAlgorithm(spec, "nccl");
    FAIL() << "NVLSTree ran without a generator";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_NE(std::string(e.what()).find("no algorithm 'nvls_tree' for all_reduce"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collbench
