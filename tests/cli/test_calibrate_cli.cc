// `collbench calibrate --model nccl` end to end: the overlay written, the identifiability verdicts printed, a table of
// another size predicted, and the refusals (degenerate fits, missing or bad flags) as one line with exit code 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_runner.h"
#include "collbench/nccl_calibration.h"

namespace collbench {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::runCli;

const std::string kData = std::string(COLLBENCH_SOURCE_DIR) + "/tests/data/realdata/";

class NcclCalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("collbench_calibrate_cli_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(NcclCalibrateCli, TwoNodeCalibrationPredictsTheOneNodeTable) {
  const std::string out = path("h100.cal.json");
  const CliResult r = runCli(fmt::format(
      "calibrate {0}h100x16-2node-ib400-nvlstree-ncclTests309-A.csv --model nccl --topology dgx-h100-ib400 -o {1} "
      "--predict {0}h100x8-nvls-dgxcbench.csv",
      kData, out));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("net_fraction               0.98       0.98             [0.3, 1]  not identified by these "
                       "logs (no row depends on it): kept at prior 0.98"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# predicted " + kData + "h100x8-nvls-dgxcbench.csv (8 ranks, not fitted): median "),
            std::string::npos)
      << r.out;
  const NcclCalibration c = readNcclCalibration(out);
  EXPECT_EQ(c.topology, "dgx-h100-ib400");
  EXPECT_EQ(c.gpusPerNode, 8);
  EXPECT_EQ(c.rows.size(), 32u);
  EXPECT_EQ(c.heldOut.count, 16u);  // --holdout-every 2 by default
  for (const NcclParamFit& p : c.params) {
    EXPECT_GE(p.value, p.bounds.lower) << toString(p.param);
    EXPECT_LE(p.value, p.bounds.upper) << toString(p.param);
  }
}

TEST_F(NcclCalibrateCli, RingTableUnderItsEnvironment) {
  // NCCL_ALGO=Ring on 2 nodes: every row is NCCL's ring under that environment, never NVLSTree.
  const CliResult r = runCli(fmt::format(
      "calibrate {}h100x16-2node-ib400-ring-ncclTests309-G.csv --model nccl --topology dgx-h100-ib400 -o {} "
      "--nccl-env NCCL_ALGO=Ring --nccl-env NCCL_MIN_CTAS=24 --holdout-every 0",
      kData, path("ring.json")));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("Ring/Simple"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("NVLSTree"), std::string::npos) << r.out;
}

TEST_F(NcclCalibrateCli, RefusalsAreOneLineAndExit2) {
  const std::string log = kData + "h100x16-2node-ib400-nvlstree-ncclTests309-A.csv";
  const std::string out = path("refused.json");
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {
           Case{fmt::format("calibrate {} --model nccl -o {}", log, out),
                "collbench: error: --topology: --model nccl needs the system the logs ran on (e.g. dgx-h100-ib400)\n"},
           Case{fmt::format("calibrate {} --model nccl --topology dgx-h100-ib400 --nccl-env ALGO=ring -o {}", log, out),
                "collbench: error: --nccl-env: 'ALGO=ring' is not NCCL_<NAME>=<value>\n"},
           Case{fmt::format("calibrate {} --model nccl --topology dgx-h100-ib400 --nccl-env NCCL_ALGO=fast -o {}", log,
                            out),
                "collbench: error: NCCL_ALGO=fast: unknown element 'fast' (available: Tree, Ring, CollnetDirect, "
                "CollnetChain, NVLS, NVLSTree, PAT)\n"},
           Case{fmt::format("calibrate {} --model ncl -o {}", log, out),
                "collbench: error: --model: 'ncl' is not alpha-beta or nccl\n"},
           Case{fmt::format("calibrate {} --topology dgx-h100-ib400 -o {}", log, out),
                "collbench: error: --topology, --nccl-env and --predict need --model nccl\n"},
       }) {
    const CliResult r = runCli(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  // The alpha-beta fit of a GPU log is degenerate (an unbounded NVLink, a free call): refused, nothing written.
  const CliResult ab = runCli(fmt::format("calibrate {} --collective all_reduce --rank-kind gpu -o {}", log, out));
  EXPECT_EQ(ab.exitCode, 2);
  EXPECT_EQ(ab.err.rfind("collbench: error: calibrate: degenerate fit, nothing written: beta_intra fitted to no cost "
                         "(an unbounded link)",
                         0),
            0u)
      << ab.err;
  EXPECT_NE(ab.err.find("use --model nccl --topology <system>"), std::string::npos) << ab.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace collbench
