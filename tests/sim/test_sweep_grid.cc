// `collbench sweep` as a library (simulator/sweep.h): the grid's order, its checks before any simulation, and rows
// from worker processes and from shards equal to one process's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/tuning.h"
#include "error_of.h"
#include "sweep.h"

namespace collbench::sim {
namespace {

using testing::errorOf;

SweepRequest smallRequest() {
  SweepRequest r;
  r.topologies = {"dgx-h100-8x1"};
  r.sets = {"", "link.nvlink.bandwidth_GBps=100"};
  r.ranks = {2, kAllRanks};
  r.sizes = {1 << 10, 1 << 20};
  r.algorithms = {"ring", "tree"};
  return r;
}

/// A row without the host's wall and CPU seconds (they differ from run to run).
SweepRow timeless(SweepRow r) {
  r.wall = r.cpu = 0;
  return r;
}

TEST(SweepGrid, OrderIsVariantsThenRanksThenSizesThenAlgorithms) {
  const SweepGrid g(smallRequest());
  ASSERT_EQ(g.variants().size(), 2u);
  EXPECT_EQ(g.variants()[1].overrides, "link.nvlink.bandwidth_GBps=100");
  EXPECT_EQ(g.variants()[0].ranks, (std::vector<int>{2, 8}));  // `all` is the topology's 8
  ASSERT_EQ(g.points().size(), 2u * 2u * 2u * 2u);
  const SweepPoint& p = g.points()[5];  // variant 0, 8 ranks, 1 KiB, tree
  EXPECT_EQ(p.variant, 0u);
  EXPECT_EQ(p.nranks, 8);
  EXPECT_EQ(p.bytes, 1u << 10);
  EXPECT_EQ(p.algorithm, "tree");
  EXPECT_EQ(g.points()[8].variant, 1u);
}

TEST(SweepGrid, ChecksRanksBeforeAnySimulation) {
  SweepRequest r = smallRequest();
  r.ranks = {9};
  EXPECT_EQ(errorOf([&] { SweepGrid g(r); }), "-g/--ranks 9: topology 'dgx-h100-8x1' has 8 ranks (use 1..8 or all)");
  r = smallRequest();
  r.collective = Collective::Barrier;
  EXPECT_EQ(errorOf([&] { SweepGrid g(r); }), "sweep does not time barrier (no bytes)");
}

// `auto` chooses on each variant's topology, as `sim --algo auto` does (planCall with the topology's shipped table and
// cost model): the row holds that choice and the simulator's time for it with its configuration, and a variant with
// slower NVLink is chosen for on its own links.
TEST(SweepGrid, AutoChoosesOnEachVariantsTopology) {
  registerSimBackend();  // the backend NCCL's choice competes on
  SweepRequest r = smallRequest();
  r.ranks = {kAllRanks};
  r.sizes = {8, std::size_t{1} << 30};
  r.algorithms = {"auto"};
  SweepGrid g(r);
  for (std::size_t i = 0; i < g.points().size(); ++i) {
    const SweepPoint& p = g.points()[i];
    const SweepVariant& v = g.variants()[p.variant];
    const SweepRow row = g.run(i);
    const CollectiveSpec spec{Collective::AllReduce, p.nranks, p.bytes / 4, DType::F32};
    const FoundTuningTable found = findTuningTable("", &v.topology, "sim");
    const Selector selector(
        SelectorOptions{&v.topology, found.table ? &*found.table : nullptr, "sim", "auto", found.path});
    const Plan plan = planCall(selector, spec, CallConfig{}, rankHosts(v.topology, p.nranks));
    EXPECT_EQ(row.algorithm, plan.choice.algorithm) << v.overrides << " " << p.bytes;
    const SimResult want = Simulator(v.topology, p.nranks).runAlgorithm(spec, plan.choice.algorithm, plan.params);
    EXPECT_DOUBLE_EQ(row.timeUs, want.seconds * 1e6) << v.overrides << " " << p.bytes;
  }
  // NCCL's NVLS at 1 GiB on the shipped DGX: not a flat network's Rabenseifner.
  EXPECT_EQ(g.run(1).algorithm, "nccl");
}

TEST(SweepGrid, WorkersAndShardsGiveTheOneProcessRows) {
  SweepGrid g(smallRequest());
  const std::vector<SweepRow> one = runSweep(g, SweepControl{1, {}});
  ASSERT_EQ(one.size(), g.points().size());
  // 8 ranks of NVSwitch at 100 GB/s instead of 450: the same ring is slower.
  EXPECT_GT(one[8 + 6].timeUs, one[6].timeUs);
  const std::vector<SweepRow> two = runSweep(g, SweepControl{2, {}});
  ASSERT_EQ(two.size(), one.size());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(timeless(two[i]), timeless(one[i])) << i;
  std::vector<SweepRow> joined;
  for (int k = 1; k <= 3; ++k) {
    for (const SweepRow& r : runSweep(g, SweepControl{2, Shard{k, 3}})) joined.push_back(r);
  }
  ASSERT_EQ(joined.size(), one.size());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(timeless(joined[i]), timeless(one[i])) << i;
}

}  // namespace
}  // namespace collbench::sim
