// Seeded fuzzing (issue #10's style) of the tuning-table JSON, nccl-tests log, NCCL tuner CSV and collbench-perf
// sample parsers: every mutated input ends in a result or a collbench::Error with a one-line message, never another
// exception, a crash or a hang.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "collbench/calibrate.h"
#include "collbench/error.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/tuning.h"
#include "fuzz_mutator.h"

namespace collbench {
namespace {

std::string dataFile(const std::string& name) {
  std::ifstream f(std::filesystem::path(COLLBENCH_SOURCE_DIR) / "tests/unit/data" / name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using testing::survives;

template <typename F>
void fuzz(std::uint64_t seed, const std::vector<std::string>& seeds, F&& parse) {
  for (std::size_t i = 0; i < seeds.size(); ++i) ASSERT_TRUE(survives(parse, seeds[i], -1)) << "seed " << i;
  testing::Mutator m(seed);
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i)
    parsed += survives(parse, m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]), i);
  EXPECT_LT(parsed, cases);  // the mutations break inputs ...
  EXPECT_GT(parsed, 0);      // ... but not all of them: the mutator is not vacuous
}

std::string seedTable() {
  TuningTable t;
  t.provenance = {"collbench 0.1.0", "collbench tune", "sim", "box", "2025-01-01T00:00:00Z", "flat", "00ff", ""};
  TuningSection s{"flat", "00ff", "sim", "collbench", {}};
  s.entries.push_back({Collective::AllReduce, 8, 1, 1024, {{"direct", "", 0, 1, 4.5}, {"ring", "", 0, 2, 9.0}}});
  s.entries.push_back({Collective::AllGather, 8, 1, 8192, {{"ring", "", 131072, 2, 7.0}}});
  TuningSection n{"flat", "00ff", "sim", "nccl", {}};
  n.entries.push_back(
      {Collective::AllReduce, 16, 2, 4096, {{"tree", "ll", 0, 8, 12.0}, {"ring", "simple", 0, 16, 30.0}}});
  t.sections = {s, n};
  return toJson(t);
}

TEST(TuningFuzz, TuningTableJson) {
  fuzz(20261211, {seedTable()}, [](const std::string& s) { parseTuningTable(s, "fuzz.json"); });
}

TEST(TuningFuzz, NcclTestsLogs) {
  fuzz(411,
       {dataFile("all_reduce_perf_2.19_dgx_h100.log"), dataFile("all_reduce_perf_2.13_two_nodes.log"),
        dataFile("reduce_scatter_perf_2.19_per_iteration.log")},
       [](const std::string& s) {
         const NcclTestsLog log = parseNcclTestsLog(s, "fuzz.log");
         samplesFromNcclTestsLog(log, "fuzz.log", "ring", Collective::AllReduce);
       });
}

TEST(TuningFuzz, NcclTunerCsv) {
  const std::string csv =
      "# comment\nallreduce,0,8192,ring,ll,2,2,16,-1,-1\nallreduce,8193,18446744073709551615,tree,simple,8,2,16\n"
      "broadcast,0,100,ring,ll128,-1,-1,-1,4\n";
  fuzz(99, {csv}, [](const std::string& s) { parseNcclTunerCsv(s, "fuzz.conf"); });
}

TEST(TuningFuzz, PerfJsonSamples) {
  const std::string perf =
      R"({"format": "collbench-perf", "version": 1, "collective": "all_reduce", "config": {"backend": "host",)"
      R"( "ranks": 4, "datatype": "float", "op": "sum", "channels": 1, "chunk_bytes": 0, "topology": ""},)"
      R"( "results": [{"size": 1024, "count": 256, "type": "float", "algorithm": "ring", "out_of_place":)"
      R"( {"time_us": 10.5, "algbw_GBps": 0.1, "busbw_GBps": 0.15}, "in_place": {"time_us": 10.5, "algbw_GBps":)"
      R"( 0.1, "busbw_GBps": 0.15}}, {"size": 4096, "count": 1024, "type": "float", "algorithm": "direct",)"
      R"( "chunk_bytes": 0, "channels": 2, "out_of_place": {"time_us": 12.5, "algbw_GBps": 0.3, "busbw_GBps":)"
      R"( 0.45}, "in_place": {"time_us": 12.5, "algbw_GBps": 0.3, "busbw_GBps": 0.45}}]})";
  fuzz(5150, {perf}, [](const std::string& s) { samplesFromPerfJson(s, "fuzz.json"); });
}

}  // namespace
}  // namespace collbench
