// Processes mode across real processes: each case starts this test binary as the workers of a `collbench launch`
// cluster (gloo backend, TF_CONFIG per process; runWorkers in test_support.h). The worker side of case X is
// ProcessWorker.DISABLED_X, which writes what it saw as JSON; the parent test asserts on every worker's view.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/strategy/train_example.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using nlohmann::json;
using testing::runWorkers;
using testing::workerStrategy;
using testing::writeWorkerResult;

constexpr const char* kFilesEnv = "COLLBENCH_TEST_FILES";
constexpr const char* kPolicyEnv = "COLLBENCH_TEST_SHARD_POLICY";

/// Lines per file: unequal, so that with FILE sharding on 2 workers worker 0 (files 0 and 2) has 12 examples and
/// worker 1 (files 1 and 3) 3.
constexpr int kLinesPerFile[] = {5, 2, 7, 1};

std::vector<std::string> splitComma(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t start = 0, c; start <= s.size(); start = c + 1) {
    c = s.find(',', start);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(start, c - start));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Worker sides (run only under runWorkers: they skip otherwise)

TEST(ProcessWorker, DISABLED_ShardedInput) {
  auto s = workerStrategy(1);
  if (!s) GTEST_SKIP() << "a worker of runWorkers()";
  const AutoShardPolicy policy = parseAutoShardPolicy(std::getenv(kPolicyEnv));
  const std::string files = std::getenv(kFilesEnv) ? std::getenv(kFilesEnv) : "";
  // Files: global batches of 2; unbatched DATA: a vector of 5 numbers.
  const Dataset dataset = files.empty() ? Dataset::fromVector(std::vector<float>{0, 1, 2, 3, 4})
                                        : Dataset::fromTextFiles(splitComma(files)).batch(2);
  json seen = json::array(), totals = json::array();
  int steps = 0;
  std::string error;
  try {
    DistributedIterator it = s->experimentalDistributeDataset(dataset.withOptions(DatasetOptions{policy})).iterator();
    while (auto batch = it.next()) {
      // A collective per step, as a training step has: before the fix, a worker out of input left it waiting.
      const PerReplica rows = s->run(
          [](const Element& e) {
            const double n = e[0].rank() == 0 ? 1.0 : static_cast<double>(e[0].dim(0));
            return getReplicaContext()->allReduce(ReduceOp::Sum, Tensor::scalar(n));
          },
          *batch);
      totals.push_back(rows[0].at(0));
      for (std::size_t i = 0; i < (*batch)[0][0].numElements(); ++i) seen.push_back((*batch)[0][0].at(i));
      ++steps;
    }
  } catch (const Error& e) {
    error = e.what();
  }
  writeWorkerResult(*s, {{"steps", steps}, {"seen", seen}, {"totals", totals}, {"error", error}});
}

TEST(ProcessWorker, DISABLED_ReduceAndLocalResults) {
  auto s = workerStrategy(2);
  if (!s) GTEST_SKIP() << "a worker of runWorkers()";
  // Replica r: r + 1 rows of [r, 1] (a partial batch of a different size on every replica).
  const PerReplica rows = s->experimentalDistributeValuesFromFunction([](const ValueContext& ctx) {
    const int r = ctx.replicaIdInSyncGroup;
    std::vector<float> data;
    for (int i = 0; i <= r; ++i) data.insert(data.end(), {static_cast<float>(r), 1.0f});
    return Tensor::fromVector(data, Shape{r + 1, 2});
  });
  const PerReplica ids =
      s->run([] { return Tensor::scalar(static_cast<float>(getReplicaContext()->replicaIdInSyncGroup())); });
  json local = json::array();
  for (const Tensor& t : s->experimentalLocalResults(ids)) local.push_back(t.at(0));
  writeWorkerResult(*s, {{"hosted", rows.size()},
                         {"sum_axis0", s->reduce(ReduceOp::Sum, rows, 0).toDoubles()},
                         {"mean_axis0", s->reduce(ReduceOp::Mean, rows, 0).toDoubles()},
                         {"sum_ids", s->reduce(ReduceOp::Sum, ids).at(0)},
                         {"mean_ids", s->reduce(ReduceOp::Mean, ids).at(0)},
                         {"local_results", local}});
}

TEST(ProcessWorker, DISABLED_Train) {
  auto s = workerStrategy(2);
  if (!s) GTEST_SKIP() << "a worker of runWorkers()";
  TrainConfig c;
  c.examples = 256;
  c.hidden = 8;
  c.globalBatch = 32;
  c.steps = 40;  // past the AUTO trial of the gradient pack's all-reduce (7 calls per candidate)
  const TrainResult r = trainExample(*s, c);
  json weights = json::array();
  for (const Tensor& w : r.weights) weights.push_back(w.toDoubles());
  json algorithms = json::array();  // of the all-reduces across workers, in order
  for (const TraceEvent& e : s->trace().events) {
    const bool gradients = e.group == kTraceGroupWorkers && e.kind == Collective::AllReduce && e.dtype == DType::F32;
    if (gradients) algorithms.push_back(e.algorithm);
  }
  // Mirrored: this worker's local copies hold the same values.
  bool copiesEqual = true;
  for (const Variable& v : r.variables) {
    for (int h = 1; h < v.numCopies(); ++h) copiesEqual = copiesEqual && v.copy(h) == v.copy(0);
  }
  writeWorkerResult(
      *s, {{"weights", weights}, {"copies_equal", copiesEqual}, {"chief", s->isChief()}, {"algorithms", algorithms}});
}

// ---------------------------------------------------------------------------------------------------------------
// Parent sides

class ShardedFiles : public ::testing::TestWithParam<AutoShardPolicy> {};

TEST_P(ShardedFiles, WorkersAgreeOnTheEndOfUnevenInput) {
  COLLBENCH_REQUIRE_PROCESS_MODE();
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("collbench_shard_files_{}", ::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  std::set<double> all;
  for (int k = 0; k < 4; ++k) {
    files.push_back((dir / fmt::format("part{}.txt", k)).string());
    std::ofstream out(files.back());
    for (int j = 0; j < kLinesPerFile[k]; ++j) {
      out << 100 * k + j << "\n";
      all.insert(100 * k + j);
    }
  }
  std::string list;
  for (const auto& f : files) list += (list.empty() ? "" : ",") + f;
  const testing::WorkerRun run =
      runWorkers("ShardedInput", 2, {{kFilesEnv, list}, {kPolicyEnv, std::string(toString(GetParam()))}});
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run.cli.exitCode, 0) << run.cli.out << run.cli.err;
  EXPECT_EQ(run.cli.out.find("is applying DATA sharding"), std::string::npos) << "AUTO shards file sources by FILE";
  std::set<double> seen;
  std::size_t count = 0;
  for (int w = 0; w < 2; ++w) {
    const json& r = run.results[static_cast<std::size_t>(w)];
    ASSERT_TRUE(r.is_object()) << "worker " << w << " wrote nothing\n" << run.cli.err;
    EXPECT_EQ(r["error"], "") << "worker " << w;
    for (double v : r["seen"].get<std::vector<double>>()) {
      EXPECT_EQ(static_cast<int>(v) / 100 % 2, w) << "worker " << w << " reads files " << w << ", " << w + 2;
      seen.insert(v);
      ++count;
    }
  }
  EXPECT_EQ(seen, all) << "every example is read";
  EXPECT_EQ(count, all.size()) << "by exactly one worker";
  // Global batches of 2 = one row per replica: worker 0's 12 examples take 12 steps, and worker 1 (3 examples)
  // stays in step with empty batches instead of leaving worker 0 alone in the all-reduce.
  EXPECT_EQ(run.results[0]["steps"], 12);
  EXPECT_EQ(run.results[1]["steps"], 12);
  EXPECT_EQ(run.results[0]["totals"], run.results[1]["totals"]);
  const std::vector<double> totals = run.results[0]["totals"].get<std::vector<double>>();
  ASSERT_EQ(totals.size(), 12u);
  EXPECT_EQ(totals[0], 2);   // both workers have a row
  EXPECT_EQ(totals[11], 1);  // only worker 0
  EXPECT_EQ(std::accumulate(totals.begin(), totals.end(), 0.0), 15.0);
}

INSTANTIATE_TEST_SUITE_P(Processes, ShardedFiles, ::testing::Values(AutoShardPolicy::Auto, AutoShardPolicy::File),
                         [](const auto& p) { return std::string(toString(p.param)); });

TEST(Processes, UnbatchedDataOfUnevenCountFailsTheSameOnEveryWorker) {
  // 5 elements on 2 workers: at the third step worker 1 is out. Unbatched elements cannot be padded (as in threads
  // mode), so both workers raise the same error there, rather than one hanging in the collective.
  COLLBENCH_REQUIRE_PROCESS_MODE();
  const testing::WorkerRun run = runWorkers("ShardedInput", 2, {{kPolicyEnv, "DATA"}});
  ASSERT_EQ(run.cli.exitCode, 0) << run.cli.out << run.cli.err;
  for (int w = 0; w < 2; ++w) {
    const json& r = run.results[static_cast<std::size_t>(w)];
    ASSERT_TRUE(r.is_object()) << "worker " << w << " wrote nothing\n" << run.cli.err;
    EXPECT_EQ(r["steps"], 2) << "worker " << w;
    EXPECT_EQ(r["error"],
              "distributed dataset: replica(s) 1 ran out of input while replica(s) 0 still have some; unbatched "
              "elements cannot be padded with empty batches: batch the dataset")
        << "worker " << w;
  }
  EXPECT_EQ(run.results[0]["seen"], json({0.0, 2.0}));
  EXPECT_EQ(run.results[1]["seen"], json({1.0, 3.0}));
}

TEST(Processes, ReduceAlongAxisAndLocalResults) {
  COLLBENCH_REQUIRE_PROCESS_MODE();
  const testing::WorkerRun run = runWorkers("ReduceAndLocalResults", 2);
  ASSERT_EQ(run.cli.exitCode, 0) << run.cli.out << run.cli.err;
  for (int w = 0; w < 2; ++w) {
    const json& r = run.results[static_cast<std::size_t>(w)];
    ASSERT_TRUE(r.is_object()) << "worker " << w << " wrote nothing\n" << run.cli.err;
    EXPECT_EQ(r["hosted"], 2) << "a process holds its own worker's replicas only";
    // Replicas 0..3 with r + 1 rows [r, 1]: column 0 sums to 0*1 + 1*2 + 2*3 + 3*4 = 20, column 1 to 10 rows.
    EXPECT_EQ(r["sum_axis0"], json({20.0, 10.0})) << "worker " << w;
    EXPECT_EQ(r["mean_axis0"], json({2.0, 1.0})) << "MEAN divides by the 10 rows of all replicas";
    EXPECT_EQ(r["sum_ids"], 6.0);
    EXPECT_EQ(r["mean_ids"], 1.5);
    EXPECT_EQ(r["local_results"], json({2.0 * w, 2.0 * w + 1})) << "worker " << w << "'s replicas only";
  }
}

TEST(Processes, NonChiefWeightsEqualTheChiefs) {
  COLLBENCH_REQUIRE_PROCESS_MODE();
  const testing::WorkerRun run = runWorkers("Train", 2);
  ASSERT_EQ(run.cli.exitCode, 0) << run.cli.out << run.cli.err;
  ASSERT_TRUE(run.results[0].is_object() && run.results[1].is_object()) << run.cli.err;
  EXPECT_EQ(run.results[0]["chief"], true);
  EXPECT_EQ(run.results[1]["chief"], false);
  for (const json& r : run.results) EXPECT_EQ(r["copies_equal"], true);
  // Bit for bit: every worker applies the same all-reduced gradients to the same (broadcast) initial weights.
  EXPECT_EQ(run.results[1]["weights"], run.results[0]["weights"]);
  EXPECT_FALSE(run.results[0]["weights"].empty());
  // AUTO tried near-tied algorithms on the gradients' all-reduce and both workers settled on the same one (they agree
  // on the times through the backend; a disagreement would have mismatched the schedules).
  const json& algorithms = run.results[0]["algorithms"];
  EXPECT_EQ(run.results[1]["algorithms"], algorithms);
  ASSERT_GE(algorithms.size(), 40u);
  EXPECT_GT(std::set<std::string>(algorithms.begin(), algorithms.end()).size(), 1u) << algorithms.dump();
  EXPECT_EQ(algorithms.back(), algorithms[algorithms.size() - 2]) << "settled";
}

}  // namespace
}  // namespace collbench::strategy
