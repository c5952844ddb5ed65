// Switch ops on the simulator (sim_backend.h): NVLS all-reduce timed against its closed form on a flat switch that
// reduces and on dgx-h100-8x1, refused where the switch cannot reduce.
#include <gtest/gtest.h>

#include <string>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kBytesPerGB = 1e9;
constexpr double kRelTolerance = 1e-6;

/// flat(n) whose switch reduces at `reduceGBps` per port.
Topology reducingFlat(int n, double linkGBps, double latencyUs, double reduceGBps) {
  Topology t = flatTopology(n, linkGBps, latencyUs);
  t.nodes[static_cast<std::size_t>(t.nodeIndex("sw0"))].reduceGBps = reduceGBps;
  validateTopology(t, "reducing flat");
  return t;
}

/// One loop of nvls (every owner's chunk b = B/n at once; sim_backend.h: the legs of a switch op stream together):
/// the reduction pulls n chunks up each link while one reduced chunk comes down at min(L, S); then the multicast
/// sends one chunk up while n come down. One link latency per stage:
///   T = 2 lat + max(B / L, B / (n min(L, S))) + B / L.
double nvlsOneLoopSeconds(int n, double bytes, double linkGBps, double latencyUs, double reduceGBps) {
  const double link = linkGBps * kBytesPerGB, reduced = std::min(linkGBps, reduceGBps) * kBytesPerGB;
  return 2 * latencyUs * 1e-6 + std::max(bytes / link, bytes / n / reduced) + bytes / link;
}

/// nvls of `count` floats in one loop (one channel, chunk = the owner's whole share).
sim::SimResult oneLoop(const Topology& t, int n, std::size_t count) {
  AlgoParams p;
  p.chunkBytes = count * 4 / static_cast<std::size_t>(n);
  return sim::Simulator(t, n).runAlgorithm({Collective::AllReduce, n, count, DType::F32}, "nvls", p);
}

TEST(SimSwitch, NvlsOneLoopOnAFlatReducingSwitch) {
  // Switch slower than the links (S < L): at 2 GB/s the reduced chunk, 1/n of the bytes, comes down last.
  for (int n : {2, 4, 7}) {
    for (double reduceGBps : {20.0, 2.0}) {
      const std::size_t count = static_cast<std::size_t>(n) * 65536;  // 256 KiB per owner
      const sim::SimResult r = oneLoop(reducingFlat(n, 50, 1, reduceGBps), n, count);
      const double want = nvlsOneLoopSeconds(n, static_cast<double>(count * 4), 50, 1, reduceGBps);
      EXPECT_NEAR(r.seconds, want, want * kRelTolerance) << n << " " << reduceGBps;
      EXPECT_EQ(r.method, "exact");
    }
  }
}

TEST(SimSwitch, NvlsOneLoopOnDgxH100) {
  // dgx-h100-8x1: NVLink4 450 GB/s per direction, 0.3 us, NVLS 450 GB/s per port. Its GPU ranks pay NCCL's latency
  // once (sim_backend.h "Protocols"): for a call with switch ops NCCL's NVLS latency, base 0 + NVLink hwLatency 25 us
  // (tuning.cc); and the switch's legs move at the share of those rates NCCL's NVLS reaches (WireRule::switchShare).
  const std::size_t count = std::size_t{8} << 20;  // 32 MiB
  const sim::SimResult r = oneLoop(loadTopology("dgx-h100-8x1"), 8, count);
  const double share = NcclModelParams{}.nvlsFraction;
  const double want = 25e-6 + nvlsOneLoopSeconds(8, static_cast<double>(count * 4), 450 * share, 0.3, 450 * share);
  EXPECT_NEAR(r.seconds, want, want * kRelTolerance);
}

TEST(SimSwitch, CostTermMatchesTheOneLoopClosedForm) {
  const Topology t = reducingFlat(4, 50, 1, 20);
  const std::size_t count = 4 * 65536;
  AlgoParams p;
  p.chunkBytes = count;  // one loop
  const CostModel m(t, 4);
  const Estimate e = m.estimate({Collective::AllReduce, 4, count, DType::F32}, "nvls", p);
  ASSERT_TRUE(e.supported) << e.note;
  const double want = nvlsOneLoopSeconds(4, static_cast<double>(count * 4), 50, 1, 20) * 1e6;
  EXPECT_NEAR(e.terms.us - m.callOverheadUs(), want, want * kRelTolerance);
  EXPECT_FALSE(CostModel(loadTopology("dgx-a100-8x1"), 8)
                   .estimate({Collective::AllReduce, 8, count, DType::F32}, "nvls")
                   .supported);
}

TEST(SimSwitch, NvlsBeatsRingAtOneGiBOnDgxH100) {
  // Per link and direction NVLS moves (n+1)/n of the buffer, a ring 2(n-1)/n: at 1 GiB on 8 GPUs NVLS must win,
  // and cannot beat its own floor (n+1)/n x B / 450 GB/s.
  const Topology t = loadTopology("dgx-h100-8x1");
  const std::size_t count = std::size_t{1} << 28;
  const CollectiveSpec spec{Collective::AllReduce, 8, count, DType::F32};
  const sim::Simulator sim(t, 8);
  const sim::SimResult nvls = sim.runAlgorithm(spec, "nvls");
  const sim::SimResult ring = sim.runAlgorithm(spec, "ring");
  const double bytes = static_cast<double>(count * 4);
  EXPECT_LT(nvls.seconds, ring.seconds);
  EXPECT_GE(nvls.seconds, 9.0 / 8 * bytes / (450 * kBytesPerGB));
  // The cost term's pipeline (the first loop's two stages, then the busier link direction per loop) within 15 %.
  const Estimate e = CostModel(t, 8).estimate(spec, "nvls");
  EXPECT_NEAR(e.seconds(), nvls.seconds, 0.15 * nvls.seconds);
}

TEST(SimSwitch, RefusedWhereTheSwitchCannotReduce) {
  const CollectiveSpec spec{Collective::AllReduce, 8, 1024, DType::F32};
  try {
    sim::Simulator(loadTopology("dgx-a100-8x1"), 8).runAlgorithm(spec, "nvls");
    FAIL() << "dgx-a100-8x1's NVSwitch has no SHARP";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 0 op 0 (switch_reduce, group 0, root 0): switch n0.nvsw of group 0 "
                                         "cannot reduce"),
              std::string::npos)
        << e.what();
  }
  try {
    sim::Simulator(reducingFlat(4, 50, 1, 0), 4).runAlgorithm({Collective::AllReduce, 4, 1024, DType::F32}, "nvls");
    FAIL() << "flat's switch does not reduce";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("switch sw0 of group 0 cannot reduce"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collbench
