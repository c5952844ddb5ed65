// Double binary tree all-reduce (NCCL style): half the data is reduced up and broadcast down each of two
// complementary binary trees, pipelined in chunks so that reduction of chunk k+1 overlaps broadcast of chunk k.
// On several hosts the trees are NCCL's: a double binary tree over hosts with a chain through each host's GPUs.
#include <algorithm>
#include <functional>
#include <map>

#include "builder.h"
#include "generators.h"
#include "models/cost_context.h"

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

int treeDepth(const std::vector<int>& parent) {
  const std::size_t n = parent.size();
  std::vector<int> depth(n, -1);
  int deepest = 0;
  for (std::size_t r = 0; r < n; ++r) {
    // Up to the first rank of known depth (or the root), then back down the path, numbering it.
    int top = static_cast<int>(r), hops = 0;
    while (depth[static_cast<std::size_t>(top)] < 0 && parent[static_cast<std::size_t>(top)] >= 0) {
      top = parent[static_cast<std::size_t>(top)];
      ++hops;
    }
    if (depth[static_cast<std::size_t>(top)] < 0) depth[static_cast<std::size_t>(top)] = 0;
    int d = depth[static_cast<std::size_t>(top)] + hops;
    deepest = std::max(deepest, d);
    for (int v = static_cast<int>(r); v != top; v = parent[static_cast<std::size_t>(v)]) {
      depth[static_cast<std::size_t>(v)] = d--;
    }
  }
  return deepest;
}

// treeParents (algorithms.h): NCCL 2.28 src/graph/connect.cc: ncclTopoPreset chains each channel's intra-node order,
// connectTrees joins the nodes by ncclGetDtree; the chain's first GPU talks to the network (the tree pattern,
// NCCL_TOPO_PATTERN_TREE, src/graph/search.cc). Starting channel c's chains at local rank c mod size spreads the
// channels over GPUs and NICs, and on rail-optimized fabrics keeps each channel on one rail.
}  // namespace collbench::algo

namespace collbench {

std::vector<int> treeParents(int n, const AlgoParams& params, int tree, int channel) {
  using algo::dtreeParent, algo::mod;
  std::vector<int> parent(static_cast<std::size_t>(n));
  const std::vector<std::vector<int>> hosts =
      static_cast<int>(params.rankHost.size()) == n ? groupByHost(params.rankHost) : std::vector<std::vector<int>>{};
  if (hosts.size() < 2) {
    for (int r = 0; r < n; ++r) parent[static_cast<std::size_t>(r)] = dtreeParent(n, r, tree);
    return parent;
  }
  const int nHosts = static_cast<int>(hosts.size());
  auto chainAt = [&](int h, int i) {
    const auto& local = hosts[static_cast<std::size_t>(h)];
    const int size = static_cast<int>(local.size());
    return local[static_cast<std::size_t>(mod(channel + i, size))];
  };
  for (int h = 0; h < nHosts; ++h) {
    const int up = dtreeParent(nHosts, h, tree);
    parent[static_cast<std::size_t>(chainAt(h, 0))] = up < 0 ? -1 : chainAt(up, 0);
    const int size = static_cast<int>(hosts[static_cast<std::size_t>(h)].size());
    for (int i = 1; i < size; ++i) parent[static_cast<std::size_t>(chainAt(h, i))] = chainAt(h, i - 1);
  }
  return parent;
}

}  // namespace collbench

namespace collbench::algo {

/// The children of every rank under `parent`, in rank order.
std::vector<std::vector<int>> treeChildren(const std::vector<int>& parent) {
  std::vector<std::vector<int>> children(parent.size());
  for (std::size_t r = 0; r < parent.size(); ++r) {
    if (parent[r] >= 0) children[static_cast<std::size_t>(parent[r])].push_back(static_cast<int>(r));
  }
  return children;
}

Schedule treeAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "tree", params);
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  const Partition byTree{spec.count, kTreeCount};
  for (int t = 0; t < kTreeCount; ++t) {
    const Partition byChannel{byTree.size(static_cast<std::size_t>(t)), static_cast<std::size_t>(params.channels)};
    for (int c = 0; c < params.channels; ++c) {
      const int channel = t * params.channels + c;
      const std::vector<int> parent = treeParents(n, params, t, channel);
      const std::vector<std::vector<int>> children = treeChildren(parent);
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

namespace {

Estimate treeCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  if (n == 1) return estimateOf(ctx.gammaCost(static_cast<double>(s.count * es), 0));
  const Partition byTree{s.count, 2};
  const int c = p.channels;
  std::size_t chunks = 0;
  CostTerms fill;
  std::vector<CostContext::Flow> steady;
  std::vector<double> foldBytes(static_cast<std::size_t>(n), 0.0);  // per period, what each node folds
  for (int t = 0; t < 2; ++t) {
    const std::size_t slice = ceilDiv(byTree.size(static_cast<std::size_t>(t)), static_cast<std::size_t>(c));
    if (slice == 0) continue;
    const std::size_t k = pipelineChunks(slice, es, p.chunkBytes, kDefaultPipelineChunkBytes);
    chunks = std::max(chunks, k);
    const double C = static_cast<double>(ceilDiv(slice, k) * es);
    const int lanes =
        static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(c), byTree.size(static_cast<std::size_t>(t))));
    // Channels of one shape share its links (`mult` parallel flows); NCCL's host chains differ between channels.
    std::map<std::vector<int>, int> shapes;
    for (int lane = 0; lane < lanes; ++lane) ++shapes[treeParents(n, p, t, t * c + lane)];
    for (const auto& shape : shapes) {
      const std::vector<int>& parent = shape.first;
      const int mult = shape.second;
      const std::vector<std::vector<int>> kids = treeChildren(parent);
      const int root = static_cast<int>(std::find(parent.begin(), parent.end(), -1) - parent.begin());
      // Fill: one chunk up (a node folds its children one after the other, then sends up) and down (a node sends
      // to all its children at once, sharing its links).
      std::function<CostTerms(int)> up = [&](int r) {
        CostTerms acc;
        bool first = true;
        for (int ch : kids[static_cast<std::size_t>(r)]) {
          const CostTerms ready = up(ch);
          const CostTerms start = first ? ready : CostTerms::max(ready, acc);
          acc = start + ctx.phaseMax({{ch, r, C, mult}}) + ctx.gammaCost(C * mult, r);
          first = false;
        }
        return acc;
      };
      CostTerms last;
      std::function<void(int, const CostTerms&)> down = [&](int r, const CostTerms& at) {
        last = CostTerms::max(last, at);
        const auto& ch = kids[static_cast<std::size_t>(r)];
        if (ch.empty()) return;
        std::vector<CostContext::Flow> flows;
        for (int x : ch) flows.push_back({r, x, C, mult});
        const std::vector<CostTerms> cost = ctx.phase(flows);
        for (std::size_t i = 0; i < ch.size(); ++i) down(ch[i], at + cost[i]);
      };
      down(root, up(root));
      fill = CostTerms::max(fill, last);
      for (int r = 0; r < n; ++r) {
        const int above = parent[static_cast<std::size_t>(r)];
        foldBytes[static_cast<std::size_t>(r)] +=
            static_cast<double>(kids[static_cast<std::size_t>(r)].size()) * C * mult;
        if (above < 0) continue;
        steady.push_back({r, above, C, mult});
        steady.push_back({above, r, C, mult});
      }
    }
  }
  if (chunks <= 1) return estimateOf(fill);
  // Steady state: every connection carries one chunk per period while all of them share the links (each flow
  // at its most loaded link's share, latency included: a connection's next transfer starts when the last ended);
  // each node folds its children's chunks of both trees and all channels at its rate. Measured against the
  // simulator this is within 5% on flat and NVSwitch topologies and 15% pessimistic for 64 KiB chunks over NICs.
  CostTerms period;
  for (const CostTerms& x : ctx.phase(steady)) period = CostTerms::max(period, x);
  for (int r = 0; r < n; ++r) period = CostTerms::max(period, ctx.gammaCost(foldBytes[static_cast<std::size_t>(r)], r));
  return estimateOf(fill + period * static_cast<double>(chunks - 1));
}

/// Every chunk of every tree slice climbs and descends: 2(n-1) transfers.
std::size_t treeTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  return pipelineTransfers(spec, p, kTreeCount, 2 * (static_cast<std::size_t>(spec.nranks) - 1));
}

/// A chunk goes up the deepest path of its tree and down again: twice the largest depth of the two trees. A tree's
/// channels only rotate each host's chain (treeParents), which moves no host's chain length, so its first channel
/// stands for all.
std::size_t treeTrip(const CollectiveSpec& spec, const AlgoParams& p) {
  int deepest = 0;
  for (int t = 0; t < kTreeCount; ++t)
    deepest = std::max(deepest, treeDepth(treeParents(spec.nranks, p, t, t * p.channels)));
  return 2 * static_cast<std::size_t>(deepest);
}

}  // namespace

AlgorithmInfo treeAllReduceAlgorithm() {
  return {.name = "tree",
          .collective = Collective::AllReduce,
          .summary = "NCCL double binary tree, pipelined in chunks, log-depth latency",
          .build = treeAllReduce,
          .cost = treeCost,
          .traits = {.pipelineSlices = kTreeCount,
                     .usesChunkBytes = true,
                     .usesChannels = true,
                     .simTreeModel = true,
                     .transfers = treeTransfers,
                     .pipelineTrip = treeTrip}};
}

}  // namespace collbench::algo
