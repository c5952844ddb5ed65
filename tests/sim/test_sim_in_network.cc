// The in-network all-reduces (nvls_tree, collnet_direct, collnet_chain) on the simulator: one loop on 2 hosts of
// dgx-h100-ib400 timed against its closed form (NVLink for the in-host stages, the NIC for the inter-host ones, the
// switches' reduction rates), and the cost terms against the simulator where the pipeline runs many chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kRelTolerance = 1e-6;
constexpr double kBytesPerGB = 1e9;
constexpr double kSecondsPerUs = 1e-6;
constexpr int kHosts = 2;
constexpr int kLocal = 8;
constexpr int kRanks = kHosts * kLocal;

/// The link between two nodes of `t`.
const TopoLink& linkBetween(const Topology& t, const std::string& a, const std::string& b) {
  for (const TopoLink& l : t.links) {
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return l;
  }
  throw Error(Errc::InvalidArgument, "no link " + a + " - " + b);
}

/// dgx-h100-ib400's figures for 2 hosts: NVLink (GPU - NVSwitch), PCIe (GPU - NIC), NIC (NIC - rail leaf), the
/// GPUs' reduction rate, NVLS's and SHARP's.
struct Figures {
  double nvlinkLat, nvlink, pcieLat, pcie, nicLat, nic, gpuReduce, nvls, sharp;
  explicit Figures(const Topology& t) {
    const TopoLink& nv = linkBetween(t, "n0.gpu0", "n0.nvsw");
    const TopoLink& pc = linkBetween(t, "n0.gpu0", "n0.nic0");
    const TopoLink& ni = linkBetween(t, "n0.nic0", "leaf0");
    nvlinkLat = nv.latencyUs * kSecondsPerUs;
    nvlink = nv.bandwidthGBps * kBytesPerGB;
    pcieLat = pc.latencyUs * kSecondsPerUs;
    pcie = pc.bandwidthGBps * kBytesPerGB;
    nicLat = ni.latencyUs * kSecondsPerUs;
    nic = ni.bandwidthGBps * kBytesPerGB;
    gpuReduce = t.nodes[static_cast<std::size_t>(t.nodeIndex("n0.gpu0"))].reduceGBps * kBytesPerGB;
    nvls = t.nodes[static_cast<std::size_t>(t.nodeIndex("n0.nvsw"))].reduceGBps * kBytesPerGB;
    sharp = t.nodes[static_cast<std::size_t>(t.nodeIndex("leaf0"))].reduceGBps * kBytesPerGB;
  }
  /// A GPU to its rail's leaf: PCIe then the NIC's port (the slower of the two sets the rate).
  double railLat() const { return pcieLat + nicLat; }
  double rail() const { return std::min(pcie, nic); }
  /// One chunk between two GPUs of a host (through the NVSwitch), and the receiver folding it in.
  double nvlinkHop(double bytes) const { return 2 * nvlinkLat + bytes / nvlink; }
  /// SHARP's two stages on a rail of `bytes` per member (sim_backend.h: legs of a switch op stream together): the
  /// members' bytes up while the reduced bytes come down to the root at min(link, reduce), then the multicast.
  double sharp2(double bytes) const {
    return 2 * railLat() + std::max(bytes / rail(), bytes / std::min(rail(), sharp)) + bytes / rail();
  }
};

/// NCCL's point-to-point protocol on GPU ranks (sim_backend.h, "Protocols"): every transfer here is above the LL
/// threshold, so Simple's step latency on its path class, and the call's floor, NCCL's NVLS latency (switch ops ran),
/// which is above Simple's base latency.
/// What the step latency adds to a transfer whose route's latency is `routeLat` (collbench/wire_rule.h: the larger of
/// the two, NCCL's step latency including the wire).
double stepExtra(NcclPath path, double routeLat) {
  return std::max(0.0, ncclStepLatencyUs(path, NcclAlgorithm::Ring, NcclProtocol::Simple) * kSecondsPerUs - routeLat);
}
double launchFloor() {
  return std::max(ncclBaseLatencyUs(NcclAlgorithm::Ring, NcclProtocol::Simple),
                  ncclBaseLatencyUs(NcclAlgorithm::Nvls, NcclProtocol::Simple) +
                      ncclStepLatencyUs(NcclPath::Nvl, NcclAlgorithm::Nvls, NcclProtocol::Simple)) *
         kSecondsPerUs;
}

sim::SimResult simulate(const Topology& t, const std::string& algorithm, std::size_t count, std::size_t chunkBytes,
                        int channels = 1) {
  const AlgoParams p{chunkBytes, channels, rankHosts(t, kRanks)};
  return sim::Simulator(t, kRanks).runAlgorithm({Collective::AllReduce, kRanks, count, DType::F32}, algorithm, p);
}

constexpr std::size_t kCount = std::size_t{kLocal} * 65536;  // 2 MiB: 256 KiB per head
constexpr double kBytes = static_cast<double>(kCount * 4);

TEST(SimInNetwork, NvlsTreeOneLoopOnTwoHosts) {
  // Every head's chunk b = B/8 at once: the NVSwitch pulls 8 chunks up each GPU's link (one per head) while one
  // reduced chunk comes down; host 1's head sends its sum to host 0's over the rail, which folds it in and sends the
  // result back; then the NVSwitch multicasts 8 chunks down each GPU's link:
  //   T = 2 a_nv + 2 B/L_nv + 2 (2 a_pcie + 2 a_nic) + 2 b/NIC + b/R_gpu, plus the floor and two network steps;
  // the NVSwitch's legs move at the share of the rates NCCL's NVLS reaches (WireRule::switchShare).
  const Topology t = loadTopology("dgx-h100-ib400");
  const Figures f(t);
  const double b = kBytes / kLocal;
  const double nv = f.nvlink * NcclModelParams{}.nvlsFraction, nvls = f.nvls * NcclModelParams{}.nvlsFraction;
  const double want = 2 * f.nvlinkLat + std::max(kBytes / nv, b / std::min(nv, nvls)) + kBytes / nv +
                      2 * (2 * f.railLat() + b / f.rail()) + b / f.gpuReduce + launchFloor() +
                      2 * stepExtra(NcclPath::Net, 2 * f.railLat());
  const sim::SimResult r = simulate(t, "nvls_tree", kCount, kCount * 4 / kLocal);
  EXPECT_NEAR(r.seconds, want, want * kRelTolerance);
  EXPECT_EQ(r.method, "exact");
}

TEST(SimInNetwork, CollnetDirectOneLoopOnTwoHosts) {
  // Head j gathers the 7 other GPUs' pieces of chunk j one after the other (each GPU sends to a different head in
  // each round, so every link carries one chunk per round), SHARP all-reduces it over rail j, and head j sends the
  // result to the 7 others at once (7 chunks out of and into each GPU's link):
  //   T = 7 (2 a_nv + b/L_nv + b/R_gpu) + SHARP(b) + 2 a_nv + 7 b/L_nv, plus the floor and 8 NVLink steps (the
  //   switch ops pay none).
  const Topology t = loadTopology("dgx-h100-ib400");
  const Figures f(t);
  const double b = kBytes / kLocal;
  const double want = (kLocal - 1) * (f.nvlinkHop(b) + b / f.gpuReduce) + f.sharp2(b) + 2 * f.nvlinkLat +
                      (kLocal - 1) * b / f.nvlink + launchFloor() + kLocal * stepExtra(NcclPath::Nvl, 2 * f.nvlinkLat);
  const sim::SimResult r = simulate(t, "collnet_direct", kCount, kCount * 4 / kLocal);
  EXPECT_NEAR(r.seconds, want, want * kRelTolerance);
}

TEST(SimInNetwork, CollnetChainOneLoopOnTwoHosts) {
  // One chunk of the whole buffer: 7 hops up the chain (each folded in), SHARP over the heads' rail, 7 hops down:
  //   T = 7 (2 a_nv + B/L_nv + B/R_gpu) + SHARP(B) + 7 (2 a_nv + B/L_nv), plus the floor and 14 NVLink steps.
  const Topology t = loadTopology("dgx-h100-ib400");
  const Figures f(t);
  const double want = (kLocal - 1) * (f.nvlinkHop(kBytes) + kBytes / f.gpuReduce) + f.sharp2(kBytes) +
                      (kLocal - 1) * f.nvlinkHop(kBytes) + launchFloor() +
                      2 * (kLocal - 1) * stepExtra(NcclPath::Nvl, 2 * f.nvlinkLat);
  const sim::SimResult r = simulate(t, "collnet_chain", kCount, kCount * 4);
  EXPECT_NEAR(r.seconds, want, want * kRelTolerance);
}

// One loop of collnet_chain where each rail spans several leaves: SHARP's aggregation tree reduces at each leaf and at
// each switch above where two of them meet (sim_backend.h), so every fabric link carries one stream, not one per host.
// The loop costs the one-leaf closed form with `fabricHops` more hops each way in both SHARP stages,
//   SHARP(B) = 2 (a_rail + h a_fabric) + B / min(rail, fabric, R_sharp) + B / min(rail, fabric),
// exact and on the fluid network. Aggregating at the leaves only, the three-level fabric reads 212 us against 131:
// two leaves' streams share a spine's uplink to the core.
void expectAggregatedChainLoop(const Topology& t, int hosts, int local, int fabricHops) {
  const Figures f(t);
  const TopoLink& uplink = linkBetween(t, "leaf0", "spine0");
  const double fabricLat = uplink.latencyUs * kSecondsPerUs, fabric = uplink.bandwidthGBps * kBytesPerGB;
  const double sharp = 2 * (f.railLat() + fabricHops * fabricLat) + kBytes / std::min({f.rail(), fabric, f.sharp}) +
                       kBytes / std::min(f.rail(), fabric);
  const double want = (local - 1) * (f.nvlinkHop(kBytes) + kBytes / f.gpuReduce) + sharp +
                      (local - 1) * f.nvlinkHop(kBytes) + launchFloor() +
                      2 * (local - 1) * stepExtra(NcclPath::Nvl, 2 * f.nvlinkLat);
  const int n = hosts * local;
  const AlgoParams p{kCount * 4, 1, rankHosts(t, n)};
  for (const sim::SimMode mode : {sim::SimMode::Exact, sim::SimMode::Fluid}) {
    sim::SimConfig cfg;
    cfg.mode = mode;
    const sim::SimResult r =
        sim::Simulator(t, n, cfg).runAlgorithm({Collective::AllReduce, n, kCount, DType::F32}, "collnet_chain", p);
    EXPECT_NEAR(r.seconds, want, want * kRelTolerance) << t.name << " " << toString(mode);
  }
}

TEST(SimInNetwork, CollnetChainAggregatesAtEachLevelOfItsRail) {
  // 4 hosts of 8 GPUs, 2 per leaf: a rail's two leaves meet at a spine.
  expectAggregatedChainLoop(generateTopology("multi_node", R"({"nodes": 4, "levels": 2, "leaves": 16, "arch": "hopper",
      "nvlink_GBps": 450, "nvls_GBps": 450, "pcie_GBps": 63, "nic_GBps": 50, "reduce_GBps": 1100, "sharp_GBps": 50})"),
                            4, kLocal, 1);
  // 8 hosts of 2 GPUs and one NIC, 2 per leaf, 2 leaves per pod, 2 pods: the leaves meet at spines, the spines at a
  // core.
  expectAggregatedChainLoop(generateTopology("multi_node", R"({"nodes": 8, "gpus_per_node": 2, "nics_per_node": 1,
      "radix": 4, "levels": 3, "arch": "hopper", "nvlink_GBps": 450, "nvls_GBps": 450, "pcie_GBps": 63, "nic_GBps": 50,
      "reduce_GBps": 1100, "sharp_GBps": 50})"),
                            8, 2, 2);
}

TEST(SimInNetwork, CostTermsFollowTheSimulatedPipeline) {
  // 64 MiB with NCCL's chunks on 2 hosts x 8: many loops. The cost terms' fill + period per loop against the
  // simulator, and the simulator against the inter-host floor (each NIC carries at least its rail's share B/8 each
  // way). The cost terms carry no protocol latencies: both run without the GPU generation, which times transfers
  // without NCCL's point-to-point protocol.
  Topology t = loadTopology("dgx-h100-ib400");
  for (TopoNode& node : t.nodes) node.arch.clear();
  const Figures f(t);
  const std::size_t count = std::size_t{16} << 20;
  const double bytes = static_cast<double>(count * 4);
  const CostModel model(t, kRanks);
  for (const std::string a : {"nvls_tree", "collnet_direct", "collnet_chain"}) {
    for (int channels : {1, 4}) {
      const sim::SimResult r = simulate(t, a, count, 0, channels);
      const Estimate e = model.estimate({Collective::AllReduce, kRanks, count, DType::F32}, a,
                                        AlgoParams{0, channels, rankHosts(t, kRanks)});
      ASSERT_TRUE(e.supported) << e.note;
      const double modelSeconds = e.seconds() - model.callOverheadUs() * kSecondsPerUs;
      std::printf("%-15s channels %d: simulated %.1f us (%.1f GB/s busbw), model %.1f us\n", a.c_str(), channels,
                  r.seconds * 1e6, 2.0 * (kRanks - 1) / kRanks * bytes / r.seconds / kBytesPerGB, modelSeconds * 1e6);
      EXPECT_GE(r.seconds, bytes / kLocal / f.rail()) << a;
      EXPECT_NEAR(modelSeconds, r.seconds, 0.3 * r.seconds) << a << " channels " << channels;
    }
  }
}

/// The cost terms against the simulator on the GPUs as shipped (the next test), where every transfer pays NCCL's step
/// latency (the wire rule) and a connection's transfers follow each other. nvls_tree's terms follow its tree hops
/// closely; collnet's in-host pipelines are approximated (Direct's steps as lockstep, Chain's hops as overlapping):
/// measured within 8% and 13%. Left out: Chain on one host at 128 MiB on 4 channels, priced at 0.77 of the simulator.
constexpr double kNvlsTreeWireTol = 0.1;
constexpr double kCollnetWireTol = 0.2;

TEST(SimInNetwork, CostTermsFollowTheSimulatedPipelineUnderNcclsProtocol) {
  // Between two hosts' heads each loop pays a network step latency on top of its chunks; inside a host, collnet's
  // steps pay NVLink's. Before the terms paid the route's latency only: auto chose nvls_tree on 2 channels at 1 GiB
  // on 8 x 8 H100 for 5426 us, the simulator ran it in 19346; collnet's terms were up to 2.3x below the simulator.
  // On one host collnet performs no switch op: the call's floor is Simple's, not NVLS's (the terms were 1.4x above
  // the simulator at 1 MiB).
  struct Case {
    std::string algo;
    int hosts;
    std::size_t count, chunkBytes;
    int channels;
  };
  std::vector<Case> cases;
  const std::size_t kMiB = std::size_t{1} << 20;
  for (int hosts : {2, 4}) {
    for (std::size_t chunk : {std::size_t{0}, 512 * std::size_t{1024}}) {
      for (int channels : {1, 4}) cases.push_back({"nvls_tree", hosts, 32 * kMiB, chunk, channels});
    }
  }
  for (const char* a : {"collnet_direct", "collnet_chain"}) {
    for (int channels : {1, 4}) {
      for (std::size_t count : {4 * kMiB, 32 * kMiB}) cases.push_back({a, 2, count, 0, channels});
      for (std::size_t count : {kMiB / 4, 4 * kMiB}) cases.push_back({a, 1, count, 0, channels});
    }
  }
  const Topology t = loadTopology("dgx-h100-ib400");
  for (const Case& k : cases) {
    const int ranks = k.hosts * kLocal;
    const CostModel model(t, ranks);
    const AlgoParams p{k.chunkBytes, k.channels, rankHosts(t, ranks)};
    const CollectiveSpec spec{Collective::AllReduce, ranks, k.count, DType::F32};
    const double simulated = sim::Simulator(t, ranks).runAlgorithm(spec, k.algo, p).seconds;
    const Estimate e = model.estimate(spec, k.algo, p);
    ASSERT_TRUE(e.supported) << e.note;
    const double modelSeconds = e.seconds() - model.callOverheadUs() * kSecondsPerUs;
    const double tol = k.algo == "nvls_tree" ? kNvlsTreeWireTol : kCollnetWireTol;
    EXPECT_NEAR(modelSeconds, simulated, tol * simulated)
        << k.algo << " on " << k.hosts << " hosts, " << k.count * 4 / kMiB << " MiB, chunk " << k.chunkBytes << ", "
        << k.channels << " channels: model " << modelSeconds * 1e6 << " us, simulated " << simulated * 1e6 << " us";
  }
}

}  // namespace
}  // namespace collbench
