// No simulated all-reduce beats the bandwidth floor. Every rank must send and receive at least 2(n-1)/n of the
// buffer (Patarasuk & Yuan 2009: each of the n-1 other ranks' contributions to every element must reach it, and its
// own must reach them), and a rank of a single-switch node moves data only over its own link of bandwidth B, so
//   t >= 2 (n-1) / n * S / B.
// The bound is independent of the algorithm, its chunking and its channels, so it catches a simulator that lets
// flows share a link for free, drops transfers or overlaps what a connection serialises.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kGpuLinkGBps = 450;  // dgx-h100-8x1: each GPU's one link to the NVSwitch (topologies/README.md)

struct Case {
  int n;
  int channels;
  std::size_t chunkBytes;
};

TEST(LowerBound, NoAllReduceBeatsTheBandwidthFloorOnOneSwitch) {
  const Topology t = loadTopology("dgx-h100-8x1");
  const std::size_t count = std::size_t{64} << 20 >> 2;  // 64 MiB of floats
  const double bytes = static_cast<double>(count * 4);
  for (const std::string& algo : algorithmNames(Collective::AllReduce)) {
    const AlgorithmInfo& info = findAlgorithm(Collective::AllReduce, algo);
    // In-network reduction moves (n+1)/n of the bytes per link, under this floor (test_sim_switch.cc bounds it).
    if (info.native || info.traits.needsSwitchReduction) continue;
    for (const Case c : {Case{2, 1, 0}, Case{3, 2, 128 << 10}, Case{5, 4, 128 << 10}, Case{5, 1, 4 << 20},
                         Case{8, 4, 512 << 10}, Case{8, 8, 1 << 20}}) {
      AlgoParams p;
      p.channels = c.channels;
      p.chunkBytes = c.chunkBytes;
      p.rankHost = rankHosts(t, c.n);
      const sim::SimResult r = sim::Simulator(t, c.n).runAlgorithm(
          CollectiveSpec{Collective::AllReduce, c.n, count, DType::F32, ReduceOp::Sum}, algo, p);
      const double floor = 2.0 * (c.n - 1) / c.n * bytes / (kGpuLinkGBps * 1e9);
      EXPECT_GE(r.seconds, floor * (1 - 1e-9))
          << fmt::format("{} n={} channels={} chunk={} ({}): {:.1f} us < floor {:.1f} us", algo, c.n, c.channels,
                         c.chunkBytes, r.method, r.seconds * 1e6, floor * 1e6);
    }
  }
}

}  // namespace
}  // namespace collbench
