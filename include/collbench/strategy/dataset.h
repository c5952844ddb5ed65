#pragma once
/// A small tf.data: lazy pipelines of elements (tuples of Tensors) built from vectors or files, with batch, shard,
/// repeat and take, an element_spec, and the options the strategy's auto-sharding reads.
///
/// Datasets are immutable values (copying one is cheap; transformations return new datasets sharing the input).
/// Nothing is read until an iterator pulls elements, so errors that depend on the data (a missing file, elements
/// that cannot be batched) surface at iteration time, as in TF.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collbench/strategy/tensor.h"

namespace collbench::strategy {

/// One dataset element: a tuple of components, e.g. {features, label}.
using Element = std::vector<Tensor>;

/// TF: tf.TensorSpec. Dims may be kUnknownDim (None), e.g. the batch dimension of batch(drop_remainder=false).
struct TensorSpec {
  DType dtype = DType::F32;
  Shape shape;
  /// "TensorSpec(shape=[?, 3], dtype=float)".
  std::string describe() const;
  /// Whether `t` conforms (same dtype and rank, equal known dims).
  bool isCompatible(const Tensor& t) const;
  bool operator==(const TensorSpec&) const = default;
};
/// TF: Dataset.element_spec (one spec per component).
using ElementSpec = std::vector<TensorSpec>;

/// TF: tf.data.experimental.AutoShardPolicy. How experimentalDistributeDataset splits a dataset across workers:
///   Auto: FILE if the pipeline reads files, otherwise DATA with a warning saying why FILE failed.
///   File: worker w reads files w, w+W, ...; a source that is not files, or fewer files than workers, is an error
///         when iterating.
///   Data: every worker reads everything and keeps its share of the final stream (see experimentalDistributeDataset).
///   Off:  no sharding: every worker sees every element.
enum class AutoShardPolicy { Auto, File, Data, Off };
/// "AUTO", "FILE", "DATA", "OFF".
std::string_view toString(AutoShardPolicy p);
/// Case-insensitive; unknown names throw Error{InvalidArgument}.
AutoShardPolicy parseAutoShardPolicy(std::string_view text);

/// TF: tf.data.Options, the part the strategy reads (options.experimental_distribute.auto_shard_policy).
struct DatasetOptions {
  AutoShardPolicy autoShardPolicy = AutoShardPolicy::Auto;
  bool operator==(const DatasetOptions&) const = default;
};

/// Pulls elements one at a time; nullopt at the end (TF's OutOfRange).
class DatasetIterator {
 public:
  virtual ~DatasetIterator() = default;
  virtual std::optional<Element> next() = 0;
};

/// Calls `row` with the line number (from 1) and the numbers of every example line of text file `path`, as
/// Dataset::fromTextFiles reads it: numbers separated by commas, spaces or tabs; blank lines and '#' comments
/// skipped. Nothing is kept, so a caller can check a large file before iterating it. Throws Error{InvalidArgument}
/// "file '<path>' is a directory", "cannot open file '<path>'" or "file '<path>' line <n>: \"<token>\" is not a
/// number".
void forEachTextRow(const std::string& path,
                    const std::function<void(std::size_t line, const std::vector<double>& values)>& row);

/// Reads one file into elements (for Dataset::fromFiles). Throw Error{InvalidArgument} naming the file on errors.
using FileReader = std::function<std::vector<Element>(const std::string& path)>;

namespace detail {
struct DatasetNode;
}

class Dataset {
 public:
  /// TF: from_tensor_slices. Component i's dim 0 is sliced: element k = {components[0][k], components[1][k], ...}.
  /// Components must have rank >= 1 and equal dim 0 (errors name the component and both sizes).
  static Dataset fromTensorSlices(std::vector<Tensor> components);
  /// TF: from_tensors of each element in turn (from a vector of elements). Elements must match the first one's
  /// structure (component count, dtypes, shapes); errors name the element and component.
  static Dataset fromElements(std::vector<Element> elements);
  /// Scalars from a vector: element k = {scalar(values[k])}.
  template <typename T>
  static Dataset fromVector(const std::vector<T>& values) {
    return fromTensorSlices({Tensor::fromVector(values)});
  }
  /// A file-based source (TF: TFRecordDataset(filenames) and friends): files are read in order, each through
  /// `reader`, when the iterator reaches them. FILE sharding splits `files`. `spec` is the element_spec the reader
  /// produces (elements are checked against it). An empty file list is an error.
  static Dataset fromFiles(std::vector<std::string> files, FileReader reader, ElementSpec spec);
  /// Text files of numbers (TF: TextLineDataset + decode_csv): every non-empty line that is not a '#' comment is
  /// one element with one component, the comma- or space-separated numbers on the line as a `dtype` vector.
  /// Errors name the file and line.
  static Dataset fromTextFiles(std::vector<std::string> files, DType dtype = DType::F32);

  /// TF: batch(batch_size, drop_remainder). Stacks `batchSize` consecutive elements (components must have equal
  /// shapes within a batch: the error names the element); the last partial batch is kept unless dropRemainder.
  Dataset batch(std::int64_t batchSize, bool dropRemainder = false) const;
  /// TF: shard(num_shards, index): keeps elements index, index + numShards, ... Needs 0 <= index < numShards.
  Dataset shard(std::int64_t numShards, std::int64_t index) const;
  /// TF: repeat(count); -1 repeats forever. Repeating an empty dataset is empty.
  Dataset repeat(std::int64_t count = -1) const;
  /// TF: take(count); -1 takes everything.
  Dataset take(std::int64_t count) const;
  /// TF: with_options.
  Dataset withOptions(DatasetOptions options) const;
  const DatasetOptions& options() const { return options_; }

  /// TF: element_spec.
  const ElementSpec& elementSpec() const;
  /// A fresh iterator from the start.
  std::unique_ptr<DatasetIterator> makeIterator() const;
  /// Every element (for tests and small data); throws Error{InvalidArgument} after kMaxMaterializedElements.
  std::vector<Element> toVector() const;
  static constexpr std::size_t kMaxMaterializedElements = 1 << 24;

  /// Implementation access for the strategy's sharding (detail; not for users).
  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node, DatasetOptions options = {});

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
  DatasetOptions options_;
};

/// TF: tf.distribute.InputContext, passed to the dataset function of distributeDatasetsFromFunction.
class InputContext {
 public:
  /// Throws Error{InvalidArgument} unless 0 <= inputPipelineId < numInputPipelines and numReplicasInSync >= 1.
  explicit InputContext(int numInputPipelines = 1, int inputPipelineId = 0, int numReplicasInSync = 1);
  /// TF num_input_pipelines: the number of workers.
  int numInputPipelines() const { return numInputPipelines_; }
  /// TF input_pipeline_id: this worker's rank.
  int inputPipelineId() const { return inputPipelineId_; }
  /// TF num_replicas_in_sync.
  int numReplicasInSync() const { return numReplicasInSync_; }
  /// TF get_per_replica_batch_size: global / numReplicasInSync; throws Error{InvalidArgument} naming both numbers
  /// when it does not divide.
  std::int64_t getPerReplicaBatchSize(std::int64_t globalBatchSize) const;

 private:
  int numInputPipelines_;
  int inputPipelineId_;
  int numReplicasInSync_;
};

// ---------------------------------------------------------------------------------------------------------------
// Sharding primitives (what the strategy applies; public so that they can be tested and reused by tools).

/// What autoShard did.
struct ShardDecision {
  AutoShardPolicy applied = AutoShardPolicy::Off;  ///< File, Data or Off
  std::string warning;                             ///< non-empty when AUTO fell back to DATA (the text logged)
};

/// Worker `workerIndex`'s view of `dataset` under its options' policy, for `numWorkers` workers (TF auto_shard):
/// File rewrites the file source to files workerIndex, workerIndex + numWorkers, ...; Data and Off return the
/// dataset unchanged (Data's element selection is done by the distributed iterator, on the final stream, see
/// Strategy::experimentalDistributeDataset); with one worker nothing is sharded. The File checks (source must be
/// files; at least as many files as workers) are deferred to iteration, as in TF: the returned dataset's iterator
/// throws Error{InvalidArgument}.
Dataset autoShard(const Dataset& dataset, int numWorkers, int workerIndex, ShardDecision* decision = nullptr);

/// The global batch size of a dataset whose last batching transformation is batch(B) (looking through shard,
/// repeat and take), with its drop_remainder flag; nullopt when the dataset is not batched.
struct BatchInfo {
  std::int64_t batchSize = 0;
  bool dropRemainder = false;
};
std::optional<BatchInfo> findBatch(const Dataset& dataset);

}  // namespace collbench::strategy
