// Contention is modelled, not assumed away: flows sharing a link split it (max-min), an oversubscribed fat tree
// slows a ring that crosses racks by the oversubscription, and a non-blocking switch adds none. Expected values are
// derived from the link parameters, not read from the simulator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kGBps = 50, kLatencyUs = 1;
constexpr double kAlpha = 2 * kLatencyUs * 1e-6, kBeta = 1 / (kGBps * 1e9);
constexpr double kRel = 1e-9;

/// Hand-built schedule: each (src, dst) pair sends `bytes` once, all at t = 0, each on its own channel.
Schedule flows(int n, const std::vector<std::pair<int, int>>& pairs, std::size_t bytes) {
  Schedule s;
  s.spec = CollectiveSpec{Collective::AllReduce, n, 0, DType::F32};
  s.algorithm = "test-flows";
  s.ranks.resize(static_cast<std::size_t>(n));
  int channel = 0;
  for (auto [src, dst] : pairs) {
    Op send;
    send.kind = OpKind::Send;
    send.peer = dst;
    send.bytes = bytes;
    send.channel = channel;
    Op recv = send;
    recv.kind = OpKind::Recv;
    recv.peer = src;
    s.ranks[static_cast<std::size_t>(src)].ops.push_back(send);
    s.ranks[static_cast<std::size_t>(dst)].ops.push_back(recv);
    ++channel;
  }
  return s;
}

double simulate(const Topology& t, const Schedule& s) {
  return sim::Simulator(t, static_cast<int>(t.ranks.size())).run(s).seconds;
}

TEST(Contention, OneFlowGetsTheLink) {
  const std::size_t S = 1 << 24;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), flows(3, {{0, 2}}, S)), kAlpha + S * kBeta,
              kRel * (kAlpha + S * kBeta));
}

TEST(Contention, TwoFlowsIntoOneRankEachGetHalf) {
  // 0 -> 2 and 1 -> 2 share rank 2's downlink: each moves at B/2, so both end at alpha + 2 S beta.
  const std::size_t S = 1 << 24;
  const double want = kAlpha + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), flows(3, {{0, 2}, {1, 2}}, S)), want, kRel * want);
}

TEST(Contention, TwoFlowsOutOfOneRankEachGetHalf) {
  const std::size_t S = 1 << 24;
  const double want = kAlpha + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), flows(3, {{0, 1}, {0, 2}}, S)), want, kRel * want);
}

TEST(Contention, UnequalFlowsShareThenTheLongerOneSpeedsUp) {
  // Both at B/2 until the short one (S) is done at alpha + 2 S beta; the long one (3 S) has S left, alone: + S beta.
  const std::size_t S = 1 << 22;
  Schedule s = flows(3, {{0, 2}, {1, 2}}, S);
  s.ranks[1].ops[0].bytes = 3 * S;
  s.ranks[2].ops[1].bytes = 3 * S;
  const double want = kAlpha + 2.0 * S * kBeta + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), s), want, kRel * want);
}

TEST(Contention, NonBlockingSwitchAddsNone) {
  // Disjoint pairs through one switch: every flow has the whole link, as if alone.
  const std::size_t S = 1 << 24;
  const double want = kAlpha + S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(8, kGBps, kLatencyUs), flows(8, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 0}}, S)), want,
              kRel * want);
}

TEST(Contention, SwitchPortLimitCapsTheFlow) {
  Topology t = flatTopology(2, kGBps, kLatencyUs);
  applyOverride(t, "node.switch.switch_GBps=20");
  const std::size_t S = 1 << 24;
  const double want = kAlpha + S / 20e9;
  EXPECT_NEAR(simulate(t, flows(2, {{0, 1}}, S)), want, kRel * want);
}

// k = 4 fat tree (Al-Fares): 16 hosts, 2 per edge switch, 2 edges per pod. Ring r -> r+1 in rank order: within an
// edge the route is host-edge-host (2 links), to the other edge of the pod host-edge-agg-edge-host (4), to the
// next pod through a core switch (6); the edge-agg links carry B / s for oversubscription s. Each ring flow is
// alone on its links, so every hop takes alpha_hop + b beta_hop, and the ring's longest chain is 2(n-1) hops of
// the slowest connection (it can stay on one connection through its FIFO order): T = 2(n-1)(6 L + b s / B).
TEST(Contention, OversubscribedFatTreeSlowsTheCrossRackRing) {
  const int n = 16;
  const std::size_t count = std::size_t{1} << 28;  // 1 GiB of floats
  const double b = static_cast<double>(count / n * 4), L = 0.4e-6, B = 50e9;
  std::map<double, double> busbw;
  for (double s : {1.0, 2.0}) {
    const Topology t =
        generateTopology("fat_tree", fmt::format(R"({{"k": 4, "oversubscription": {}, "reduce_GBps": 0}})", s));
    const sim::SimResult r =
        sim::Simulator(t, n).runAlgorithm(CollectiveSpec{Collective::AllReduce, n, count, DType::F32}, "ring");
    const double want = 2.0 * (n - 1) * (6 * L + b * s / B);
    EXPECT_NEAR(r.seconds, want, 1e-6 * want) << "oversubscription " << s;
    busbw[s] = static_cast<double>(count * 4) / r.seconds * 2.0 * (n - 1) / n;
  }
  // The predicted factor: (6 L + b / B) / (6 L + 2 b / B), just above 1/2 at this size.
  const double predicted = (6 * L + b / B) / (6 * L + 2 * b / B);
  EXPECT_NEAR(busbw[2.0] / busbw[1.0], predicted, 1e-6);
  EXPECT_LT(busbw[2.0] / busbw[1.0], 0.51);
}

// Ring channels are spread over the hosts' NICs (ringOrder): on a rail-optimized cluster one channel is bound by one
// 50 GB/s NIC, and C channels use C different NICs, so busbw grows C-fold until the 8 NICs of a host are all busy.
TEST(Contention, RingChannelsSpreadOverTheRails) {
  const Topology t = generateTopology("multi_node", R"({"nodes": 2, "reduce_GBps": 0})");
  const int n = 16;
  const std::size_t count = std::size_t{1} << 28;  // 1 GiB of floats
  const double nicGBps = 50;                        // the generator's ConnectX-7 default
  auto busbw = [&](int channels) {
    AlgoParams p;
    p.channels = channels;
    p.rankHost = rankHosts(t, n);
    const sim::SimResult r =
        sim::Simulator(t, n).runAlgorithm(CollectiveSpec{Collective::AllReduce, n, count, DType::F32}, "ring", p);
    return static_cast<double>(count * 4) / r.seconds * 2.0 * (n - 1) / n / 1e9;
  };
  const double one = busbw(1), eight = busbw(8);
  EXPECT_NEAR(one, nicGBps, 0.02 * nicGBps);
  EXPECT_GT(eight, 7 * one);  // at most 8x (the latency terms do not shrink with channels)
  EXPECT_LE(eight, 8 * one);
}

// Cross-traffic and LV08 change the answer in the documented direction.
TEST(Models, Lv08AndCrossTrafficAreSlower) {
  const int n = 8;
  const Topology t = flatTopology(n, kGBps, kLatencyUs);
  const Schedule s = buildSchedule(CollectiveSpec{Collective::AllReduce, n, 1 << 20, DType::F32}, "ring");
  const double cm02 = sim::Simulator(t, n).run(s).seconds;
  sim::SimConfig lv;
  lv.model = sim::NetworkModel::LV08;
  const double lv08 = sim::Simulator(t, n, lv).run(s).seconds;
  sim::SimConfig ct;
  ct.crossTraffic = true;
  const double cross = sim::Simulator(t, n, ct).run(s).seconds;
  EXPECT_GT(lv08, cm02 * 1.01);
  // The ring's acknowledgements flow r+1 -> r, on links the ring uses in the other direction only: the ring's own
  // flows are slowed by the 5 % of the reverse flows of their neighbours on each shared direction.
  EXPECT_GT(cross, cm02 * 1.01);
}

}  // namespace
}  // namespace collbench
