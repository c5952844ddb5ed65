// The regression gate: perf-JSON parsing with field-naming errors, deterministic comparison of simulator runs,
// medians and bootstrap intervals for measured runs, and the Markdown summary.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "collbench/error.h"
#include "collbench/gate.h"

namespace collbench {
namespace {

using nlohmann::json;

/// A perf document shaped as perf_runner.cc writes it: one row per size, time = base x factor(size).
json perfDoc(const std::string& backend, const std::string& algorithm, const std::vector<std::size_t>& sizes,
             const std::function<double(std::size_t)>& timeUs, int ranks = 8) {
  json rows = json::array();
  for (std::size_t s : sizes) {
    const double t = timeUs(s);
    const json half = {{"time_us", t},
                       {"algbw_GBps", static_cast<double>(s) / t / 1e3},
                       {"busbw_GBps", static_cast<double>(s) / t / 1e3 * 1.75},
                       {"wrong", backend == "sim" ? json(nullptr) : json(0)}};
    rows.push_back({{"size", s},
                    {"count", s / 4},
                    {"type", "float"},
                    {"redop", "sum"},
                    {"root", -1},
                    {"algorithm", algorithm},
                    {"algorithm_reason", "forced by --algo"},
                    {"out_of_place", half},
                    {"in_place", half}});
  }
  return {{"format", "collbench-perf"},
          {"version", 1},
          {"collective", "all_reduce"},
          {"config",
           {{"backend", backend},
            {"ranks", ranks},
            {"topology", backend == "sim" ? "dgx-h100-8x1" : ""},
            {"algorithm", algorithm},
            {"datatype", "float"},
            {"op", "sum"},
            {"iters", 20}}},
          {"command_line", "collbench perf all_reduce --backend " + backend},
          {"environment", {{"collbench_version", "0.1.0"}}},
          {"results", rows},
          {"avg_busbw_GBps", 1.0},
          {"wrong_total", 0}};
}

const std::vector<std::size_t> kSizes = {1024, 65536, 1 << 20, 1 << 24};

double simTime(std::size_t s) { return 5.0 + static_cast<double>(s) / 2e5; }

PerfRun run(const json& doc, const std::string& name = "run.json") { return parsePerfRun(doc.dump(), name); }

std::string errorOf(const std::string& text) {
  try {
    parsePerfRun(text, "b.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "accepted " << text.substr(0, 200);
  return "";
}

TEST(GateParse, ReadsWhatPerfWrites) {
  const PerfRun r = run(perfDoc("sim", "ring", kSizes, simTime));
  EXPECT_EQ(r.backend, "sim");
  EXPECT_TRUE(r.deterministic());
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.topology, "dgx-h100-8x1");
  ASSERT_EQ(r.rows.size(), kSizes.size());
  EXPECT_EQ(r.rows[2].size, 1u << 20);
  EXPECT_DOUBLE_EQ(r.rows[2].outOfPlace.timeUs, simTime(1 << 20));
  EXPECT_FALSE(r.rows[2].outOfPlace.wrong.has_value());
  EXPECT_EQ(r.toolVersion, "0.1.0");
}

TEST(GateParse, ErrorsNameTheField) {
  json d = perfDoc("sim", "ring", kSizes, simTime);
  d["results"][2]["out_of_place"].erase("time_us");
  EXPECT_NE(errorOf(d.dump()).find("b.json: results[2].out_of_place.time_us: missing required field"),
            std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["results"][1]["in_place"]["time_us"] = "fast";
  EXPECT_NE(errorOf(d.dump()).find("results[1].in_place.time_us: expected a number"), std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["results"][0]["out_of_place"]["time_us"] = -1;
  EXPECT_NE(errorOf(d.dump()).find("results[0].out_of_place.time_us"), std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["format"] = "nccl-tests";
  EXPECT_NE(errorOf(d.dump()).find("format: expected \"collbench-perf\""), std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["version"] = 2;
  EXPECT_NE(errorOf(d.dump()).find("version 2 is not supported"), std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["config"].erase("backend");
  EXPECT_NE(errorOf(d.dump()).find("config.backend: missing"), std::string::npos);
  d = perfDoc("sim", "ring", kSizes, simTime);
  d["results"][3]["size"] = d["results"][2]["size"];
  EXPECT_NE(errorOf(d.dump()).find("results[3].size"), std::string::npos);
  EXPECT_NE(errorOf("{\"format\": ").find("b.json: malformed JSON"), std::string::npos);
  EXPECT_NE(errorOf("[1, 2]").find("expected an object"), std::string::npos);
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  EXPECT_NE(errorOf(deep).find("nested deeper"), std::string::npos);
}

TEST(GateTolerance, Parses) {
  EXPECT_DOUBLE_EQ(parseTolerance("3%"), 0.03);
  EXPECT_DOUBLE_EQ(parseTolerance(" 2.5 % "), 0.025);
  EXPECT_DOUBLE_EQ(parseTolerance("0.1"), 0.1);
  EXPECT_DOUBLE_EQ(parseTolerance("0"), 0.0);
  for (const char* bad : {"", "%", "-1%", "100%", "fast", "3%%", "1e999", "nan"}) {
    EXPECT_THROW(parseTolerance(bad), Error) << bad;
  }
}

TEST(GateSim, IdenticalRunsPass) {
  const PerfRun b = run(perfDoc("sim", "ring", kSizes, simTime), "base.json");
  const GateReport r = gate({b}, {b});
  EXPECT_TRUE(r.deterministic);
  EXPECT_EQ(r.overall, Verdict::Pass);
  EXPECT_EQ(r.exitCode(), 0);
  EXPECT_EQ(r.rows.size(), 2 * kSizes.size());
  EXPECT_NE(toMarkdown(r).find("## collbench gate: PASS"), std::string::npos);
}

TEST(GateSim, AnyChangeBeyondToleranceCounts) {
  const PerfRun b = run(perfDoc("sim", "ring", kSizes, simTime), "base.json");
  const PerfRun slower = run(
      perfDoc("sim", "ring", kSizes, [](std::size_t s) { return s == (1u << 20) ? simTime(s) * 1.05 : simTime(s); }));
  GateReport r = gate({b}, {slower});
  EXPECT_EQ(r.overall, Verdict::Regression);
  EXPECT_EQ(r.exitCode(), 1);
  EXPECT_EQ(r.count(Verdict::Regression), 2);  // out-of-place and in-place
  const std::string md = toMarkdown(r);
  EXPECT_NE(md.find("all_reduce ring 1048576 B out-of-place"), std::string::npos) << md;
  EXPECT_NE(md.find("+5.00%"), std::string::npos) << md;
  EXPECT_NE(md.find("**regression**"), std::string::npos);
  // Within a wider tolerance it passes.
  EXPECT_EQ(gate({b}, {slower}, GateOptions{0.06}).overall, Verdict::Pass);
  EXPECT_EQ(gate({b}, {slower}, GateOptions{0.06}).exitCode(), 0);
  // Faster fails too: the simulator is deterministic, so a faster row is a change to review and accept by updating
  // the baseline. The rows say so, distinct from regressions.
  const PerfRun faster =
      run(perfDoc("sim", "ring", kSizes, [](std::size_t s) { return s == 1024 ? simTime(s) * 0.9 : simTime(s); }));
  r = gate({b}, {faster});
  EXPECT_EQ(r.overall, Verdict::Improvement);
  EXPECT_EQ(r.count(Verdict::Improvement), 2);
  EXPECT_EQ(r.count(Verdict::Regression), 0);
  EXPECT_EQ(r.exitCode(), 1);
  const std::string fmd = toMarkdown(r);
  EXPECT_NE(fmd.find("## collbench gate: IMPROVEMENT (fails: simulated timings changed)"), std::string::npos) << fmd;
  EXPECT_NE(fmd.find("| all_reduce ring 1024 B out-of-place |"), std::string::npos) << fmd;
  EXPECT_NE(fmd.find("-10.00%"), std::string::npos) << fmd;
  EXPECT_NE(fmd.find("**improvement** (changed: faster by 10.00%; if intended, update the baseline"), std::string::npos)
      << fmd;
  EXPECT_NE(fmd.find("scripts/gate-baselines.sh --update"), std::string::npos) << fmd;
  EXPECT_EQ(fmd.find("regression**"), std::string::npos) << fmd;
  // Both directions at once: the regression leads the verdict, the improvement is still listed as such.
  const PerfRun mixed = run(perfDoc("sim", "ring", kSizes, [](std::size_t s) {
    return s == 1024 ? simTime(s) * 0.9 : s == (1u << 20) ? simTime(s) * 1.05 : simTime(s);
  }));
  r = gate({b}, {mixed});
  EXPECT_EQ(r.overall, Verdict::Regression);
  EXPECT_EQ(r.count(Verdict::Improvement), 2);
  EXPECT_EQ(r.exitCode(), 1);
  // Within the tolerance a faster run passes.
  EXPECT_EQ(gate({b}, {faster}, GateOptions{0.11}).exitCode(), 0);
}

TEST(GateSim, ZeroBaselineTimeIsBadInput) {
  json d = perfDoc("sim", "ring", kSizes, simTime);
  d["results"][2]["in_place"]["time_us"] = 0;
  const PerfRun zero = run(d, "base.json");
  const PerfRun cur = run(perfDoc("sim", "ring", kSizes, simTime), "cur.json");
  try {
    gate({zero}, {cur});
    FAIL() << "a zero baseline time was compared";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("base.json: results[2].in_place.time_us: 0 at size 1048576 B (row "
                                         "'all_reduce ring 1048576 B in-place')"),
              std::string::npos)
        << e.what();
  }
  // In the current run a zero time is a measurement (a change of -100%), not a broken reference.
  EXPECT_EQ(gate({cur}, {zero}).overall, Verdict::Improvement);
  // A zero-byte row may take no time in the baseline.
  json z = perfDoc("sim", "ring", {0, 1024}, simTime);
  for (const char* half : {"out_of_place", "in_place"}) z["results"][0][half]["time_us"] = 0;
  EXPECT_EQ(gate({run(z)}, {run(z)}).overall, Verdict::Pass);
}

TEST(GateSim, IncomparableInputsAreErrors) {
  const PerfRun b = run(perfDoc("sim", "ring", kSizes, simTime), "base.json");
  EXPECT_THROW(gate({b}, {run(perfDoc("sim", "ring", kSizes, simTime, 4))}), Error);  // ranks differ
  EXPECT_THROW(gate({b}, {run(perfDoc("host", "ring", kSizes, simTime))}), Error);    // backend differs
  try {
    gate({b}, {run(perfDoc("sim", "ring", {1024, 65536}, simTime))});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lack row 'all_reduce ring 1048576 B out-of-place'"), std::string::npos)
        << e.what();
  }
  // Rows only in the current run are noted, not failed.
  const GateReport r = gate({b}, {b, run(perfDoc("sim", "tree", kSizes, simTime), "tree.json")});
  EXPECT_EQ(r.overall, Verdict::Pass);
  EXPECT_EQ(r.notes.size(), 2 * kSizes.size());
}

/// Measured runs: time x (1 + shift) with deterministic multiplicative noise of amplitude `noise`.
std::vector<PerfRun> measured(int repeats, double shift, double noise, int salt) {
  std::vector<PerfRun> out;
  for (int i = 0; i < repeats; ++i) {
    const double wobble = noise * std::sin(1.7 * (i + 1) + salt);
    out.push_back(
        run(perfDoc("host", "ring", kSizes, [&](std::size_t s) { return simTime(s) * (1 + shift) * (1 + wobble); }),
            "m" + std::to_string(i) + ".json"));
  }
  return out;
}

TEST(GateMeasured, MediansAndIntervals) {
  const auto base = measured(7, 0, 0.005, 0);
  GateReport r = gate(base, measured(7, 0, 0.005, 3));
  EXPECT_FALSE(r.deterministic);
  EXPECT_EQ(r.overall, Verdict::Pass);
  for (const GateRow& row : r.rows) {
    EXPECT_TRUE(row.hasInterval);
    EXPECT_LE(row.ciLow, row.change);
    EXPECT_GE(row.ciHigh, row.change);
  }
  r = gate(base, measured(7, 0.20, 0.005, 3));
  EXPECT_EQ(r.overall, Verdict::Regression);
  EXPECT_EQ(r.exitCode(), 1);
  EXPECT_EQ(gate(base, measured(7, -0.20, 0.005, 3)).overall, Verdict::Improvement);
  // Noise far larger than the shift: the interval straddles the tolerance.
  r = gate(base, measured(5, 0.04, 0.25, 3));
  EXPECT_EQ(r.overall, Verdict::Inconclusive);
  EXPECT_EQ(r.exitCode(), 0);
  EXPECT_EQ(r.exitCode(true), 1);
  EXPECT_NE(toMarkdown(r).find("**inconclusive**"), std::string::npos);
  // The bootstrap is seeded: the same inputs give the same report.
  EXPECT_EQ(toMarkdown(gate(base, measured(5, 0.04, 0.25, 3))), toMarkdown(r));
}

TEST(GateMeasured, OneSampleCannotProveAChange) {
  const GateReport r = gate(measured(1, 0, 0, 0), measured(1, 0.5, 0, 0));
  EXPECT_EQ(r.overall, Verdict::Inconclusive);
  EXPECT_NE(r.rows[0].note.find("--repeat"), std::string::npos);
  EXPECT_EQ(gate(measured(1, 0, 0, 0), measured(1, 0.01, 0, 0)).overall, Verdict::Pass);
}

TEST(GateMeasured, WrongResultsAreARegression) {
  json d = perfDoc("host", "ring", kSizes, simTime);
  d["results"][1]["in_place"]["wrong"] = 3;
  const GateReport r = gate(measured(3, 0, 0.001, 0), {run(d, "bad.json")});
  EXPECT_EQ(r.overall, Verdict::Regression);
  const std::string md = toMarkdown(r);
  EXPECT_NE(md.find("all_reduce ring 65536 B in-place"), std::string::npos);
  EXPECT_NE(md.find("3 wrong elements"), std::string::npos);
}

}  // namespace
}  // namespace collbench
