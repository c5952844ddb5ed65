// Fidelity (fidelity.h): error statistics against hand-computed values, the comparison with a closed-form
// alpha-beta "simulator", rank-count resolution, the table, and the collbench-fidelity JSON round trip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/fidelity.h"
#include "collbench/nccl_tests_log.h"

namespace collbench {
namespace {

/// A closed-form simulator: alpha + bytes / beta, the algorithm named "closed-form".
constexpr double kAlphaSeconds = 10e-6;
constexpr double kBetaBytesPerSecond = 100e9;

SimulatedCall closedForm(const FidelityCall& c) {
  return {kAlphaSeconds + static_cast<double>(c.bytes) / kBetaBytesPerSecond, "closed-form"};
}

/// Three rows, one per size class, measured at 20 us, 40 us, 1000 us on 8 ranks.
NcclTestsLog threeRowLog() {
  const std::string text =
      "# gpu_count: 8\n"
      "bytes,count,type,time_us_oop,algbw_oop,busbw_oop,time_us_ip,algbw_ip,busbw_ip\n"
      "1024,256,float,20,0.05,0.09,20,0.05,0.09\n"
      "1048576,262144,float,40,26.21,45.87,40,26.21,45.87\n"
      "33554432,8388608,float,1000,33.55,58.72,1000,33.55,58.72\n";
  return parseNcclTestsLog(text, "three.csv");
}

FidelityOptions options() {
  FidelityOptions o;
  o.topology = "test-topo";
  o.topologyFingerprint = "0123456789abcdef";
  return o;
}

TEST(Fidelity, ErrorStatsByHand) {
  const ErrorStats odd = errorStats({0.1, -0.2, 0.3, -0.4, 0.5});
  EXPECT_EQ(odd.rows, 5u);
  EXPECT_DOUBLE_EQ(odd.median, 0.3);
  EXPECT_DOUBLE_EQ(odd.p90, 0.5);  // ceil(0.9 x 5) = 5th smallest
  EXPECT_DOUBLE_EQ(odd.worst, 0.5);
  const ErrorStats even = errorStats({-0.4, 0.1, 0.3, 0.2});
  EXPECT_DOUBLE_EQ(even.median, 0.25);  // mean of the middle two of 0.1 0.2 0.3 0.4
  EXPECT_DOUBLE_EQ(even.p90, 0.4);      // ceil(3.6) = 4th
  std::vector<double> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back(-0.01 * i);
  EXPECT_DOUBLE_EQ(errorStats(ten).p90, 0.09);  // ceil(9.0) = 9th
  EXPECT_EQ(errorStats({}), ErrorStats{});
}

TEST(Fidelity, GeomeanByHand) {
  // |error| 0.1, 0.4, 0.025: product 0.001, cube root 0.1 (the median is 0.1 too, the arithmetic mean 0.175).
  EXPECT_NEAR(errorStats({0.1, -0.4, 0.025}).geomean, 0.1, 1e-15);
  // 0.5 x 0.02 = 0.01, square root 0.1; the sign does not matter.
  EXPECT_NEAR(errorStats({-0.5, -0.02}).geomean, 0.1, 1e-15);
  // A row hit exactly counts as the floor, 0.1%: sqrt(0.001 x 0.1) = 0.01; so does one below it.
  ASSERT_DOUBLE_EQ(kGeomeanErrorFloor, 0.001);
  EXPECT_NEAR(errorStats({0.0, 0.1}).geomean, 0.01, 1e-15);
  EXPECT_NEAR(errorStats({-0.00001, 0.1, 0.01}).geomean, 0.01, 1e-15);  // cbrt(0.001 x 0.1 x 0.01)
  // One value is its own geomean.
  EXPECT_DOUBLE_EQ(errorStats({-0.3}).geomean, 0.3);
}

TEST(Fidelity, SizeClassBoundaries) {
  EXPECT_EQ(sizeClassOf(8), SizeClass::Small);
  EXPECT_EQ(sizeClassOf(65535), SizeClass::Small);
  EXPECT_EQ(sizeClassOf(65536), SizeClass::Medium);
  EXPECT_EQ(sizeClassOf(16u << 20), SizeClass::Medium);
  EXPECT_EQ(sizeClassOf((16u << 20) + 1), SizeClass::Large);
  EXPECT_EQ(toString(SizeClass::Medium), "medium");
  EXPECT_EQ(describe(SizeClass::Large), "> 16 MiB");
}

TEST(Fidelity, ComparesEveryRowWithTheSimulator) {
  std::vector<FidelityCall> calls;
  const FidelityLog f = compareWithSimulation(threeRowLog(), "three.csv", options(), [&](const FidelityCall& c) {
    calls.push_back(c);
    return closedForm(c);
  });
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].nranks, 8);
  EXPECT_EQ(calls[0].collective, Collective::AllReduce);
  EXPECT_EQ(calls[0].dtype, DType::F32);
  EXPECT_EQ(calls[2].bytes, 33554432u);
  ASSERT_EQ(f.rows.size(), 3u);
  EXPECT_EQ(f.ranks, 8);
  EXPECT_EQ(f.topology, "test-topo");
  // 1 KiB: 10 us + 1024 B / 100 GB/s = 10.01024 us against 20 us.
  EXPECT_NEAR(f.rows[0].simulatedUs, 10.01024, 1e-9);
  EXPECT_NEAR(f.rows[0].error(), 10.01024 / 20 - 1, 1e-12);
  // 32 MiB: 10 us + 335.54432 us against 1000 us; busbw = bytes / time x 2 x 7 / 8.
  const double t = 10 + 33554432 / 1e5;
  EXPECT_NEAR(f.rows[2].simulatedUs, t, 1e-9);
  EXPECT_NEAR(f.rows[2].simulatedBusbwGBps, 33554432 / (t * 1e-6) / 1e9 * 1.75, 1e-9);
  EXPECT_DOUBLE_EQ(f.rows[2].measuredBusbwGBps, 58.72);
  EXPECT_EQ(f.rows[1].algorithm, "closed-form");
  EXPECT_EQ(f.rows[1].line, 4);
  // One row per class: each class's median is that row's |error|.
  for (SizeClass c : kSizeClasses) {
    const std::size_t i = static_cast<std::size_t>(c);
    EXPECT_EQ(f.byClass[i].rows, 1u);
    EXPECT_DOUBLE_EQ(f.byClass[i].median, std::abs(f.rows[i].error()));
  }
  EXPECT_DOUBLE_EQ(f.all.median, errorStats({f.rows[0].error(), f.rows[1].error(), f.rows[2].error()}).median);
  // Geomean of |error| 0.499488, 0.487856, 0.65445568: exp((ln 0.499488 + ln 0.487856 + ln 0.65445568) / 3).
  EXPECT_NEAR(f.all.geomean, 0.5422909002, 1e-10);
  for (SizeClass c : kSizeClasses) {
    const std::size_t i = static_cast<std::size_t>(c);
    EXPECT_DOUBLE_EQ(f.byClass[i].geomean, std::abs(f.rows[i].error()));
  }
}

TEST(Fidelity, RankCountFromTheLogOrTheFlag) {
  NcclTestsLog log = threeRowLog();
  EXPECT_EQ(fidelityRanks(log, "x.csv", 0), 8);
  EXPECT_EQ(fidelityRanks(log, "x.csv", 8), 8);
  try {
    fidelityRanks(log, "x.csv", 16);
    ADD_FAILURE() << "a conflicting -g was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "-g/--ranks 16 differs from the 8 ranks that x.csv states");
  }
  log.nranks = 0;
  EXPECT_EQ(fidelityRanks(log, "x.csv", 4), 4);
  try {
    fidelityRanks(log, "x.csv", 0);
    ADD_FAILURE() << "no rank count was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("x.csv: the log states no rank count"), std::string::npos) << e.what();
  }
}

TEST(Fidelity, RejectsZeroMeasuredTime) {
  const NcclTestsLog log = parseNcclTestsLog(
      "# gpu_count: 2\nbytes,count,type,time_us_oop,algbw_oop,busbw_oop\n1024,256,float,0,0,0\n", "zero.csv");
  try {
    compareWithSimulation(log, "zero.csv", options(), closedForm);
    ADD_FAILURE() << "a 0 us row was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "zero.csv:3: out-of-place time is 0 us: no error can be taken against it");
  }
}

TEST(Fidelity, TableHasRowsAndSummaries) {
  const FidelityLog f = compareWithSimulation(threeRowLog(), "three.csv", options(), closedForm);
  const std::string table = formatFidelityTable(f);
  EXPECT_NE(table.find("# fidelity of three.csv: all_reduce on 8 ranks (1 node), simulated on test-topo"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("   -49.9  "), std::string::npos) << table;  // 1 KiB: 10.01 us vs 20 us: -49.95%
  EXPECT_NE(table.find("# all sizes"), std::string::npos);
  // The summary lines end with the geomean |error| (54.23% over all sizes, the 1 KiB row's 49.9% below 64 KiB).
  EXPECT_NE(table.find("worst   65.4%  geomean   54.2%  (3 rows)"), std::string::npos) << table;
  EXPECT_NE(table.find("geomean   49.9%  (1 row)"), std::string::npos) << table;
  EXPECT_NE(table.find("# < 64 KiB"), std::string::npos);
  EXPECT_NE(table.find("# > 16 MiB"), std::string::npos);
}

TEST(Fidelity, HeaderAndRecordCarryTheLogsGpusPerThread) {
  // A CSV whose header quotes nccl-tests' -g 8: one thread launched all eight GPUs, which the simulated time takes.
  const NcclTestsLog log = parseNcclTestsLog(
      "# command: all_reduce_perf -b 8 -e 8G -f 2 -g 8\n# gpu_count: 8\n"
      "bytes,count,type,time_us_oop,algbw_oop,busbw_oop,time_us_ip,algbw_ip,busbw_ip\n"
      "1024,256,float,20,0.05,0.09,20,0.05,0.09\n",
      "g8.csv");
  const FidelityLog f = compareWithSimulation(log, "g8.csv", options(), closedForm);
  EXPECT_EQ(f.gpusPerThread, 8);
  EXPECT_NE(formatFidelityTable(f).find("all_reduce on 8 ranks (1 node, -g 8), simulated on"), std::string::npos)
      << formatFidelityTable(f);
  FidelityDocument doc;
  doc.logs.push_back(f);
  EXPECT_EQ(parseFidelityDocument(toJson(doc), "g8.json").logs[0].gpusPerThread, 8);
  // A file without the field (written before it existed) reads as one GPU per thread; below 1 is refused.
  nlohmann::json j = nlohmann::json::parse(toJson(doc));
  j["logs"][0].erase("gpus_per_thread");
  EXPECT_EQ(parseFidelityDocument(j.dump(), "old.json").logs[0].gpusPerThread, 1);
  j["logs"][0]["gpus_per_thread"] = 0;
  try {
    parseFidelityDocument(j.dump(), "bad.json");
    ADD_FAILURE() << "gpus_per_thread 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpus_per_thread"), std::string::npos) << e.what();
  }
}

TEST(Fidelity, JsonRoundTrip) {
  FidelityDocument doc;
  doc.tool = "collbench test";
  doc.commandLine = "collbench fidelity three.csv --topology test-topo";
  doc.logs.push_back(compareWithSimulation(threeRowLog(), "three.csv", options(), closedForm));
  doc.logs.back().ncclVersion = "2.26.2";
  doc.logs.push_back(doc.logs.front());
  doc.logs.back().rows.pop_back();
  summarize(doc.logs.back());
  const FidelityDocument back = parseFidelityDocument(toJson(doc), "rt.json");
  EXPECT_EQ(back, doc);
  EXPECT_EQ(back.logs[1].byClass[static_cast<int>(SizeClass::Large)].rows, 0u);
  EXPECT_NEAR(back.logs[0].all.geomean, 0.5422909002, 1e-10);
  // A file written before the geomean was added (same version, no "geomean" in its summaries) still reads.
  nlohmann::json old = nlohmann::json::parse(toJson(doc));
  for (auto& log : old["logs"]) {
    for (auto& [name, stats] : log["summary"].items()) stats.erase("geomean");
  }
  EXPECT_EQ(parseFidelityDocument(old.dump(), "old.json"), doc);
}

TEST(Fidelity, JsonRejectsEditsAndUnknownFields) {
  FidelityDocument doc;
  doc.logs.push_back(compareWithSimulation(threeRowLog(), "three.csv", options(), closedForm));
  nlohmann::json j = nlohmann::json::parse(toJson(doc));
  auto expectError = [](const nlohmann::json& bad, const std::string& part) {
    try {
      parseFidelityDocument(bad.dump(), "bad.json");
      ADD_FAILURE() << "accepted: " << bad.dump().substr(0, 200);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  nlohmann::json edited = j;
  edited["logs"][0]["summary"]["all"]["median"] = 0.01;
  expectError(edited, "bad.json: logs[0].summary.all: does not match its rows");
  nlohmann::json geomean = j;
  geomean["logs"][0]["summary"]["medium"]["geomean"] = 0.1;
  expectError(geomean, "bad.json: logs[0].summary.medium: does not match its rows");
  nlohmann::json unknown = j;
  unknown["logs"][0]["rows"][1]["colour"] = "red";
  expectError(unknown, "bad.json: logs[0].rows[1].colour: unknown field");
  nlohmann::json wrongError = j;
  wrongError["logs"][0]["rows"][0]["error"] = 0.5;
  expectError(wrongError, "logs[0].rows[0].error: is not simulated_us / measured_us - 1");
  nlohmann::json format = j;
  format["format"] = "collbench-perf";
  expectError(format, "bad.json: format: expected \"collbench-fidelity\"");
  nlohmann::json missing = j;
  missing["logs"][0].erase("ranks");
  expectError(missing, "logs[0].ranks: missing required field");
}

}  // namespace
}  // namespace collbench
