// Seeded fuzzing of the trace, perf-JSON (gate), replay and Chrome-trace (report) parsers: every mutated input
// ends in a valid result or a collbench::Error with a one-line message, never another exception or a crash.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "collbench/error.h"
#include "collbench/gate.h"
#include "collbench/report.h"
#include "collbench/trace.h"
#include "collbench/workload.h"
#include "fuzz_mutator.h"

namespace collbench {
namespace {

template <typename F>
void fuzz(std::uint64_t seed, const std::vector<std::string>& seeds, F&& parse) {
  testing::Mutator m(seed);
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += testing::survives(parse, input, i);
  }
  // Most mutations break the format, some keep it valid: the mutator reaches both sides.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

std::vector<std::string> traceSeeds() {
  Trace t;
  t.worldSize = 4;
  t.topology = TraceTopology{"threads", 2, 2};
  t.backend = "host";
  constexpr auto kEnd = TraceAfter::PreviousEnd, kIssue = TraceAfter::PreviousIssue;
  t.events.push_back(TraceEvent{Collective::Broadcast, 64, DType::F32, ReduceOp::Sum, 1, "replicas", 4, "chain", 0.001,
                                0.002, 0.001, -1, 0, kEnd, 0.001});
  t.events.push_back(TraceEvent{Collective::AllReduce, 4096, DType::BF16, ReduceOp::Avg, 0, "workers", 2, "ring", 0.003,
                                0.004, 0.001, 0, 0, kEnd, 0.003});
  t.events.push_back(TraceEvent{Collective::ReduceScatter, 1024, DType::I64, ReduceOp::Max, 0, "local", 2, "ring",
                                0.004, 0.005, 0, 0, 1, kIssue, 0.003});
  t.events.push_back(TraceEvent{Collective::Barrier, 0, DType::F32, ReduceOp::Sum, 0, "replicas", 4, "", 0.006, 0.006,
                                0.001, 1, 0, kEnd, 0.006});
  WorkloadOptions o;
  o.worldSize = 2;
  o.steps = 2;
  return {toJson(t), toJson(t, -1), toJson(workloadTrace(buildModel("resnet50"), o))};
}

nlohmann::json perfSeed(const std::string& backend) {
  using nlohmann::json;
  json rows = json::array();
  for (std::size_t s : {1024, 1 << 20}) {
    const json half = {
        {"time_us", 10.0 + static_cast<double>(s) / 1e5}, {"algbw_GBps", 1.5}, {"busbw_GBps", 2.5}, {"wrong", 0}};
    rows.push_back({{"size", s},
                    {"count", s / 4},
                    {"type", "float"},
                    {"redop", "sum"},
                    {"root", -1},
                    {"algorithm", "ring"},
                    {"algorithm_reason", "r"},
                    {"out_of_place", half},
                    {"in_place", half}});
  }
  return {{"format", "collbench-perf"},
          {"version", 1},
          {"collective", "all_reduce"},
          {"config",
           {{"backend", backend},
            {"ranks", 4},
            {"topology", ""},
            {"algorithm", "ring"},
            {"datatype", "float"},
            {"op", "sum"},
            {"iters", 5}}},
          {"command_line", "collbench perf"},
          {"environment", {{"collbench_version", "0.1.0"}}},
          {"results", rows}};
}

TEST(GateFuzz, TraceJson) {
  fuzz(9001, traceSeeds(), [](const std::string& s) { parseTrace(s, "fuzz.json"); });
}

TEST(GateFuzz, PerfJsonAndGate) {
  const PerfRun base = parsePerfRun(perfSeed("sim").dump(), "base.json");
  fuzz(9002, {perfSeed("sim").dump(2), perfSeed("host").dump()}, [&](const std::string& s) {
    const PerfRun r = parsePerfRun(s, "fuzz.json");
    // Whatever parses must also gate (or be rejected as incomparable) without any other exception.
    const GateReport g = gate({base}, {r});
    (void)toMarkdown(g, true);
  });
}

TEST(GateFuzz, ReplayJson) {
  const nlohmann::json seed = {
      {"format", "collbench-replay"},
      {"version", 1},
      {"command_line", "collbench replay t.json --backend sim"},
      {"trace", {{"path", "t.json"}, {"world_size", 4}, {"backend", "host"}}},
      {"config",
       {{"backend", "sim"}, {"topology", "dgx-h100-8x1"}, {"world_size", 8}, {"scaling", "weak"}, {"overlap", "none"}}},
      {"summary",
       {{"recorded_step_s", 0.01},
        {"replayed_step_s", 0.011},
        {"compute_s", 0.009},
        {"comm_s", 0.002},
        {"exposed_comm_s", 0.002},
        {"one_replica_step_s", 0.009},
        {"scaling_efficiency", 0.82},
        {"speedup", 0.82}}}};
  fuzz(9003, {seed.dump(2)}, [](const std::string& s) { parseReplayRun(s, "fuzz.json"); });
}

TEST(GateFuzz, ChromeTraceAndReport) {
  const std::string seed = R"({"displayTimeUnit":"ns","otherData":{"title":"ring"},"traceEvents":[
{"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0"}},
{"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"send"}},
{"name":"send to 1","cat":"send","ph":"X","pid":0,"tid":1,"ts":0.5,"dur":2.0,"args":{"op":0,"bytes":64}},
{"name":"recv from 1","cat":"recv","ph":"X","pid":1,"tid":"r","ts":1.0,"dur":1.5}]})";
  fuzz(9004, {seed}, [](const std::string& s) {
    ReportInputs in;
    addReportInput(in, s, "fuzz.json");
    (void)renderReportHtml(in);
    (void)renderReportMarkdown(in);
  });
}

}  // namespace
}  // namespace collbench
