// Parser robustness: every mutated input ends in a valid result or a collbench::Error with a one-line message,
// never another exception, a crash or a hang. Inputs that once broke a parser live in fuzz_regressions/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "collbench/algorithms.h"
#include "collbench/calibrate.h"
#include "collbench/error.h"
#include "collbench/gate.h"
#include "collbench/schedule_file.h"
#include "collbench/topology.h"
#include "collbench/trace.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "fuzz_mutator.h"

namespace collbench {
namespace {

std::string readFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using testing::survives;

TEST(ParserFuzz, TopologyJson) {
  const std::filesystem::path dir = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "topologies";
  std::vector<std::string> seeds;
  for (const char* name : {"dgx-h100-8x1.json", "pcie-4gpu.json", "fat-tree-k8.json", "h100-4x8-rail.json"}) {
    seeds.push_back(readFile(dir / name));
  }
  testing::Mutator m(20261202);
  int parsed = 0;
  const int cases = testing::fuzzCases();
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([](const std::string& s) { parseTopology(s, "fuzz.json"); }, input, i);
  }
  // Most mutations must be rejected (they break the format), but some stay valid (a changed description, a swapped
  // latency): the fuzzer reaches past the JSON syntax into the topology checks, and it is not only garbage.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

// Schedule files: the hand-written chunk example and a generated file in bytes. Mutations reach the field checks, the
// bounds and the validator (a changed peer, offset or dep), not only the JSON syntax.
TEST(ParserFuzz, ScheduleJson) {
  const CollectiveSpec spec{Collective::AllReduce, 3, 96, DType::F32, ReduceOp::Sum, 0};
  const std::vector<std::string> seeds = {
      readFile(std::filesystem::path(COLLBENCH_SOURCE_DIR) / "examples" / "schedules" / "bidir-ring-4.json"),
      toJson(toScheduleFile(buildSchedule(spec, "ring")))};
  testing::Mutator m(20261206);
  int parsed = 0;
  const int cases = testing::fuzzCases();
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([](const std::string& s) { parseScheduleFile(s, "fuzz.json"); }, input, i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

TEST(ParserFuzz, SizeStrings) {
  testing::Mutator m(7);
  const std::vector<std::string> seeds = {"8", "32M", "1.5G", "4KiB", "1000", "0"};
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([](const std::string& s) { parseBytes(s, "-b"); }, input, i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

// Each file in fuzz_regressions/ once broke the parser its name starts with; every one must now be rejected with a
// one-line collbench::Error (survives() checks the kind and the line), and none may be accepted.
TEST(ParserFuzz, RegressionFiles) {
  const std::filesystem::path dir = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "tests/unit/fuzz_regressions";
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> parsers = {
      {"topology-", [](const std::string& s) { parseTopology(s, "regression.json"); }},
      {"trace-", [](const std::string& s) { parseTrace(s, "regression.json"); }},
      {"perf-", [](const std::string& s) { samplesFromPerfJson(s, "regression.json", 1); }},
      {"gate-", [](const std::string& s) { parsePerfRun(s, "regression.json"); }},
      {"tuning-", [](const std::string& s) { parseTuningTable(s, "regression.json"); }},
      {"size-", [](const std::string& s) { parseBytes(s, "-b"); }},
  };
  int checked = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    const auto p =
        std::find_if(parsers.begin(), parsers.end(), [&](const auto& e) { return name.starts_with(e.first); });
    ASSERT_NE(p, parsers.end()) << name << ": no parser for this prefix";
    EXPECT_FALSE(survives(p->second, readFile(f.path()), 0)) << name << " was accepted";
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace collbench
