// Wire protocols on the simulator (Schedule::protocol, sim_backend.h "Protocols") against closed forms: a ring
// all-reduce of n equal blocks of b bytes takes
//   floor + (n-1) (max(step, alpha) + w(b) beta + b gamma) + (n-1) (max(step, alpha) + w(b) beta)
// where floor is NCCL's base latency of the protocol (paid once), step its per-step latency on the route's path class
// (it includes the wire, so the larger of it and alpha: collbench/wire_rule.h),
// w(b) = b / payload efficiency the bytes on the wire, alpha the route's latency, beta 1 / link bandwidth and gamma 1 /
// reduce_GBps (the reduce-scatter's reductions are on the chain). NCCL 2.28 tuning.cc, Ring row: baseLatencies LL 6.6,
// LL128 14, Simple 8.4 us; hwLatencies NVLINK LL .6, LL128 1.9, Simple 3.4 us; NET LL 2.7, LL128 4.0, Simple 14 us.
// device.h: LL carries 4 data bytes per 8, LL128 120 per 128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "flows_schedule.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kRelTol = 1e-6;

struct ProtoCase {
  Protocol protocol;
  double floorUs, nvlinkStepUs, netStepUs, efficiency;
};
constexpr ProtoCase kLL{Protocol::LL, 6.6, 0.6, 2.7, 0.5};
constexpr ProtoCase kLL128{Protocol::LL128, 14.0, 1.9, 4.0, 120.0 / 128.0};
constexpr ProtoCase kSimple{Protocol::Simple, 8.4, 3.4, 14.0, 1.0};

struct Route {
  double alpha, beta, gamma;  // seconds, seconds per byte, seconds per reduced byte
};

double ringWithProtocol(int n, double blockBytes, const Route& r, double floorUs, double stepUs, double efficiency) {
  const double wire = std::ceil(blockBytes / efficiency), step = stepUs * 1e-6;
  const double hop = std::max(step, r.alpha) + wire * r.beta;
  return floorUs * 1e-6 + (n - 1) * (hop + blockBytes * r.gamma) + (n - 1) * hop;
}

AlgoParams with(Protocol p) {
  AlgoParams params;
  params.protocol = p;
  return params;
}

// flat(n): generic "fabric" links, so the network row; a transfer crosses two links of 1 us at 50 GB/s; no reduction
// cost. Without a protocol the time is today's (flat's ranks have no GPU arch: no default protocol).
/// The same machine as `t` under a name that says nothing of its network: InfiniBand to the model, which adds no
/// latency beyond NCCL's.
Topology onAnotherNetwork(const Topology& t, int n) {
  Topology other = t;
  other.name = "same-machine";
  other.description = "the same machine, another network";
  EXPECT_EQ(ncclSystemOf(other, n).nicKind, NicKind::InfiniBand);
  return other;
}

/// A direct all-reduce of `bytes` (two rounds across the network: the pieces to their owners, the sums back) takes
/// `wantUs` longer on `t` than on `other`, in the cost model's estimate and on the simulator.
void expectDirectAllReduceAdds(const Topology& t, const Topology& other, int n, std::size_t bytes, double wantUs) {
  const CollectiveSpec spec{Collective::AllReduce, n, bytes, DType::F32};
  AlgoParams p;
  p.rankHost = rankHosts(t, n);
  const double modelAdded =
      CostModel(t, n).estimate(spec, "direct", p).terms.us - CostModel(other, n).estimate(spec, "direct", p).terms.us;
  EXPECT_NEAR(modelAdded, wantUs, 1e-9);
  const double simAdded = sim::Simulator(t, n).runAlgorithm(spec, "direct", p).seconds -
                          sim::Simulator(other, n).runAlgorithm(spec, "direct", p).seconds;
  EXPECT_NEAR(simAdded, wantUs * 1e-6, 1e-12);
}

TEST(Protocol, RingOnFlatPaysFloorStepLatencyAndPayload) {
  const int n = 6;
  const std::size_t count = n * 3000;
  const double b = 3000.0 * 4;
  const Route route{2e-6, 1 / 50e9, 0};
  const sim::Simulator simulator(flatTopology(n, 50, 1), n);
  const CollectiveSpec spec{Collective::AllReduce, n, count, DType::F32};
  for (const ProtoCase& c : {kLL, kLL128, kSimple}) {
    SCOPED_TRACE(toString(c.protocol));
    const double want = ringWithProtocol(n, b, route, c.floorUs, c.netStepUs, c.efficiency);
    EXPECT_NEAR(simulator.runAlgorithm(spec, "ring", with(c.protocol)).seconds, want, kRelTol * want);
  }
  const double none = 2.0 * (n - 1) * (route.alpha + b * route.beta);
  EXPECT_NEAR(simulator.runAlgorithm(spec, "ring").seconds, none, kRelTol * none);
}

// dgx-h100-8x1: NVLink routes (GPU -> NVSwitch -> GPU), GPU ranks of a known arch. Without a protocol the simulator
// times the schedule as the nccl backend runs it, NCCL's point-to-point rule: LL for blocks up to 16 KiB, Simple above.
TEST(Protocol, GpuRanksDefaultToNcclPointToPointRule) {
  const Topology t = loadTopology("dgx-h100-8x1");
  const int n = 8;
  const TopoLink& link = t.links.front();
  double reduceGBps = 0;
  for (const TopoNode& node : t.nodes) {
    if (node.id == t.ranks.front()) reduceGBps = node.reduceGBps;
  }
  ASSERT_GT(reduceGBps, 0);
  const Route route{2 * link.latencyUs * 1e-6, 1 / (link.bandwidthGBps * 1e9), 1 / (reduceGBps * 1e9)};
  const sim::Simulator simulator(t, n);
  for (const std::size_t blockElems : {std::size_t{2}, std::size_t{4096}, std::size_t{4097}, std::size_t{1} << 18}) {
    SCOPED_TRACE(blockElems);
    const CollectiveSpec spec{Collective::AllReduce, n, n * blockElems, DType::F32};
    const double b = static_cast<double>(blockElems * 4);
    const ProtoCase& c = b <= 16384 ? kLL : kSimple;
    const double want = ringWithProtocol(n, b, route, c.floorUs, c.nvlinkStepUs, c.efficiency);
    EXPECT_NEAR(simulator.runAlgorithm(spec, "ring").seconds, want, kRelTol * want);
    // An explicit protocol overrides the rule.
    const double ll128 = ringWithProtocol(n, b, route, kLL128.floorUs, kLL128.nvlinkStepUs, kLL128.efficiency);
    EXPECT_NEAR(simulator.runAlgorithm(spec, "ring", with(Protocol::LL128)).seconds, ll128, kRelTol * ll128);
  }
}

// The protocol travels with a schedule: run() of a built schedule and of the same schedule read back agree with
// runAlgorithm, and on a timeline the first send starts after the launch floor and what the step latency adds to the
// route's.
TEST(Protocol, ScheduleCarriesItAndTimelineStartsAfterTheFloor) {
  const int n = 4;
  sim::SimConfig cfg;
  cfg.timeline = true;
  const sim::Simulator simulator(flatTopology(n, 50, 1), n, cfg);
  const CollectiveSpec spec{Collective::AllReduce, n, n * 1000, DType::F32};
  const Schedule s = buildSchedule(spec, "ring", with(Protocol::LL));
  ASSERT_EQ(s.protocol, Protocol::LL);
  const sim::SimResult r = simulator.run(s);
  const double want = ringWithProtocol(n, 4000, Route{2e-6, 1 / 50e9, 0}, kLL.floorUs, kLL.netStepUs, 0.5);
  EXPECT_NEAR(r.seconds, want, kRelTol * want);
  ASSERT_FALSE(r.spans.empty());
  double firstSend = r.seconds;
  for (const sim::Span& sp : r.spans) {
    if (sp.kind == sim::SpanKind::Send) firstSend = std::min(firstSend, sp.start);
  }
  EXPECT_NEAR(firstSend, kLL.floorUs * 1e-6 + std::max(0.0, kLL.netStepUs * 1e-6 - 2e-6), 1e-12);
}

// A transfer across the network pays the system's network latency beyond NCCL's step latency (collbench/wire_rule.h,
// NcclModelParams::netHopExtraUs), as NCCL's calls do in the time model: on aws-p5 (EFA on Hopper) a send between
// its first two servers takes that much longer than on the same machine under a name that says nothing of EFA (an
// InfiniBand one to the model, which adds nothing); a send inside a server pays nothing more. The cost model prices
// the same: a direct all-reduce moves by twice as much, in its estimate and on the simulator.
TEST(Protocol, NetworkTransfersPayTheSystemsHopLatency) {
  const int n = 16;
  const Topology efa = loadTopology("aws-p5");
  const Topology ib = onAnotherNetwork(efa, n);
  ASSERT_EQ(ncclSystemOf(efa, n).nicKind, NicKind::Efa2);
  const double extraUs = NcclModelParams{}.netHopExtraUs[static_cast<std::size_t>(NicKind::Efa2)];
  ASSERT_GT(extraUs, 0);
  for (const auto& [dst, wantUs] : {std::pair{8, extraUs}, std::pair{1, 0.0}}) {
    SCOPED_TRACE(dst);
    const Schedule s = testing::flowsSchedule(n, {{0, dst}}, std::size_t{1} << 20);
    const double added = sim::Simulator(efa, n).run(s).seconds - sim::Simulator(ib, n).run(s).seconds;
    EXPECT_NEAR(added, wantUs * 1e-6, 1e-12);
  }
  expectDirectAllReduceAdds(efa, ib, n, std::size_t{64} * n, 2 * extraUs);
}

// On p4d and p4de EFA reads a message of GPU memory longer than one packet (NcclModelParams::netReadUs): a Simple
// send of 32 KiB between the first two servers pays the read on top of the hop's latency, an LL one (its buffer in host
// memory) and one of a packet (8 KiB, LL under the point-to-point rule) only the hop's, one inside a server nothing.
// The cost model prices the same: a direct all-reduce whose pieces are 32 KiB moves by two hops and two reads.
TEST(Protocol, EfaOnP4deReadsTransfersLongerThanAPacket) {
  const int n = 16;
  const Topology efa = loadTopology("aws-p4de");
  const Topology ib = onAnotherNetwork(efa, n);
  ASSERT_EQ(ncclSystemOf(efa, n).nicKind, NicKind::Efa);
  const auto kind = static_cast<std::size_t>(NicKind::Efa);
  const double hopUs = NcclModelParams{}.netHopExtraUs[kind], readUs = NcclModelParams{}.netReadUs[kind];
  ASSERT_GT(readUs, 0);
  struct Case {
    int dst;
    std::size_t bytes;
    std::optional<Protocol> protocol;
    double wantUs;
  };
  for (const Case& c : {Case{8, 32 << 10, std::nullopt, hopUs + readUs}, Case{8, 32 << 10, Protocol::LL, hopUs},
                        Case{8, 8 << 10, std::nullopt, hopUs}, Case{1, 32 << 10, std::nullopt, 0.0}}) {
    SCOPED_TRACE(::testing::Message() << c.dst << " " << c.bytes);
    Schedule s = testing::flowsSchedule(n, {{0, c.dst}}, c.bytes);
    s.protocol = c.protocol;
    const double added = sim::Simulator(efa, n).run(s).seconds - sim::Simulator(ib, n).run(s).seconds;
    EXPECT_NEAR(added, c.wantUs * 1e-6, 1e-12);
  }
  expectDirectAllReduceAdds(efa, ib, n, (std::size_t{32} << 10) * n, 2 * (hopUs + readUs));
}

}  // namespace
}  // namespace collbench
