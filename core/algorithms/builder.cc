#include "builder.h"

#include <algorithm>
#include <bit>

#include "collbench/error.h"

namespace collbench::algo {

ScheduleBuilder::ScheduleBuilder(const CollectiveSpec& spec, std::string algorithm, bool keepEmptyOps)
    : elemSize_(spec.kind == Collective::Barrier ? 1 : spec.elementSize()), keepEmptyOps_(keepEmptyOps) {
  schedule_.spec = spec;
  schedule_.algorithm = std::move(algorithm);
  schedule_.ranks.resize(static_cast<std::size_t>(spec.nranks));
  virtuals_.resize(static_cast<std::size_t>(spec.nranks));
}

ScheduleBuilder::ScheduleBuilder(const CollectiveSpec& spec, std::string algorithm, const AlgoParams& params,
                                 bool keepEmptyOps)
    : ScheduleBuilder(spec, std::move(algorithm), keepEmptyOps) {
  schedule_.protocol = params.protocol;
}

OpId ScheduleBuilder::addVirtual(int rank, std::vector<int> realOps) {
  auto& v = virtuals_[static_cast<std::size_t>(rank)];
  v.push_back(std::move(realOps));
  return static_cast<OpId>(v.size() - 1);
}

OpId ScheduleBuilder::add(int rank, Op op, std::initializer_list<OpId> deps) {
  COLLBENCH_CHECK(rank >= 0 && rank < nranks(), "rank {}", rank);
  auto& v = virtuals_[static_cast<std::size_t>(rank)];
  std::vector<int> real;
  for (OpId d : deps) {
    if (d == kNoOp) continue;
    COLLBENCH_CHECK(d >= 0 && d < static_cast<OpId>(v.size()), "dep {} on rank {}", d, rank);
    const auto& r = v[static_cast<std::size_t>(d)];
    real.insert(real.end(), r.begin(), r.end());
  }
  std::sort(real.begin(), real.end());
  real.erase(std::unique(real.begin(), real.end()), real.end());
  if (op.bytes == 0 && !keepEmptyOps_) return addVirtual(rank, std::move(real));
  op.src.offset *= elemSize_;
  op.dst.offset *= elemSize_;
  op.deps = std::move(real);
  auto& ops = schedule_.ranks[static_cast<std::size_t>(rank)].ops;
  ops.push_back(std::move(op));
  return addVirtual(rank, {static_cast<int>(ops.size() - 1)});
}

OpId ScheduleBuilder::switchOp(OpKind kind, int rank, int group, int root, BufRef src, BufRef dst, std::size_t elems,
                               std::initializer_list<OpId> deps, int channel) {
  Op op;
  op.kind = kind;
  op.group = group;
  op.peer = root;
  op.src = src;
  op.dst = dst;
  op.bytes = elems * elemSize_;
  op.channel = channel;
  return add(rank, std::move(op), deps);
}

int ScheduleBuilder::switchGroup(std::vector<int> ranks) {
  schedule_.switchGroups.push_back(std::move(ranks));
  return static_cast<int>(schedule_.switchGroups.size() - 1);
}

OpId ScheduleBuilder::send(int rank, int peer, BufRef src, std::size_t elems, std::initializer_list<OpId> deps,
                           int channel) {
  Op op;
  op.kind = OpKind::Send;
  op.peer = peer;
  op.src = src;
  op.bytes = elems * elemSize_;
  op.channel = channel;
  return add(rank, std::move(op), deps);
}

OpId ScheduleBuilder::recv(int rank, int peer, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps,
                           int channel) {
  Op op;
  op.kind = OpKind::Recv;
  op.peer = peer;
  op.dst = dst;
  op.bytes = elems * elemSize_;
  op.channel = channel;
  return add(rank, std::move(op), deps);
}

OpId ScheduleBuilder::recvReduce(int rank, int peer, BufRef src, BufRef dst, std::size_t elems,
                                 std::initializer_list<OpId> deps, int channel) {
  Op op;
  op.kind = OpKind::RecvReduce;
  op.peer = peer;
  op.src = src;
  op.dst = dst;
  op.bytes = elems * elemSize_;
  op.channel = channel;
  return add(rank, std::move(op), deps);
}

OpId ScheduleBuilder::copy(int rank, BufRef src, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps) {
  Op op;
  op.kind = OpKind::Copy;
  op.src = src;
  op.dst = dst;
  op.bytes = elems * elemSize_;
  return add(rank, std::move(op), deps);
}

OpId ScheduleBuilder::reduce(int rank, BufRef src, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps) {
  Op op;
  op.kind = OpKind::Reduce;
  op.src = src;
  op.dst = dst;
  op.bytes = elems * elemSize_;
  return add(rank, std::move(op), deps);
}

OpId ScheduleBuilder::join(int rank, const std::vector<OpId>& ids) {
  auto& v = virtuals_[static_cast<std::size_t>(rank)];
  std::vector<int> real;
  for (OpId d : ids) {
    if (d == kNoOp) continue;
    const auto& r = v[static_cast<std::size_t>(d)];
    real.insert(real.end(), r.begin(), r.end());
  }
  std::sort(real.begin(), real.end());
  real.erase(std::unique(real.begin(), real.end()), real.end());
  return addVirtual(rank, std::move(real));
}

void ScheduleBuilder::needScratch(int rank, std::size_t elems) {
  auto& s = schedule_.ranks[static_cast<std::size_t>(rank)].scratchBytes;
  s = std::max(s, elems * elemSize_);
}

Schedule ScheduleBuilder::finish() { return std::move(schedule_); }

std::size_t pipelineChunks(std::size_t elems, std::size_t elemSize, std::size_t chunkBytes,
                           std::size_t defaultChunkBytes) {
  const std::size_t chunk = chunkBytes ? chunkBytes : defaultChunkBytes;
  if (elems == 0 || chunk == 0) return 1;
  const std::size_t chunkElems = std::max<std::size_t>(1, chunk / elemSize);
  return (elems + chunkElems - 1) / chunkElems;
}

std::size_t ceilLog2(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(n - 1)); }

std::size_t pipelineTransfers(const CollectiveSpec& spec, const AlgoParams& p, int slicesPerChannel,
                              std::size_t transfersPerChunk) {
  const Partition slices{spec.count, static_cast<std::size_t>(p.channels) * static_cast<std::size_t>(slicesPerChannel)};
  std::size_t chunks = 0;
  for (std::size_t i = 0; i < slices.parts; ++i) {
    chunks += pipelineChunks(slices.size(i), spec.elementSize(), p.chunkBytes, kDefaultPipelineChunkBytes);
  }
  return chunks * transfersPerChunk;
}

}  // namespace collbench::algo
