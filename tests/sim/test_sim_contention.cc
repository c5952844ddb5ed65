// Contention is modelled, not assumed away: flows sharing a link split it (max-min), an oversubscribed fat tree
// slows a ring whose hops all leave their racks by the oversubscription, and a non-blocking switch adds none.
// Expected values are derived from the link parameters and routes, not read from the simulator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "flows_schedule.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kGBps = 50, kLatencyUs = 1;
constexpr double kAlpha = 2 * kLatencyUs * 1e-6, kBeta = 1 / (kGBps * 1e9);
constexpr double kRel = 1e-9;

double simulate(const Topology& t, const Schedule& s) {
  return sim::Simulator(t, static_cast<int>(t.ranks.size())).run(s).seconds;
}

/// Op by op (SimGrid's max-min) and the fluid network both give `want`.
void expectBothWays(const Topology& t, const Schedule& s, double want) {
  for (const sim::SimMode mode : {sim::SimMode::Exact, sim::SimMode::Fluid}) {
    sim::SimConfig cfg;
    cfg.mode = mode;
    const sim::SimResult r = sim::Simulator(t, static_cast<int>(t.ranks.size()), cfg).run(s);
    EXPECT_NEAR(r.seconds, want, kRel * want) << r.method;
  }
}

TEST(Contention, OneFlowGetsTheLink) {
  const std::size_t S = 1 << 24;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), testing::flowsSchedule(3, {{0, 2}}, S)), kAlpha + S * kBeta,
              kRel * (kAlpha + S * kBeta));
}

TEST(Contention, TwoFlowsIntoOneRankEachGetHalf) {
  // 0 -> 2 and 1 -> 2 share rank 2's downlink: each moves at B/2, so both end at alpha + 2 S beta.
  const std::size_t S = 1 << 24;
  const double want = kAlpha + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), testing::flowsSchedule(3, {{0, 2}, {1, 2}}, S)), want,
              kRel * want);
}

TEST(Contention, TwoFlowsOutOfOneRankEachGetHalf) {
  const std::size_t S = 1 << 24;
  const double want = kAlpha + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), testing::flowsSchedule(3, {{0, 1}, {0, 2}}, S)), want,
              kRel * want);
}

TEST(Contention, UnequalFlowsShareThenTheLongerOneSpeedsUp) {
  // Both at B/2 until the short one (S) is done at alpha + 2 S beta; the long one (3 S) has S left, alone: + S beta.
  const std::size_t S = 1 << 22;
  Schedule s = testing::flowsSchedule(3, {{0, 2}, {1, 2}}, S);
  s.ranks[1].ops[0].bytes = 3 * S;
  s.ranks[2].ops[1].bytes = 3 * S;
  const double want = kAlpha + 2.0 * S * kBeta + 2.0 * S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(3, kGBps, kLatencyUs), s), want, kRel * want);
}

TEST(Contention, WhatAFlowHeldElsewhereLeavesGoesToTheOthers) {
  // 0 -> 2, 3 -> 2 and 4 -> 2 share rank 2's downlink at B/3 each; 0 -> 1 shares rank 0's uplink with 0 -> 2 and
  // takes what that leaves, 2B/3 (max-min), not half of it. By 3 S beta the three are done and 0 -> 1 has moved
  // 2 S of its 3 S; alone, it moves the last S in S beta.
  const std::size_t S = 1 << 22;
  Schedule s = testing::flowsSchedule(5, {{0, 1}, {0, 2}, {3, 2}, {4, 2}}, S);
  s.ranks[0].ops[0].bytes = 3 * S;
  s.ranks[1].ops[0].bytes = 3 * S;
  expectBothWays(flatTopology(5, kGBps, kLatencyUs), s, kAlpha + 4.0 * S * kBeta);
}

TEST(Contention, AnEmptyTransferTakesNoShare) {
  // 1 -> 2 moves nothing: 0 -> 2 has rank 2's downlink to itself.
  const std::size_t S = 1 << 22;
  Schedule s = testing::flowsSchedule(3, {{0, 2}, {1, 2}}, S);
  s.ranks[1].ops[0].bytes = 0;
  s.ranks[2].ops[1].bytes = 0;
  expectBothWays(flatTopology(3, kGBps, kLatencyUs), s, kAlpha + S * kBeta);
}

TEST(Contention, NonBlockingSwitchAddsNone) {
  // Disjoint pairs through one switch: every flow has the whole link, as if alone.
  const std::size_t S = 1 << 24;
  const double want = kAlpha + S * kBeta;
  EXPECT_NEAR(simulate(flatTopology(8, kGBps, kLatencyUs),
                       testing::flowsSchedule(8, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 0}}, S)),
              want, kRel * want);
}

TEST(Contention, SwitchPortLimitCapsTheFlow) {
  Topology t = flatTopology(2, kGBps, kLatencyUs);
  applyOverride(t, "node.switch.switch_GBps=20");
  const std::size_t S = 1 << 24;
  const double want = kAlpha + S / 20e9;
  EXPECT_NEAR(simulate(t, testing::flowsSchedule(2, {{0, 1}}, S)), want, kRel * want);
}

// Directed-link loads of the ring r -> r+1 on the topology's routes: the most ring flows on one directed link.
int maxRingFlowsPerLink(const Topology& t, int n) {
  const Router router(t);
  std::map<std::pair<int, bool>, int> load;
  int most = 0;
  for (int r = 0; r < n; ++r) {
    for (const Hop& h : router.route(r, (r + 1) % n)) most = std::max(most, ++load[{h.link, h.forward}]);
  }
  return most;
}

// A 2:1 fat tree is built with half the uplinks (topologies/README.md), so contention appears when every host of a
// rack sends out of it at once. k = 4: racks (edge switches) of 2 hosts, pod 0 = racks {h0, h1} and {h2, h3}. The
// 4 ranks are placed so that every ring hop crosses racks (h0 -> h2 -> h1 -> h3 -> h0): both hosts of each rack send
// out of it during every step. Routes are given explicitly, as a fat-tree fabric manager computes them
// (destination-mod-k: the uplink to aggregation switch dst mod k/(2s), as OpenSM's ftree routing does), because the
// Router's default ECMP is a hash that may put the two flows of a rack on one uplink of the 1:1 fabric too. 1:1:
// each rack has 2 uplinks and its two flows (to h2 and h3, or to h1 and h0) take different ones: every flow is
// alone on its links. 2:1: one uplink per rack, which its two flows share, as the link counts force. Every flow
// crosses 4 links (host-edge-agg-edge-host: 4 L), all flows of a step have the same size and the same bottleneck
// share B / m (m flows on the most loaded link), so the steps run in lockstep: T = 2(n-1)(4 L + m b / B), and the
// busbw ratio is (4 L + b / B) / (4 L + 2 b / B), just above 1/2 at 1 GiB.
TEST(Contention, OversubscribedFatTreeHalvesTheCrossRackRing) {
  const int n = 4;
  const std::vector<int> hosts{0, 2, 1, 3};        // ring order; racks are hosts / 2
  const std::size_t count = std::size_t{1} << 28;  // 1 GiB of floats
  const double b = static_cast<double>(count / n * 4), L = 0.4e-6, B = 50e9;
  std::map<int, double> busbw;
  for (int s : {1, 2}) {
    Topology t =
        generateTopology("fat_tree", fmt::format(R"({{"k": 4, "oversubscription": {}, "reduce_GBps": 0}})", s));
    const int uplinks = 2 / s;
    t.ranks.clear();
    for (int h : hosts) t.ranks.push_back(fmt::format("n{}.gpu0", h));
    for (int r = 0; r < n; ++r) {
      const int src = hosts[static_cast<std::size_t>(r)], dst = hosts[static_cast<std::size_t>((r + 1) % n)];
      t.routes[{fmt::format("n{}.gpu0", src), fmt::format("n{}.gpu0", dst)}] = {
          fmt::format("n{}.gpu0", src), fmt::format("pod0.edge{}", src / 2), fmt::format("pod0.agg{}", dst % uplinks),
          fmt::format("pod0.edge{}", dst / 2), fmt::format("n{}.gpu0", dst)};
    }
    validateTopology(t, fmt::format("{}:1 fat tree with routes", s));
    const int m = maxRingFlowsPerLink(t, n);
    EXPECT_EQ(m, s) << "1:1 gives each flow its own uplink; 2:1 leaves one uplink per rack for its two flows";
    const sim::SimResult r =
        sim::Simulator(t, n).runAlgorithm(CollectiveSpec{Collective::AllReduce, n, count, DType::F32}, "ring");
    const double want = 2.0 * (n - 1) * (4 * L + m * b / B);
    EXPECT_NEAR(r.seconds, want, 1e-9 * want) << s << ":1";
    busbw[s] = static_cast<double>(count * 4) / r.seconds * 2.0 * (n - 1) / n;
  }
  const double predicted = (4 * L + b / B) / (4 * L + 2 * b / B);
  EXPECT_NEAR(busbw[2] / busbw[1], predicted, 1e-9);
  EXPECT_LT(busbw[2] / busbw[1], 0.501);
}

// The same fabrics with the ring in rank order (racks filled in turn): one flow leaves each rack per step, alone on
// an uplink in both fabrics, so 2:1 costs nothing; oversubscription only shows under load that exceeds the uplinks.
TEST(Contention, OversubscriptionIsFreeWhenOneFlowLeavesEachRack) {
  const int n = 16;
  const std::size_t count = std::size_t{1} << 24;
  std::map<int, double> time;
  for (int s : {1, 2}) {
    const Topology t =
        generateTopology("fat_tree", fmt::format(R"({{"k": 4, "oversubscription": {}, "reduce_GBps": 0}})", s));
    EXPECT_EQ(maxRingFlowsPerLink(t, n), 1);
    time[s] =
        sim::Simulator(t, n).runAlgorithm(CollectiveSpec{Collective::AllReduce, n, count, DType::F32}, "ring").seconds;
  }
  EXPECT_NEAR(time[2], time[1], 1e-9 * time[1]);
}

// Ring channels are spread over the hosts' NICs (ringOrder): on a rail-optimized cluster one channel is bound by one
// 50 GB/s NIC, and C channels use C different NICs, so busbw grows C-fold until the 8 NICs of a host are all busy.
TEST(Contention, RingChannelsSpreadOverTheRails) {
  const Topology t = generateTopology("multi_node", R"({"nodes": 2, "reduce_GBps": 0})");
  const int n = 16;
  const std::size_t count = std::size_t{1} << 28;  // 1 GiB of floats
  const double nicGBps = 50;                       // the generator's ConnectX-7 default
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
