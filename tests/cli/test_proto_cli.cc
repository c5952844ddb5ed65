// `--proto LL|LL128|Simple` on perf, sim and plan: one flag, one error line with exit 2 for a bad value, the protocol
// reaches the schedule (plan --dump, --schedule-out) and the simulated time, and the host backend moves the same data.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;

bool hasSim() { return runCli("sim --bytes 8 -g 2").exitCode == 0; }

TEST(ProtoCli, BadValueIsOneLineExitTwoOnEveryCommand) {
  const std::string want = "collbench: error: --proto: unknown protocol 'LL64' (available: LL, LL128, Simple)\n";
  for (const char* args : {"plan -g 4 --bytes 1K --algo ring --proto LL64",
                           "perf --backend host -g 2 -b 1K -e 1K --proto LL64", "sim -g 2 --bytes 1K --proto LL64"}) {
    SCOPED_TRACE(args);
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_EQ(r.err, want);
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(ProtoCli, PlanCarriesItIntoTheScheduleAndItsFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("collbench_proto_{}.json", ::getpid())).string();
  std::filesystem::remove(path);
  const CliResult r = runCli("plan -g 4 --bytes 1K --algo ring --proto ll128 --dump --schedule-out " + path);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find(", protocol LL128\n"), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(testing::slurp(path));
  EXPECT_EQ(doc.at("protocol"), "LL128");
  std::filesystem::remove(path);
}

TEST(ProtoCli, SimTimesTheProtocolAndHostMovesTheSameData) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const auto timeUs = [](const std::string& proto) {
    const CliResult r = runCli("sim --topology dgx-h100-8x1 -g 8 --bytes 4M --algo ring --json" + proto);
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return nlohmann::json::parse(r.out).at("time_us").get<double>();
  };
  // Ring on dgx-h100-8x1 (tests/sim/test_sim_protocol.cc): 512 KiB blocks, 14 hops of the larger of the step latency
  // and the route's 0.6 us + wire bytes at 450 GB/s, 7 reductions at 1100 GB/s, the launch floor once (NCCL 2.28
  // tuning.cc, Ring, NVLink; collbench/wire_rule.h).
  const auto ringUs = [](double floorUs, double stepUs, double efficiency) {
    const double blk = 512 * 1024;
    return floorUs + 14 * (std::max(stepUs, 0.6) + blk / efficiency / 450e3) + 7 * blk / 1100e3;
  };
  const double ll = timeUs(" --proto LL"), ll128 = timeUs(" --proto LL128"), simple = timeUs(" --proto Simple");
  EXPECT_NEAR(ll, ringUs(6.6, 0.6, 0.5), 1e-3);
  EXPECT_NEAR(ll128, ringUs(14.0, 1.9, 120.0 / 128.0), 1e-3);
  EXPECT_NEAR(simple, ringUs(8.4, 3.4, 1.0), 1e-3);
  EXPECT_EQ(timeUs(""), simple);  // 512 KiB blocks: NCCL's point-to-point rule picks Simple
  const CliResult host = runCli("perf --backend host -g 4 -b 64K -e 64K -c 1 -n 1 --algo ring --proto LL");
  EXPECT_EQ(host.exitCode, 0) << host.err << host.out;  // results checked (-c 1): the same data movement
}

}  // namespace
}  // namespace collbench
