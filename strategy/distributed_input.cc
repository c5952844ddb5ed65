// Iteration of distributed datasets: global batches split into per-replica pieces, sharded by worker.
#include "distributed_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collbench/error.h"

namespace collbench::strategy {

namespace {

Element sliceElement(const Element& e, std::int64_t begin, std::int64_t end) {
  Element out;
  out.reserve(e.size());
  for (const Tensor& t : e) out.push_back(t.slice(begin, end));
  return out;
}

/// Rows of a batched element (dim 0 of its first component).
std::int64_t rowsOf(const Element& e) { return e.empty() || e.front().rank() == 0 ? 0 : e.front().dim(0); }

}  // namespace

DistributedIterator DistributedDataset::iterator() const {
  auto impl = std::make_shared<DistributedIterator::Impl>();
  impl->dataset = impl_;
  for (std::size_t k = 0; k < impl_->hostedWorkers.size(); ++k) {
    detail::WorkerFeed feed;
    feed.worker = impl_->hostedWorkers[k];
    feed.input = impl_->workerDatasets[k].makeIterator();
    impl->feeds.push_back(std::move(feed));
  }
  return DistributedIterator(std::move(impl));
}

std::optional<PerReplicaValues<Element>> DistributedIterator::next() { return impl_->next(); }

std::optional<Element> DistributedIterator::Impl::nextPiece(detail::WorkerFeed& feed) {
  const DistributedDataset::Impl& ds = *dataset;
  while (feed.pieces.empty()) {
    if (feed.exhausted) return std::nullopt;
    std::optional<Element> e = feed.input->next();
    if (!e) {
      feed.exhausted = true;
      return std::nullopt;
    }
    const bool data = ds.applied == AutoShardPolicy::Data;
    if (ds.fromFunction || !ds.batch) {
      const std::int64_t index = feed.elementIndex++;
      if (data && index % ds.numWorkers != feed.worker) continue;
      feed.pieces.push_back(std::move(*e));
      continue;
    }
    // A global batch: R pieces, the first B % R one row larger (TF batch_sizes_for_worker), cut at the rows held.
    const std::int64_t replicas = static_cast<std::int64_t>(ds.numWorkers) * ds.localReplicas;
    const std::int64_t global = ds.batch->batchSize;
    const std::int64_t floor = global / replicas, ceilCount = global % replicas;
    const std::int64_t rows = rowsOf(*e);
    const std::int64_t first = data ? static_cast<std::int64_t>(feed.worker) * ds.localReplicas : 0;
    const std::int64_t last = data ? first + ds.localReplicas : replicas;
    for (std::int64_t r = first; r < last; ++r) {
      const std::int64_t offset = r * floor + std::min(r, ceilCount);
      const std::int64_t size = floor + (r < ceilCount ? 1 : 0);
      feed.pieces.push_back(sliceElement(*e, std::min(offset, rows), std::min(offset + size, rows)));
    }
  }
  Element piece = std::move(feed.pieces.front());
  feed.pieces.pop_front();
  return piece;
}

std::optional<PerReplicaValues<Element>> DistributedIterator::Impl::next() {
  const DistributedDataset::Impl& ds = *dataset;
  std::vector<std::optional<Element>> got;
  got.reserve(ds.replicaIds.size());
  for (detail::WorkerFeed& feed : feeds) {
    for (int l = 0; l < ds.localReplicas; ++l) got.push_back(nextPiece(feed));
  }
  // Which replicas have a piece: those hosted here, and with ds.agree every worker's (a collective, so that all
  // workers take the same branch below).
  const std::size_t replicas = static_cast<std::size_t>(ds.numWorkers) * static_cast<std::size_t>(ds.localReplicas);
  std::vector<std::int64_t> has(replicas, 0);
  for (std::size_t h = 0; h < got.size(); ++h) has[static_cast<std::size_t>(ds.replicaIds[h])] = got[h] ? 1 : 0;
  if (ds.agree) ds.agree(has);
  std::vector<int> missing, present;
  std::vector<bool> hosted(replicas, false);
  for (int id : ds.replicaIds) hosted[static_cast<std::size_t>(id)] = true;
  for (std::size_t id = 0; id < replicas; ++id) {
    if (!hosted[id] && !ds.agree) continue;  // threads mode hosts everyone; other processes only with agreement
    (has[id] ? present : missing).push_back(static_cast<int>(id));
  }
  if (present.empty()) return std::nullopt;
  const Element* reference = nullptr;
  for (const auto& g : got) {
    if (g && !reference) reference = &*g;
  }
  if (!missing.empty()) {
    bool scalarComponent = false;
    for (const TensorSpec& t : ds.spec) scalarComponent = scalarComponent || t.shape.empty();
    if (reference) {
      for (const Tensor& t : *reference) scalarComponent = scalarComponent || t.rank() == 0;
    }
    if (!ds.batched || scalarComponent) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("distributed dataset: replica(s) {} ran out of input while replica(s) {} still have "
                              "some; unbatched elements cannot be padded with empty batches: batch the dataset",
                              fmt::join(missing, ", "), fmt::join(present, ", ")));
    }
  }
  Element empty;
  if (missing.empty()) {
    // Everyone has a piece: no padding.
  } else if (reference) {
    empty = sliceElement(*reference, 0, 0);
  } else {
    // Nothing left here while other workers still have data: empty batches of the element spec (TF's dummy
    // tensors: batch dimension 0, unknown dimensions 0).
    for (const TensorSpec& t : ds.spec) {
      Shape shape = t.shape;
      for (std::int64_t& d : shape) d = d == kUnknownDim ? 0 : d;
      shape.front() = 0;
      empty.emplace_back(t.dtype, std::move(shape));
    }
  }
  std::vector<Element> values;
  values.reserve(got.size());
  for (auto& g : got) {
    if (g) {
      values.push_back(std::move(*g));
    } else {
      values.push_back(empty);
    }
  }
  return PerReplicaValues<Element>(std::move(values), ds.replicaIds);
}

}  // namespace collbench::strategy
