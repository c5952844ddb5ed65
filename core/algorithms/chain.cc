// Pipelined chains for broadcast (root -> root+1 -> ... -> root-1) and reduce (root+1 -> ... -> root), as NCCL
// runs broadcast and reduce over its ring: the data moves in chunks so that every link is busy at once.
#include <algorithm>

#include "builder.h"
#include "generators.h"
#include "models/cost_context.h"

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
  ScheduleBuilder b(spec, "ring", params);
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
  ScheduleBuilder b(spec, "ring", params);
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

Schedule disseminationBarrier(const CollectiveSpec& spec, const AlgoParams& params) {
  // Hensgen, Finkel, Manber 1988: in round k every rank signals rank + 2^k; after ceil(log2 n) rounds each rank
  // has heard, transitively, from all others.
  ScheduleBuilder b(spec, "dissemination", params, /*keepEmptyOps=*/true);
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

namespace {

/// Pipelined chain of broadcast (`reduce` false) or reduce.
CostTerms chainTerms(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p, bool reduce) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  const double S = static_cast<double>(s.count * es);
  if (n == 1) return ctx.gammaCost(S, 0);
  const std::size_t slice = ceilDiv(s.count, static_cast<std::size_t>(p.channels));
  const std::size_t k = pipelineChunks(slice, es, p.chunkBytes, kDefaultPipelineChunkBytes);
  const double C = static_cast<double>(ceilDiv(slice, k) * es);
  const int mult = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(p.channels), s.count));
  // Broadcast: root -> root+1 -> ... -> root-1. Reduce: root+1 -> ... -> root, each receiver folding.
  std::vector<CostContext::Flow> hops;
  std::vector<int> receivers;
  for (int h = 0; h < n - 1; ++h) {
    const int from = reduce ? (s.root + 1 + h) % n : (s.root + h) % n;
    hops.push_back({from, (from + 1) % n, C, mult});
    receivers.push_back((from + 1) % n);
  }
  const std::vector<CostTerms> x = ctx.phase(hops);
  CostTerms fillT, period;
  for (std::size_t h = 0; h < x.size(); ++h) {
    const CostTerms g = reduce ? ctx.gammaCost(C * mult, receivers[h]) : CostTerms{};
    fillT += x[h] + g;
    period = CostTerms::max(period, CostTerms::max(x[h], g));
  }
  CostTerms t = fillT + period * static_cast<double>(k - 1);
  if (!reduce) t = CostTerms::max(t, ctx.gammaCost(S, s.root));  // the root's own copy runs beside the chain
  return t;
}

Estimate chainBroadcastCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  return estimateOf(chainTerms(ctx, s, p, false));
}

Estimate chainReduceCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  return estimateOf(chainTerms(ctx, s, p, true));
}

Estimate disseminationCost(const CostContext& ctx, const CollectiveSpec&, const AlgoParams&) {
  const int n = ctx.n;
  CostTerms t;
  for (int d = 1; d < n; d *= 2) {
    std::vector<CostContext::Flow> flows;
    for (int r = 0; r < n; ++r) flows.push_back({r, (r + d) % n, 0});
    t += ctx.phaseMax(flows, /*keepEmpty=*/true);
  }
  return estimateOf(t);
}

/// Every chunk of every channel crosses the n-1 hops of the chain.
std::size_t chainTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  return pipelineTransfers(spec, p, 1, static_cast<std::size_t>(spec.nranks) - 1);
}

/// ceil(log2 n) rounds of one message per rank.
std::size_t disseminationTransfers(const CollectiveSpec& spec, const AlgoParams&) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  return n * ceilLog2(n);
}

}  // namespace

AlgorithmInfo chainBroadcastAlgorithm() {
  return {.name = "ring",
          .collective = Collective::Broadcast,
          .summary = "pipelined chain from the root around the ring",
          .build = chainBroadcast,
          .cost = chainBroadcastCost,
          .traits = {.pipelineSlices = 1, .usesChunkBytes = true, .usesChannels = true, .transfers = chainTransfers}};
}

AlgorithmInfo chainReduceAlgorithm() {
  return {.name = "ring",
          .collective = Collective::Reduce,
          .summary = "pipelined chain around the ring ending at the root",
          .build = chainReduce,
          .cost = chainReduceCost,
          .traits = {.pipelineSlices = 1, .usesChunkBytes = true, .usesChannels = true, .transfers = chainTransfers}};
}

AlgorithmInfo disseminationBarrierAlgorithm() {
  return {.name = "dissemination",
          .collective = Collective::Barrier,
          .summary = "ceil(log2 n) rounds of zero-byte messages",
          .build = disseminationBarrier,
          .cost = disseminationCost,
          .traits = {.transfers = disseminationTransfers}};
}

}  // namespace collbench::algo
