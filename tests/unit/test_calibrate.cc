// Calibration: recovering known alpha/beta/gamma from samples the model generated (with noise), hold-out, the perf
// JSON and nccl-tests log readers, and rejections.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collbench/calibrate.h"
#include "collbench/error.h"

namespace collbench {
namespace {

using nlohmann::json;

std::string dataFile(const std::string& name) {
  std::ifstream f(std::filesystem::path(COLLBENCH_SOURCE_DIR) / "tests/unit/data" / name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Samples timed by the model on a class topology of `hosts` x `perHost` with known parameters, +-1% noise.
std::vector<CalibrationSample> synthetic(const CalibrationParams& p, int hosts, int perHost,
                                         const std::vector<std::string>& algos) {
  const int n = hosts * perHost;
  const CostModel m(classTopology("truth", hosts, perHost, p.intra, p.inter, p.gammaGBps), n, p.callOverheadUs);
  std::vector<CalibrationSample> out;
  int i = 0;
  for (const std::string& a : algos) {
    for (std::size_t b = 1024; b <= (64u << 20); b *= 4, ++i) {
      CalibrationSample s;
      s.algorithm = a;
      s.nranks = n;
      s.hosts = hosts;
      s.bytes = b;
      const Estimate e =
          m.estimate(CollectiveSpec{Collective::AllReduce, n, b / 4, DType::F32}, a, AlgoParams{0, 1, m.rankHost()});
      if (!e.supported) continue;
      s.timeUs = e.terms.us * (1 + 0.01 * std::sin(1.3 * i));
      s.origin = fmt::format("synthetic {}", i);
      out.push_back(s);
    }
  }
  return out;
}

const std::vector<std::string> kAlgos = {"ring", "recursive_doubling", "rabenseifner", "direct",
                                         "tree", "hierarchical"};

TEST(Calibrate, RecoversKnownParametersOfTwoClasses) {
  CalibrationParams truth;
  truth.intra = {true, 1.5, 120};
  truth.inter = {true, 6.0, 25};
  truth.gammaGBps = 300;
  std::vector<CalibrationSample> s = synthetic(truth, 2, 4, kAlgos);
  const auto one = synthetic(truth, 1, 4, kAlgos);
  s.insert(s.end(), one.begin(), one.end());
  const CalibrationResult r = calibrate(s);
  for (bool id : r.identified) EXPECT_TRUE(id);
  EXPECT_NEAR(r.params.intra.alphaUs, 1.5, 0.1);
  EXPECT_NEAR(r.params.inter.alphaUs, 6.0, 0.3);
  EXPECT_NEAR(r.params.intra.betaGBps, 120, 8);
  EXPECT_NEAR(r.params.inter.betaGBps, 25, 1.5);
  EXPECT_NEAR(r.params.gammaGBps, 300, 40);
  EXPECT_TRUE(r.memoryTiers.empty());  // alpha-beta data: BIC keeps one tier
  EXPECT_GT(r.heldOutCount, 10);
  EXPECT_LT(r.heldOutMedian, 0.02);
  EXPECT_LT(r.heldOutWorst, 0.06);
  // The calibrated topology holds every sample's layout and parses back.
  EXPECT_EQ(r.topology.ranks.size(), 8u);
  EXPECT_NO_THROW(parseTopology(toJson(r.topology), "calibrated.json"));
  for (const SampleFit& f : r.fits) EXPECT_EQ(f.relError, f.predictedUs / f.sample.timeUs - 1);
}

TEST(Calibrate, RecoversMemoryTiers) {
  // Two ranks on one host whose intra-host rates drop to 0.4x once a call's working set (2 ranks x input + output)
  // passes 8 MiB: the fit finds the bound between the training sizes around it and the scale, and predicts the
  // held-out sizes on both sides.
  CalibrationParams truth;
  truth.intra = {true, 1.0, 8};
  truth.gammaGBps = 20;
  Topology t = classTopology("truth", 1, 2, truth.intra, truth.inter, truth.gammaGBps, NodeKind::Cpu);
  t.memoryTiers = {{std::size_t{8} << 20, 1.0}, {0, 0.4}};
  const CostModel m(t, 2);
  std::vector<CalibrationSample> samples;
  int i = 0;
  for (const char* a : {"ring", "recursive_doubling"}) {
    for (std::size_t b = 1024; b <= (64u << 20); b *= 2, ++i) {
      CalibrationSample s;
      s.algorithm = a;
      s.nranks = 2;
      s.bytes = b;
      s.timeUs = m.estimate(CollectiveSpec{Collective::AllReduce, 2, b / 4, DType::F32}, a).terms.us *
                 (1 + 0.01 * std::sin(1.3 * i));
      s.origin = fmt::format("synthetic {}", i);
      samples.push_back(s);
    }
  }
  const CalibrationResult r = calibrate(samples);
  ASSERT_EQ(r.memoryTiers.size(), 2u) << (r.notes.empty() ? "" : r.notes.front());
  // Training working sets 4 MiB (1 MiB calls) and 16 MiB (4 MiB calls): the bound is their geometric midpoint.
  EXPECT_EQ(r.memoryTiers[0].maxWorkingSetBytes, std::size_t{8} << 20);
  EXPECT_EQ(r.memoryTiers[0].bandwidthScale, 1.0);
  EXPECT_NEAR(r.memoryTiers[1].bandwidthScale, 0.4, 0.02);
  EXPECT_NEAR(r.params.intra.betaGBps, 8, 0.4);
  EXPECT_NEAR(r.params.gammaGBps, 20, 2);
  EXPECT_LT(r.heldOutMedian, 0.02);
  EXPECT_LT(r.heldOutWorst, 0.05);
  EXPECT_EQ(r.topology.memoryTiers.size(), 2u);
  for (const std::string& n : r.notes) EXPECT_EQ(n.find("combinations"), std::string::npos) << n;
  // One algorithm at one rank count moves beta and gamma bytes in one ratio: the fit says their split is arbitrary.
  std::vector<CalibrationSample> doubling(samples.begin() + 17, samples.end());
  ASSERT_EQ(doubling.front().algorithm, "recursive_doubling");
  bool said = false;
  for (const std::string& n : calibrate(doubling).notes) {
    said = said || n.find("determine only 2 combinations of alpha_intra, beta_intra, gamma") != std::string::npos;
  }
  EXPECT_TRUE(said);
  // One tier cannot follow the drop; asking for one says so in the fit.
  CalibrationOptions one;
  one.memoryTiers = 1;
  const CalibrationResult flat = calibrate(samples, one);
  EXPECT_TRUE(flat.memoryTiers.empty());
  EXPECT_GT(flat.heldOutMedian, 0.1);
  // Each tier needs two distinct training sizes: 6 tiers need 12, and these samples have 9.
  CalibrationOptions many;
  many.memoryTiers = 6;
  try {
    calibrate(samples, many);
    ADD_FAILURE() << "6 tiers from 9 training sizes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 tiers need 12 distinct training sizes (2 each), the samples have 9"),
              std::string::npos)
        << e.what();
  }
}

TEST(Calibrate, OneHostLeavesInterUnidentified) {
  CalibrationParams truth;
  truth.intra = {true, 4.0, 8};
  truth.gammaGBps = 6;
  const CalibrationResult r = calibrate(synthetic(truth, 1, 4, kAlgos));
  EXPECT_TRUE(r.identified[0]);
  EXPECT_FALSE(r.identified[1]);
  EXPECT_FALSE(r.identified[3]);
  EXPECT_NEAR(r.params.intra.alphaUs, 4.0, 0.2);
  EXPECT_NEAR(r.params.intra.betaGBps, 8, 0.5);
  EXPECT_NEAR(r.params.gammaGBps, 6, 0.6);
  bool noted = false;
  for (const auto& n : r.notes) noted = noted || n.find("alpha_inter is not identified") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(r.topology.ranks.size(), 4u);
}

TEST(Calibrate, FitsAFixedPerCallOverhead) {
  // Host-like: one host of 4 ranks, 20 us per call on top of 3 us per message, 5 GB/s, reductions at 4 GB/s.
  CalibrationParams truth;
  truth.intra = {true, 3.0, 5};
  truth.gammaGBps = 4;
  truth.callOverheadUs = 20;
  const CalibrationResult r = calibrate(synthetic(truth, 1, 4, {"ring", "recursive_doubling", "rabenseifner"}));
  EXPECT_EQ(CalibrationOptions{}.loss, CalibrationLoss::L2);  // least squares unless asked otherwise
  EXPECT_TRUE(r.identified[5]);
  EXPECT_NEAR(r.params.callOverheadUs, 20, 1.0);
  EXPECT_NEAR(r.params.intra.alphaUs, 3.0, 0.3);
  EXPECT_LT(r.heldOutMedian, 0.02);
  // One algorithm at one rank count: every latency term is constant across sizes, so the overhead cannot be told
  // from them; it stays at its initial value (0) and the latency takes it all.
  const CalibrationResult ring = calibrate(synthetic(truth, 1, 4, {"ring"}));
  EXPECT_FALSE(ring.identified[5]);
  EXPECT_EQ(ring.params.callOverheadUs, 0);
  EXPECT_NEAR(ring.params.intra.alphaUs, 3.0 + 20.0 / 6, 0.3);  // 2(n-1) = 6 latency terms per call
  bool noted = false;
  for (const auto& note : ring.notes)
    noted = noted || note.find("call_overhead is not identified") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Calibrate, HoldOutEverySecondSizeButNeverTheLargest) {
  CalibrationParams truth;
  const auto s = synthetic(truth, 1, 2, {"ring"});
  const CalibrationResult r = calibrate(s, CalibrationOptions{});
  ASSERT_EQ(r.fits.size(), s.size());
  EXPECT_FALSE(r.fits.back().heldOut);
  EXPECT_TRUE(r.fits[1].heldOut);
  EXPECT_FALSE(r.fits[0].heldOut);
  CalibrationOptions all;
  all.holdOutEvery = 0;
  EXPECT_EQ(calibrate(s, all).heldOutCount, 0);
  CalibrationOptions negative;
  negative.holdOutEvery = -1;
  EXPECT_THROW(calibrate(s, negative), Error);
}

TEST(Calibrate, ReadsPerfJson) {
  json doc = {{"format", "collbench-perf"},
              {"version", 1},
              {"collective", "all_reduce"},
              {"config",
               {{"backend", "host"},
                {"ranks", 4},
                {"topology", ""},
                {"datatype", "float"},
                {"op", "sum"},
                {"channels", 2},
                {"chunk_bytes", 0}}},
              {"results", json::array()}};
  for (int i = 0; i < 3; ++i) {
    doc["results"].push_back({{"size", 1024 << (2 * i)},
                              {"count", 256 << (2 * i)},
                              {"type", "float"},
                              {"algorithm", "ring"},
                              {"out_of_place", {{"time_us", 10.0 + i}, {"algbw_GBps", 1.0}, {"busbw_GBps", 1.5}}},
                              {"in_place", {{"time_us", 9.0 + i}, {"algbw_GBps", 1.0}, {"busbw_GBps", 1.5}}}});
  }
  doc["results"][2]["channels"] = 1;
  const auto s = samplesFromPerfJson(doc.dump(), "run.json");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].nranks, 4);
  EXPECT_EQ(s[0].hosts, 1);
  EXPECT_EQ(s[0].channels, 2);  // the config's
  EXPECT_EQ(s[2].channels, 1);  // the row's
  EXPECT_EQ(s[1].bytes, 4096u);
  EXPECT_DOUBLE_EQ(s[1].timeUs, 11.0);
  EXPECT_EQ(s[1].origin, "run.json results[1]");
  auto rejected = [](json d, const std::string& part) {
    try {
      samplesFromPerfJson(d.dump(), "run.json");
      ADD_FAILURE() << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  json d = doc;
  d["format"] = "collbench-tuning";
  rejected(d, "format");
  d = doc;
  d["results"][0]["out_of_place"]["time_us"] = -2;
  rejected(d, "results[0].out_of_place.time_us");
  d = doc;
  d["results"][1]["type"] = "float33";
  rejected(d, "results[1].type");
  d = doc;
  d["config"]["ranks"] = 0;
  rejected(d, "config.ranks");
  d = doc;
  d["results"][0].erase("algorithm");
  rejected(d, "results[0].algorithm: missing");
  EXPECT_THROW(samplesFromPerfJson(doc.dump(), "run.json", 3), Error);  // 4 ranks over 3 hosts
}

TEST(Calibrate, FitsATwoNodeNcclTestsLog) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("all_reduce_perf_2.13_two_nodes.log"), "two.log");
  EXPECT_THROW(samplesFromNcclTestsLog(log, "two.log", "ring"), Error);  // the 2.13 log does not name its collective
  const auto s = samplesFromNcclTestsLog(log, "two.log", "ring", Collective::AllReduce);
  ASSERT_EQ(s.size(), 21u);
  EXPECT_EQ(s[0].hosts, 2);
  EXPECT_EQ(s[0].nranks, 16);
  EXPECT_EQ(s[0].origin, "two.log:26");
  CalibrationOptions o;
  o.rankKind = NodeKind::Gpu;
  const CalibrationResult r = calibrate(s, o);
  // The log was timed by the ring model (+-1%): the fit reproduces it on the held-out sizes.
  EXPECT_LT(r.heldOutMedian, 0.015);
  EXPECT_LT(r.heldOutWorst, 0.03);
  EXPECT_NEAR(r.params.inter.alphaUs, 9.0, 0.5);  // 2(n-1) inter-bound steps at small sizes
  EXPECT_EQ(r.topology.ranks.size(), 16u);
  EXPECT_THROW(samplesFromNcclTestsLog(log, "two.log", "dissemination", Collective::AllReduce), Error);
}

TEST(Calibrate, Rejections) {
  EXPECT_THROW(calibrate({}), Error);
  CalibrationSample s;
  s.algorithm = "nccl";
  s.nranks = 2;
  s.bytes = 1024;
  s.timeUs = 3;
  try {
    calibrate({s});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nccl' has no cost model"), std::string::npos) << e.what();
  }
  s.algorithm = "ring";
  s.hosts = 3;
  EXPECT_THROW(calibrate({s}), Error);
}

}  // namespace
}  // namespace collbench
