// Sweeps over cores and a cluster as a user runs them (docs/sweeps.md): `tune`, `sweep` and `regret` with -j N give
// the -j 1 output; their --shard K/N outputs, joined by `collbench merge`, are the unsharded file apart from
// provenance; bad flags are one line and exit 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::countLines;
using testing::runCli;
using testing::slurp;

class SweepsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("sweeps_cli_{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void run(const std::string& args) const {
    const CliResult r = runCli(args);
    ASSERT_EQ(r.exitCode, 0) << args << "\n" << r.err << r.out;
  }
  std::filesystem::path dir_;
};

/// The file's lines without the provenance line (a tuning table writes it on one line of its own).
std::string withoutProvenance(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"provenance\"") == std::string::npos) out += line + "\n";
  }
  return out;
}

/// A record without what differs from run to run (command line, tool) or with the host (wall_s, cpu_s).
std::string withoutRunFields(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  j.erase("command_line");
  j.erase("environment");
  for (auto& row : j["rows"]) {
    row.erase("wall_s");
    row.erase("cpu_s");
  }
  return j.dump(1);
}

TEST_F(SweepsCli, TuneShardsMergeIntoTheUnshardedTable) {
  const std::string grid =
      "tune --backend sim --topology dgx-h100-8x1 -g 2,4,8 -b 1K -e 1M -f 32 --chunks 0 --channels 1";
  run(fmt::format("{} -j 1 -o {}", grid, path("whole.json")));
  run(fmt::format("{} -j 2 -o {}", grid, path("j2.json")));
  EXPECT_EQ(withoutProvenance(slurp(path("j2.json"))), withoutProvenance(slurp(path("whole.json"))));
  for (int k = 1; k <= 4; ++k) run(fmt::format("{} --shard {}/4 -o {}", grid, k, path("part.{shard}.json")));
  EXPECT_NE(slurp(path("part.2.json")).find("\"shard\":\"2/4\""), std::string::npos);
  run(fmt::format("merge {} {} {} {} -o {}", path("part.4.json"), path("part.2.json"), path("part.1.json"),
                  path("part.3.json"), path("merged.json")));
  const std::string whole = slurp(path("whole.json")), merged = slurp(path("merged.json"));
  EXPECT_EQ(countLines(merged), countLines(whole));
  EXPECT_EQ(withoutProvenance(merged), withoutProvenance(whole));
  EXPECT_EQ(merged.find("\"shard\""), std::string::npos);
  // A missing part is refused, naming it.
  const CliResult r = runCli(fmt::format("merge {} {} {} -o {}", path("part.1.json"), path("part.2.json"),
                                         path("part.4.json"), path("m2.json")));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_EQ(r.err, "collbench: error: merge: 3 of 4 shards given; missing 3\n");
}

// On 2048 ranks of a star, direct all-reduce's schedule (8.4 M transfers) is too large to build and the simulator has
// no way to time it without: tune measures the others, as the selector would choose among them, rather than stopping
// the whole sweep at direct.
TEST_F(SweepsCli, TuneSkipsSchedulesTheBackendCannotBuild) {
  run(fmt::format("topo gen flat --param n=2048 -o {}", path("star.json")));
  run(fmt::format("tune --backend sim --topology {} -g 2048 -b 1M -e 1M --algos direct,rabenseifner -j 1 -o {}",
                  path("star.json"), path("table.json")));
  const nlohmann::json table = nlohmann::json::parse(slurp(path("table.json")));
  const nlohmann::json& candidates = table["sections"][0]["entries"][0]["candidates"];
  ASSERT_EQ(candidates.size(), 1U) << candidates.dump();
  EXPECT_EQ(candidates[0]["algorithm"], "rabenseifner");
}

TEST_F(SweepsCli, SweepAndRegretShardsMergeIntoTheUnshardedRecords) {
  const std::string sweep = "sweep --topology dgx-h100-8x1 -g 2,all --sizes 1K,1M --algo ring,tree";
  run(fmt::format("{} -j 1 --json {}", sweep, path("sw.json")));
  for (int k = 1; k <= 3; ++k) run(fmt::format("{} -j 2 --shard {}/3 --json {}", sweep, k, path("sw.{shard}.json")));
  run(fmt::format("merge {} {} {} -o {}", path("sw.3.json"), path("sw.1.json"), path("sw.2.json"), path("swm.json")));
  EXPECT_EQ(withoutRunFields(slurp(path("swm.json"))), withoutRunFields(slurp(path("sw.json"))));

  run(fmt::format("tune --backend sim --topology dgx-h100-8x1 -g 2,4,8 -b 1K -e 1M -f 32 -o {}", path("t.json")));
  const std::string regret = fmt::format("regret --backend sim --topology dgx-h100-8x1 --tuning {}", path("t.json"));
  run(fmt::format("{} -j 1 -J {}", regret, path("r.json")));
  run(fmt::format("{} -j 2 -J {}", regret, path("rj.json")));
  EXPECT_EQ(withoutRunFields(slurp(path("rj.json"))), withoutRunFields(slurp(path("r.json"))));
  for (int k = 1; k <= 2; ++k) run(fmt::format("{} --shard {}/2 -J {}", regret, k, path("r.{shard}.json")));
  run(fmt::format("merge {} {} -o {}", path("r.2.json"), path("r.1.json"), path("rm.json")));
  EXPECT_EQ(withoutRunFields(slurp(path("rm.json"))), withoutRunFields(slurp(path("r.json"))));
}

TEST_F(SweepsCli, BadShardsAndJobsAreOneLineAndExit2) {
  const std::string out = path("x.json");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {fmt::format("tune --backend model -g 2 --shard 3/2 -o {}", out),
            "--shard '3/2': K must be in 1..N and N >= 1"},
           {fmt::format("sweep --sizes 1K --shard 1of2 --json {}", out),
            "--shard '1of2': expected K/N (this job's part K of N, e.g. 2/8) or auto"},
           {fmt::format("regret --shard 0/1 -J {}", out), "--shard '0/1': K must be in 1..N and N >= 1"},
           {fmt::format("tune --backend host -g 2 -j 2 -o {}", out),
            "-j/--jobs 2: backend 'host' moves data, and configurations timed at once would disturb each other's "
            "times (use -j 1; --shard K/N splits the grid over separate machines)"},
           {fmt::format("tune --backend model -g 2 -j 0 -o {}", out), "-j/--jobs must be >= 1, got 0"},
           {fmt::format("tune --backend model -g 2 --shard 1/2 --library both -o {}", out),
            "--shard splits collbench's sweep into tables for collbench merge: it takes no --library nccl/both, "
            "--export or --from (export the merged table with --from)"}}) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args;
    EXPECT_EQ(r.err, "collbench: error: " + message + "\n") << args;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
}

TEST_F(SweepsCli, MergeRefusesHugeShardCountsInOneShortLine) {
  run(fmt::format("tune --backend model -g 2 -b 1K -e 1K --shard 1/2 -o {}", path("p.1.json")));
  const std::string text = slurp(path("p.1.json"));
  const auto at = text.find("\"shard\":\"1/2\"");
  ASSERT_NE(at, std::string::npos);
  const auto withShard = [&](const std::string& shard) {
    std::string t = text;
    t.replace(at, std::string("\"shard\":\"1/2\"").size(), "\"shard\":\"" + shard + "\"");
    const std::string p = path("p." + std::to_string(t.size()) + ".json");
    std::ofstream(p) << t;
    return p;
  };
  const std::string huge = withShard("1/2000000000"), many = withShard("1/100000000");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {fmt::format("merge {} -o {}", huge, path("m.json")),
            fmt::format("merge: {}: shard '1/2000000000': N is more than 1048576, the most shard files one command "
                        "line can name",
                        huge)},
           {fmt::format("merge {} -o {}", many, path("m.json")),
            fmt::format("merge: {}: shard '1/100000000': N is more than 1048576, the most shard files one command "
                        "line can name",
                        many)},
           {fmt::format("merge {} -o {}", path("p.1.json"), path("m.json")),
            "merge: 1 of 2 shards given; missing 2"}}) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args;
    EXPECT_EQ(r.err, "collbench: error: " + message + "\n") << args;
    EXPECT_FALSE(std::filesystem::exists(path("m.json"))) << args;
  }
}

TEST_F(SweepsCli, ShardAutoUnderMpirunWritesThisRanksPart) {
  const CliResult r =
      runCli(fmt::format("tune --backend model -g 2,4 -b 1K -e 4K --shard auto -o {}", path("t.{shard}.json")));
  EXPECT_EQ(r.exitCode, 2);  // no launcher in the test's environment
  const std::string env = "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2";
  const std::string cmd = fmt::format("{} {} tune --backend model -g 2,4 -b 1K -e 4K --shard auto -o {} >/dev/null",
                                      env, COLLBENCH_CLI, path("t.{shard}.json"));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;  // NOLINT(concurrency-mt-unsafe)
  EXPECT_TRUE(std::filesystem::exists(path("t.2.json")));
  EXPECT_FALSE(std::filesystem::exists(path("t.1.json")));
  EXPECT_NE(slurp(path("t.2.json")).find("\"shard\":\"2/2\""), std::string::npos);
}

}  // namespace
}  // namespace collbench
