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

TEST(NcclModel, FollowsNcclsTuningModel) {
  const NcclMachine one{8, 1, 450, true, 50};
  // Latency-bound: LL beats Simple; bandwidth-bound: Simple beats LL.
  const auto llSmall = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::LL, 16, 1024, one);
  const auto simpleSmall = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 16, 1024, one);
  ASSERT_TRUE(llSmall && simpleSmall);
  EXPECT_LT(*llSmall, *simpleSmall);
  const auto llBig = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::LL, 16, 1u << 30, one);
  const auto simpleBig = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 16, 1u << 30, one);
  EXPECT_GT(*llBig, *simpleBig);
  // Ring Simple, one node: baseLat 8.4 + 2(n-1) x NVLink hwLat 3.4 us at zero bytes.
  EXPECT_NEAR(*ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 16, 0, one), 8.4 + 14 * 3.4,
              1e-9);
  // Tree is all-reduce only.
  EXPECT_FALSE(ncclModelTimeUs(Collective::AllGather, NcclAlgo::Tree, NcclProto::Simple, 8, 1024, one));
  EXPECT_TRUE(ncclModelTimeUs(Collective::AllGather, NcclAlgo::Ring, NcclProto::Simple, 8, 1024, one));
  // More channels never slow the bandwidth term down.
  EXPECT_LE(*ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 32, 1u << 30, one),
            *ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 2, 1u << 30, one));
  EXPECT_EQ(ncclChunkBytes(NcclProto::Simple), 512u * 1024);
  EXPECT_EQ(ncclChunkBytes(NcclProto::LL), 32u * 1024);
  EXPECT_EQ(parseNcclProto("LL128"), NcclProto::LL128);
  EXPECT_EQ(parseNcclAlgo("Ring"), NcclAlgo::Ring);
  EXPECT_THROW(parseNcclProto("ll64"), Error);
  const NcclMachine m = ncclMachine(loadTopology("h100-4x8-rail"), 32);
  EXPECT_EQ(m.nnodes, 4);
  EXPECT_TRUE(m.nvlink);
  EXPECT_NEAR(m.interGBps, 50, 1e-9);
  EXPECT_NEAR(m.intraGBps, 450, 1e-9);
  const Topology p = ncclProtocolTopology(loadTopology("dgx-h100-8x1"), NcclAlgo::Ring, NcclProto::LL, 8);
  for (const TopoLink& l : p.links) EXPECT_LE(l.bandwidthGBps, 141.0);  // LL's llMaxBw on one Hopper node
}

// Hand-computed from ncclTopoTuneModel and ncclTopoGetAlgoTime (NCCL src/graph/tuning.cc), Hopper constants.
TEST(NcclModel, TreeOnOneNodeByHand) {
  const NcclMachine one{8, 1, 450, true, 50};
  // Tree Simple, 2 channels, 1 MiB: per channel min(60, 450/2) = 60 GB/s; tree: min(120 x 0.92, 2 x perChMaxTreeBw
  // 38.7) = 77.4, algorithm bandwidth x0.5 = 38.7, correction at log2(1 MiB >> 6) = 14: 0.5 -> 19.35 GB/s.
  // Latency: baseLat 8.4 + 2 x ((8 - 1) x NVLink tree Simple 4.0 + log2(1) x net) = 64.4 us.
  const auto t = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Tree, NcclProto::Simple, 2, 1u << 20, one);
  ASSERT_TRUE(t);
  EXPECT_NEAR(*t, 64.4 + 1048576.0 / (1e3 * 19.35), 1e-6);
}

TEST(NcclModel, MultiNodeByHand) {
  // Ring Simple on 4 nodes x 8 (NVLink 450 GB/s, NIC 50 GB/s), 8 channels, 256 MiB: per channel min(48 (inter
  // search speed), 50 / 8) = 6.25 -> bus 50 GB/s, algorithm 50 x 32 / 62. Latency: baseLat 8.4 + (62 - 6) x
  // max(NVLink 3.4, net overhead 1 x 3) + 6 inter steps x NET 14.0 = 282.8 us, x1.4 (multi-node ring plateau).
  const NcclMachine four{32, 4, 450, true, 50};
  const std::size_t big = std::size_t{256} << 20;
  const auto ring = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 8, big, four);
  ASSERT_TRUE(ring);
  EXPECT_NEAR(*ring, 282.8 * 1.4 + static_cast<double>(big) / (1e3 * 50 * 32 / 62), 1e-6);
  // Tree LL128 on 2 nodes x 8, 4 channels, 64 KiB: per channel min(48, 50 / 4) = 12.5 -> 50; tree min(50 x 0.92,
  // 4 x 41.4 (N2)) = 46; LL128 on more than one node min(46 x 120/128, 4 x 36.7) = 43.125; x0.5 and correction at
  // log2(64 KiB >> 6) = 10: 0.6 -> 12.9375 GB/s. Latency 14.0 + 2 x (7 x NVLink 1.25 + 1 x NET tree LL128 8.5) = 48.5.
  const NcclMachine two{16, 2, 450, true, 50};
  const auto tree = ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Tree, NcclProto::LL128, 4, 65536, two);
  ASSERT_TRUE(tree);
  EXPECT_NEAR(*tree, 48.5 + 65536.0 / (1e3 * 12.9375), 1e-6);
  // One rank per node (ppn 1): the ring's inter-node steps take the tree's network latency (NET tree LL 5.0):
  // 6.6 + (6 - 6) x intra + 2 x 3 x 5.0 = 36.6 us at zero bytes.
  const NcclMachine flat{4, 4, 50, false, 50};
  EXPECT_NEAR(*ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::LL, 2, 0, flat), 6.6 + 6 * 5.0, 1e-9);
}

TEST(NcclModel, ProtocolTopologyUsesInterNodeConstantsOnNics) {
  const Topology rail = loadTopology("h100-4x8-rail");
  auto find = [](const Topology& t, const std::string& cls) {
    for (std::size_t i = 0; i < t.links.size(); ++i) {
      if (t.links[i].linkClass == cls) return i;
    }
    return t.links.size();
  };
  const std::size_t nic = find(rail, "nic"), nvlink = find(rail, "nvlink");
  ASSERT_LT(nic, rail.links.size());
  ASSERT_LT(nvlink, rail.links.size());
  // LL on 4 nodes: the Intel host's llMaxBw N4 (20.4 GB/s) caps every rank and NIC link, not Hopper's 141; on 2
  // nodes N2 (39.0).
  const Topology ll4 = ncclProtocolTopology(rail, NcclAlgo::Ring, NcclProto::LL, 8, 32);
  EXPECT_NEAR(ll4.links[nic].bandwidthGBps, 20.4, 1e-9);
  EXPECT_NEAR(ll4.links[nvlink].bandwidthGBps, 20.4, 1e-9);
  EXPECT_NEAR(ncclProtocolTopology(rail, NcclAlgo::Ring, NcclProto::LL, 8, 16).links[nic].bandwidthGBps, 25.0, 1e-9);
  EXPECT_NEAR(ncclProtocolTopology(rail, NcclAlgo::Ring, NcclProto::LL, 8, 16).links[nvlink].bandwidthGBps, 39.0, 1e-9);
  // Latency: NET ring LL 2.7 us split over the two NIC links of a route; NVLink ring LL 0.6 raised to the network
  // post overhead 1.0 once ranks span nodes, split over the two NVLink ends.
  EXPECT_NEAR(ll4.links[nic].latencyUs - rail.links[nic].latencyUs, 2.7 / 2, 1e-9);
  EXPECT_NEAR(ll4.links[nvlink].latencyUs - rail.links[nvlink].latencyUs, 1.0 / 2, 1e-9);
  const Topology ll1 = ncclProtocolTopology(rail, NcclAlgo::Ring, NcclProto::LL, 8, 8);  // one node: Hopper's row
  EXPECT_NEAR(ll1.links[nvlink].bandwidthGBps, 141.0, 1e-9);
  EXPECT_NEAR(ll1.links[nvlink].latencyUs - rail.links[nvlink].latencyUs, 0.6 / 2, 1e-9);
  // Simple ring on one channel: the inter-node search speed (48 GB/s) on the NIC, the intra one (60) on NVLink.
  const Topology simple = ncclProtocolTopology(rail, NcclAlgo::Ring, NcclProto::Simple, 1, 32);
  EXPECT_NEAR(simple.links[nic].bandwidthGBps, 48.0, 1e-9);
  EXPECT_NEAR(simple.links[nvlink].bandwidthGBps, 60.0, 1e-9);
  // Tree Simple on 4 nodes: perChMaxTreeBw N4 36.0 per channel after the 0.92 efficiency (50 x 0.92 = 46 > 36).
  const Topology tree = ncclProtocolTopology(rail, NcclAlgo::Tree, NcclProto::Simple, 1, 32);
  EXPECT_NEAR(tree.links[nic].bandwidthGBps, 36.0, 1e-9);
}

}  // namespace
}  // namespace collbench
