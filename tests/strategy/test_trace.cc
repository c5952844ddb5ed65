// The trace format (core/ir/trace.cc): round trip and validation messages naming the event index and field.
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
  t.model = "mlp";
  t.dtype = DType::F32;
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
  a.after = TraceAfter::PreviousEnd;
  a.issueSeconds = 0.25;
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
  b.step = 3;
  b.after = TraceAfter::PreviousIssue;  // issued 0.25 s after a was, while a ran: it queued until a ended
  b.computeGapSeconds = 0.25;
  b.issueSeconds = 0.5;
  t.events = {a, b};
  return t;
}

TEST(Trace, RoundTrip) {
  const Trace t = sampleTrace();
  const std::string text = toJson(t);
  const json j = json::parse(text);
  EXPECT_EQ(j["format"], "collbench-trace");
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["dtype"], "float");
  EXPECT_EQ(j["events"][0]["after"], "previous_end");
  EXPECT_EQ(j["events"][1]["after"], "previous_issue");
  EXPECT_EQ(j["events"][1]["issue_s"], 0.5);
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
  expectInvalid([] { parseTrace("[]", "run.json"); }, {"run.json", "expected an object"});
  expectBad([](json& j) { j["format"] = "chrome-trace"; }, {"run.json: format:", "collbench-trace"});
  expectBad([](json& j) { j["version"] = 3; }, {"run.json: version:", "version 3 is not supported", "1 and 2"});
  expectBad([](json& j) { j["version"] = "2"; }, {"version:", "expected an integer"});
  expectBad([](json& j) { j["dtype"] = "float128"; }, {"run.json: dtype:", "float128"});
  expectBad([](json& j) { j["model"] = 7; }, {"run.json: model:", "expected a string"});
  expectBad([](json& j) { j.erase("world_size"); }, {"world_size:", "missing"});
  expectBad([](json& j) { j["world_size"] = 3; }, {"world_size:", "3 is not topology.workers 2 x"});
  expectBad([](json& j) { j["world_size"] = "4"; }, {"world_size:", "expected an integer"});
  expectBad([](json& j) { j["topology"]["gpus"] = 8; }, {"topology.gpus:", "unknown field"});
  expectBad([](json& j) { j["topology"]["workers"] = 0; }, {"topology.workers:", "must be in [1, 16777216], got 0"});
  expectBad([](json& j) { j["extra"] = 1; }, {"extra:", "unknown field"});
  expectBad([](json& j) { j["events"] = json::object(); }, {"events:", "expected an array"});
  expectBad([](json& j) { j["simulated"] = "no"; }, {"simulated:", "true or false"});
}

TEST(Trace, EventErrorsNameIndexAndField) {
  expectBad([](json& j) { j["events"][1] = 5; }, {"run.json: events[1]:", "expected an object"});
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
  expectBad([](json& j) { j["events"][1]["after"] = "whenever"; }, {"events[1].after:", "\"whenever\" is not one of"});
  expectBad([](json& j) { j["events"][0]["issue_s"] = 0.3; }, {"events[0].issue_s:", "after start_s 0.25"});
  expectBad([](json& j) { j["events"][0]["issue_s"] = -0.1; }, {"events[0].issue_s:", ">= 0"});
}

TEST(Trace, EventsMustBeInProgramOrder) {
  expectBad([](json& j) { j["events"][1]["step"] = 2; },
            {"run.json: events[1].step:", "2 comes after step 3 (events[0])", "program order"});
  expectBad([](json& j) { j["events"][1]["step"] = -1; }, {"events[1].step:", "-1 comes after step 3"});
  expectBad(
      [](json& j) {
        j["events"][1]["start_s"] = 0.2;
        j["events"][1]["end_s"] = 0.2;
        j["events"][1]["issue_s"] = 0.2;
      },
      {"events[1].start_s:", "0.2 is before events[0].start_s 0.25"});
  expectBad(
      [](json& j) {
        j["events"][0]["start_s"] = 0.5;
        j["events"][0]["end_s"] = 0.5;
        j["events"][0]["issue_s"] = 0.5;
        j["events"][1]["issue_s"] = 0.3;
      },
      {"events[1].issue_s:", "0.3 is before events[0].issue_s 0.5"});
  // Equal times and steps are in order (a collective of no duration, a pack issued with the previous one).
  json j = json::parse(toJson(sampleTrace()));
  j["events"][1]["start_s"] = j["events"][0]["start_s"];
  j["events"][1]["end_s"] = j["events"][0]["start_s"];
  j["events"][1]["issue_s"] = j["events"][0]["issue_s"];
  EXPECT_EQ(parseTrace(j.dump()).events.size(), 2u);
}

TEST(Trace, ReadsVersion1) {
  json j = json::parse(toJson(sampleTrace()));
  j["version"] = 1;
  for (const char* k : {"model", "dtype"}) j.erase(k);
  for (json& e : j["events"]) {
    e.erase("after");
    e.erase("issue_s");
  }
  const Trace t = parseTrace(j.dump(), "old.json");
  EXPECT_EQ(t.model, "");
  EXPECT_FALSE(t.dtype.has_value());
  EXPECT_FALSE(t.events[1].after.has_value());
  EXPECT_FALSE(t.events[1].issueSeconds.has_value());
  EXPECT_EQ(t.events[1].startSeconds, 0.5);
  // Written back, it is a version 2 trace without the new fields, equal to what was read.
  EXPECT_EQ(json::parse(toJson(t))["version"], 2);
  EXPECT_EQ(parseTrace(toJson(t)), t);
  // A version 1 trace cannot hold version 2 fields: the message says which version has them.
  json bad = j;
  bad["model"] = "mlp";
  expectInvalid([&] { parseTrace(bad.dump(), "old.json"); }, {"old.json: model:", "version 2 field", "version 1"});
  bad = j;
  bad["events"][1]["after"] = "previous_end";
  expectInvalid([&] { parseTrace(bad.dump(), "old.json"); }, {"old.json: events[1].after:", "version 2 field"});
}

TEST(Trace, OptionalFieldsDefault) {
  json j = json::parse(toJson(sampleTrace()));
  for (const char* k : {"backend", "simulated", "model", "dtype", "tool", "command"}) j.erase(k);
  for (const char* k : {"algorithm", "step", "pack", "after", "issue_s"}) j["events"][0].erase(k);
  const Trace t = parseTrace(j.dump());
  EXPECT_EQ(t.backend, "");
  EXPECT_FALSE(t.simulated);
  EXPECT_EQ(t.events[0].step, -1);
  EXPECT_EQ(t.events[0].pack, 0);
  EXPECT_EQ(t.events[0].algorithm, "");
  EXPECT_EQ(t.model, "");
  EXPECT_FALSE(t.dtype.has_value());
  EXPECT_FALSE(t.events[0].after.has_value());
  EXPECT_FALSE(t.events[0].issueSeconds.has_value());
}

}  // namespace
}  // namespace collbench
