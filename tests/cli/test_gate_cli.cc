// `collbench gate` as CI runs it: a committed simulator baseline passes against itself, a copy with one algorithm
// slowed fails with exit 1 naming the rows, malformed or incomparable inputs exit 2, and measured runs repeat.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace collbench {
namespace {

using nlohmann::json;
using testing::CliResult;
using testing::runCli;

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / fmt::format("collbench_gate_{}_{}", ::getpid(), name);
}

const std::filesystem::path kBaselines = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "reports" / "baselines";
const std::filesystem::path kRing = kBaselines / "sim-dgx-h100-8x1-all_reduce-ring.json";
const std::filesystem::path kTree = kBaselines / "sim-dgx-h100-8x1-all_reduce-tree.json";

std::filesystem::path writeJson(const std::string& name, const json& doc) {
  const auto p = temp(name);
  std::ofstream(p) << doc.dump(2);
  return p;
}

TEST(GateCli, IdenticalRunsPass) {
  ASSERT_TRUE(std::filesystem::exists(kRing)) << "scripts/gate-baselines.sh --update writes " << kRing;
  const CliResult r = runCli(fmt::format("gate --baseline {} --current {}", kRing.string(), kRing.string()));
  EXPECT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("## collbench gate: PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("deterministic"), std::string::npos);
  EXPECT_EQ(r.err, "");
}

TEST(GateCli, SlowedAlgorithmFailsNamingTheRow) {
  // A copy of two baselines (ring and tree), with tree slowed by 10% at 1 MiB and above.
  const json ring = json::parse(testing::slurp(kRing));
  json tree = json::parse(testing::slurp(kTree));
  for (json& row : tree["results"]) {
    if (row["size"].get<std::size_t>() >= (1u << 20)) {
      for (const char* half : {"out_of_place", "in_place"})
        row[half]["time_us"] = row[half]["time_us"].get<double>() * 1.1;
    }
  }
  const auto slowTree = writeJson("tree_slow.json", tree);
  const CliResult r = runCli(fmt::format("gate --baseline {} {} --current {} {}", kRing.string(), kTree.string(),
                                         kRing.string(), slowTree.string()));
  EXPECT_EQ(r.exitCode, 1) << r.err << r.out;
  EXPECT_NE(r.out.find("## collbench gate: REGRESSION"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| all_reduce tree 1048576 B out-of-place |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("+10.00%"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("all_reduce ring"), std::string::npos) << "ring did not change: " << r.out;
  // Within a tolerance above the slowdown it passes; --all lists every row.
  const CliResult loose =
      runCli(fmt::format("gate --baseline {} --current {} --tolerance 12% --all", kTree.string(), slowTree.string()));
  EXPECT_EQ(loose.exitCode, 0) << loose.out;
  EXPECT_NE(loose.out.find("| all_reduce tree 1024 B in-place |"), std::string::npos) << loose.out;
  // --summary appends the same markdown (for $GITHUB_STEP_SUMMARY).
  const auto summary = temp("summary.md");
  std::filesystem::remove(summary);
  ASSERT_EQ(runCli(fmt::format("gate --baseline {} --current {} --summary {}", kTree.string(), slowTree.string(),
                               summary.string()))
                .exitCode,
            1);
  EXPECT_NE(testing::slurp(summary).find("REGRESSION"), std::string::npos);
  std::filesystem::remove(summary);
  std::filesystem::remove(slowTree);
}

TEST(GateCli, FasterSimulatedRunFailsAsAChange) {
  // The simulator is deterministic: a faster row is a change to review (exit 1), named as an improvement with the way
  // to accept it. A measured run that got faster passes.
  json fast = json::parse(testing::slurp(kRing));
  fast["results"][0]["out_of_place"]["time_us"] = fast["results"][0]["out_of_place"]["time_us"].get<double>() * 0.8;
  const std::size_t size = fast["results"][0]["size"];
  const auto faster = writeJson("ring_fast.json", fast);
  const CliResult r = runCli(fmt::format("gate --baseline {} --current {}", kRing.string(), faster.string()));
  EXPECT_EQ(r.exitCode, 1) << r.err << r.out;
  EXPECT_NE(r.out.find("## collbench gate: IMPROVEMENT (fails: simulated timings changed)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("| all_reduce ring {} B out-of-place |", size)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("changed: faster by 20.00%; if intended, update the baseline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scripts/gate-baselines.sh --update"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 improvement"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("**regression**"), std::string::npos) << r.out;
  // A baseline with no time at a non-zero size cannot be compared against: bad input naming the row.
  json zero = json::parse(testing::slurp(kRing));
  zero["results"][1]["in_place"]["time_us"] = 0;
  const auto broken = writeJson("ring_zero.json", zero);
  const CliResult z = runCli(fmt::format("gate --baseline {} --current {}", broken.string(), kRing.string()));
  EXPECT_EQ(z.exitCode, 2) << z.out;
  EXPECT_NE(z.err.find("results[1].in_place.time_us: 0 at size"), std::string::npos) << z.err;
  EXPECT_EQ(testing::countLines(z.err), 1) << z.err;
  std::filesystem::remove(faster);
  std::filesystem::remove(broken);
}

TEST(GateCli, BadInputExitsTwoWithOneLine) {
  const auto malformed = temp("malformed.json");
  std::ofstream(malformed) << "{\"format\": \"collbench-perf\", \"version\": 1, \"results\": [";
  json noTime = json::parse(testing::slurp(kRing));
  noTime["results"][3]["in_place"].erase("time_us");
  const auto missing = writeJson("missing_field.json", noTime);
  json fewer = json::parse(testing::slurp(kRing));
  fewer["results"].erase(fewer["results"].size() - 1);
  const auto shorter = writeJson("shorter.json", fewer);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fmt::format("gate --baseline {} --current {}", malformed.string(), kRing.string()), "malformed JSON"},
      {fmt::format("gate --baseline {} --current {}", missing.string(), kRing.string()),
       "results[3].in_place.time_us: missing required field"},
      {fmt::format("gate --baseline {} --current {}", kRing.string(), shorter.string()), "lack row"},
      {fmt::format("gate --baseline {} --current {}", (kBaselines / "sim-h100-4x8-rail-all_reduce-ring.json").string(),
                   kRing.string()),
       "config.ranks"},
      {fmt::format("gate --baseline /nonexistent.json --current {}", kRing.string()), "cannot read"},
      {fmt::format("gate --baseline {} --current {} --tolerance lots", kRing.string(), kRing.string()), "--tolerance"},
      {fmt::format("gate --baseline {}", kRing.string()), "--current"},
  };
  for (const auto& [args, want] : cases) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << args << "\n" << r.err;
  }
  for (const auto& p : {malformed, missing, shorter}) std::filesystem::remove(p);
}

// An empty run compares nothing (a baseline without rows would pass anything); a current run whose recorded command
// is not one this collbench runs is bad input naming the file, in one line, not a regression (exit 1).
TEST(GateCli, EmptyRunsAndUnrunnableCommandsAreBadInput) {
  json empty = json::parse(testing::slurp(kRing));
  empty["results"] = json::array();
  const auto emptyPath = writeJson("empty.json", empty);
  const auto base = temp("unrunnable_base.json");
  std::filesystem::remove(base);
  const CliResult perf = runCli("perf all_reduce --backend host -g 2 -b 1K -e 1K -n 1 -w 0 -J " + base.string());
  ASSERT_EQ(perf.exitCode, 0) << perf.err;
  json bad = json::parse(testing::slurp(base));
  const std::string badCommand = "collbench perf all_reduce --backend host -g 2 -b 1K -e 1K --no-such-flag";
  bad["command_line"] = badCommand;
  const auto badPath = writeJson("unrunnable.json", bad);
  json huge = bad;
  huge["command_line"] = "collbench perf all_reduce --backend host -g 100000 -b 1K -e 1K";
  const auto hugePath = writeJson("unrunnable_huge.json", huge);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fmt::format("gate --baseline {} --current {}", emptyPath.string(), kRing.string()),
       fmt::format("collbench: error: --baseline {}: results: the run has no rows, nothing to compare\n",
                   emptyPath.string())},
      {fmt::format("gate --baseline {} --current {}", kRing.string(), emptyPath.string()),
       fmt::format("collbench: error: --current {}: results: the run has no rows, nothing to compare\n",
                   emptyPath.string())},
      {fmt::format("gate --baseline {} --current {} --repeat 1", base.string(), badPath.string()),
       fmt::format("collbench: error: {}: command_line '{}' cannot be rerun by --repeat: The following argument was "
                   "not expected: --no-such-flag\n",
                   badPath.string(), badCommand)},
  };
  for (const auto& [args, want] : cases) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err, want) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  const CliResult r =
      runCli(fmt::format("gate --baseline {} --current {} --repeat 1", base.string(), hugePath.string()));
  EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
  EXPECT_EQ(r.err.rfind(fmt::format("collbench: error: {}: command_line 'collbench perf all_reduce --backend host -g "
                                    "100000 -b 1K -e 1K' cannot be rerun by --repeat: -g/--ngpus 100000: backend "
                                    "'host' runs at most 4096 ranks",
                                    hugePath.string()),
                        0),
            0u)
      << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  for (const auto& p : {emptyPath, base, badPath, hugePath}) std::filesystem::remove(p);
}

TEST(GateCli, MeasuredRunsRepeat) {
  const auto base = temp("host_base.json");
  std::filesystem::remove(base);
  const CliResult perf = runCli("perf all_reduce --backend host -g 2 -b 1K -e 4K -f 2 -n 2 -w 1 -J " + base.string());
  ASSERT_EQ(perf.exitCode, 0) << perf.err;
  // --repeat reruns the current file's recorded perf command: one recorded sample plus two repeats.
  const CliResult r =
      runCli(fmt::format("gate --baseline {} --current {} --repeat 2 --all", base.string(), base.string()));
  EXPECT_TRUE(r.exitCode == 0) << r.out << r.err;  // measured: pass or inconclusive, never a proven regression here
  EXPECT_NE(r.out.find("(repeat 2)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("medians of repeats"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1/3 |"), std::string::npos) << r.out;
  std::filesystem::remove(base);
}

}  // namespace
}  // namespace collbench
