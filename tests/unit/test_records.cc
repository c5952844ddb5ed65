// The record formats (records.h): each writer's output reads back equal, bad documents give one line naming the field
// and the value, the files shipped in reports/ parse, and the shared field reader and output-file check.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collbench/calibrate.h"
#include "collbench/error.h"
#include "collbench/json_fields.h"
#include "collbench/records.h"
#include "collbench/tuning.h"

namespace collbench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

/// Runs `f`, which must throw Error{InvalidArgument} with exactly `message` on one line.
void expectMessage(const std::function<void()>& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument) << e.what();
    EXPECT_EQ(std::string(e.what()), message);
  }
}

PerfRun samplePerf() {
  PerfRun r;
  r.source = "run.json";
  r.collective = "all_reduce";
  r.backend = "host";
  r.ranks = 4;
  r.topology = "";
  r.algorithm = "auto";
  r.minBytes = 1024;
  r.maxBytes = 4096;
  r.stepFactor = 2;
  r.iters = 20;
  r.warmup = 1;
  r.check = 1;
  r.datatype = "float";
  r.op = "sum";
  r.channels = 2;
  r.chunkBytes = 65536;
  r.commandLine = "collbench perf -b 1K -e 4K -f 2 -J run.json";
  r.environment = {{"host", "h"}, {"cpus", 2}, {"collbench_version", "0.1.0"}, {"gpu", nullptr}};
  r.toolVersion = "0.1.0";
  for (std::size_t size : {1024u, 2048u, 4096u}) {
    PerfRow row{size, size / 4, "float", "sum", -1, "ring", "table", 65536, 2, {}, {}};
    row.outOfPlace = {10.5, 0.25, 0.375, 0};
    row.inPlace = {11.25, 0.125, 0.1875, std::nullopt};
    r.rows.push_back(row);
  }
  r.rows[1].channels = 1;
  r.avgBusbwGBps = 0.28125;
  r.wrongTotal = 0;
  return r;
}

TEST(PerfRecord, RoundTrips) {
  const PerfRun r = samplePerf();
  EXPECT_EQ(parsePerfRun(toJson(r).dump(2), "run.json"), r);
}

TEST(PerfRecord, BadDocumentsNameTheFieldAndTheValue) {
  const json good = toJson(samplePerf());
  const auto rejected = [](json d, const std::string& message) {
    expectMessage([&] { parsePerfRun(d.dump(), "run.json"); }, message);
  };
  json d = good;
  d["results"][2]["out_of_place"]["time_us"] = "abc";
  rejected(d, "run.json: results[2].out_of_place.time_us: expected a number, got string \"abc\"");
  d = good;
  d["format"] = "collbench-tuning";
  rejected(d, "run.json: format: expected \"collbench-perf\", got \"collbench-tuning\"");
  d = good;
  d["version"] = 2;
  rejected(d, "run.json: version: version 2 is not supported (this collbench reads version 1)");
  d = good;
  d["config"]["ranks"] = 0;
  rejected(d, "run.json: config.ranks: must be in [1, 16777216], got 0");
  d = good;
  d["results"][0].erase("algorithm");
  rejected(d, "run.json: results[0].algorithm: missing required field");
  d = good;
  d["results"][1]["size"] = 1024;
  rejected(d, "run.json: results[1].size: 1024 B with algorithm ring appears twice");
  d = good;
  d["results"][0]["channels"] = 0;
  rejected(d, "run.json: results[0].channels: must be in [1, 2147483647], got 0");
  d = good;
  d["config"] = json::array();
  rejected(d, "run.json: config: expected an object, got array []");
}

TEST(PerfRecord, OlderFilesTakeTheDefaults) {
  json d = toJson(samplePerf());
  for (const char* k : {"minbytes", "iters", "channels", "chunk_bytes"}) d["config"].erase(k);
  for (json& row : d["results"]) {
    row.erase("channels");
    row.erase("chunk_bytes");
  }
  d.erase("avg_busbw_GBps");
  const PerfRun r = parsePerfRun(d.dump(), "old.json");
  EXPECT_EQ(r.minBytes, 0u);
  EXPECT_EQ(r.iters, 0);
  EXPECT_EQ(r.rows[1].channels, 1);  // the config's default
  EXPECT_EQ(r.rows[1].chunkBytes, 0u);
  EXPECT_EQ(r.avgBusbwGBps, 0);
}

ReplayRun sampleReplay() {
  ReplayRun r;
  r.source = "replay.json";
  r.tool = "collbench 0.1.0";
  r.commandLine = "collbench replay t.json --backend sim -J replay.json";
  r.tracePath = "t.json";
  r.traceBackend = "host";
  r.traceTopology = "threads";
  r.traceCommand = "collbench train";
  r.traceWorldSize = 2;
  r.backend = "sim";
  r.topology = "dgx-h100-8x1";
  r.scaling = "weak";
  r.overlap = "none";
  r.algo = "trace";
  r.worldSize = 8;
  r.warmup = 1;
  r.recordedStepSeconds = 0.5;
  r.stepSeconds = 0.25;
  r.recordedMeanStepSeconds = 0.5;
  r.meanStepSeconds = 0.375;
  r.computeSeconds = 0.125;
  r.commSeconds = 0.125;
  r.exposedSeconds = 0.125;
  r.oneReplicaStepSeconds = 0.125;
  r.efficiency = 0.5;
  r.speedup = 4;
  r.recordedSteps = {{0, 0.5, 0.25, 0.25, 0.25}, {1, 0.5, 0.25, 0.25, 0.25}};
  r.steps = {{0, 0.25, 0.125, 0.125, 0.125}};
  ReplayEventRecord e;
  e.kind = "all_reduce";
  e.dtype = "float";
  e.op = "sum";
  e.bytes = 4096;
  e.group = "replicas";
  e.nranks = 8;
  e.algorithm = "ring";
  e.step = 0;
  e.after = "previous_end";
  e.computeGapSeconds = 0.125;
  e.issueSeconds = 0.125;
  e.startSeconds = 0.125;
  e.endSeconds = 0.25;
  e.recordedStartSeconds = 0.25;
  e.recordedEndSeconds = 0.5;
  r.events.push_back(e);
  e.index = 1;
  e.kind = "broadcast";
  e.op = "";
  e.recordedIssueSeconds = 0.375;
  r.events.push_back(e);
  return r;
}

TEST(ReplayRecord, RoundTrips) {
  const ReplayRun r = sampleReplay();
  EXPECT_EQ(parseReplayRun(toJson(r).dump(2), "replay.json"), r);
  json d = toJson(r);
  d["config"]["scaling"] = "sideways";
  expectMessage([&] { parseReplayRun(d.dump(), "replay.json"); },
                "replay.json: config.scaling: expected \"weak\" or \"strong\"");
  d = toJson(r);
  d["events"][1]["start_s"] = -1;
  expectMessage([&] { parseReplayRun(d.dump(), "replay.json"); },
                "replay.json: events[1].start_s: expected a finite number >= 0, got -1");
}

TEST(SimRecord, RoundTrips) {
  SimRecord r{"collbench 0.1.0",
              "collbench sim --json",
              "dgx-h100-8x1",
              "abc123",
              "CM02",
              "all_reduce",
              "ring",
              "float",
              8,
              1048576,
              262144,
              12.5,
              83.875,
              146.75,
              "exact",
              "",
              true,
              112,
              56,
              56,
              0.25,
              "op-by-op",
              13.5};
  EXPECT_EQ(parseSimRecord(toJson(r).dump(2)), r);
  r.spansMethod = "";
  r.spansTimeUs = 0;
  const json d = toJson(r);
  EXPECT_FALSE(d.contains("timeline_spans_method"));
  EXPECT_EQ(parseSimRecord(d.dump()), r);
  json bad = d;
  bad["exact"] = "yes";
  expectMessage([&] { parseSimRecord(bad.dump(), "sim.json"); },
                "sim.json: exact: expected true or false, got string \"yes\"");
}

TEST(SweepRecord, RoundTrips) {
  SweepRecord r{"collbench 0.1.0", "collbench sweep", "all_reduce", "float", "sum", "CM02", false, {}, "2/3"};
  r.rows.push_back({"dgx-h100-8x1", "abc", "", "ring", "exact", "", 8, 1024, 256, 112, 56, 56, 2.5, 0.5, 0.875, 0.125,
                    0.0625, true});
  r.rows.push_back({"h100-4x8-rail", "def", "link.nic.bandwidth_GBps=50;", "hierarchical", "aggregated", "folded", 32,
                    4096, 1024, 1000, 500, 20, 7.25, 0.5, 0.96875, 0.25, 0.125, false});
  EXPECT_EQ(parseSweepRecord(toJson(r).dump(2)), r);
  EXPECT_EQ(toJson(r)["shard"], "2/3");
  r.shard.clear();  // an unsharded run writes no shard field
  EXPECT_FALSE(toJson(r).contains("shard"));
  EXPECT_EQ(parseSweepRecord(toJson(r).dump(2)), r);
  json bad = toJson(r);
  bad["rows"][1]["ranks"] = 0;
  expectMessage([&] { parseSweepRecord(bad.dump(), "sweep.json"); },
                "sweep.json: rows[1].ranks: must be in [1, 2147483647], got 0");
}

TEST(RegretRecord, RoundTrips) {
  RegretRecord r;
  r.collective = "all_reduce";
  r.backend = "sim";
  r.topology = "dgx-h100-8x1";
  r.topologyFingerprint = "abc";
  r.tuning = "reports/tuning/dgx-h100-8x1.sim.json";
  r.commandLine = "collbench regret";
  RegretRow w;
  w.nranks = 3;
  w.bytes = 1440;
  w.chosen = {"direct", 0, 1, 1.25};
  w.chosenSource = "interpolated";
  w.predictedUs = 1.125;
  w.best = {"ring", 65536, 2, 1.0};
  w.tableChoice = {"direct", 0, 1, 1.25};
  w.sweepChosenUs = 1.25;
  w.sweepBestUs = 1.0;
  w.sweepTableUs = 1.25;
  r.rows = {w};
  r.worst = r.geomean = r.tableWorst = r.tableGeomean = 1.25;
  const json d = toJson(r);
  EXPECT_EQ(d["rows"][0]["regret"], 1.25);
  EXPECT_EQ(parseRegretRecord(d.dump(2)), r);
  json bad = d;
  bad["summary"]["points"] = 2;
  expectMessage([&] { parseRegretRecord(bad.dump(), "regret.json"); },
                "regret.json: summary.points: says 2 points, the file has 1 rows");
  // Unmeasured times are -1; a non-finite one is written as null and read back as NaN.
  r.rows[0].sweepTableUs = INFINITY;
  const RegretRecord back = parseRegretRecord(toJson(r).dump());
  EXPECT_TRUE(toJson(r)["rows"][0]["sweep"]["table_us"].is_null());
  EXPECT_TRUE(std::isnan(back.rows[0].sweepTableUs));
}

TEST(CalibrationRecord, RoundTrips) {
  CalibrationRecord r;
  r.tool = "collbench 0.1.0";
  r.commandLine = "collbench calibrate";
  r.environment = {{"host", "h"}};
  r.topologyFile = "cal.json";
  r.topologyFingerprint = "abc";
  r.intraAlphaUs = 2.5;
  r.intraBetaGBps = 10;
  r.interAlphaUs = 5;
  r.interBetaGBps = 1.25;
  r.gammaGBps = 4;
  r.callOverheadUs = 0.5;
  r.memoryTiers = {{std::size_t{1} << 20, 1}, {std::nullopt, 0.25}};
  r.identified[0] = r.identified[2] = r.identified[4] = true;
  r.fitMedian = 0.0625;
  r.fitWorst = 0.125;
  r.heldOut = {0.09375, 0.25, 3};
  r.simHeldOut = CalibrationErrors{0.125, 0.5, 3};
  r.notes = {"alpha_inter is not identified by these samples: kept at its initial value"};
  r.samples.push_back({"all_reduce", "ring", "run.json results[0]", 2, 1, 1024, 12.5, 12.25, 12.75, false});
  r.samples.push_back({"all_reduce", "ring", "run.json results[1]", 2, 1, 2048, 13.5, 14, std::nullopt, true});
  EXPECT_EQ(parseCalibrationRecord(toJson(r).dump(2)), r);
  r.heldOut = {std::nullopt, std::nullopt, 0};
  r.simHeldOut.reset();
  EXPECT_EQ(parseCalibrationRecord(toJson(r).dump(2)), r);
  json bad = toJson(r);
  bad["identified"]["gamma"] = 1;
  expectMessage([&] { parseCalibrationRecord(bad.dump(), "fit.json"); },
                "fit.json: identified.gamma: expected true or false, got number 1");
}

TEST(CalibrationRecord, HoldsTheFit) {
  std::vector<CalibrationSample> samples;
  for (std::size_t bytes = 1024; bytes <= (std::size_t{1} << 22); bytes *= 4) {
    CalibrationSample s;
    s.algorithm = "ring";
    s.nranks = 2;
    s.bytes = bytes;
    s.timeUs = 5 + static_cast<double>(bytes) / 1e3;  // 5 us + 1 GB/s
    s.origin = fmt::format("runs.json results[{}]", samples.size());
    samples.push_back(s);
  }
  const CalibrationResult fit = calibrate(samples);
  const CalibrationRecord rec = toRecord(fit);
  ASSERT_EQ(rec.samples.size(), samples.size());
  EXPECT_EQ(rec.samples[1].bytes, samples[1].bytes);
  EXPECT_EQ(rec.samples[1].measuredUs, samples[1].timeUs);
  EXPECT_EQ(rec.samples[1].modelUs, fit.fits[1].predictedUs);
  EXPECT_EQ(rec.samples[1].origin, "runs.json results[1]");
  EXPECT_EQ(rec.intraAlphaUs, fit.params.intra.alphaUs);
  EXPECT_EQ(rec.heldOut.count, static_cast<std::size_t>(fit.heldOutCount));
  EXPECT_EQ(parseCalibrationRecord(toJson(rec).dump()), rec);
}

std::string readText(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The committed baselines, calibration fits and runs, and regret files are read by the current readers.
TEST(Records, ShippedReportsParse) {
  const fs::path reports = fs::path(COLLBENCH_SOURCE_DIR) / "reports";
  int perf = 0, calibration = 0, regret = 0, tuning = 0;
  for (const auto& entry : fs::recursive_directory_iterator(reports)) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = readText(entry.path()), source = entry.path().string();
    const std::string format = json::parse(text).value("format", "");
    SCOPED_TRACE(source);
    if (format == PerfRun::kFormat) {
      EXPECT_FALSE(readPerfRun(source).rows.empty());
      ++perf;
    } else if (format == CalibrationRecord::kFormat) {
      EXPECT_FALSE(parseCalibrationRecord(text, source).samples.empty());
      ++calibration;
    } else if (format == RegretRecord::kFormat) {
      const RegretRecord r = parseRegretRecord(text, source);
      EXPECT_FALSE(r.rows.empty());
      EXPECT_GE(r.worst, 1.0);
      ++regret;
    } else if (format == "collbench-tuning") {
      EXPECT_FALSE(parseTuningTable(text, source).sections.empty());
      ++tuning;
    }
  }
  EXPECT_GE(perf, 11);  // reports/baselines/*.json
  EXPECT_GE(calibration, 2);
  EXPECT_GE(regret, 3);
  EXPECT_GE(tuning, 4);
}

TEST(JsonFields, MessagesNameThePathAndTheValue) {
  const json doc = json::parse(R"({"a": {"b": [1, {"c": "x"}]}, "n": null, "big": 18446744073709551615})");
  const JsonFields top("doc.json", "", doc);
  expectMessage([&] { top.string("missing"); }, "doc.json: missing: missing required field");
  expectMessage([&] { top.object("a").element("b", 0); }, "doc.json: a.b[0]: expected an object, got number 1");
  expectMessage([&] { top.object("a").element("b", 1).integer("c", 0); },
                "doc.json: a.b[1].c: expected an integer, got string \"x\"");
  expectMessage([&] { top.integer("big", 0); }, "doc.json: big: 18446744073709551615 is too large");
  EXPECT_FALSE(top.has("n"));
  EXPECT_EQ(top.stringOr("n", "fallback"), "fallback");
  EXPECT_EQ(top.integerOr("absent", 7, 0), 7);
  EXPECT_FALSE(top.optionalNumber("n").has_value());
  expectMessage([&] { top.fail("", "broken"); }, "doc.json: (top level): broken");
}

TEST(OutputFile, OneCheckForEveryCommand) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("collbench_records_{}", ::getpid());
  fs::create_directories(dir);
  const std::string file = (dir / "out.json").string();
  checkOutputFile(file, false, "-J/--output_file");  // new file in a writable directory
  EXPECT_FALSE(fs::exists(file));                    // the check creates nothing
  writeTextFile(file, "{}", "-J/--output_file");
  EXPECT_EQ(readText(file), "{}\n");
  expectMessage([&] { checkOutputFile(file, false, "-J/--output_file"); },
                fmt::format("-J/--output_file '{}' exists; pass --force to overwrite it", file));
  checkOutputFile(file, true, "-J/--output_file");
  expectMessage([&] { checkOutputFile(dir.string(), true, "-o/--output"); },
                fmt::format("-o/--output '{}' is a directory", dir.string()));
  expectMessage(
      [&] { checkOutputFile("/nonexistent-collbench-dir/x.json", false, "--timeline"); },
      "--timeline '/nonexistent-collbench-dir/x.json': directory '/nonexistent-collbench-dir' does not exist");
  expectMessage([&] { writeTextFile((dir / "no" / "x").string(), "{}", "--csv"); },
                fmt::format("cannot write --csv '{}'", (dir / "no" / "x").string()));
  checkOutputFile("", false, "-J");  // no file asked for
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collbench
