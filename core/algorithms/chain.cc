// Pipelined chains for broadcast (root -> root+1 -> ... -> root-1) and reduce (root+1 -> ... -> root), as NCCL
// runs broadcast and reduce over its ring: the data moves in chunks so that every link is busy at once.
#include "builder.h"
#include "generators.h"

namespace collbench::algo {
namespace {

struct Chunk {
  std::size_t offset, length;
  int channel;
};

std::vector<Chunk> chunksOf(std::size_t count, std::size_t elemSize, const AlgoParams& p) {
  std::vector<Chunk> out;
  const Partition byChannel{count, static_cast<std::size_t>(p.channels)};
  for (int c = 0; c < p.channels; ++c) {
    const std::size_t len = byChannel.size(static_cast<std::size_t>(c));
    const Partition chunks{len, pipelineChunks(len, elemSize, p.chunkBytes, kDefaultPipelineChunkBytes)};
    for (std::size_t k = 0; k < chunks.parts; ++k) {
      out.push_back(Chunk{byChannel.offset(static_cast<std::size_t>(c)) + chunks.offset(k), chunks.size(k), c});
    }
  }
  return out;
}

}  // namespace

Schedule chainBroadcast(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring");
  const int n = spec.nranks, root = spec.root;
  b.copy(root, in(0), out(0), spec.count, {});
  for (const Chunk& c : chunksOf(spec.count, b.elemSize(), params)) {
    for (int r = 0; r < n; ++r) {
      const int pos = mod(r - root, n), next = mod(r + 1, n), prev = mod(r - 1, n);
      if (pos == 0) {
        if (n > 1) b.send(r, next, in(c.offset), c.length, {}, c.channel);
        continue;
      }
      const OpId got = b.recv(r, prev, out(c.offset), c.length, {}, c.channel);
      if (pos < n - 1) b.send(r, next, out(c.offset), c.length, {got}, c.channel);
    }
  }
  return b.finish();
}

Schedule chainReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring");
  const int n = spec.nranks, root = spec.root;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  for (const Chunk& c : chunksOf(spec.count, b.elemSize(), params)) {
    for (int r = 0; r < n; ++r) {
      // pos 0 is the first rank after the root, pos n-1 the root; partial sums of non-roots live in scratch so
      // that their output buffers are left untouched, as NCCL leaves them.
      const int pos = mod(r - root - 1, n), next = mod(r + 1, n), prev = mod(r - 1, n);
      if (pos == 0) {
        b.send(r, next, in(c.offset), c.length, {}, c.channel);
      } else if (pos < n - 1) {
        b.needScratch(r, spec.count);
        const OpId got = b.recvReduce(r, prev, in(c.offset), scratch(c.offset), c.length, {}, c.channel);
        b.send(r, next, scratch(c.offset), c.length, {got}, c.channel);
      } else {
        b.recvReduce(r, prev, in(c.offset), out(c.offset), c.length, {}, c.channel);
      }
    }
  }
  return b.finish();
}

Schedule disseminationBarrier(const CollectiveSpec& spec, const AlgoParams&) {
  // Hensgen, Finkel, Manber 1988: in round k every rank signals rank + 2^k; after ceil(log2 n) rounds each rank
  // has heard, transitively, from all others.
  ScheduleBuilder b(spec, "dissemination", /*keepEmptyOps=*/true);
  const int n = spec.nranks;
  for (int r = 0; r < n; ++r) {
    OpId heard = kNoOp;
    for (int d = 1; d < n; d *= 2) {
      b.send(r, (r + d) % n, in(0), 0, {heard});
      heard = b.recv(r, mod(r - d, n), out(0), 0, {heard});
    }
  }
  return b.finish();
}

}  // namespace collbench::algo
