// Cost model: closed forms on flat(n, B, L) derived from the generators (not from the model's code), the class
// decomposition that calibration fits, class topologies, unsupported cases, scale, and NCCL's tuning model.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>

#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

constexpr double kB = 50;          // GB/s per link
constexpr double kL = 1;           // us per link
constexpr double kG = 200;         // reduce GB/s
constexpr double kAlpha = 2 * kL;  // two links rank -> switch -> rank
double beta(double bytes) { return bytes / (kB * 1e3); }
double gamma(double bytes) { return bytes / (kG * 1e3); }

Topology flat(int n) {
  Topology t = flatTopology(n, kB, kL);
  for (TopoNode& node : t.nodes) {
    if (node.kind == NodeKind::Gpu) node.reduceGBps = kG;
  }
  return t;
}

double us(const CostModel& m, Collective c, std::size_t count, const std::string& a, AlgoParams p = {}) {
  const Estimate e = m.estimate(CollectiveSpec{c, m.nranks(), count, DType::F32}, a, p);
  EXPECT_TRUE(e.supported) << e.note;
  return e.terms.us;
}

TEST(CostModel, RingClosedForm) {
  for (int n : {2, 3, 8, 13}) {
    const CostModel m(flat(n), n);
    for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20}) {
      // 2(n-1) steps of one block (the largest: ceil(count/n) elements), the first n-1 folded on arrival.
      const double b = static_cast<double>((count + n - 1) / n * 4);
      const double want = 2.0 * (n - 1) * (kAlpha + beta(b)) + (n - 1) * gamma(b);
      EXPECT_NEAR(us(m, Collective::AllReduce, count, "ring"), want, 1e-9 * want) << n << " " << count;
      // Channels share the links: the same time up to the rounding of blocks per channel.
      EXPECT_NEAR(us(m, Collective::AllReduce, count, "ring", AlgoParams{0, 4, {}}), want, 0.05 * want);
    }
  }
}

TEST(CostModel, RingBidirIsTheRingOnTwiceTheChannelsOnOneSwitch) {
  // On a flat switch the reversed ring loads every port like the forward one: C channels of both rings cost what the
  // ring costs on 2C channels (ring_bidir.cc's pieces are the ring's on 2C channels).
  for (int n : {2, 3, 8}) {
    const CostModel m(flat(n), n);
    for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20}) {
      for (const AlgoParams& p : {AlgoParams{}, AlgoParams{64 * 1024, 2, {}}}) {
        AlgoParams twice = p;
        twice.channels = 2 * p.channels;
        const double ring = us(m, Collective::AllReduce, count, "ring", twice);
        EXPECT_NEAR(us(m, Collective::AllReduce, count, "ring_bidir", p), ring, 1e-9 * ring) << n << " " << count;
      }
    }
  }
}

TEST(CostModel, MemoryTierScalesIntraHostRatesByWorkingSet) {
  // One host of 4 ranks, 2 us / 10 GB/s routes, free reductions; calls above 4 MiB of working set (4 ranks x input +
  // output) move at half the rate: ring = 2(n-1) (alpha + block / (beta x scale)).
  Topology t = classTopology("tiers", 1, 4, {true, 2.0, 10.0}, {}, 0.0, NodeKind::Cpu);
  t.memoryTiers = {{std::size_t{4} << 20, 1.0}, {0, 0.5}};
  const CostModel m(t, 4);
  for (std::size_t bytes : {std::size_t{256} << 10, std::size_t{1} << 20}) {
    const double scale = 4 * 2 * bytes <= (std::size_t{4} << 20) ? 1.0 : 0.5;
    const double want = 6 * (2.0 + static_cast<double>(bytes / 4) / (10e3 * scale));
    EXPECT_NEAR(us(m, Collective::AllReduce, bytes / 4, "ring"), want, 1e-9 * want) << bytes;
  }
}

TEST(CostModel, RecursiveDoublingAndDirectClosedForms) {
  const std::size_t count = 1 << 18;
  const double S = count * 4.0;
  for (int n : {4, 8, 16}) {  // powers of two: log2(n) exchanges of the whole buffer, each folded
    const CostModel m(flat(n), n);
    const double steps = std::countr_zero(static_cast<unsigned>(n));
    const double want = gamma(S) + steps * (kAlpha + beta(S) + gamma(S));
    EXPECT_NEAR(us(m, Collective::AllReduce, count, "recursive_doubling"), want, 1e-9 * want);
    // Direct: n-1 blocks leave each rank at once over its one link, are folded one by one, then gathered.
    const double blk = S / n;
    const double direct = (kAlpha + beta((n - 1) * blk)) + (n - 1) * gamma(blk) + (kAlpha + beta((n - 1) * blk));
    EXPECT_NEAR(us(m, Collective::AllReduce, count, "direct"), direct, 1e-9 * direct);
  }
}

TEST(CostModel, ReduceScatterAllGatherBroadcastBarrier) {
  const int n = 4;
  const CostModel m(flat(n), n);
  const std::size_t count = 4096;  // per rank
  const double b = count * 4.0;
  EXPECT_NEAR(us(m, Collective::ReduceScatter, count, "ring"), (n - 1) * (kAlpha + beta(b) + gamma(b)), 1e-9);
  EXPECT_NEAR(us(m, Collective::AllGather, count, "ring"), (n - 1) * (kAlpha + beta(b)), 1e-9);
  // Broadcast of one chunk: n-1 hops along the chain.
  EXPECT_NEAR(us(m, Collective::Broadcast, count, "ring"), (n - 1) * (kAlpha + beta(b)), 1e-9);
  // ceil(log2 n) rounds of empty messages.
  EXPECT_NEAR(us(m, Collective::Barrier, 0, "dissemination"), 2 * kAlpha, 1e-12);
  // Pipelined broadcast: fill + (chunks - 1) periods.
  const std::size_t big = 8 * (512 * 1024 / 4);
  const double c = 512 * 1024;
  EXPECT_NEAR(us(m, Collective::Broadcast, big, "ring"), (n - 1 + 7) * (kAlpha + beta(c)), 1e-6);
}

TEST(CostModel, TermsDecomposeIntoClassParameters) {
  // On a class topology every route of a class has the class's alpha and beta: us == sum of terms x parameters.
  const LinkClassCost intra{true, 2, 100}, inter{true, 7, 20};
  const double g = 300;
  const CostModel m(classTopology("t", 3, 4, intra, inter, g), 12);
  EXPECT_EQ(m.summary().hosts, 3);
  EXPECT_EQ(m.summary().ranksPerHost, 4);
  EXPECT_NEAR(m.summary().cls[0].alphaUs, 2, 1e-12);
  EXPECT_NEAR(m.summary().cls[1].betaGBps, 20, 1e-12);
  for (const char* a : {"ring", "tree", "recursive_doubling", "rabenseifner", "direct", "hierarchical"}) {
    for (std::size_t count : {std::size_t{64}, std::size_t{1} << 16, std::size_t{1} << 22}) {
      const Estimate e = m.estimate(CollectiveSpec{Collective::AllReduce, 12, count, DType::F32}, a);
      ASSERT_TRUE(e.supported) << a;
      const CostTerms& t = e.terms;
      const double sum = t.alphaCount[0] * intra.alphaUs + t.alphaCount[1] * inter.alphaUs +
                         t.betaBytes[0] / (intra.betaGBps * 1e3) + t.betaBytes[1] / (inter.betaGBps * 1e3) +
                         t.gammaBytes / (g * 1e3);
      EXPECT_NEAR(sum, t.us, 1e-9 * t.us) << a << " " << count;
    }
  }
}

TEST(CostModel, UnsupportedIsANoteNotAnError) {
  const CostModel rail(loadTopology("h100-4x8-rail"), 12);  // one host of 8, one of 4
  const Estimate h = rail.estimate(CollectiveSpec{Collective::AllReduce, 12, 1024, DType::F32}, "hierarchical");
  EXPECT_FALSE(h.supported);
  EXPECT_NE(h.note.find("same number of ranks"), std::string::npos);
  const CostModel m(flat(4), 4);
  EXPECT_FALSE(m.estimate(CollectiveSpec{Collective::AllReduce, 4, 1024, DType::F32}, "nccl").supported);
  EXPECT_FALSE(m.estimate(CollectiveSpec{Collective::AllReduce, 4, 1024, DType::F32}, "nope").supported);
  EXPECT_FALSE(m.estimate(CollectiveSpec{Collective::Broadcast, 4, 1024, DType::F32}, "tree").supported);
  EXPECT_THROW(m.estimate(CollectiveSpec{Collective::AllReduce, 5, 1024, DType::F32}, "ring"), Error);
  EXPECT_THROW(CostModel(flat(4), 5), Error);
  EXPECT_EQ(us(m, Collective::AllReduce, 0, "ring"), 0);
}

TEST(CostModel, HugeRankCountsAreFast) {
  // Thousands of ranks in seconds: O(n) routes per phase pattern (the first estimate pays for the routes, about
  // 60 us per new rank pair on a 4096-port star; later estimates reuse them).
  const auto start = std::chrono::steady_clock::now();
  const CostModel m(flatTopology(4096, 50, 1), 4096);
  for (const char* a : {"ring", "rabenseifner", "tree", "direct", "ring"}) {
    const Estimate e = m.estimate(CollectiveSpec{Collective::AllReduce, 4096, 1u << 28, DType::F32}, a);
    EXPECT_TRUE(e.supported);
    EXPECT_GT(e.terms.us, 0) << a;
  }
  // Above kRingRecurrenceMaxRanks the ring's closed form: 2(n-1) steps of one block (free reductions here).
  const double ring = m.estimate(CollectiveSpec{Collective::AllReduce, 4096, 1u << 28, DType::F32}, "ring").terms.us;
  const double block = (1u << 28) / 4096 * 4.0;
  EXPECT_NEAR(ring, 2.0 * 4095 * (2 + block / 50e3), 1e-9 * ring);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

TEST(CostModel, RingPhasesOfIdenticalHostsAreFoldedBitForBit) {
  // The ring recurrence runs over one period of identical hosts (the delays repeat every 8 ranks on one leaf, every
  // leaf's worth of hosts across spines) and memoizes phases the selector asks for twice. Pinned: the full recurrence
  // over every rank (before the fold) gave these values, to the last bit, on a two-level rail fabric (16 x 8) and a
  // three-level one with 4 GPUs per NIC and leaves of 4 servers (12 x 8).
  struct Case {
    const char* params;
    const char* algorithm;
    std::size_t chunk;
    int channels;
    double us;
  };
  const Case cases[] = {
      {R"({"nodes": 16})", "ring", 0, 1, 43299.928639999933},
      {R"({"nodes": 16})", "ring", 131072, 2, 43252.664320001277},
      {R"({"nodes": 16})", "ring_bidir", 131072, 2, 32279.864319998662},
      {R"({"nodes": 16})", "hierarchical", 0, 1, 10266.730372525251},
      {R"({"nodes": 12, "radix": 8, "levels": 3, "nics_per_node": 2})", "ring", 131072, 4, 60477.5775999998},
      {R"({"nodes": 12, "radix": 8, "levels": 3, "nics_per_node": 2})", "ring_bidir", 0, 4, 38006.566400000003},
      {R"({"nodes": 12, "radix": 8, "levels": 3, "nics_per_node": 2})", "hierarchical", 0, 1, 24915.492703434342},
  };
  for (const Case& c : cases) {
    const CostModel m(generateTopology("multi_node", c.params), 0);
    const CollectiveSpec spec{Collective::AllReduce, m.nranks(), (1u << 30) / 4, DType::F32};
    const AlgoParams p{c.chunk, c.channels, m.rankHost()};
    for (int again = 0; again < 2; ++again) {  // the second time from the memo
      EXPECT_EQ(m.estimate(spec, c.algorithm, p).terms.us, c.us) << c.params << " " << c.algorithm << " " << again;
    }
  }
}

// Router answers a source's single route (and distance) by a search from both ends over the shortest paths, and a
// source asked again in a row by its BFS tree: both must pick the same links and hop counts, on every fabric shape and
// with unequal latencies (where the latency minimum decides among equal hop counts).
TEST(CostModel, PairSearchRoutesEqualTreeRoutes) {
  struct Case {
    const char* generator;
    const char* params;
  };
  const Case cases[] = {
      {"multi_node", R"({"nodes": 12, "radix": 8, "levels": 3, "nics_per_node": 2})"},
      {"multi_node", R"({"nodes": 6, "gpus_per_node": 4, "rail_optimized": false, "radix": 8})"},
      {"fat_tree", R"({"k": 4})"},
      {"torus", R"({"dims": [4, 3, 2]})"},
      {"dragonfly", R"({"groups": 5, "routers": 3})"},
      {"ring", R"({"n": 7})"},
  };
  for (const Case& c : cases) {
    for (bool uneven : {false, true}) {
      Topology t = generateTopology(c.generator, c.params);
      if (uneven) {
        // Latencies 0.5, 0.75, 1 us in turn: equal hop counts differ in latency, some tie.
        for (std::size_t l = 0; l < t.links.size(); ++l) t.links[l].latencyUs = 0.5 + 0.25 * static_cast<double>(l % 3);
      }
      const Router pairs(t), distances(t), trees(t);
      const int nodes = static_cast<int>(t.nodes.size());
      std::vector<std::vector<std::vector<Hop>>> got(static_cast<std::size_t>(nodes));
      std::vector<std::vector<int>> gotHops(static_cast<std::size_t>(nodes));
      for (auto& row : got) row.resize(static_cast<std::size_t>(nodes));
      for (auto& row : gotHops) row.resize(static_cast<std::size_t>(nodes));
      std::vector<std::vector<int>> gotDistance = gotHops;
      // Destination-major: consecutive calls change the source, so every route comes from the pair search.
      for (int d = 0; d < nodes; ++d) {
        for (int s = 0; s < nodes; ++s) {
          gotHops[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)] =
              pairs.nodeRoute(s, d, got[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)]);
          gotDistance[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)] = distances.distance(s, d);
        }
      }
      std::vector<Hop> want;
      int checked = 0;
      for (int s = 0; s < nodes; ++s) {
        // Asked twice in a row, the source gets its tree: every route below walks it.
        const int near = trees.distance(s, (s + 1) % nodes);
        ASSERT_EQ(trees.distance(s, (s + 1) % nodes), near);
        for (int d = 0; d < nodes; ++d) {
          ASSERT_EQ(gotHops[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)], trees.nodeRoute(s, d, want))
              << c.generator << " " << uneven << " " << s << " -> " << d;
          ASSERT_EQ(gotDistance[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)], trees.distance(s, d))
              << c.generator << " " << uneven << " " << s << " -> " << d;
          const auto& have = got[static_cast<std::size_t>(s)][static_cast<std::size_t>(d)];
          ASSERT_EQ(have.size(), want.size()) << c.generator << " " << uneven << " " << s << " -> " << d;
          for (std::size_t h = 0; h < want.size(); ++h) {
            ASSERT_EQ(have[h].link, want[h].link) << c.generator << " " << uneven << " " << s << " -> " << d;
            ASSERT_EQ(have[h].forward, want[h].forward) << c.generator << " " << uneven << " " << s << " -> " << d;
          }
          checked += want.empty() ? 0 : 1;
        }
      }
      EXPECT_GT(checked, nodes * (nodes - 1) / 2) << c.generator;
    }
  }
}

TEST(CostModel, ClassTopologyValidation) {
  EXPECT_THROW(classTopology("x", 0, 4, {true, 1, 10}, {true, 2, 10}, 0), Error);
  EXPECT_THROW(classTopology("x", 2, 4, {true, 1, 0}, {true, 2, 10}, 0), Error);
  EXPECT_THROW(classTopology("x", 2, 4, {true, 3, 10}, {true, 2, 10}, 0), Error);  // inter must be slower to reach
  const Topology one = classTopology("one", 1, 1, {true, 1, 10}, {true, 2, 10}, 0);
  EXPECT_EQ(one.ranks.size(), 1u);
  const Topology t = classTopology("two", 2, 2, {true, 1, 10}, {true, 2, 10}, 5, NodeKind::Cpu);
  EXPECT_NO_THROW(parseTopology(toJson(t), "round-trip"));
  EXPECT_EQ(rankHosts(t, 4), (std::vector<int>{0, 0, 1, 1}));
}

}  // namespace
}  // namespace collbench
