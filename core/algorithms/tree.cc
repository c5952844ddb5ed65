// Double binary tree all-reduce (NCCL style): half the data is reduced up and broadcast down each of two
// complementary binary trees, pipelined in chunks so that reduction of chunk k+1 overlaps broadcast of chunk k.
#include <algorithm>

#include "builder.h"
#include "generators.h"

namespace collbench::algo {

int btreeParent(int n, int rank) {
  if (rank == 0) return -1;
  const int bit = rank & -rank;
  const int up = (rank ^ bit) | (bit << 1);
  return up < n ? up : (rank ^ bit);
}

int dtreeParent(int n, int rank, int tree) {
  if (tree == 0) return btreeParent(n, rank);
  if (n % 2 == 0) {
    const int p = btreeParent(n, n - 1 - rank);
    return p < 0 ? -1 : n - 1 - p;
  }
  const int p = btreeParent(n, mod(rank - 1, n));
  return p < 0 ? -1 : (p + 1) % n;
}

Schedule treeAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "tree");
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  constexpr int kTrees = 2;
  const Partition byTree{spec.count, kTrees};
  for (int t = 0; t < kTrees; ++t) {
    std::vector<int> parent(static_cast<std::size_t>(n));
    std::vector<std::vector<int>> children(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      parent[static_cast<std::size_t>(r)] = dtreeParent(n, r, t);
      if (parent[static_cast<std::size_t>(r)] >= 0)
        children[static_cast<std::size_t>(parent[static_cast<std::size_t>(r)])].push_back(r);
    }
    const Partition byChannel{byTree.size(static_cast<std::size_t>(t)), static_cast<std::size_t>(params.channels)};
    for (int c = 0; c < params.channels; ++c) {
      const int channel = t * params.channels + c;
      const std::size_t sliceOff =
          byTree.offset(static_cast<std::size_t>(t)) + byChannel.offset(static_cast<std::size_t>(c));
      const std::size_t sliceLen = byChannel.size(static_cast<std::size_t>(c));
      const Partition chunks{sliceLen,
                             pipelineChunks(sliceLen, b.elemSize(), params.chunkBytes, kDefaultPipelineChunkBytes)};
      for (std::size_t k = 0; k < chunks.parts; ++k) {
        const std::size_t o = sliceOff + chunks.offset(k), len = chunks.size(k);
        for (int r = 0; r < n; ++r) {
          const int up = parent[static_cast<std::size_t>(r)];
          // Reduce phase: fold each child's partial into the output, one child after the other.
          OpId acc = kNoOp;
          for (int child : children[static_cast<std::size_t>(r)]) {
            acc = b.recvReduce(r, child, acc == kNoOp ? in(o) : out(o), out(o), len, {acc}, channel);
          }
          OpId result = acc;
          if (up >= 0) {
            const OpId sent = b.send(r, up, acc == kNoOp ? in(o) : out(o), len, {acc}, channel);
            result = b.recv(r, up, out(o), len, {sent}, channel);
          }
          // Broadcast phase.
          for (int child : children[static_cast<std::size_t>(r)]) b.send(r, child, out(o), len, {result}, channel);
        }
      }
    }
  }
  return b.finish();
}

}  // namespace collbench::algo
