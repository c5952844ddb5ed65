// Tuning tables: JSON round trip, rejections naming field and value, interpolation, and NCCL's tuner CSV (rules,
// parse-back round trip, first-match semantics, rejections).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "collbench/error.h"
#include "collbench/tuning.h"

namespace collbench {
namespace {

using nlohmann::json;

TuningTable sampleTable() {
  TuningTable t;
  t.provenance = {"collbench 0.1.0", "collbench tune ...", "sim", "box", "2025-01-01T00:00:00Z", "flat", "00ff", ""};
  TuningSection s;
  s.topology = "flat";
  s.fingerprint = "00ff";
  s.backend = "sim";
  // Two rank counts x three sizes; recursive doubling wins small, ring wins large.
  for (int n : {4, 8}) {
    for (std::size_t b : {std::size_t{1024}, std::size_t{1} << 20, std::size_t{1} << 30}) {
      TuningEntry e{Collective::AllReduce, n, 1, b, {}};
      const double small = b < (1u << 20) ? 1.0 : 3.0;
      e.candidates.push_back({"recursive_doubling", "", 0, 1, 10.0 * small * n * std::log2(static_cast<double>(b))});
      e.candidates.push_back({"ring", "", b >= (1u << 30) ? std::size_t{131072} : 0, b >= (1u << 30) ? 2 : 1,
                              20.0 / small * n * std::log2(static_cast<double>(b))});
      s.entries.push_back(e);
    }
  }
  t.sections.push_back(s);
  TuningSection nccl;
  nccl.topology = "flat";
  nccl.fingerprint = "00ff";
  nccl.backend = "sim";
  nccl.library = "nccl";
  for (std::size_t b : {std::size_t{1024}, std::size_t{65536}, std::size_t{1} << 20, std::size_t{1} << 26}) {
    TuningEntry e{Collective::AllReduce, 16, 2, b, {}};
    e.candidates.push_back({"ring", "ll", 0, 2, b < 65536 ? 5.0 : 50.0});
    e.candidates.push_back({"tree", "simple", 0, 8, b < (1u << 20) ? 20.0 : 10.0});
    e.candidates.push_back({"ring", "simple", 0, 32, b < (1u << 26) ? 30.0 : 1.0});
    nccl.entries.push_back(e);
  }
  TuningEntry bc{Collective::Broadcast, 16, 2, 4096, {{"ring", "ll128", 0, 4, 7.0}}};
  nccl.entries.push_back(bc);
  t.sections.push_back(nccl);
  return parseTuningTable(toJson(t), "sample");  // sorted as loading sorts
}

void expectRejected(const json& doc, const std::vector<std::string>& parts) {
  try {
    parseTuningTable(doc.dump(), "t.json");
    ADD_FAILURE() << "accepted " << doc.dump().substr(0, 200);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(TuningTable, JsonRoundTrip) {
  const TuningTable t = sampleTable();
  const TuningTable back = parseTuningTable(toJson(t), "again");
  EXPECT_EQ(toJson(back), toJson(t));
  ASSERT_EQ(back.sections.size(), 2u);
  EXPECT_EQ(back.provenance.commandLine, "collbench tune ...");
  EXPECT_EQ(toJson(t).find("\"shard\""), std::string::npos);  // an unsharded table writes no shard field
  TuningTable part = t;
  part.provenance.shard = "2/5";
  EXPECT_EQ(parseTuningTable(toJson(part), "part").provenance.shard, "2/5");
  EXPECT_EQ(back.sections[1].library, "nccl");
  const TuningEntry* e = back.sections[0].find(Collective::AllReduce, 8, 1024);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->candidates.front().algorithm, "recursive_doubling");  // sorted fastest first
  EXPECT_EQ(back.find("00ff"), &back.sections[0]);
  EXPECT_EQ(back.find("00ff", kLibraryNccl), &back.sections[1]);
  EXPECT_EQ(back.find("beef"), nullptr);
}

TEST(TuningTable, RejectionsNameFieldAndValue) {
  const json good = json::parse(toJson(sampleTable()));
  json d = good;
  d["format"] = "collbench-topology";
  expectRejected(d, {"t.json", "format", "collbench-tuning", "collbench-topology"});
  d = good;
  d["version"] = 2;
  expectRejected(d, {"version", "version 2 is not supported"});
  d = good;
  d["extra"] = 1;
  expectRejected(d, {"extra", "unknown field"});
  d = good;
  d["sections"][0]["entries"][1]["nranks"] = 0;
  expectRejected(d, {"sections[0].entries[1].nranks", "got 0"});
  d = good;
  d["sections"][0]["entries"][0]["nnodes"] = 9;
  expectRejected(d, {"sections[0].entries[0].nnodes", "got 9"});
  d = good;
  d["sections"][0]["entries"][0]["bytes"] = -5;
  expectRejected(d, {"entries[0].bytes", ">= 0", "got -5"});
  d = good;
  d["sections"][0]["entries"][0]["collective"] = "all_to_all";
  expectRejected(d, {"entries[0].collective", "unknown collective", "all_to_all"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"][0]["algorithm"] = "rnig";
  expectRejected(d, {"candidates[0].algorithm", "unknown algorithm for all_reduce", "rnig"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"][1]["time_us"] = -1;
  expectRejected(d, {"candidates[1].time_us", ">= 0", "got -1"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"][1]["time_us"] = "fast";
  expectRejected(d, {"candidates[1].time_us", "expected a number", "fast"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"][0]["channels"] = 0;
  expectRejected(d, {"candidates[0].channels", "got 0"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"][0]["protocol"] = "ll";
  expectRejected(d, {"candidates[0].protocol", "only NCCL candidates"});
  d = good;
  d["sections"][0]["entries"][0]["candidates"] = json::array();
  expectRejected(d, {"entries[0].candidates", "at least one"});
  d = good;
  d["sections"][0]["entries"].push_back(d["sections"][0]["entries"][0]);
  expectRejected(d, {"duplicate point", "all_reduce", "nranks 4", "bytes 1024"});
  d = good;
  d["sections"][1]["entries"][0]["candidates"][0]["protocol"] = "ll64";
  expectRejected(d, {"sections[1].entries[0].candidates[0].protocol", "ll64"});
  d = good;
  d["sections"][1]["entries"][4]["candidates"][0]["algorithm"] = "tree";
  expectRejected(d, {"NCCL has no tree broadcast"});
  d = good;
  d["sections"][0]["library"] = "mpi";
  expectRejected(d, {"sections[0].library", "mpi"});
  expectRejected(json::parse("[1, 2]"), {"(top level)", "expected an object"});
  try {
    parseTuningTable("{\"format\": \"collbench-tuning\",\n \"version\": 1,\n \"sections\": [}", "broken.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: malformed JSON at line 3"), std::string::npos) << e.what();
  }
}

TEST(TuningTable, ParamSpaceAndSweepConfigs) {
  EXPECT_TRUE(paramSpace(Collective::AllReduce, "tree").chunk);
  EXPECT_TRUE(paramSpace(Collective::AllReduce, "ring").channels);
  EXPECT_FALSE(paramSpace(Collective::AllReduce, "direct").chunk);
  EXPECT_FALSE(paramSpace(Collective::AllReduce, "recursive_doubling").channels);
  EXPECT_TRUE(paramSpace(Collective::Broadcast, "ring").chunk);
  EXPECT_EQ(sweepConfigs(Collective::AllReduce, "tree", {0, 1024}, {1, 2, 4}).size(), 6u);
  EXPECT_EQ(sweepConfigs(Collective::AllReduce, "rabenseifner", {0, 1024}, {1, 2, 4}).size(), 1u);
}

// tune --passes: the mean of each candidate's pass times, re-ranked; a pass whose mode favoured one algorithm does not
// decide alone.
TEST(TuningTable, MeanOfPassesAveragesEachCandidateAndReranks) {
  TuningSection fast, slow;
  fast.entries.push_back(
      {Collective::AllReduce, 4, 1, 1024, {{"rabenseifner", "", 0, 1, 1.0}, {"recursive_doubling", "", 0, 1, 1.1}}});
  slow.entries.push_back(
      {Collective::AllReduce, 4, 1, 1024, {{"recursive_doubling", "", 0, 1, 2.9}, {"rabenseifner", "", 0, 1, 3.7}}});
  fast.entries.push_back({Collective::AllReduce, 4, 1, 2048, {{"ring", "", 0, 2, 4.0}}});
  slow.entries.push_back({Collective::AllReduce, 4, 1, 2048, {{"ring", "", 0, 2, 6.0}}});
  const TuningSection mean = meanOfPasses({fast, slow});
  ASSERT_EQ(mean.entries.size(), 2u);
  const TuningEntry& small = mean.entries[0];
  ASSERT_EQ(small.candidates.size(), 2u);
  EXPECT_EQ(small.candidates[0].algorithm, "recursive_doubling");  // (1.1 + 2.9) / 2 = 2.0 < (1.0 + 3.7) / 2
  EXPECT_DOUBLE_EQ(small.candidates[0].timeUs, 2.0);
  EXPECT_DOUBLE_EQ(small.candidates[1].timeUs, 2.35);
  EXPECT_DOUBLE_EQ(mean.entries[1].candidates[0].timeUs, 5.0);
  EXPECT_DOUBLE_EQ(meanOfPasses({slow}).entries[0].candidates[0].timeUs, 2.9);  // one pass: unchanged

  TuningSection otherConfig = slow;
  otherConfig.entries[1].candidates[0].channels = 4;
  try {
    meanOfPasses({fast, otherConfig});
    ADD_FAILURE() << "passes with different candidates were averaged";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 2 has candidate ring (chunk 0, channels 4) at 4 ranks, 2048 bytes"),
              std::string::npos)
        << e.what();
  }
  TuningSection fewer = slow;
  fewer.entries.pop_back();
  EXPECT_THROW(meanOfPasses({fast, fewer}), Error);
  EXPECT_THROW(meanOfPasses({}), Error);
}

TEST(TuningInterpolation, TablePointsGiveTheTableChoice) {
  const TuningTable t = sampleTable();
  for (const TuningEntry& e : t.sections[0].entries) {
    const auto p = predictFromTable(t.sections[0], e.collective, e.nranks, e.bytes);
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.front().fit, TableFit::Exact);
    EXPECT_EQ(p.front().candidate.algorithm, e.candidates.front().algorithm);
    EXPECT_EQ(p.front().candidate.chunkBytes, e.candidates.front().chunkBytes);
    EXPECT_EQ(p.front().candidate.channels, e.candidates.front().channels);
    EXPECT_DOUBLE_EQ(p.front().candidate.timeUs, e.candidates.front().timeUs);
  }
}

TEST(TuningInterpolation, LogTimeBetweenPointsAndClampedOutside) {
  const TuningTable t = sampleTable();
  const TuningSection& s = t.sections[0];
  // Halfway in log(bytes) between 1 KiB and 1 MiB at n=4: the geometric mean of the two measured times.
  const auto p = predictFromTable(s, Collective::AllReduce, 4, 32768);
  ASSERT_EQ(p.size(), 2u);
  for (const auto& x : p) {
    EXPECT_EQ(x.fit, TableFit::Interpolated);
    EXPECT_EQ(x.bytesLo, 1024u);
    EXPECT_EQ(x.bytesHi, 1u << 20);
    const double lo =
        s.find(Collective::AllReduce, 4, 1024)->candidates[x.candidate.algorithm == "ring" ? 1 : 0].timeUs;
    double hi = 0;
    for (const auto& k : s.find(Collective::AllReduce, 4, 1u << 20)->candidates) {
      if (k.algorithm == x.candidate.algorithm) hi = k.timeUs;
    }
    EXPECT_NEAR(x.candidate.timeUs, std::sqrt(lo * hi), 1e-9 * hi) << x.candidate.algorithm;
  }
  // Between rank counts and sizes: four corners.
  const auto q = predictFromTable(s, Collective::AllReduce, 6, 32768);
  ASSERT_FALSE(q.empty());
  EXPECT_EQ(q.front().nranksLo, 4);
  EXPECT_EQ(q.front().nranksHi, 8);
  // Outside: clamped to the edge, marked extrapolated.
  const auto r = predictFromTable(s, Collective::AllReduce, 16, std::size_t{1} << 33);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().fit, TableFit::Extrapolated);
  EXPECT_EQ(r.front().candidate.algorithm, "ring");
  EXPECT_EQ(r.front().candidate.chunkBytes, 131072u);  // the nearest corner's configuration
  EXPECT_TRUE(predictFromTable(s, Collective::Broadcast, 4, 1024).empty());
}

TEST(TuningInterpolation, ModelShapeScaledByTheTable) {
  const TuningTable t = sampleTable();
  // A model exactly twice the measurements at the corners: predictions are the model / 2 everywhere.
  const TuningSection& s = t.sections[0];
  auto measured = [&](std::string_view a, int n, std::size_t b) {
    for (const auto& k : s.find(Collective::AllReduce, n, b)->candidates) {
      if (k.algorithm == a) return k.timeUs;
    }
    return -1.0;
  };
  ModelTimeFn model = [&](std::string_view a, std::size_t, int, int n, std::size_t b) -> std::optional<double> {
    if (a == "ring" && n == 6) return std::nullopt;  // cannot run there
    const double lb = std::log2(static_cast<double>(b));
    if (s.find(Collective::AllReduce, n, b)) return 2 * measured(a, n, b);
    return 2 * 10.0 * n * lb;  // some shape
  };
  const auto p = predictFromTable(s, Collective::AllReduce, 4, 32768, model);
  ASSERT_EQ(p.size(), 2u);
  for (const auto& x : p) {
    EXPECT_TRUE(x.modelShaped);
    EXPECT_NEAR(x.candidate.timeUs, 10.0 * 4 * 15, 1e-6);
  }
  const auto q = predictFromTable(s, Collective::AllReduce, 6, 32768, model);
  ASSERT_EQ(q.size(), 1u);  // ring left out where the model says it cannot run
  EXPECT_EQ(q.front().candidate.algorithm, "recursive_doubling");
}

TEST(NcclTuner, RulesCsvRoundTripMatchesTableChoices) {
  const TuningTable t = sampleTable();
  const std::vector<NcclTunerRule> rules = ncclTunerRules(t);
  const std::string csv = ncclTunerCsv(rules, t.provenance);
  EXPECT_NE(csv.find("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"),
            std::string::npos);
  EXPECT_NE(csv.find("allreduce,0,"), std::string::npos);
  const std::vector<NcclTunerRule> back = parseNcclTunerCsv(csv, "tuner.conf");
  ASSERT_EQ(back.size(), rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(back[i].collective, rules[i].collective);
    EXPECT_EQ(back[i].minBytes, rules[i].minBytes);
    EXPECT_EQ(back[i].maxBytes, rules[i].maxBytes);
    EXPECT_EQ(back[i].algorithm, rules[i].algorithm);
    EXPECT_EQ(back[i].protocol, rules[i].protocol);
    EXPECT_EQ(back[i].channels, rules[i].channels);
    EXPECT_EQ(back[i].nnodes, rules[i].nnodes);
    EXPECT_EQ(back[i].nranks, rules[i].nranks);
  }
  // Every table point gets the table's choice from the plugin's first-match rule.
  for (const TuningEntry& e : t.sections[1].entries) {
    const NcclTunerRule* r = matchNcclTunerRule(back, e.collective, e.bytes, e.nnodes, e.nranks);
    ASSERT_NE(r, nullptr) << e.bytes;
    EXPECT_EQ(r->algorithm, e.candidates.front().algorithm) << e.bytes;
    EXPECT_EQ(r->protocol, e.candidates.front().protocol) << e.bytes;
    EXPECT_EQ(r->channels, e.candidates.front().channels) << e.bytes;
  }
  // Ranges cover every size without gaps, up to SIZE_MAX; other rank counts match nothing.
  for (std::size_t b : {std::size_t{0}, std::size_t{5000}, std::size_t{1} << 40, SIZE_MAX}) {
    EXPECT_NE(matchNcclTunerRule(back, Collective::AllReduce, b, 2, 16), nullptr) << b;
  }
  EXPECT_EQ(matchNcclTunerRule(back, Collective::AllReduce, 1024, 1, 8), nullptr);
  // ring/ll wins at 1 KiB, tree/simple at 64 KiB and 1 MiB (one merged range), ring/simple at 64 MiB; ranges split at
  // the geometric mean of neighbouring sizes.
  const NcclTunerRule* first = matchNcclTunerRule(back, Collective::AllReduce, 0, 2, 16);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->maxBytes, 8192u);       // sqrt(1 KiB x 64 KiB)
  EXPECT_EQ(rules.size(), 4u);             // allreduce: three ranges; broadcast: one
  EXPECT_EQ(rules[1].maxBytes, 8u << 20);  // sqrt(1 MiB x 64 MiB)
  for (const std::string& line :
       {std::string("allreduce,0,10,ring,simple,2,1,8"), std::string("allreduce,0,10,ring,simple,2,1,8,-1"),
        std::string("allreduce, 0, 10, nvls, simple, -1, -1, -1, 4, 1")}) {
    EXPECT_EQ(parseNcclTunerCsv(line + "\n", "x").size(), 1u) << line;
  }
  EXPECT_THROW(ncclTunerRules(TuningTable{}), Error);
  // Provenance of any length stays within the plugin's 256-byte line buffer.
  TuningProvenance longProv = t.provenance;
  longProv.commandLine = std::string(1000, 'x');
  longProv.topology = std::string(300, 't');
  EXPECT_EQ(parseNcclTunerCsv(ncclTunerCsv(rules, longProv), "long.conf").size(), rules.size());
}

TEST(NcclTuner, RejectsMalformedCsv) {
  auto rejected = [](const std::string& text, const std::vector<std::string>& parts) {
    try {
      parseNcclTunerCsv(text, "tuner.conf");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    }
  };
  rejected("# ok\nallreduce,0,10\n", {"tuner.conf:2", "expected 8 to 10", "found 3"});
  rejected("allgathr,0,10,ring,simple,2,1,8\n", {"collective_type", "allgathr"});
  rejected("allreduce,x,10,ring,simple,2,1,8\n", {"min_bytes", "not an integer", "'x'"});
  rejected("allreduce,20,10,ring,simple,2,1,8\n", {"min_bytes", "larger than max_bytes"});
  rejected("allreduce,0,10,rign,simple,2,1,8\n", {"algorithm", "rign"});
  rejected("allreduce,0,10,ring,LL,2,1,8\n", {"protocol", "'LL'"});
  rejected("allreduce,0,10,ring,simple,0,1,8\n", {"channels", "positive or -1"});
  rejected("allreduce,0,10,ring,simple,2,1,-7\n", {"nRanks", "-7"});
  rejected("allreduce,0,10,ring,simple,2,1,8,-1,2\n", {"regBuff", "'2'"});
  rejected("allreduce,0,10,,simple,2,1,8\n", {"algorithm", "empty field"});
  rejected("allreduce,0,99999999999999999999999,ring,simple,2,1,8\n", {"max_bytes"});
  rejected("allreduce,0,10,ring,simple,2,1,8" + std::string(300, ' ') + "\n", {"longer than"});
}

}  // namespace
}  // namespace collbench
