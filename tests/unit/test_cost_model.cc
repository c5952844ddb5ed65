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

constexpr double kB = 50;      // GB/s per link
constexpr double kL = 1;       // us per link
constexpr double kG = 200;     // reduce GB/s
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
  EXPECT_NEAR(*ncclModelTimeUs(Collective::AllReduce, NcclAlgo::Ring, NcclProto::Simple, 16, 0, one),
              8.4 + 14 * 3.4, 1e-9);
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

}  // namespace
}  // namespace collbench
