// Every generator builds a valid schedule (matching, bounds, no deadlock, no races, in place and out of place)
// for ranks 1..17 and awkward element counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "algo_params_for_tests.h"
#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/validator.h"

// Internal to core/algorithms (tree shape helpers).
namespace collbench::algo {
int btreeParent(int n, int rank);
int dtreeParent(int n, int rank, int tree);
}  // namespace collbench::algo

namespace collbench {
namespace {

struct Case {
  const AlgorithmInfo* algo;
  int nranks;
  std::size_t count;
  AlgoParams params;
};

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const auto& a : algorithms()) {
    if (a.native) continue;
    for (int n = 1; n <= 17; ++n) {
      for (std::size_t count : {0u, 1u, 7u, 1000u, 65537u}) {
        cases.push_back({&a, n, count, {}});
      }
      // Pipelining and channels: small chunks force many rounds.
      cases.push_back({&a, n, 1000, AlgoParams{64, 3, {}}});
    }
  }
  return cases;
}

class GeneratorTest : public ::testing::TestWithParam<Case> {};

TEST_P(GeneratorTest, ValidInAndOutOfPlace) {
  const Case& c = GetParam();
  CollectiveSpec spec{c.algo->collective, c.nranks,      c.algo->collective == Collective::Barrier ? 0 : c.count,
                      DType::F32,         ReduceOp::Sum, c.nranks - 1};
  const Schedule s = buildSchedule(spec, c.algo->name, testing::paramsFor(c.algo->name, c.nranks, c.params));
  ASSERT_EQ(static_cast<int>(s.ranks.size()), c.nranks);
  EXPECT_NO_THROW(validate(s, {false}));
  EXPECT_NO_THROW(validate(s, {true}));
}

INSTANTIATE_TEST_SUITE_P(All, GeneratorTest, ::testing::ValuesIn(allCases()), [](const auto& paramInfo) {
  const Case& c = paramInfo.param;
  return fmt::format("{}_{}_n{}_c{}_ch{}_k{}", toString(c.algo->collective), c.algo->name, c.nranks, c.count,
                     c.params.channels, c.params.chunkBytes);
});

TEST(Generators, RingAllReduceMovesTheOptimalVolume) {
  // Each rank sends 2(n-1)/n of the buffer: the bandwidth lower bound.
  const int n = 5;
  const std::size_t count = 1000;
  const Schedule s = buildSchedule({Collective::AllReduce, n, count, DType::F32}, "ring");
  for (const auto& r : s.ranks) {
    std::size_t sent = 0;
    for (const auto& op : r.ops) sent += op.kind == OpKind::Send ? op.bytes : 0;
    EXPECT_EQ(sent, 2 * (n - 1) * count * 4 / n);
  }
}

TEST(Generators, DoubleBinaryTreeShapeMatchesNccl) {
  // NCCL's btree on 14 ranks (trees.cc illustration): 0 <- 8, 8 <- 4 and 12, 4 <- 2 and 6, 12 <- 10 and 13.
  EXPECT_EQ(algo::btreeParent(14, 0), -1);
  EXPECT_EQ(algo::btreeParent(14, 8), 0);
  EXPECT_EQ(algo::btreeParent(14, 4), 8);
  EXPECT_EQ(algo::btreeParent(14, 12), 8);
  EXPECT_EQ(algo::btreeParent(14, 13), 12);
  EXPECT_EQ(algo::btreeParent(14, 10), 12);
  EXPECT_EQ(algo::btreeParent(14, 1), 2);
  EXPECT_EQ(algo::btreeParent(14, 3), 2);
  // Tree 1 mirrors tree 0 for even n: the root of tree 1 is n-1.
  EXPECT_EQ(algo::dtreeParent(14, 13, 1), -1);
  EXPECT_EQ(algo::dtreeParent(14, 5, 1), 13);
  // For odd n it shifts by one: root 1.
  EXPECT_EQ(algo::dtreeParent(13, 1, 1), -1);
}

TEST(Generators, HierarchicalNeedsEqualHosts) {
  AlgoParams p;
  p.rankHost = {0, 0, 1};
  try {
    buildSchedule({Collective::AllReduce, 3, 8, DType::F32}, "hierarchical", p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same number of ranks on every host"), std::string::npos) << e.what();
  }
  try {
    buildSchedule({Collective::AllReduce, 3, 8, DType::F32}, "hierarchical");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the host of each of the 3 ranks"), std::string::npos) << e.what();
  }
}

TEST(Generators, HierarchicalKeepsInterHostTrafficSmall) {
  // 2 hosts x 4 ranks: each rank sends 2(H-1)/(H L) = 1/4 of the buffer across hosts, versus up to 2(n-1)/n on a
  // flat ring whose every link may cross hosts.
  AlgoParams p;
  p.rankHost = {0, 0, 0, 0, 1, 1, 1, 1};
  const std::size_t count = 8000;
  const Schedule s = buildSchedule({Collective::AllReduce, 8, count, DType::F32}, "hierarchical", p);
  for (int r = 0; r < 8; ++r) {
    std::size_t cross = 0;
    for (const auto& op : s.ranks[static_cast<std::size_t>(r)].ops) {
      if (op.kind == OpKind::Send &&
          p.rankHost[static_cast<std::size_t>(op.peer)] != p.rankHost[static_cast<std::size_t>(r)])
        cross += op.bytes;
    }
    EXPECT_EQ(cross, count * 4 / 4) << r;
  }
}

TEST(Generators, TreeOnHostsIsNcclsHostTreeWithChains) {
  // 3 hosts x 4 ranks, 4 channels: NCCL's tree joins hosts by a double binary tree and chains each host's ranks; the
  // chain of channel c starts at local index c, which alone talks to other hosts, to the same local index there.
  AlgoParams p{0, 4, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}};
  const Schedule s = buildSchedule({Collective::AllReduce, 12, 4096, DType::F32}, "tree", p);
  auto mod4 = [](int x) { return (x % 4 + 4) % 4; };
  std::size_t cross = 0;
  for (int r = 0; r < 12; ++r) {
    std::map<int, std::set<int>> intraPeers;  // channel -> peers on the rank's host
    for (const auto& op : s.ranks[static_cast<std::size_t>(r)].ops) {
      if (!op.isComm()) continue;
      const int c = op.channel % 4;
      if (op.peer / 4 != r / 4) {
        ++cross;
        EXPECT_EQ(r % 4, c) << "rank " << r << " channel " << op.channel;
        EXPECT_EQ(op.peer % 4, c) << "rank " << r << " channel " << op.channel;
      } else {
        intraPeers[op.channel].insert(op.peer);
        // A chain: the neighbours of local index i are i - 1 and i + 1 counted from the channel's start.
        EXPECT_EQ(std::abs(mod4(r - c) - mod4(op.peer - c)), 1) << "rank " << r << " peer " << op.peer;
      }
    }
    for (const auto& [channel, peers] : intraPeers) EXPECT_LE(peers.size(), 2u) << "rank " << r;
  }
  EXPECT_GT(cross, 0u);
  // Without hosts the shape is the double binary tree over ranks, whatever the channel.
  const Schedule flat = buildSchedule({Collective::AllReduce, 12, 4096, DType::F32}, "tree", AlgoParams{0, 4, {}});
  for (const auto& op : flat.ranks[5].ops) {
    if (!op.isComm()) continue;
    const int tree = op.channel / 4;
    EXPECT_TRUE(op.peer == algo::dtreeParent(12, 5, tree) || algo::dtreeParent(12, op.peer, tree) == 5) << op.peer;
  }
}

TEST(Generators, TreeTripIsItsDeepestPathUpAndDown) {
  const auto trip = findAlgorithm(Collective::AllReduce, "tree").traits.pipelineTrip;
  ASSERT_NE(trip, nullptr);
  // NCCL's btree on 14 ranks: 1 -> 2 -> 4 -> 8 -> 0 is the deepest path (tree 1 mirrors it).
  EXPECT_EQ(trip({Collective::AllReduce, 14, 4096, DType::F32}, AlgoParams{}), 8u);
  // 2 hosts x 4 ranks: host 1's chain (3 hops) under host 0's first rank (1 hop), with 1 or 4 channels.
  for (int channels : {1, 4}) {
    AlgoParams p{0, channels, {0, 0, 0, 0, 1, 1, 1, 1}};
    EXPECT_EQ(trip({Collective::AllReduce, 8, 4096, DType::F32}, p), 8u) << channels;
  }
  // No pipeline across ranks, no trip.
  EXPECT_EQ(trip({Collective::AllReduce, 1, 4096, DType::F32}, AlgoParams{}), 0u);
}

TEST(Generators, RingChannelsRotateOverHosts) {
  AlgoParams p;
  EXPECT_EQ(ringOrder(4, p, 3), (std::vector<int>{0, 1, 2, 3}));  // no hosts given: rank order
  p.rankHost = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
  for (int c = 0; c < 4; ++c) {
    const std::vector<int> ring = ringOrder(12, p, c);
    std::vector<int> sorted = ring;
    std::sort(sorted.begin(), sorted.end());
    for (int r = 0; r < 12; ++r) EXPECT_EQ(sorted[static_cast<std::size_t>(r)], r);  // a permutation
    for (int h = 0; h < 3; ++h) {
      // Host h keeps its ranks together and starts at local index (c - h) mod 4 ...
      EXPECT_EQ(ring[static_cast<std::size_t>(4 * h)], 4 * h + ((c - h) % 4 + 4) % 4) << "channel " << c;
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(p.rankHost[static_cast<std::size_t>(ring[static_cast<std::size_t>(4 * h + i)])], h);
    }
    // ... so it is left from the local index the next host is entered at (the same rail), except at the wrap.
    EXPECT_EQ(ring[3] % 4, ring[4] % 4);
    EXPECT_EQ(ring[7] % 4, ring[8] % 4);
  }
  // The exits of host 0 differ between channels: channels use different GPUs and NICs for inter-host hops.
  std::set<int> exits;
  for (int c = 0; c < 4; ++c) exits.insert(ringOrder(12, p, c)[3]);
  EXPECT_EQ(exits.size(), 4u);
}

TEST(Generators, RingBidirSendsHalfEachWay) {
  // Two counter-rotating rings per channel: every rank sends to both neighbours, each half of the ring's volume,
  // the forward ring on even channels and the reversed one on odd channels.
  const int n = 5;
  const std::size_t count = 1000;
  const Schedule s = buildSchedule({Collective::AllReduce, n, count, DType::F32}, "ring_bidir", AlgoParams{0, 2, {}});
  for (int r = 0; r < n; ++r) {
    std::size_t toNext = 0, toPrev = 0;
    for (const auto& op : s.ranks[static_cast<std::size_t>(r)].ops) {
      if (op.kind != OpKind::Send) continue;
      EXPECT_EQ(op.peer == (r + 1) % n, op.channel % 2 == 0) << "rank " << r << " channel " << op.channel;
      (op.peer == (r + 1) % n ? toNext : toPrev) += op.bytes;
    }
    EXPECT_EQ(toNext, (n - 1) * count * 4 / n) << r;
    EXPECT_EQ(toPrev, (n - 1) * count * 4 / n) << r;
  }
}

TEST(Registry, TransferEstimatesBoundTheSchedules) {
  // The simulator sizes its method by AlgorithmTraits::transfers before building anything: it must not undercount.
  for (const auto& a : algorithms()) {
    if (a.native) continue;
    for (int n : {1, 2, 5, 8, 12}) {
      for (const AlgoParams& p : {AlgoParams{}, AlgoParams{64, 3, {}}}) {
        const CollectiveSpec spec{a.collective, n, a.collective == Collective::Barrier ? 0u : 65537u, DType::F32};
        const AlgoParams params = testing::paramsFor(a.name, n, p);
        const Schedule s = buildSchedule(spec, a.name, params);
        std::size_t sends = 0;
        for (const auto& r : s.ranks) {
          for (const auto& op : r.ops) sends += op.kind == OpKind::Send ? 1 : 0;
        }
        EXPECT_LE(sends, estimateTransfers(a, spec, params)) << a.name << " " << toString(a.collective) << " n=" << n;
      }
    }
  }
}

TEST(Registry, TraitsAnswerWhatCallersAsked) {
  // What the simulator, tuner and selector used to decide by name, now read from the traits.
  const AlgorithmInfo& tree = findAlgorithm(Collective::AllReduce, "tree");
  EXPECT_EQ(tree.traits.pipelineSlices, 2);
  EXPECT_EQ(findAlgorithm(Collective::Broadcast, "ring").traits.pipelineSlices, 1);
  EXPECT_EQ(findAlgorithm(Collective::AllReduce, "ring").traits.pipelineSlices, 0);
  EXPECT_TRUE(findAlgorithm(Collective::AllReduce, "ring").traits.simRingModel);
  EXPECT_FALSE(findAlgorithm(Collective::ReduceScatter, "ring").traits.simRingModel);
  EXPECT_TRUE(findAlgorithm(Collective::AllReduce, "hierarchical").traits.needsHosts);
  EXPECT_FALSE(findAlgorithm(Collective::AllReduce, "direct").traits.defaultModel);
  EXPECT_FALSE(findAlgorithm(Collective::AllReduce, "recursive_doubling").traits.usesChannels);
  EXPECT_TRUE(findAlgorithm(Collective::AllGather, "ring").traits.usesChunkBytes);
  for (const auto& a : algorithms()) EXPECT_EQ(a.cost == nullptr, a.native) << a.name;
  AlgorithmTraits pow2;
  pow2.minRanks = 2;
  pow2.maxRanks = 64;
  pow2.powerOfTwo = true;
  EXPECT_FALSE(pow2.admits(1));
  EXPECT_TRUE(pow2.admits(2));
  EXPECT_FALSE(pow2.admits(12));
  EXPECT_TRUE(pow2.admits(64));
  EXPECT_FALSE(pow2.admits(128));
}

TEST(Generators, RejectsBadSpecs) {
  EXPECT_THROW(buildSchedule({Collective::AllReduce, 0, 4, DType::F32}, "ring"), Error);
  try {
    buildSchedule({Collective::Broadcast, 4, 4, DType::F32, ReduceOp::Sum, 4}, "ring");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("root 4 is not a rank of 4"), std::string::npos) << e.what();
  }
  try {
    buildSchedule({Collective::AllReduce, 4, 4, DType::F32}, "bogus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown algorithm 'bogus' for all_reduce (available: ring, tree"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace collbench
