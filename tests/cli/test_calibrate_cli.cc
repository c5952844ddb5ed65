// `collbench calibrate --model nccl` end to end: the overlay written, the identifiability verdicts printed, a table of
// another size predicted, and the refusals (degenerate fits, missing or bad flags) as one line with exit code 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

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

/// The "X%" of the first "median" after `label` in `text` ("" when absent).
std::string medianAfter(const std::string& text, const std::string& label) {
  const std::size_t at = text.find(label);
  const std::size_t median = at == std::string::npos ? at : text.find("median", at);
  const std::size_t end = median == std::string::npos ? median : text.find('%', median);
  if (end == std::string::npos) return "";
  const std::size_t from = text.find_last_of(' ', end) + 1;
  return text.substr(from, end - from + 1);
}

TEST_F(NcclCalibrateCli, CalibrationFileAppliesToFidelityPerfAndSimAtAnotherNodeCount) {
  const std::string cal = path("h100.cal.json");
  const std::string oneNode = kData + "h100x8-nvls-dgxcbench.csv";
  const CliResult fit = runCli(fmt::format(
      "calibrate {}h100x16-2node-ib400-nvlstree-ncclTests309-A.csv --model nccl --topology dgx-h100-ib400 -o {} "
      "--predict {}",
      kData, cal, oneNode));
  ASSERT_EQ(fit.exitCode, 0) << fit.err;
  const std::string predicted = medianAfter(fit.out, "# predicted " + oneNode);
  ASSERT_FALSE(predicted.empty()) << fit.out;
  // fidelity with the file simulates the one-node table as calibrate's prediction did; without it, with the defaults.
  const std::string fidelity = fmt::format("fidelity {} --topology dgx-h100-ib400 --algo nccl", oneNode);
  const CliResult withCal = runCli(fidelity + " --nccl-calibration " + cal);
  const CliResult withoutCal = runCli(fidelity);
  ASSERT_EQ(withCal.exitCode, 0) << withCal.err;
  ASSERT_EQ(withoutCal.exitCode, 0) << withoutCal.err;
  EXPECT_EQ(medianAfter(withCal.out, "# all sizes"), predicted) << withCal.out;
  EXPECT_NE(medianAfter(withoutCal.out, "# all sizes"), predicted) << withoutCal.out;
  // perf and sim at 8 nodes, which no log had: the calibrated parameters change the time of NVLSTree's 1 GiB.
  const std::string perf = "perf all_reduce --backend sim --topology dgx-h100-ib400 -g 64 --algo nccl -b 1G -e 1G";
  const CliResult perfCal = runCli(perf + " --nccl-calibration " + cal), perfDefault = runCli(perf);
  ASSERT_EQ(perfCal.exitCode, 0) << perfCal.err;
  ASSERT_EQ(perfDefault.exitCode, 0) << perfDefault.err;
  EXPECT_NE(perfCal.out.find("NVLSTree"), std::string::npos) << perfCal.out;
  const auto lastRow = [](const std::string& out) { return out.substr(out.find("  1073741824")); };
  EXPECT_NE(lastRow(perfCal.out).substr(0, 100), lastRow(perfDefault.out).substr(0, 100));
  const std::string sim = "sim --topology dgx-h100-ib400 -g 64 --algo nccl --bytes 1G --json";
  const CliResult simCal = runCli(sim + " --nccl-calibration " + cal), simDefault = runCli(sim);
  ASSERT_EQ(simCal.exitCode, 0) << simCal.err;
  EXPECT_NE(simCal.out, simDefault.out);
  // Refused before anything runs: another system's calibration, a backend that does not model NCCL, a missing file.
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {
           Case{fmt::format("fidelity {} --topology aws-p4de --algo nccl --nccl-calibration {}", oneNode, cal),
                fmt::format("collbench: error: --nccl-calibration: calibration '{}' is for hopper/infiniband systems, "
                            "the topology's are ampere/efa\n",
                            cal)},
           Case{fmt::format("perf all_reduce --backend host -g 2 --nccl-calibration {}", cal),
                fmt::format("collbench: error: --nccl-calibration {}: the NCCL model's calibration is for --backend "
                            "sim, not 'host'\n",
                            cal)},
           Case{"sim --algo nccl --nccl-calibration /nonexistent.json",
                "collbench: error: --nccl-calibration: cannot read calibration '/nonexistent.json'\n"},
       }) {
    const CliResult r = runCli(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
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

// Every flag is checked the same way whichever model runs, and the other model's flags are refused by name rather
// than ignored (an audit saw --min-bytes 12Q, --hosts -1 and -g -1 accepted with --model nccl, exit 0).
TEST_F(NcclCalibrateCli, FlagsAreCheckedUnderBothModels) {
  const std::string log = kData + "h100x16-2node-ib400-nvlstree-ncclTests309-A.csv";
  const std::string out = path("flags.json");
  const std::string nccl = fmt::format("calibrate {} --model nccl --topology dgx-h100-ib400 -o {}", log, out);
  const std::string ab = fmt::format("calibrate {} -o {}", log, out);  // flags are checked before any log is read
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases;
  for (const std::string& base : {nccl, ab}) {
    for (const Case& c : {
             Case{"--min-bytes 12Q", "invalid --min-bytes '12Q': unknown suffix 'Q' (expected e.g. 8, 64K, 32M, 1.5G)"},
             Case{"--min-bytes 1G --max-bytes 1K",
                  "--min-bytes 1G is more than --max-bytes 1K: no size is left to fit"},
             Case{"--memory-tiers abc", "--memory-tiers: 'abc' is not auto or a number >= 1"},
             Case{"--rank-kind bogus", "--rank-kind: 'bogus' is not cpu or gpu"},
             Case{"--rank-kind switch", "--rank-kind: 'switch' is not cpu or gpu"},
             Case{"--hosts -1", "--hosts must be in [1, 16777216], got -1"},
             Case{"--hosts 0", "--hosts must be in [1, 16777216], got 0"},
             Case{"-g -1", "-g/--ngpus must be in [1, 16777216] (or 0: the count the logs state), got -1"},
             Case{"--collective bogus",
                  "--collective: unknown collective 'bogus' (accepted: all_reduce, reduce_scatter, all_gather, "
                  "broadcast, reduce, barrier)"},
         }) {
      cases.push_back({base + " " + c.args, c.message});
    }
  }
  cases.push_back({nccl + " --hosts 2", "--hosts applies to --model alpha-beta only; remove it with --model nccl"});
  cases.push_back({nccl + " --rank-kind gpu --keep-all --min-bytes 1K",
                   "--min-bytes, --rank-kind, --keep-all apply to --model alpha-beta only; remove them with --model "
                   "nccl"});
  cases.push_back({ab + " -g 8", "-g/--ngpus needs --model nccl"});
  // Two outputs of one command must be two files, however the paths are spelled.
  cases.push_back({nccl + " -J " + out, fmt::format("-o/--output and -J/--output_file name the same file '{}'", out)});
  const std::string spelled = (dir_ / "." / "flags.json").string();
  cases.push_back(
      {ab + " -J " + spelled, fmt::format("-o/--output and -J/--output_file name the same file '{}'", spelled)});
  for (const Case& c : cases) {
    const CliResult r = runCli(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.out;
    EXPECT_EQ(r.err, "collbench: error: " + c.message + "\n") << c.args;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
}

}  // namespace
}  // namespace collbench
