// The trace format (core/trace.cc): round trip and validation messages naming the event index and field.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "collbench/trace.h"
#include "test_support.h"

namespace collbench {
namespace {

using nlohmann::json;
using strategy::testing::expectInvalid;

Trace sampleTrace() {
  Trace t;
  t.worldSize = 4;
  t.topology = {"threads", 2, 2};
  t.backend = "host";
  t.tool = "collbench test";
  t.command = "collbench train -n 4";
  TraceEvent a;
  a.kind = Collective::AllReduce;
  a.bytes = 4096;
  a.dtype = DType::F32;
  a.op = ReduceOp::Sum;
  a.group = "workers";
  a.nranks = 2;
  a.algorithm = "ring";
  a.startSeconds = 0.25;
  a.endSeconds = 0.5;
  a.computeGapSeconds = 0.25;
  a.step = 3;
  a.pack = 1;
  TraceEvent b;
  b.kind = Collective::Broadcast;
  b.bytes = 16;
  b.dtype = DType::F64;
  b.root = 1;
  b.group = "local";
  b.nranks = 2;
  b.algorithm = "in_process";
  b.startSeconds = 0.5;
  b.endSeconds = 0.5;
  b.step = -1;
  t.events = {a, b};
  return t;
}

TEST(Trace, RoundTrip) {
  const Trace t = sampleTrace();
  const std::string text = toJson(t);
  const json j = json::parse(text);
  EXPECT_EQ(j["format"], "collbench-trace");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["topology"]["local_replicas"], 2);
  EXPECT_EQ(j["events"][0]["kind"], "all_reduce");
  EXPECT_EQ(j["events"][0]["op"], "sum");
  EXPECT_FALSE(j["events"][0].contains("root"));
  EXPECT_FALSE(j["events"][1].contains("op"));
  EXPECT_EQ(j["events"][1]["root"], 1);
  EXPECT_EQ(parseTrace(text), t);
  EXPECT_EQ(parseTrace(toJson(t, -1)), t);
}

TEST(Trace, FileRoundTrip) {
  const auto path = (std::filesystem::temp_directory_path() / "collbench_test_trace.json").string();
  writeTrace(sampleTrace(), path);
  EXPECT_EQ(readTrace(path), sampleTrace());
  std::filesystem::remove(path);
  expectInvalid([&] { readTrace(path); }, {"cannot read", path});
  expectInvalid([] { writeTrace(sampleTrace(), "/nonexistent-dir/x.json"); }, {"cannot write", "/nonexistent-dir"});
}

/// The sample as JSON, edited by `edit`, parsed: expects an error naming every part.
void expectBad(const std::function<void(json&)>& edit, std::initializer_list<std::string> parts) {
  json j = json::parse(toJson(sampleTrace()));
  edit(j);
  SCOPED_TRACE(j.dump());
  expectInvalid([&] { parseTrace(j.dump(), "run.json"); }, parts);
}

TEST(Trace, TopLevelErrors) {
  expectInvalid([] { parseTrace("{", "run.json"); }, {"run.json", "malformed JSON"});
  expectInvalid([] { parseTrace("[]", "run.json"); }, {"run.json", "must be an object"});
  expectBad([](json& j) { j["format"] = "chrome-trace"; }, {"run.json: format:", "collbench-trace"});
  expectBad([](json& j) { j["version"] = 2; }, {"version:", "version 2 is not supported"});
  expectBad([](json& j) { j.erase("world_size"); }, {"world_size:", "missing"});
  expectBad([](json& j) { j["world_size"] = 3; }, {"world_size:", "3 is not topology.workers 2 x"});
  expectBad([](json& j) { j["world_size"] = "4"; }, {"world_size:", "expected an integer"});
  expectBad([](json& j) { j["topology"]["gpus"] = 8; }, {"topology.gpus:", "unknown field"});
  expectBad([](json& j) { j["topology"]["workers"] = 0; }, {"topology.workers:", "must be >= 1"});
  expectBad([](json& j) { j["extra"] = 1; }, {"extra:", "unknown field"});
  expectBad([](json& j) { j["events"] = json::object(); }, {"events:", "expected an array"});
  expectBad([](json& j) { j["simulated"] = "no"; }, {"simulated:", "true or false"});
}

TEST(Trace, EventErrorsNameIndexAndField) {
  expectBad([](json& j) { j["events"][1] = 5; }, {"run.json: events[1]:", "must be an object"});
  expectBad([](json& j) { j["events"][0]["kind"] = "all_reducer"; }, {"events[0].kind:", "all_reducer"});
  expectBad([](json& j) { j["events"][0].erase("kind"); }, {"events[0].kind:", "missing"});
  expectBad([](json& j) { j["events"][1]["dtype"] = "float128"; }, {"events[1].dtype:", "float128"});
  expectBad([](json& j) { j["events"][0]["bytes"] = -4; }, {"events[0].bytes:", "must be >= 0"});
  expectBad([](json& j) { j["events"][0]["bytes"] = 10; }, {"events[0].bytes:", "not a multiple of the float size 4"});
  expectBad([](json& j) { j["events"][0]["group"] = "everyone"; }, {"events[0].group:", "\"everyone\""});
  expectBad([](json& j) { j["events"][0]["nranks"] = 3; }, {"events[0].nranks:", "3 does not match group \"workers\""});
  expectBad([](json& j) { j["events"][0]["group"] = "replicas"; }, {"events[0].nranks:", "group \"replicas\" of 4"});
  expectBad([](json& j) { j["events"][0].erase("op"); }, {"events[0].op:", "missing"});
  expectBad([](json& j) { j["events"][0]["op"] = "xor"; }, {"events[0].op:", "xor"});
  expectBad([](json& j) { j["events"][1]["op"] = "sum"; }, {"events[1].op:", "broadcast does not reduce"});
  expectBad([](json& j) { j["events"][0]["root"] = 0; }, {"events[0].root:", "all_reduce has no root"});
  expectBad([](json& j) { j["events"][1]["root"] = 2; }, {"events[1].root:", "out of range for 2 ranks"});
  expectBad([](json& j) { j["events"][0]["end_s"] = 0.1; }, {"events[0].end_s:", "before start_s"});
  expectBad([](json& j) { j["events"][0]["start_s"] = -1; }, {"events[0].start_s:", ">= 0"});
  expectBad([](json& j) { j["events"][1]["compute_gap_s"] = "x"; }, {"events[1].compute_gap_s:", "number of seconds"});
  expectBad([](json& j) { j["events"][1]["step"] = -2; }, {"events[1].step:", "must be >= -1"});
  expectBad([](json& j) { j["events"][0]["pack"] = 1.5; }, {"events[0].pack:", "expected an integer"});
  expectBad([](json& j) { j["events"][1]["color"] = "red"; }, {"events[1].color:", "unknown field"});
}

TEST(Trace, OptionalFieldsDefault) {
  json j = json::parse(toJson(sampleTrace()));
  for (const char* k : {"backend", "simulated", "tool", "command"}) j.erase(k);
  for (const char* k : {"algorithm", "step", "pack"}) j["events"][0].erase(k);
  const Trace t = parseTrace(j.dump());
  EXPECT_EQ(t.backend, "");
  EXPECT_FALSE(t.simulated);
  EXPECT_EQ(t.events[0].step, -1);
  EXPECT_EQ(t.events[0].pack, 0);
  EXPECT_EQ(t.events[0].algorithm, "");
}

}  // namespace
}  // namespace collbench
