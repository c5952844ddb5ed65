// The tune and regret libraries and the merge of shards (tune.h, regret.h, merge.h), on the cost-model backend and on
// hand-made rows: grid order, -j N equal to -j 1, shards that merge into the unsharded table, the regret arithmetic.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/merge.h"
#include "collbench/regret.h"
#include "collbench/tune.h"
#include "error_of.h"

namespace collbench {
namespace {

using testing::errorOf;

TuneRequest modelRequest() {
  TuneRequest r;
  r.backend = std::string(kModelBackend);
  r.collectives = {Collective::AllReduce, Collective::AllGather};
  r.sizes = {1 << 10, 64 << 10, 4 << 20};
  r.ranks = {4, 2, 3};  // the table keeps the order given
  r.chunks = {0, 128 << 10};
  r.channels = {1, 2};
  return r;
}

TEST(TuneLibrary, GridIsRanksThenCollectivesThenSizes) {
  const Tuner t(modelRequest());
  ASSERT_EQ(t.grid().size(), 3u * 2u * 3u);
  std::size_t i = 0;
  for (int n : {4, 2, 3}) {
    for (Collective c : {Collective::AllReduce, Collective::AllGather}) {
      for (std::size_t b : {1u << 10, 64u << 10, 4u << 20}) {
        const TunePoint& p = t.grid()[i++];
        EXPECT_EQ(p.nranks, n);
        EXPECT_EQ(p.collective, c);
        EXPECT_EQ(p.spec.count, countForBytes(c, n, b, DType::F32));
        EXPECT_EQ(p.bytes, std::max(p.spec.inputBytes(), p.spec.outputBytes()));
      }
    }
  }
}

TEST(TuneLibrary, DefaultRanksAddTheHostBoundaries) {
  EXPECT_EQ(defaultTuneRanks(loadTopology("h100-4x8-rail")),
            (std::vector<int>{2, 4, 8, 9, 10, 16, 17, 18, 24, 25, 26, 32}));
}

TEST(TuneLibrary, ModelEntriesAreTheCostModelsSortedEstimates) {
  Tuner t(modelRequest());
  const std::optional<TuningEntry> e = t.measurePoint(1);  // 4 ranks, all-reduce, 64 KiB
  ASSERT_TRUE(e);
  EXPECT_EQ(e->nranks, 4);
  EXPECT_EQ(e->bytes, 64u << 10);
  const CostModel m = CostModel::defaultFlat(4);
  const TunePoint& p = t.grid()[1];
  ASSERT_FALSE(e->candidates.empty());
  for (std::size_t k = 0; k < e->candidates.size(); ++k) {
    const TuningCandidate& c = e->candidates[k];
    AlgoParams params{c.chunkBytes, c.channels, {}};
    EXPECT_DOUBLE_EQ(c.timeUs, m.estimate(p.spec, c.algorithm, params).terms.us) << c.algorithm;
    if (k > 0) {
      EXPECT_LE(e->candidates[k - 1].timeUs, c.timeUs);
    }
  }
  EXPECT_EQ(decodeTuningEntry(encodeTuningEntry(e))->candidates.size(), e->candidates.size());
  EXPECT_EQ(decodeTuningEntry(encodeTuningEntry(e))->candidates.back().timeUs, e->candidates.back().timeUs);
  EXPECT_FALSE(decodeTuningEntry(encodeTuningEntry(std::nullopt)));
}

TEST(TuneLibrary, WorkersAndShardsGiveTheOneProcessTable) {
  Tuner t(modelRequest());
  const std::string whole = toJson(TuningTable{{}, {sweepCollbench(t, TuneControl{1, {}, ""})}});
  EXPECT_EQ(toJson(TuningTable{{}, {sweepCollbench(t, TuneControl{3, {}, ""})}}), whole);
  for (int n : {2, 4, 18}) {
    std::vector<ShardPart<TuningTable>> parts;
    for (int k = n; k >= 1; --k) {  // any order
      TuningTable part{{}, {sweepCollbench(t, TuneControl{2, Shard{k, n}, ""})}};
      part.provenance.shard = Shard{k, n}.toString();
      parts.push_back({fmt::format("part{}", k), std::move(part)});
    }
    EXPECT_EQ(toJson(mergeTuningTables(std::move(parts))), whole) << n << " shards";
  }
}

TEST(TuneLibrary, RefusesWhatTheTopologyAndRegistryCannotSweep) {
  TuneRequest r = modelRequest();
  r.topology = loadTopology("dgx-h100-8x1");
  r.ranks = {16};
  EXPECT_EQ(errorOf([&] { Tuner t(r); }), "--ranks 16: topology 'dgx-h100-8x1' has 8 ranks");
  r = modelRequest();
  r.algorithms = {"rign"};
  EXPECT_EQ(errorOf([&] { Tuner t(r); }), "--algos: 'rign' is not a schedule algorithm of the collectives swept");
  r = modelRequest();
  r.collectives = {Collective::Barrier};
  EXPECT_EQ(errorOf([&] { Tuner t(r); }), "tune does not time barrier (no bytes)");
}

RegretRow rowOf(int n, double chosen, double best, double table, std::string chosenAlgo = "ring") {
  RegretRow r;
  r.nranks = n;
  r.bytes = 1024;
  r.chosen = RegretChoice{std::move(chosenAlgo), 0, 1, chosen};
  r.best = RegretChoice{"tree", 0, 1, best};
  r.tableChoice = RegretChoice{"ring", 0, 1, table};
  return r;
}

TEST(RegretLibrary, SummaryIsTheWorstAndTheGeometricMean) {
  const std::vector<RegretRow> rows{rowOf(2, 10, 10, 10), rowOf(3, 15, 10, 20, "tree"), rowOf(5, 12, 10, 12)};
  const RegretSummary s = summarizeRegret(rows);
  EXPECT_DOUBLE_EQ(s.worst, 1.5);
  EXPECT_EQ(s.worstRow, 1u);
  EXPECT_NEAR(s.geomean, std::cbrt(1.0 * 1.5 * 1.2), 1e-12);
  EXPECT_DOUBLE_EQ(s.tableWorst, 2.0);
  EXPECT_NEAR(s.tableGeomean, std::cbrt(1.0 * 2.0 * 1.2), 1e-12);
  EXPECT_TRUE(s.trialled);  // row 1 chose tree over the table's ring
  const RegretSummary none = summarizeRegret({});
  EXPECT_EQ(none.worst, 1.0);
  EXPECT_EQ(none.geomean, 1.0);
  EXPECT_FALSE(none.worstRow);
  EXPECT_FALSE(summarizeRegret({rowOf(2, 10, 10, 10)}).trialled);
}

TuningSection sectionOf(const std::vector<int>& ranks, const std::vector<std::size_t>& sizes) {
  TuningSection s;
  for (int n : ranks) {
    for (std::size_t b : sizes)
      s.entries.push_back(TuningEntry{Collective::AllReduce, n, 1, b, {{"ring", "", 0, 1, 1}}});
  }
  return s;
}

TEST(RegretLibrary, HeldOutGridIsTheMissingRanksAndTheMidpoints) {
  const TuningSection s = sectionOf({2, 4, 8}, {1024, 4096, 1 << 20});
  const RegretGrid g = heldOutGrid(s, Collective::AllReduce, 0, {}, {}, "t.json");
  EXPECT_EQ(g.ranks, (std::vector<int>{3, 5, 6, 7}));
  // sqrt(1024 * 4096) = 2048; sqrt(4096 * 2^20) = 65536.
  EXPECT_EQ(g.sizes, (std::vector<std::size_t>{2048, 65536}));
  EXPECT_TRUE(g.note.empty());
  // Capped at the topology's rank count; explicit lists win.
  EXPECT_EQ(heldOutGrid(s, Collective::AllReduce, 5, {}, {}, "t.json").ranks, (std::vector<int>{3, 5}));
  EXPECT_EQ(heldOutGrid(s, Collective::AllReduce, 0, {6}, {100}, "t.json").sizes, (std::vector<std::size_t>{100}));
  // Midpoints round down to 16 bytes: sqrt(1000 * 3000) = 1732.05 -> 1728.
  EXPECT_EQ(heldOutGrid(sectionOf({2}, {1000, 3000}), Collective::AllReduce, 0, {}, {}, "t").sizes,
            (std::vector<std::size_t>{1728}));
  const RegretGrid full = heldOutGrid(sectionOf({2, 3}, {1024, 4096}), Collective::AllReduce, 0, {}, {}, "t");
  EXPECT_EQ(full.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(full.note, "the table holds every rank count in its range: held-out sizes only");
  EXPECT_EQ(errorOf([&] { heldOutGrid(s, Collective::AllGather, 0, {}, {}, "t.json"); }),
            "t.json has no all_gather entries");
  EXPECT_EQ(errorOf([&] { heldOutGrid(sectionOf({2}, {1024}), Collective::AllReduce, 0, {}, {}, "t"); }),
            "no held-out sizes (the table needs two sizes at least)");
}

TEST(Merge, RegretRowsJoinInShardOrderWithTheSummaryRecomputed) {
  RegretRecord a, b;
  a.collective = b.collective = "all_reduce";
  a.rows = {rowOf(2, 10, 10, 10)};
  b.rows = {rowOf(3, 15, 10, 20), rowOf(5, 12, 10, 12)};
  a.shard = "1/2";
  b.shard = "2/2";
  b.worst = 99;  // a part's own summary is not the whole's
  const RegretRecord m = mergeRegretRecords({{"b.json", b}, {"a.json", a}});
  ASSERT_EQ(m.rows.size(), 3u);
  EXPECT_EQ(m.rows[0].nranks, 2);
  EXPECT_EQ(m.rows[2].nranks, 5);
  EXPECT_DOUBLE_EQ(m.worst, 1.5);
  EXPECT_NEAR(m.geomean, std::cbrt(1.8), 1e-12);
  EXPECT_DOUBLE_EQ(m.tableWorst, 2.0);
  EXPECT_TRUE(m.shard.empty());
}

/// An all-reduce sweep record that says it is shard `shard` ("K/N"; "" for none).
SweepRecord part(std::string shard) {
  SweepRecord r;
  r.collective = "all_reduce";
  r.shard = std::move(shard);
  return r;
}

TEST(Merge, RefusesIncompleteRepeatedOrForeignParts) {
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/3")}, {"c", part("3/3")}});
            }),
            "merge: 2 of 3 shards given; missing 2");
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/2")}, {"b", part("1/2")}});
            }),
            "merge: a and b are both shard 1/2");
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/2")}, {"b", part("2/3")}});
            }),
            "merge: b is shard 2/3 but a is a shard of 2");
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("")}});
            }),
            "merge: a has no shard field: it is not the output of a --shard K/N run");
  SweepRecord other = part("2/2");
  other.model = "LV08";
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/2")}, {"b", other}});
            }),
            "merge: b: model 'LV08' differs from a's '' (shards of different grids)");
}

TEST(Merge, HugeShardCountsAreRefusedInOneShortLine) {
  // N beyond what one command line can name: refused before any shard number is walked.
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/2000000000")}});
            }),
            "merge: a: shard '1/2000000000': N is more than 1048576, the most shard files one command line can name");
  // Many missing shards: the first few and the count, not every number.
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("1/1048576")}, {"c", part("3/1048576")}});
            }),
            "merge: 2 of 1048576 shards given; missing 2, 4, 5, 6, 7, ... (1048574 in all)");
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("2/7")}});
            }),
            "merge: 1 of 7 shards given; missing 1, 3, 4, 5, 6, ... (6 in all)");
  EXPECT_EQ(errorOf([&] {
              mergeSweepRecords({{"a", part("2/6")}});
            }),
            "merge: 1 of 6 shards given; missing 1, 3, 4, 5, 6");
}

}  // namespace
}  // namespace collbench
