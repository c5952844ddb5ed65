// The multi-server system topologies (topologies/README.md) on the simulator: `-g N` runs on the first N/8 servers,
// and a ring across two servers is bounded by the NICs it crosses.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

const std::vector<std::string> kSystems = {"dgx-h100-ib400", "aws-p5",        "aws-p4de",
                                           "gcp-a3-mega",    "oci-h100-roce", "oci-a100-roce"};

class SimSystems : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim::registerSimBackend(); }
};

// Ring all-reduce on 16 ranks of dgx-h100-ib400 = two DGX H100 servers: ranks 7 -> 8 and 15 -> 0 cross servers
// through 50 GB/s NIC links (ConnectX-7 NDR), 2(n-1) = 30 blocks each way. So the time is at least 30 blocks at
// 50 GB/s, and at most 30 steps of the longest route's latency (GPU-PCIe-NIC-leaf-spine-leaf-NIC-PCIe-GPU:
// 2 x 0.5 + 2 x 0.85 + 2 x 0.4 = 3.5 us) plus a block at half the NIC rate (two flows on one link), plus 15
// reductions of a block at 1100 GB/s.
TEST_F(SimSystems, TwoServerRingIsBoundedByTheNics) {
  constexpr int kRanks = 16;
  constexpr std::size_t kCount = std::size_t{4} << 20;  // 16 MiB of floats: 1 MiB blocks
  const double block = static_cast<double>(kCount) * 4 / kRanks;
  const Schedule ring = buildSchedule(CollectiveSpec{Collective::AllReduce, kRanks, kCount, DType::F32}, "ring");
  const double t = makeBackend("sim", kRanks, {{"topology", "dgx-h100-ib400"}})->run(ring, Buffers(kRanks), {}).seconds;
  const double lower = 30 * block / 50e9;
  const double upper = 30 * (3.5e-6 + block / 25e9) + 15 * block / 1100e9;
  EXPECT_GE(t, lower);
  EXPECT_LE(t, upper);
  // One server's NVLink (450 GB/s) is far faster than the NICs: 8 ranks inside one server take less than half.
  const Schedule ring8 = buildSchedule(CollectiveSpec{Collective::AllReduce, 8, kCount, DType::F32}, "ring");
  EXPECT_LT(makeBackend("sim", 8, {{"topology", "dgx-h100-ib400"}})->run(ring8, Buffers(8), {}).seconds, t / 2);
}

// `collbench perf --backend sim --topology <system> -g 16` runs on each system: one row at 1 MiB with a positive
// time.
TEST(SimSystemsCli, PerfRunsOnTheFirstTwoServers) {
  if (!std::filesystem::exists(COLLBENCH_CLI)) GTEST_SKIP() << "collbench binary not built: " << COLLBENCH_CLI;
  for (const std::string& system : kSystems) {
    const testing::CliResult r =
        testing::runCli(fmt::format("perf --backend sim --topology {} -g 16 -b 1M -e 1M", system));
    ASSERT_EQ(r.exitCode, 0) << system << "\n" << r.err;
    const auto rows = testing::tableRows(r.out);
    ASSERT_EQ(rows.size(), 1u) << r.out;
    ASSERT_GE(rows[0].size(), 6u) << r.out;
    EXPECT_EQ(rows[0][0], "1048576");
    EXPECT_GT(std::stod(rows[0][5]), 0) << system;
  }
}

}  // namespace
}  // namespace collbench
