// Selector: the table's choice on table points, sane choices between them (model-shaped interpolation), the cost
// model fallback, and forced choices (--algo, COLLBENCH_ALGO).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"

namespace collbench {
namespace {

/// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* k, const char* v) : k_(k) {
    if (const char* old = std::getenv(k)) {
      old_ = old;
      had_ = true;
    }
    setenv(k, v, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(k_, old_.c_str(), 1);
    } else {
      unsetenv(k_);
    }
  }

 private:
  const char* k_;
  std::string old_;
  bool had_ = false;
};

const std::vector<std::size_t> kTableBytes = {1024, 16384, 262144, 4u << 20, 64u << 20, 1u << 30};
const std::vector<int> kTableRanks = {2, 4, 8};

/// A table whose "measurements" are the cost model on `t` times `scale(algorithm)`, at every algorithm's
/// configurations of the selector's model grid (the best kept, as tune keeps it).
TuningTable modelTable(const Topology& t, const std::function<double(const std::string&, std::size_t)>& scale) {
  TuningTable table;
  TuningSection s;
  s.topology = t.name;
  s.fingerprint = fingerprint(t);
  s.backend = "model";
  for (int n : kTableRanks) {
    const CostModel m(t, n);
    for (std::size_t b : kTableBytes) {
      TuningEntry e{Collective::AllReduce, n, m.summary().hosts, b, {}};  // as tune writes nnodes
      const CollectiveSpec spec{Collective::AllReduce, n, b / 4, DType::F32};
      for (const auto& a : algorithms()) {
        if (a.collective != Collective::AllReduce || a.native) continue;
        TuningCandidate best{a.name, "", 0, 1, -1};
        for (const AlgoParams& p :
             sweepConfigs(Collective::AllReduce, a.name, {0, 128 * 1024, 2 * 1024 * 1024}, {1, 2, 4}, m.rankHost())) {
          const Estimate est = m.estimate(spec, a.name, p);
          if (!est.supported) continue;
          const double us = est.terms.us * scale(a.name, b);
          if (best.timeUs < 0 || us < best.timeUs) best = {a.name, "", p.chunkBytes, p.channels, us};
        }
        if (best.timeUs >= 0) e.candidates.push_back(best);
      }
      std::stable_sort(e.candidates.begin(), e.candidates.end(),
                       [](const auto& x, const auto& y) { return x.timeUs < y.timeUs; });
      s.entries.push_back(e);
    }
  }
  table.sections.push_back(s);
  return table;
}

Topology flat8() {
  Topology t = flatTopology(8, 50, 1);
  for (TopoNode& n : t.nodes) {
    if (n.kind == NodeKind::Gpu) n.reduceGBps = 200;
  }
  return t;
}

TEST(Selector, TablePointsGiveTheTableChoice) {
  const Topology t = flat8();
  // Penalise direct so that the table's choices differ from the model's on some points.
  const TuningTable table = modelTable(t, [](const std::string& a, std::size_t b) {
    return a == "direct" ? 1.8 : a == "ring" && b >= (4u << 20) ? 0.7 : 1.0;
  });
  const Selector sel(SelectorOptions{&t, &table, "model", "auto", "table.json"});
  int differs = 0;
  for (const TuningEntry& e : table.sections[0].entries) {
    const Choice c = sel.choose(CollectiveSpec{Collective::AllReduce, e.nranks, e.bytes / 4, DType::F32});
    EXPECT_EQ(c.source, "table");
    EXPECT_EQ(c.algorithm, e.candidates.front().algorithm) << e.nranks << " " << e.bytes;
    EXPECT_EQ(c.chunkBytes, e.candidates.front().chunkBytes);
    EXPECT_EQ(c.channels, e.candidates.front().channels);
    EXPECT_NEAR(c.predictedUs, e.candidates.front().timeUs, 1e-9 * e.candidates.front().timeUs);
    ASSERT_GE(c.ranking.size(), 2u);
    EXPECT_NE(c.reason.find("runner-up"), std::string::npos) << c.reason;
    EXPECT_NE(c.reason.find("table table.json"), std::string::npos) << c.reason;
    const Choice model = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, e.nranks, e.bytes / 4, DType::F32},
                                         SelectorOptions{&t, nullptr, "", "auto", ""});
    differs += model.algorithm != c.algorithm ? 1 : 0;
  }
  EXPECT_GT(differs, 0);  // the table, not the model, decided
}

TEST(Selector, BetweenTablePointsFollowsTheCorrectedModel) {
  const Topology t = flat8();
  // Measurements = model: between points the prediction is the model itself, so the choice is the model's argmin
  // over the table's algorithms (within the configurations the table holds).
  const TuningTable table = modelTable(t, [](const std::string&, std::size_t) { return 1.0; });
  const Selector sel(SelectorOptions{&t, &table, "", "auto", ""});
  for (int n : {3, 5, 6, 7}) {
    const CostModel m(t, n);
    for (std::size_t b :
         {std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20}) {
      const CollectiveSpec spec{Collective::AllReduce, n, b / 4, DType::F32};
      const Choice c = sel.choose(spec);
      EXPECT_EQ(c.source, "interpolated") << n << " " << b;
      const double chosen = m.estimate(spec, c.algorithm, AlgoParams{c.chunkBytes, c.channels, m.rankHost()}).terms.us;
      EXPECT_NEAR(c.predictedUs, chosen, 1e-6 * chosen);
      // Sane: no algorithm is more than 5% faster than the choice at the configuration the table gives it.
      for (const Alternative& alt : c.ranking) {
        const double t2 =
            m.estimate(spec, alt.algorithm, AlgoParams{alt.chunkBytes, alt.channels, m.rankHost()}).terms.us;
        EXPECT_GE(t2 * 1.05, chosen) << n << " " << b << " " << alt.algorithm << " beats " << c.algorithm;
      }
    }
  }
}

TEST(Selector, TableScaleCarriesBetweenPoints) {
  const Topology t = flat8();
  // Ring "measured" 3x faster than modelled everywhere: between points it must still win where the model alone
  // would pick something else.
  const TuningTable table =
      modelTable(t, [](const std::string& a, std::size_t) { return a == "ring" ? 1 / 3.0 : 1.0; });
  const Selector sel(SelectorOptions{&t, &table, "", "auto", ""});
  const CollectiveSpec spec{Collective::AllReduce, 6, (8u << 20) / 4, DType::F32};
  EXPECT_EQ(sel.choose(spec).algorithm, "ring");
  EXPECT_NE(chooseAlgorithm(spec, SelectorOptions{&t, nullptr, "", "auto", ""}).algorithm, "ring");
}

TEST(Selector, FallsBackToTheModelWithoutATableEntry) {
  const Topology t = flat8();
  const Topology other = flatTopology(8, 25, 2);
  const TuningTable table = modelTable(other, [](const std::string&, std::size_t) { return 1.0; });
  const Choice c = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, 8, 1024, DType::F32},
                                   SelectorOptions{&t, &table, "", "auto", ""});
  EXPECT_EQ(c.source, "model");
  EXPECT_NE(c.reason.find("no section for topology fingerprint " + fingerprint(t)), std::string::npos) << c.reason;
  // Collectives the table lacks: the model too.
  const Choice rs = chooseAlgorithm(CollectiveSpec{Collective::ReduceScatter, 4, 1024, DType::F32},
                                    SelectorOptions{&other, &table, "", "auto", ""});
  EXPECT_EQ(rs.source, "model");
  EXPECT_EQ(rs.algorithm, "ring");
}

TEST(Selector, DefaultWithoutTopologyIsLatencyThenBandwidthOptimal) {
  const Choice small = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, 8, 256, DType::F32});
  EXPECT_EQ(small.algorithm, "recursive_doubling");
  EXPECT_EQ(small.source, "model");
  const Choice large = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, 8, 64u << 20, DType::F32});
  EXPECT_TRUE(large.algorithm == "rabenseifner" || large.algorithm == "ring") << large.algorithm;
  for (Collective c : {Collective::ReduceScatter, Collective::AllGather, Collective::Broadcast, Collective::Reduce,
                       Collective::Barrier}) {
    const Choice x = chooseAlgorithm(CollectiveSpec{c, 4, c == Collective::Barrier ? 0u : 4096u, DType::F32});
    EXPECT_EQ(x.algorithm, algorithmNames(c).front()) << toString(c);
  }
  for (int n : {1, 2, 3, 17}) {  // every rank count has a choice that builds
    const CollectiveSpec spec{Collective::AllReduce, n, 1000, DType::F32};
    EXPECT_NO_THROW(buildSchedule(spec, chooseAlgorithm(spec).algorithm)) << n;
  }
}

// A host table (measured without a topology) chooses among every algorithm it measured: only the model fallback
// leaves direct out. On this VM's host backend direct won 64 KiB..2 MiB on 2 ranks by up to 2x.
TEST(Selector, HostTableWithoutTopologyChoosesEveryMeasuredAlgorithm) {
  TuningTable table;
  TuningSection s;
  s.backend = "host";
  for (std::size_t b : {std::size_t{65536}, std::size_t{131072}}) {
    const double scale = static_cast<double>(b) / 65536;
    s.entries.push_back({Collective::AllReduce,
                         2,
                         1,
                         b,
                         {{"direct", "", 0, 1, 4.4 * scale},
                          {"tree", "", 0, 1, 8.0 * scale},
                          {"recursive_doubling", "", 0, 1, 14.6 * scale}}});
  }
  table.sections.push_back(s);
  const Selector sel(SelectorOptions{nullptr, &table, "host", "auto", "host.json"});
  const Choice between = sel.choose(CollectiveSpec{Collective::AllReduce, 2, 92672 / 4, DType::F32});
  EXPECT_EQ(between.algorithm, "direct") << between.reason;
  EXPECT_EQ(between.source, "interpolated");
  ASSERT_EQ(between.ranking.size(), 3u);
  EXPECT_NEAR(between.predictedUs, 4.4 * 92672 / 65536, 0.2 * 4.4 * 92672 / 65536);  // log-time between the points
  const Choice atPoint = sel.choose(CollectiveSpec{Collective::AllReduce, 2, 65536 / 4, DType::F32});
  EXPECT_EQ(atPoint.algorithm, "direct");
  EXPECT_EQ(atPoint.source, "table");
  // Without a table the default model still leaves direct out.
  EXPECT_NE(chooseAlgorithm(CollectiveSpec{Collective::AllReduce, 2, 92672 / 4, DType::F32}).algorithm, "direct");
}

TEST(Selector, HierarchicalOnlyWhereHostsAreEqual) {
  const Topology rail = loadTopology("h100-4x8-rail");
  for (int n : {12, 24}) {
    const Choice c = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, n, (256u << 20) / 4, DType::F32},
                                     SelectorOptions{&rail, nullptr, "", "auto", ""});
    auto predicted = [&](const std::string& name) {
      double best = -1;
      for (const Alternative& a : c.ranking) {
        if (a.algorithm == name && (best < 0 || a.predictedUs < best)) best = a.predictedUs;
      }
      return best;
    };
    if (n == 12) {
      EXPECT_LT(predicted("hierarchical"), 0) << c.reason;  // 8 + 4 ranks: not a candidate
    } else {
      // 3 hosts of 8 over 50 GB/s rails: NVLink first beats the flat ring (NCCL's host tree, over 4 rails, is
      // faster still).
      ASSERT_GT(predicted("hierarchical"), 0) << c.reason;
      EXPECT_LT(predicted("hierarchical"), predicted("ring")) << c.reason;
    }
  }
}

// Pricing on several threads (each with its own cost model) ranks every algorithm as one thread does, bit for bit,
// whatever thread finishes first.
TEST(Selector, ThreadsPriceAsOneThreadDoes) {
  const Topology rail = loadTopology("h100-4x8-rail");
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 20}) {
    const CollectiveSpec spec{Collective::AllReduce, 32, bytes / 4, DType::F32};
    SelectorOptions one{&rail, nullptr, "", "auto", ""}, three = one;
    one.pricingThreads = 1;
    three.pricingThreads = 3;
    const Choice a = chooseAlgorithm(spec, one), b = chooseAlgorithm(spec, three);
    EXPECT_EQ(a.algorithm, b.algorithm);
    EXPECT_EQ(a.reason, b.reason);
    ASSERT_EQ(a.ranking.size(), b.ranking.size());
    ASSERT_GE(a.ranking.size(), 4U);
    for (std::size_t i = 0; i < a.ranking.size(); ++i) {
      EXPECT_EQ(a.ranking[i].algorithm, b.ranking[i].algorithm);
      EXPECT_EQ(a.ranking[i].chunkBytes, b.ranking[i].chunkBytes);
      EXPECT_EQ(a.ranking[i].channels, b.ranking[i].channels);
      EXPECT_EQ(a.ranking[i].predictedUs, b.ranking[i].predictedUs);
    }
  }
}

TEST(Selector, GpuSystemsPayTheWireRule) {
  // dgx-h100-8x1 (GPU ranks of a known arch), 8 B: every flow pays NCCL's LL step latency on NVLink (0.6 us, the
  // larger of it and the route's 2 x 0.3 us) and the call LL's launch floor (6.6 us; NCCL 2.28 tuning.cc, Ring row;
  // collbench/wire_rule.h), so a ring's 14 steps cost 14 of them and direct's 2 steps 2: the model ranks direct ahead.
  const Topology t = loadTopology("dgx-h100-8x1");
  const Choice c = chooseAlgorithm(CollectiveSpec{Collective::AllReduce, 8, 2, DType::F32},
                                   SelectorOptions{&t, nullptr, "", "auto", ""});
  auto predicted = [&](const std::string& name) {
    for (const Alternative& a : c.ranking) {
      if (a.algorithm == name) return a.predictedUs;
    }
    return -1.0;
  };
  const double floorUs = 6.6, stepUs = 0.6, slackUs = 0.1;  // slack: 8 bytes' wire time and reductions
  EXPECT_NEAR(predicted("ring"), floorUs + 14 * stepUs, slackUs) << c.reason;
  EXPECT_NEAR(predicted("direct"), floorUs + 2 * stepUs, slackUs) << c.reason;
  EXPECT_LT(predicted("direct"), predicted("ring")) << c.reason;
  EXPECT_GE(c.predictedUs, floorUs + 2 * stepUs) << c.reason;
}

// Auto chooses only what the backend can run: a call whose schedule holds more than kMaterializeTransferLimit transfers
// runs only where the simulator times it without the schedule (ring, pipelines, hierarchical). On a 2048-rank star the
// model prices direct all-reduce fastest at 1 MiB, but its 8.4 M transfers cannot be built.
TEST(Selector, ChoosesNoScheduleTooLargeToBuild) {
  const Topology star = flatTopology(2048, 50, 1);
  const CollectiveSpec spec{Collective::AllReduce, 2048, (1u << 20) / 4, DType::F32};
  const auto transfers = [&](const char* name) {
    return estimateTransfers(findAlgorithm(Collective::AllReduce, name), spec, AlgoParams{});
  };
  ASSERT_GT(transfers("direct"), kMaterializeTransferLimit);
  ASSERT_GT(transfers("ring"), kMaterializeTransferLimit);
  const auto predicted = [](const Choice& c, const std::string& name) {
    for (const Alternative& a : c.ranking) {
      if (a.algorithm == name) return a.predictedUs;
    }
    return -1.0;
  };
  // The model alone (tune's "model", no backend) prices every algorithm.
  const Choice model = chooseAlgorithm(spec, SelectorOptions{&star, nullptr, "model", "auto", ""});
  EXPECT_EQ(model.algorithm, "direct") << model.reason;
  // The simulator ("" is its default) times the ring without its schedule, not direct.
  const Choice sim = chooseAlgorithm(spec, SelectorOptions{&star, nullptr, "", "auto", ""});
  EXPECT_NE(sim.algorithm, "direct") << sim.reason;
  EXPECT_LT(predicted(sim, "direct"), 0) << sim.reason;
  EXPECT_GT(predicted(sim, "ring"), 0) << sim.reason;
  // A backend that runs schedules builds them all: neither.
  registerBackend(
      "selector_test_cpu", "test", [](int, const BackendOptions&) -> std::unique_ptr<Backend> { return nullptr; },
      BackendCapabilities{});
  const Choice cpu = chooseAlgorithm(spec, SelectorOptions{&star, nullptr, "selector_test_cpu", "auto", ""});
  EXPECT_LT(predicted(cpu, "direct"), 0) << cpu.reason;
  EXPECT_LT(predicted(cpu, "ring"), 0) << cpu.reason;
  EXPECT_LE(transfers(cpu.algorithm.c_str()), kMaterializeTransferLimit) << cpu.reason;
  // Forced, the one candidate cannot run: the error says why.
  try {
    chooseAlgorithm(spec, SelectorOptions{&star, nullptr, "selector_test_cpu", "direct", ""});
    ADD_FAILURE() << "forced direct was chosen";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "'direct' on 1 channel would need about {} transfers: too large to build", transfers("direct"))),
              std::string::npos)
        << e.what();
  }
}

TEST(Selector, ForcedChoices) {
  const Topology t = flat8();
  const TuningTable table = modelTable(t, [](const std::string&, std::size_t) { return 1.0; });
  const CollectiveSpec spec{Collective::AllReduce, 8, (64u << 20) / 4, DType::F32};
  const Choice byFlag = chooseAlgorithm(spec, SelectorOptions{&t, &table, "", "tree", ""});
  EXPECT_EQ(byFlag.algorithm, "tree");
  EXPECT_EQ(byFlag.source, "table");  // the configuration still comes from the table
  EXPECT_NE(byFlag.reason.find("forced by --algo"), std::string::npos);
  for (const TuningCandidate& k : table.sections[0].find(Collective::AllReduce, 8, 64u << 20)->candidates) {
    if (k.algorithm == "tree") {
      EXPECT_EQ(byFlag.chunkBytes, k.chunkBytes);
    }
  }
  {
    const ScopedEnv env("COLLBENCH_ALGO", "ring");
    EXPECT_EQ(chooseAlgorithm(spec).algorithm, "ring");
    EXPECT_NE(chooseAlgorithm(spec).reason.find("COLLBENCH_ALGO=ring"), std::string::npos);
    // The flag wins over the environment, as --algo over NCCL_ALGO.
    EXPECT_EQ(chooseAlgorithm(spec, SelectorOptions{nullptr, nullptr, "", "direct", ""}).algorithm, "direct");
  }
  {
    const ScopedEnv env("COLLBENCH_ALGO", "broadcast:ring; all_reduce:tree");
    EXPECT_EQ(chooseAlgorithm(spec).algorithm, "tree");
  }
  {
    const ScopedEnv env("COLLBENCH_ALGO", "dissemination");  // a barrier algorithm: all-reduce is not forced
    EXPECT_EQ(chooseAlgorithm(spec).source, "model");
    const Choice b = chooseAlgorithm(CollectiveSpec{Collective::Barrier, 4, 0, DType::F32});
    EXPECT_EQ(b.algorithm, "dissemination");
    EXPECT_NE(b.reason.find("forced by COLLBENCH_ALGO=dissemination"), std::string::npos) << b.reason;
  }
  {
    const ScopedEnv env("COLLBENCH_ALGO", "all_reduce:nccl");  // native: forced, not modelled
    EXPECT_EQ(chooseAlgorithm(spec).algorithm, "nccl");
    EXPECT_EQ(chooseAlgorithm(spec).source, "forced");
  }
  for (const char* bad : {"rnig", "all_reduce:dissemination", "allreduce_typo:ring", "all_reduce:"}) {
    const ScopedEnv env("COLLBENCH_ALGO", bad);
    try {
      chooseAlgorithm(spec);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument) << bad;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(chooseAlgorithm(spec, SelectorOptions{nullptr, nullptr, "", "rnig", ""}), Error);
  EXPECT_EQ(forcedAlgorithm("auto", Collective::AllReduce), "");
  EXPECT_EQ(forcedAlgorithm("", Collective::AllReduce), "");
}

// A trial times the choice and each other algorithm predicted within kTrialSpread of it (its best configuration
// only), and keeps the fastest measured.
TEST(SelectorTrial, CandidatesAreTheNearTiedAlgorithms) {
  Choice c{"direct", "table"};
  c.source = "interpolated";
  c.predictedUs = 10;
  c.ranking = {{"direct", 0, 1, 10},
               {"tree", 0, 2, 12},
               {"tree", 131072, 1, 13},  // a slower configuration of an algorithm already in
               {"rabenseifner", 0, 1, 19.9},
               {"ring", 131072, 4, 20.1},  // just outside 2x
               {"recursive_doubling", 0, 1, 40}};
  const std::vector<Alternative> tried = trialCandidates(c);
  ASSERT_EQ(tried.size(), 3u);
  EXPECT_EQ(tried[0].algorithm, "direct");
  EXPECT_EQ(tried[1].algorithm, "tree");
  EXPECT_EQ(tried[1].channels, 2);
  EXPECT_EQ(tried[2].algorithm, "rabenseifner");

  // At most kTrialMaxCandidates, the choice first.
  Choice crowded = c;
  crowded.ranking.clear();
  for (const char* a : {"direct", "tree", "ring", "rabenseifner", "recursive_doubling", "hierarchical", "chain"}) {
    crowded.ranking.push_back({a, 0, 1, 10});
  }
  EXPECT_EQ(trialCandidates(crowded).size(), kTrialMaxCandidates);

  // Forced or unpredicted choices are not tried against anything.
  Choice forced = c;
  forced.source = "forced";
  EXPECT_EQ(trialCandidates(forced).size(), 1u);
  Choice unknown = c;
  unknown.predictedUs = -1;
  EXPECT_EQ(trialCandidates(unknown).size(), 1u);
}

TEST(SelectorTrial, SettlesOnTheFastestMeasured) {
  Choice c{"direct", "table t.json: fastest measured"};
  c.source = "table";
  c.predictedUs = 10;
  const std::vector<Alternative> tried = {{"direct", 0, 1, 10}, {"tree", 131072, 2, 12}, {"rabenseifner", 0, 1, 15}};
  const Choice won = settleTrial(c, tried, {30, 21, 25});
  EXPECT_EQ(won.algorithm, "tree");
  EXPECT_EQ(won.chunkBytes, 131072u);
  EXPECT_EQ(won.channels, 2);
  EXPECT_EQ(won.source, "trial");
  EXPECT_DOUBLE_EQ(won.predictedUs, 21);
  ASSERT_EQ(won.ranking.size(), 3u);  // by measured time
  EXPECT_EQ(won.ranking[1].algorithm, "rabenseifner");
  EXPECT_EQ(won.ranking[2].algorithm, "direct");
  EXPECT_NE(won.reason.find("the table's choice was direct"), std::string::npos) << won.reason;
  EXPECT_NE(won.reason.find("fastest measured"), std::string::npos) << won.reason;
  // A tie keeps the earlier one: the table's choice.
  EXPECT_EQ(settleTrial(c, tried, {21, 21, 25}).algorithm, "direct");
  EXPECT_THROW(settleTrial(c, tried, {1, 2}), Error);
}

}  // namespace
}  // namespace collbench
