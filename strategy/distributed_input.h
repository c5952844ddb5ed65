#pragma once
// What DistributedDataset and DistributedIterator hold (private to strategy/).
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "collbench/strategy/strategy.h"

namespace collbench::strategy {

struct DistributedDataset::Impl {
  bool fromFunction = false;  ///< distributeDatasetsFromFunction: no sharding or rebatching
  int numWorkers = 1;
  int localReplicas = 1;
  std::vector<int> hostedWorkers;
  std::vector<int> replicaIds;          ///< hosted replica ids, hosted order
  std::vector<Dataset> workerDatasets;  ///< per hosted worker, after file sharding (or from the function)
  AutoShardPolicy applied = AutoShardPolicy::Off;
  std::optional<BatchInfo> batch;  ///< the global batch, when the dataset is batched (not fromFunction)
  bool batched = false;            ///< elements are batches (dim 0 is the batch): replicas out of data get empty ones
  ElementSpec spec;                ///< per replica
  /// Processes mode: sums per-replica counts over every worker (Strategy::sumOverWorkerProcesses); empty when this
  /// process hosts every worker.
  std::function<void(std::vector<std::int64_t>&)> agree;
};

namespace detail {
/// One hosted worker's stream of per-replica pieces.
struct WorkerFeed {
  std::unique_ptr<DatasetIterator> input;
  int worker = 0;
  std::deque<Element> pieces;
  std::int64_t elementIndex = 0;  ///< unbatched DATA: index in the worker's stream
  bool exhausted = false;
};
}  // namespace detail

struct DistributedIterator::Impl {
  std::shared_ptr<const DistributedDataset::Impl> dataset;
  std::vector<detail::WorkerFeed> feeds;  ///< per hosted worker
  std::optional<PerReplicaValues<Element>> next();

 private:
  std::optional<Element> nextPiece(detail::WorkerFeed& feed);
};

}  // namespace collbench::strategy
