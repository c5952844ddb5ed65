// Datasets, auto-sharding across workers and distribution across replicas.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "collbench/strategy/dataset.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using testing::expectInvalid;
using testing::LogCapture;
using testing::makeStrategy;

/// Scalar (or [1]-vector) elements' first value, as integers.
std::vector<int> firstValues(const std::vector<Element>& elements) {
  std::vector<int> out;
  for (const Element& e : elements) out.push_back(static_cast<int>(e.at(0).at(0)));
  return out;
}

std::vector<int> range(int begin, int end, int stride = 1) {
  std::vector<int> out;
  for (int i = begin; i < end; i += stride) out.push_back(i);
  return out;
}

/// Every value each hosted replica received, over the whole distributed dataset (all rows of its batches).
std::vector<std::vector<int>> perReplicaValues(const DistributedDataset& dist, int* steps = nullptr) {
  std::vector<std::vector<int>> out;
  int n = 0;
  for (const PerReplicaValues<Element>& batch : dist) {
    out.resize(batch.size());
    for (std::size_t h = 0; h < batch.size(); ++h) {
      for (double v : batch[h].at(0).toDoubles()) out[h].push_back(static_cast<int>(v));
    }
    ++n;
  }
  if (steps) *steps = n;
  return out;
}

/// Temporary text files of numbers: file k holds `perFile` lines 100k, 100k+1, ...
class TextFiles {
 public:
  TextFiles(int files, int perFile) {
    const auto dir = std::filesystem::temp_directory_path();
    for (int k = 0; k < files; ++k) {
      const auto path =
          dir / ("collbench_ds_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) + ".txt");
      std::ofstream out(path);
      out << "# file " << k << "\n";
      for (int i = 0; i < perFile; ++i) out << 100 * k + i << "\n";
      paths_.push_back(path.string());
    }
  }
  ~TextFiles() {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  const std::vector<std::string>& paths() const { return paths_; }
  /// Values of file k.
  static std::vector<int> values(int k, int perFile) { return range(100 * k, 100 * k + perFile); }

 private:
  static inline int counter_ = 0;
  std::vector<std::string> paths_;
};

// -----------------------------------------------------------------------------------------------------------------
// Dataset

TEST(Dataset, FromTensorSlicesAndElementSpec) {
  const Tensor x = Tensor::fromVector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  const Tensor y = Tensor::fromVector(std::vector<std::int32_t>{7, 8, 9});
  const Dataset ds = Dataset::fromTensorSlices({x, y});
  ASSERT_EQ(ds.elementSpec().size(), 2u);
  EXPECT_EQ(ds.elementSpec()[0], (TensorSpec{DType::F32, {2}}));
  EXPECT_EQ(ds.elementSpec()[1], (TensorSpec{DType::I32, {}}));
  const auto all = ds.toVector();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1][0].toVector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(all[2][1].at(0), 9);
  EXPECT_EQ(ds.batch(2).elementSpec()[0].describe(), "TensorSpec(shape=[?, 2], dtype=float)");
  EXPECT_EQ(ds.batch(2, true).elementSpec()[1].shape, (Shape{2}));
  expectInvalid(
      [&] {
        Dataset::fromTensorSlices({x, Tensor(DType::F32, {4})});
      },
      {"component 1 has 4 rows but component 0 has 3"});
  expectInvalid([] { Dataset::fromTensorSlices({Tensor::scalar(1.0f)}); }, {"component 0 is the scalar"});
  expectInvalid([] { Dataset::fromTensorSlices({}); }, {"no components"});
}

TEST(Dataset, FromVectorAndElements) {
  EXPECT_EQ(firstValues(Dataset::fromVector(std::vector<std::int64_t>{4, 5, 6}).toVector()),
            (std::vector<int>{4, 5, 6}));
  const Dataset ds = Dataset::fromElements({{Tensor::scalar(1.0)}, {Tensor::scalar(2.0)}});
  EXPECT_EQ(firstValues(ds.toVector()), (std::vector<int>{1, 2}));
  expectInvalid(
      [] {
        Dataset::fromElements({{Tensor::scalar(1.0)}, {Tensor::scalar(2.0f)}});
      },
      {"element 1 component 0 is float[]", "dtype=double"});
  expectInvalid(
      [] {
        Dataset::fromElements({{Tensor::scalar(1.0)}, {Tensor::scalar(1.0), Tensor::scalar(1.0)}});
      },
      {"element 1 has 2 components"});
  EXPECT_TRUE(Dataset::fromElements({}).toVector().empty());
}

TEST(Dataset, BatchShardRepeatTake) {
  const Dataset ds = Dataset::fromVector(range(0, 10));
  const auto batches = ds.batch(4).toVector();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0][0].shape(), (Shape{4}));
  EXPECT_EQ(batches[2][0].toVector<std::int32_t>(), (std::vector<std::int32_t>{8, 9}));
  EXPECT_EQ(ds.batch(4, true).toVector().size(), 2u);
  EXPECT_EQ(firstValues(ds.shard(3, 1).toVector()), (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(firstValues(ds.take(3).repeat(2).toVector()), (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(firstValues(ds.repeat().take(12).toVector()), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
  EXPECT_EQ(ds.take(-1).toVector().size(), 10u);
  EXPECT_TRUE(ds.take(0).repeat().toVector().empty()) << "repeating an empty dataset is empty";
  EXPECT_TRUE(ds.repeat(0).toVector().empty());
  expectInvalid([&] { ds.batch(0); }, {"batch_size must be >= 1, got 0"});
  expectInvalid([&] { ds.shard(0, 0); }, {"num_shards must be >= 1"});
  expectInvalid([&] { ds.shard(2, 2); }, {"index 2 is out of range for num_shards 2"});
  expectInvalid([&] { ds.shard(2, -1); }, {"index -1"});
  expectInvalid([&] { ds.repeat(-2); }, {"repeat: count"});
  expectInvalid([&] { ds.take(-5); }, {"take: count"});
}

TEST(Dataset, BatchOfUnequalShapesFailsWhenIterated) {
  const Dataset ds =
      Dataset::fromElements({{Tensor(DType::F32, {2})}, {Tensor(DType::F32, {2})}}).batch(2);  // fine: equal
  EXPECT_EQ(ds.toVector().size(), 1u);
  TextFiles files(1, 0);
  {
    std::ofstream out(files.paths()[0]);
    out << "1 2\n3 4 5\n";
  }
  const Dataset ragged = Dataset::fromTextFiles(files.paths()).batch(2);
  expectInvalid([&] { ragged.toVector(); },
                {"batch(2): element 1 (input element 1) component 0 is float[3]", "float[2]"});
}

TEST(Dataset, TextFilesAndOptions) {
  TextFiles files(2, 3);
  const Dataset ds = Dataset::fromTextFiles(files.paths(), DType::F64);
  EXPECT_EQ(ds.elementSpec()[0], (TensorSpec{DType::F64, {kUnknownDim}}));
  EXPECT_EQ(firstValues(ds.toVector()), (std::vector<int>{0, 1, 2, 100, 101, 102}));
  EXPECT_EQ(ds.options().autoShardPolicy, AutoShardPolicy::Auto);
  EXPECT_EQ(ds.withOptions({AutoShardPolicy::Off}).options().autoShardPolicy, AutoShardPolicy::Off);
  EXPECT_EQ(ds.withOptions({AutoShardPolicy::Data}).batch(2).options().autoShardPolicy, AutoShardPolicy::Data)
      << "options survive transformations";
  {
    std::ofstream out(files.paths()[1]);
    out << "1, 2\n3, x\n";
  }
  expectInvalid([&] { ds.toVector(); }, {files.paths()[1], "line 2", "\"x\" is not a number"});
  expectInvalid([] { Dataset::fromTextFiles({"/nonexistent/collbench.txt"}).toVector(); },
                {"cannot open file '/nonexistent/collbench.txt'"});
  expectInvalid([] { Dataset::fromTextFiles({}); }, {"file list is empty"});
  EXPECT_EQ(parseAutoShardPolicy("data"), AutoShardPolicy::Data);
  EXPECT_EQ(toString(AutoShardPolicy::Off), "OFF");
  expectInvalid([] { parseAutoShardPolicy("hint"); }, {"\"hint\"", "AUTO, FILE, DATA, OFF"});
}

TEST(Dataset, FileReaderOutputIsChecked) {
  const Dataset ds = Dataset::fromFiles(
      {"a", "b"},
      [](const std::string& path) { return std::vector<Element>{{Tensor::scalar(path == "a" ? 1.0f : 2.0f)}}; },
      {{DType::F32, {}}});
  EXPECT_EQ(firstValues(ds.toVector()), (std::vector<int>{1, 2}));
  const Dataset bad = Dataset::fromFiles(
      {"a"}, [](const std::string&) { return std::vector<Element>{{Tensor::scalar(1.0)}}; }, {{DType::F32, {}}});
  expectInvalid([&] { bad.toVector(); }, {"file 'a' element 0 component 0 is double[]"});
}

// -----------------------------------------------------------------------------------------------------------------
// InputContext

TEST(InputContext, PerReplicaBatchSize) {
  const InputContext ctx(2, 1, 4);
  EXPECT_EQ(ctx.numInputPipelines(), 2);
  EXPECT_EQ(ctx.inputPipelineId(), 1);
  EXPECT_EQ(ctx.numReplicasInSync(), 4);
  EXPECT_EQ(ctx.getPerReplicaBatchSize(64), 16);
  expectInvalid([&] { ctx.getPerReplicaBatchSize(6); }, {"global batch size 6", "not divisible by", "4"});
  expectInvalid([] { InputContext(2, 2, 4); }, {"input_pipeline_id 2 is out of range for 2"});
  expectInvalid([] { InputContext(0, 0, 1); }, {"num_input_pipelines"});
  expectInvalid([] { InputContext(1, 0, 0); }, {"num_replicas_in_sync"});
  EXPECT_EQ(InputContext().getPerReplicaBatchSize(5), 5);
}

// -----------------------------------------------------------------------------------------------------------------
// autoShard: one worker's view

TEST(AutoShard, FilePolicyDealsFiles) {
  TextFiles files(5, 2);
  const Dataset ds = Dataset::fromTextFiles(files.paths()).withOptions({AutoShardPolicy::File});
  ShardDecision d;
  const Dataset w1 = autoShard(ds.batch(1).repeat(1), 2, 1, &d);
  EXPECT_EQ(d.applied, AutoShardPolicy::File);
  EXPECT_TRUE(d.warning.empty());
  // Worker 1 of 2 reads files 1 and 3, through the batch and repeat above the source.
  std::vector<int> got;
  for (const Element& e : w1.toVector()) got.push_back(static_cast<int>(e[0].at(0)));
  EXPECT_EQ(got, (std::vector<int>{100, 101, 300, 301}));
  EXPECT_EQ(w1.elementSpec(), ds.batch(1).elementSpec());
  // One worker: nothing to shard.
  EXPECT_EQ(autoShard(ds, 1, 0, &d).toVector().size(), 10u);
  expectInvalid([&] { autoShard(ds, 2, 2); }, {"worker 2 is out of range for 2 workers"});
}

TEST(AutoShard, FileErrorsSurfaceWhenIterating) {
  TextFiles files(1, 2);
  const Dataset oneFile = Dataset::fromTextFiles(files.paths()).withOptions({AutoShardPolicy::File});
  const Dataset sharded = autoShard(oneFile, 2, 0);  // no error yet
  expectInvalid([&] { sharded.toVector(); }, {"AutoShardPolicy FILE", "1 file but there are 2 workers",
                                              "Use AutoShardPolicy DATA or OFF", "more, smaller files"});
  const Dataset autoOneFile = Dataset::fromTextFiles(files.paths());
  expectInvalid([&] { autoShard(autoOneFile, 3, 1).toVector(); }, {"AutoShardPolicy AUTO", "1 file but there are 3"});
  const Dataset memory = Dataset::fromVector(range(0, 4)).withOptions({AutoShardPolicy::File});
  ShardDecision d;
  const Dataset bad = autoShard(memory, 2, 0, &d);
  EXPECT_TRUE(d.warning.empty());
  expectInvalid([&] { bad.toVector(); },
                {"AutoShardPolicy FILE cannot shard", "from_tensor_slices, not a list of files"});
}

TEST(AutoShard, AutoFallsBackToDataWithWarning) {
  ShardDecision d;
  const Dataset ds = Dataset::fromVector(range(0, 4));
  autoShard(ds, 2, 0, &d);
  EXPECT_EQ(d.applied, AutoShardPolicy::Data);
  EXPECT_EQ(
      d.warning,
      "AutoShardPolicy AUTO is applying DATA sharding because FILE sharding failed: the dataset's source is "
      "from_tensor_slices, not a list of files. Every worker reads the whole dataset and keeps 1/2 of it; set the "
      "dataset's AutoShardPolicy to DATA to silence this warning, or to OFF to disable sharding");
  autoShard(ds.withOptions({AutoShardPolicy::Off}), 2, 0, &d);
  EXPECT_EQ(d.applied, AutoShardPolicy::Off);
  autoShard(ds, 1, 0, &d);
  EXPECT_EQ(d.applied, AutoShardPolicy::Off) << "a single worker is not sharded";
}

TEST(AutoShard, FindBatch) {
  const Dataset ds = Dataset::fromVector(range(0, 4));
  EXPECT_FALSE(findBatch(ds).has_value());
  const auto b = findBatch(ds.batch(3, true).repeat().take(5).shard(2, 0));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->batchSize, 3);
  EXPECT_TRUE(b->dropRemainder);
}

// -----------------------------------------------------------------------------------------------------------------
// experimentalDistributeDataset on 2 simulated workers (threads mode)

TEST(DistributeDataset, AutoWithFourFilesOnTwoWorkersGivesDisjointFiles) {
  TextFiles files(4, 5);
  auto s = makeStrategy(2, 1);
  LogCapture log;
  const auto got = perReplicaValues(s->experimentalDistributeDataset(Dataset::fromTextFiles(files.paths())));
  EXPECT_EQ(log.countWarnings("AutoShardPolicy"), 0) << log.text();
  ASSERT_EQ(got.size(), 2u);
  std::vector<int> w0 = TextFiles::values(0, 5), w1 = TextFiles::values(1, 5);
  for (int v : TextFiles::values(2, 5)) w0.push_back(v);
  for (int v : TextFiles::values(3, 5)) w1.push_back(v);
  EXPECT_EQ(got[0], w0);
  EXPECT_EQ(got[1], w1);
  std::set<int> all(got[0].begin(), got[0].end());
  for (int v : got[1]) EXPECT_TRUE(all.insert(v).second) << v << " seen by both workers";
  EXPECT_EQ(all.size(), 20u) << "together the workers cover every element";
}

TEST(DistributeDataset, DataGivesEveryNthElement) {
  auto s = makeStrategy(3, 1);
  const Dataset ds = Dataset::fromVector(range(0, 12)).withOptions({AutoShardPolicy::Data});
  LogCapture log;
  const auto got = perReplicaValues(s->experimentalDistributeDataset(ds));
  EXPECT_EQ(log.countWarnings("AutoShardPolicy"), 0);
  ASSERT_EQ(got.size(), 3u);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(got[w], range(w, 12, 3)) << "worker " << w;
}

TEST(DistributeDataset, OffGivesEveryoneEverything) {
  auto s = makeStrategy(2, 1);
  TextFiles files(4, 2);
  for (const Dataset& ds : {Dataset::fromVector(range(0, 6)), Dataset::fromTextFiles(files.paths())}) {
    const auto got = perReplicaValues(s->experimentalDistributeDataset(ds.withOptions({AutoShardPolicy::Off})));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], got[1]);
    EXPECT_EQ(got[0], firstValues(ds.toVector()));
  }
}

TEST(DistributeDataset, AutoOnMemoryDataWarnsAndAppliesData) {
  auto s = makeStrategy(2, 1);
  LogCapture log;
  const auto got = perReplicaValues(s->experimentalDistributeDataset(Dataset::fromVector(range(0, 6))));
  EXPECT_EQ(log.countWarnings("AutoShardPolicy AUTO is applying DATA sharding because FILE sharding failed: the "
                              "dataset's source is from_tensor_slices, not a list of files"),
            1)
      << log.text();
  EXPECT_EQ(got[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(got[1], (std::vector<int>{1, 3, 5}));
  // A single worker is not sharded, so nothing to warn about.
  auto single = makeStrategy(1, 2);
  LogCapture quiet;
  single->experimentalDistributeDataset(Dataset::fromVector(range(0, 6)));
  EXPECT_EQ(quiet.countWarnings("AutoShardPolicy"), 0);
}

TEST(DistributeDataset, FileErrorsAtIteration) {
  auto s = makeStrategy(2, 1);
  TextFiles files(1, 3);
  const DistributedDataset dist =
      s->experimentalDistributeDataset(Dataset::fromTextFiles(files.paths()).withOptions({AutoShardPolicy::File}));
  DistributedIterator it = dist.iterator();
  expectInvalid([&] { it.next(); }, {"1 file but there are 2 workers", "DATA or OFF"});
  const DistributedDataset memory =
      s->experimentalDistributeDataset(Dataset::fromVector(range(0, 4)).withOptions({AutoShardPolicy::File}));
  expectInvalid([&] { memory.iterator().next(); }, {"FILE cannot shard", "from_tensor_slices"});
}

TEST(DistributeDataset, GlobalBatchSplitsIntoReplicaPieces) {
  // 2 workers x 2 local replicas, DATA: each global batch of 8 is cut into 4 pieces of 2, replica r gets piece r.
  auto s = makeStrategy(2, 2);
  const Dataset ds = Dataset::fromVector(range(0, 16)).batch(8, true).withOptions({AutoShardPolicy::Data});
  const DistributedDataset dist = s->experimentalDistributeDataset(ds);
  EXPECT_EQ(dist.elementSpec()[0].shape, (Shape{2}));
  int steps = 0;
  const auto got = perReplicaValues(dist, &steps);
  EXPECT_EQ(steps, 2);
  ASSERT_EQ(got.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[r], (std::vector<int>{2 * r, 2 * r + 1, 8 + 2 * r, 9 + 2 * r})) << "replica " << r;
  }
}

TEST(DistributeDataset, PartialAndUnevenBatches) {
  auto s = makeStrategy(1, 4);
  // 10 elements in batches of 4: the last global batch has 2 rows, so replicas 2 and 3 get empty batches.
  const DistributedDataset dist = s->experimentalDistributeDataset(Dataset::fromVector(range(0, 10)).batch(4));
  EXPECT_EQ(dist.elementSpec()[0].shape, (Shape{kUnknownDim}));
  DistributedIterator it = dist.iterator();
  std::vector<std::vector<std::int64_t>> rows;
  while (auto batch = it.next()) {
    std::vector<std::int64_t> r;
    for (const Element& e : batch->values()) r.push_back(e[0].dim(0));
    rows.push_back(r);
  }
  EXPECT_EQ(rows, (std::vector<std::vector<std::int64_t>>{{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 0, 0}}));
  expectInvalid([&] { it.getNext(); }, {"end of input"});
  // Global batch 6 over 4 replicas: the first 6 % 4 pieces are one larger (TF batch_sizes_for_worker).
  auto uneven = perReplicaValues(s->experimentalDistributeDataset(Dataset::fromVector(range(0, 6)).batch(6)));
  EXPECT_EQ(uneven, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4}, {5}}));
}

TEST(DistributeDataset, FilePolicyPiecesGoToLocalReplicasInTurn) {
  // FILE with batches: each worker cuts its own batches into R pieces and deals them to its local replicas.
  TextFiles files(2, 8);
  auto s = makeStrategy(2, 2);
  const Dataset ds = Dataset::fromTextFiles(files.paths()).batch(8).withOptions({AutoShardPolicy::File});
  const auto got = perReplicaValues(s->experimentalDistributeDataset(ds));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(got[1], (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(got[2], (std::vector<int>{100, 101, 104, 105}));
  EXPECT_EQ(got[3], (std::vector<int>{102, 103, 106, 107}));
}

TEST(DistributeDataset, UnevenWorkersPadBatchedButNotUnbatched) {
  TextFiles files(3, 2);  // worker 0 reads files 0 and 2, worker 1 only file 1
  auto s = makeStrategy(2, 1);
  const Dataset ds = Dataset::fromTextFiles(files.paths()).withOptions({AutoShardPolicy::File});
  DistributedIterator batched = s->experimentalDistributeDataset(ds.batch(2)).iterator();
  int steps = 0;
  std::vector<std::int64_t> worker1Rows;
  while (auto b = batched.next()) {
    worker1Rows.push_back((*b)[1][0].dim(0));
    ++steps;
  }
  // Each worker cuts its batches of 2 into 2 pieces of 1: worker 0 has 4 pieces, worker 1 has 2.
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(worker1Rows, (std::vector<std::int64_t>{1, 1, 0, 0}))
      << "worker 1 gets empty batches once its file is done";
  DistributedIterator unbatched = s->experimentalDistributeDataset(ds).iterator();
  unbatched.next();
  unbatched.next();
  expectInvalid([&] { unbatched.next(); },
                {"replica(s) 1 ran out of input while replica(s) 0 still have some", "batch the dataset"});
}

TEST(DistributeDatasetsFromFunction, FunctionShardsWithItsContext) {
  auto s = makeStrategy(2, 2);
  std::vector<InputContext> seen;
  const DistributedDataset dist = s->distributeDatasetsFromFunction([&](const InputContext& ctx) {
    seen.push_back(ctx);
    return Dataset::fromVector(range(0, 16))
        .shard(ctx.numInputPipelines(), ctx.inputPipelineId())
        .batch(ctx.getPerReplicaBatchSize(8));
  });
  ASSERT_EQ(seen.size(), 2u);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(seen[w].numInputPipelines(), 2);
    EXPECT_EQ(seen[w].inputPipelineId(), w);
    EXPECT_EQ(seen[w].numReplicasInSync(), 4);
  }
  // No rebatching or sharding by the strategy: worker w's batches of 2 go to its replicas in turn.
  const auto got = perReplicaValues(dist);
  EXPECT_EQ(got[0], (std::vector<int>{0, 2, 8, 10}));
  EXPECT_EQ(got[1], (std::vector<int>{4, 6, 12, 14}));
  EXPECT_EQ(got[2], (std::vector<int>{1, 3, 9, 11}));
  EXPECT_EQ(got[3], (std::vector<int>{5, 7, 13, 15}));
  EXPECT_EQ(dist.elementSpec()[0].shape, (Shape{kUnknownDim}));
  // TF's experimental_ name is the same function; a global batch that does not divide is the context's error.
  expectInvalid(
      [&] {
        s->experimentalDistributeDatasetsFromFunction([](const InputContext& ctx) {
          return Dataset::fromVector(range(0, 4)).batch(ctx.getPerReplicaBatchSize(6));
        });
      },
      {"global batch size 6 is not divisible by num_replicas_in_sync 4"});
}

TEST(DistributeDataset, MakeNumpyDataset) {
  auto s = makeStrategy(1, 1);
  const Dataset ds = s->experimentalMakeNumpyDataset({Tensor::fromVector(std::vector<double>{1, 2, 3})});
  EXPECT_EQ(firstValues(ds.toVector()), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ds.elementSpec()[0], (TensorSpec{DType::F64, {}}));
}

}  // namespace
}  // namespace collbench::strategy
