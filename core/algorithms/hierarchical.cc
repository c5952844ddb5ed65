// Hierarchical all-reduce (as Horovod's and NCCL's two-level schemes): ring reduce-scatter inside each host, ring
// all-reduce across hosts among the ranks with the same local index (one cross-host ring per local index, so all
// NICs/rails carry 1/L of the data at once), then ring all-gather inside each host. Inter-host traffic per rank is
// 2(H-1)/(H L) of the buffer instead of the flat ring's 2(n-1)/n over the slowest link.
#include <fmt/format.h>

#include <algorithm>

#include "builder.h"
#include "collbench/error.h"
#include "generators.h"
#include "models/cost_context.h"

namespace collbench::algo {
namespace {

/// Ring reduce-scatter then all-gather over `ring` (ranks in ring order) on elements [off, off+len), in the
/// output. `after[r]` gates each rank's first op and is updated to a join of every op the phase added on the rank
/// (not just the last: zero-byte ops are elided, and the next phase must follow all writes). The reduce-scatter of the
/// intra-host phase reads the input; later phases work in place.
struct RingPhase {
  ScheduleBuilder& b;
  const std::vector<int>& ring;
  std::size_t off, len;
  std::vector<OpId>& after;                 // indexed by rank
  std::vector<std::vector<OpId>>& rsSends;  // per rank, per step: sends of the reduce-scatter (for AG hazards)
  int channel;

  std::size_t at(const Partition& p, int blk) const { return off + p.offset(static_cast<std::size_t>(blk)); }
  std::size_t sz(const Partition& p, int blk) const { return p.size(static_cast<std::size_t>(blk)); }

  void reduceScatter(bool fromInput) {
    const int m = static_cast<int>(ring.size());
    const Partition blocks{len, static_cast<std::size_t>(m)};
    for (int i = 0; i < m; ++i) {
      const int r = ring[static_cast<std::size_t>(i)];
      const int next = ring[static_cast<std::size_t>(mod(i + 1, m))],
                prev = ring[static_cast<std::size_t>(mod(i - 1, m))];
      auto& sends = rsSends[static_cast<std::size_t>(r)];
      sends.assign(static_cast<std::size_t>(m), kNoOp);
      OpId reduced = after[static_cast<std::size_t>(r)];
      std::vector<OpId> all{reduced};
      for (int s = 0; s < m - 1; ++s) {
        const int sb = mod(i - s, m);
        const BufRef src = (s == 0 && fromInput) ? in(at(blocks, sb)) : out(at(blocks, sb));
        sends[static_cast<std::size_t>(s)] = b.send(r, next, src, sz(blocks, sb), {reduced}, channel);
        const int rb = mod(i - s - 1, m);
        const BufRef rsrc = fromInput ? in(at(blocks, rb)) : out(at(blocks, rb));
        reduced = b.recvReduce(r, prev, rsrc, out(at(blocks, rb)), sz(blocks, rb), {after[static_cast<std::size_t>(r)]},
                               channel);
        all.push_back(sends[static_cast<std::size_t>(s)]);
        all.push_back(reduced);
      }
      after[static_cast<std::size_t>(r)] = b.join(r, all);
    }
  }

  void allGather() {
    const int m = static_cast<int>(ring.size());
    const Partition blocks{len, static_cast<std::size_t>(m)};
    for (int i = 0; i < m; ++i) {
      const int r = ring[static_cast<std::size_t>(i)];
      const int next = ring[static_cast<std::size_t>(mod(i + 1, m))],
                prev = ring[static_cast<std::size_t>(mod(i - 1, m))];
      const auto& sends = rsSends[static_cast<std::size_t>(r)];
      OpId received = after[static_cast<std::size_t>(r)];
      std::vector<OpId> all{received};
      for (int t = 0; t < m - 1; ++t) {
        const int sb = mod(i + 1 - t, m);
        all.push_back(b.send(r, next, out(at(blocks, sb)), sz(blocks, sb), {received}, channel));
        const int rb = mod(i - t, m);
        received = b.recv(
            r, prev, out(at(blocks, rb)), sz(blocks, rb),
            {sends.empty() ? kNoOp : sends[static_cast<std::size_t>(t)], after[static_cast<std::size_t>(r)]}, channel);
        all.push_back(received);
      }
      after[static_cast<std::size_t>(r)] = b.join(r, all);
    }
  }
};

}  // namespace

Schedule hierarchicalAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  if (static_cast<int>(params.rankHost.size()) != n) {
    throw Error(Errc::InvalidArgument,
                fmt::format("hierarchical all-reduce needs the host of each of the {} ranks (give --topology); got {}",
                            n, params.rankHost.size()));
  }
  const std::vector<std::vector<int>> hosts = groupByHost(params.rankHost);
  const std::size_t local = hosts.front().size();
  for (const auto& h : hosts) {
    if (h.size() != local) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("hierarchical all-reduce needs the same number of ranks on every host; host of rank {} "
                              "has {}, host of rank {} has {}",
                              hosts.front().front(), local, h.front(), h.size()));
    }
  }
  ScheduleBuilder b(spec, "hierarchical", params);
  std::vector<OpId> after(static_cast<std::size_t>(n), kNoOp);
  std::vector<std::vector<OpId>> intraSends(static_cast<std::size_t>(n)), interSends(static_cast<std::size_t>(n));
  if (local == 1) {
    for (int r = 0; r < n; ++r) after[static_cast<std::size_t>(r)] = b.copy(r, in(0), out(0), spec.count, {});
  } else {
    for (const auto& h : hosts) RingPhase{b, h, 0, spec.count, after, intraSends, 0}.reduceScatter(true);
  }
  // Local index i now holds block (i+1) mod L of the host's sum; reduce it across hosts.
  const Partition blocks{spec.count, local};
  if (hosts.size() > 1) {
    for (std::size_t i = 0; i < local; ++i) {
      std::vector<int> ring;
      for (const auto& h : hosts) ring.push_back(h[i]);
      const std::size_t blk = (i + 1) % local;
      RingPhase phase{b, ring, blocks.offset(blk), blocks.size(blk), after, interSends, 1};
      phase.reduceScatter(false);
      phase.allGather();
    }
  }
  if (local > 1) {
    for (const auto& h : hosts) RingPhase{b, h, 0, spec.count, after, intraSends, 0}.allGather();
  }
  return b.finish();
}

namespace {

Estimate hierarchicalCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams&) {
  Estimate e;
  const std::vector<std::vector<int>> hosts = groupByHost(ctx.host);
  const std::size_t L = hosts.front().size();
  for (const auto& h : hosts) {
    if (h.size() != L) {
      e.supported = false;
      e.note = fmt::format("hierarchical needs the same number of ranks on every host ({} and {} here)", L, h.size());
      return e;
    }
  }
  const std::size_t es = s.elementSize();
  const std::size_t H = hosts.size();
  const double S = static_cast<double>(s.count * es);
  const std::size_t localElems = ceilDiv(s.count, L);
  CostTerms t;
  if (L == 1) {
    t = ctx.gammaMax(S);
  } else {  // ring reduce-scatter inside every host at once
    t = ctx.ringsPhase(hosts, static_cast<double>(localElems * es), static_cast<int>(L) - 1, static_cast<int>(L) - 1);
  }
  if (H > 1) {  // one ring all-reduce across hosts per local index, all at once
    std::vector<std::vector<int>> rings(L);
    for (std::size_t i = 0; i < L; ++i) {
      for (const auto& h : hosts) rings[i].push_back(h[i]);
    }
    const double block = static_cast<double>(ceilDiv(localElems, H) * es);
    t += ctx.ringsPhase(rings, block, 2 * static_cast<int>(H - 1), static_cast<int>(H) - 1);
  }
  if (L > 1) t += ctx.ringsPhase(hosts, static_cast<double>(localElems * es), static_cast<int>(L) - 1, 0);
  e.terms = t;
  return e;
}

/// A ring inside every host and one across hosts per local index: each rank exchanges 2(L-1 + H-1) times.
std::size_t hierarchicalTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  if (p.rankHost.size() != n) return n * n;
  const std::size_t hosts = static_cast<std::size_t>(*std::max_element(p.rankHost.begin(), p.rankHost.end())) + 1;
  return 2 * n * (n / hosts - 1 + hosts - 1);
}

}  // namespace

AlgorithmInfo hierarchicalAlgorithm() {
  return {
      .name = "hierarchical",
      .collective = Collective::AllReduce,
      .summary = "ring reduce-scatter in each host, ring all-reduce across hosts, all-gather",
      .build = hierarchicalAllReduce,
      .cost = hierarchicalCost,
      .traits = {
          .needsHosts = true, .defaultModel = false, .simHierarchicalModel = true, .transfers = hierarchicalTransfers}};
}

}  // namespace collbench::algo
