// Ring algorithms (NCCL/Baidu ring): all-reduce = reduce-scatter then all-gather around the ring r -> r+1, and the
// reduce-scatter and all-gather halves on their own. Data is split across channels, then into pipeline rounds
// of n blocks (chunk_bytes per block; 0 = one round), each round a complete ring on its channel.
#include "ring.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace collbench::algo {

std::vector<Piece> pieces(std::size_t elems, std::size_t elemSize, const AlgoParams& p, std::size_t blocksPerRound) {
  std::vector<Piece> out;
  const Partition byChannel{elems, static_cast<std::size_t>(p.channels)};
  for (int c = 0; c < p.channels; ++c) {
    const std::size_t sliceOff = byChannel.offset(static_cast<std::size_t>(c));
    const std::size_t sliceLen = byChannel.size(static_cast<std::size_t>(c));
    std::size_t rounds = 1;
    if (p.chunkBytes != 0 && sliceLen != 0) {
      const std::size_t perRound = std::max<std::size_t>(1, p.chunkBytes / elemSize) * blocksPerRound;
      rounds = (sliceLen + perRound - 1) / perRound;
    }
    const Partition byRound{sliceLen, rounds};
    for (std::size_t k = 0; k < rounds; ++k) {
      out.push_back(Piece{sliceOff + byRound.offset(k), byRound.size(k), c});
    }
  }
  return out;
}

}  // namespace collbench::algo

namespace collbench {

std::vector<std::vector<int>> groupByHost(const std::vector<int>& rankHost) {
  std::map<int, std::vector<int>> byHost;
  for (std::size_t r = 0; r < rankHost.size(); ++r) byHost[rankHost[r]].push_back(static_cast<int>(r));
  std::vector<std::vector<int>> hosts;
  for (auto& [h, ranks] : byHost) hosts.push_back(std::move(ranks));
  return hosts;
}

std::vector<int> ringOrder(int nranks, const AlgoParams& params, int channel) {
  std::vector<int> order(static_cast<std::size_t>(std::max(nranks, 0)));
  std::iota(order.begin(), order.end(), 0);
  if (params.rankHost.size() != order.size()) return order;
  // Hosts in order of their first rank; ranks of a host in rank order.
  std::vector<std::vector<int>> hosts;
  std::map<int, std::size_t> index;
  for (int r = 0; r < nranks; ++r) {
    const auto [it, added] = index.emplace(params.rankHost[static_cast<std::size_t>(r)], hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  if (hosts.size() < 2) return order;
  order.clear();
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    const auto& local = hosts[h];
    const long size = static_cast<long>(local.size());
    const long first = ((channel - static_cast<long>(h)) % size + size) % size;
    for (long i = 0; i < size; ++i) order.push_back(local[static_cast<std::size_t>((first + i) % size)]);
  }
  return order;
}

}  // namespace collbench

namespace collbench::algo {

void ringAllReducePiece(ScheduleBuilder& b, const Piece& piece, const std::vector<int>& ring) {
  const int n = b.nranks();
  const auto nu = static_cast<std::size_t>(n);
  const Partition blocks{piece.length, nu};
  auto at = [&](int block) { return piece.offset + blocks.offset(static_cast<std::size_t>(block)); };
  auto len = [&](int block) { return blocks.size(static_cast<std::size_t>(block)); };
  // Blocks are numbered by ring position (any numbering is an all-reduce); q is the position of rank `me`.
  for (int q = 0; q < n; ++q) {
    const int me = ring[static_cast<std::size_t>(q)];
    const int next = ring[static_cast<std::size_t>(mod(q + 1, n))],
              prev = ring[static_cast<std::size_t>(mod(q - 1, n))];
    std::vector<OpId> rsSend(nu);
    OpId reduced = kNoOp;
    // Reduce-scatter: at step s send block q-s, fold block q-s-1 arriving from prev.
    for (int s = 0; s < n - 1; ++s) {
      const int sb = mod(q - s, n);
      rsSend[static_cast<std::size_t>(s)] =
          b.send(me, next, s == 0 ? in(at(sb)) : out(at(sb)), len(sb), {reduced}, piece.channel);
      const int rb = mod(q - s - 1, n);
      reduced = b.recvReduce(me, prev, in(at(rb)), out(at(rb)), len(rb), {}, piece.channel);
    }
    // All-gather: block q+1 is complete here; pass blocks on, receiving block q-t.
    OpId received = reduced;
    for (int t = 0; t < n - 1; ++t) {
      const int sb = mod(q + 1 - t, n);
      b.send(me, next, out(at(sb)), len(sb), {received}, piece.channel);
      const int rb = mod(q - t, n);
      // rsSend[t] read block q-t (from the input, which may alias the output) before it is overwritten.
      received = b.recv(me, prev, out(at(rb)), len(rb), {rsSend[static_cast<std::size_t>(t)]}, piece.channel);
    }
  }
}

Schedule ringAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring", params);
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  for (const Piece& piece : pieces(spec.count, b.elemSize(), params, static_cast<std::size_t>(n))) {
    ringAllReducePiece(b, piece, ringOrder(n, params, piece.channel));
  }
  return b.finish();
}

Schedule ringReduceScatter(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring", params);
  const int n = spec.nranks;
  const std::size_t count = spec.count;  // elements each rank receives; input block j goes to rank j
  if (n == 1) {
    b.copy(0, in(0), out(0), count, {});
    return b.finish();
  }
  for (const Piece& piece : pieces(count, b.elemSize(), params, 1)) {
    const std::size_t o = piece.offset, len = piece.length;
    // Block j belongs to rank j wherever that rank sits on the ring; q is the position of rank `me`.
    const std::vector<int> ring = ringOrder(n, params, piece.channel);
    auto at = [&](int pos) { return ring[static_cast<std::size_t>(mod(pos, n))]; };
    for (int q = 0; q < n; ++q) {
      const int me = at(q), next = at(q + 1), prev = at(q - 1);
      // Partial sums travel in two alternating scratch slots per piece; the last step lands in the output.
      auto slot = [&](int s) { return scratch(2 * o + static_cast<std::size_t>(s % 2) * len); };
      b.needScratch(me, 2 * (o + len));
      OpId reduced = kNoOp, lastSend = kNoOp;
      BufRef partial{};
      for (int s = 0; s < n - 1; ++s) {
        const int sb = at(q - s - 1);
        const BufRef src = s == 0 ? in(static_cast<std::size_t>(sb) * count + o) : partial;
        const OpId sent = b.send(me, next, src, len, {reduced}, piece.channel);
        const int rb = at(q - s - 2);
        const BufRef dst = s == n - 2 ? out(o) : slot(s);
        // The slot written now was read by the previous step's send.
        reduced =
            b.recvReduce(me, prev, in(static_cast<std::size_t>(rb) * count + o), dst, len, {lastSend}, piece.channel);
        lastSend = sent;
        partial = dst;
      }
    }
  }
  return b.finish();
}

Schedule ringAllGather(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring", params);
  const int n = spec.nranks;
  const std::size_t count = spec.count;  // elements each rank contributes
  for (const Piece& piece : pieces(count, b.elemSize(), params, 1)) {
    const std::size_t o = piece.offset, len = piece.length;
    const std::vector<int> ring = ringOrder(n, params, piece.channel);
    auto at = [&](int pos) { return ring[static_cast<std::size_t>(mod(pos, n))]; };
    for (int q = 0; q < n; ++q) {
      const int me = at(q), next = at(q + 1), prev = at(q - 1);
      b.copy(me, in(o), out(static_cast<std::size_t>(me) * count + o), len, {});
      OpId received = kNoOp;
      for (int t = 0; t < n - 1; ++t) {
        const int sb = at(q - t);
        const BufRef src = t == 0 ? in(o) : out(static_cast<std::size_t>(sb) * count + o);
        b.send(me, next, src, len, {received}, piece.channel);
        const int rb = at(q - t - 1);
        received = b.recv(me, prev, out(static_cast<std::size_t>(rb) * count + o), len, {}, piece.channel);
      }
    }
  }
  return b.finish();
}

std::size_t ringTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t perRoundBlocks = spec.kind == Collective::AllReduce ? n : 1;
  const std::size_t rounds = pieces(spec.count, spec.elementSize(), p, perRoundBlocks).size();
  return rounds * n * (spec.kind == Collective::AllReduce ? 2 * (n - 1) : n - 1);
}

CostTerms ringAllReduceTerms(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p,
                             const CostContext::ChannelRings& rings) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  const CostContext::RingPieces pc = CostContext::ringPieces(s.count, es, p, static_cast<std::size_t>(n));
  const double block = static_cast<double>(ceilDiv(pc.pieceElems, static_cast<std::size_t>(n)) * es);
  return ctx.ringsPhase(rings.rings, rings.mult, block, rings.channels, 2 * (n - 1), n - 1, pc.rounds);
}

namespace {

Estimate ringAllReduceCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  if (ctx.n == 1) return estimateOf(ctx.gammaCost(static_cast<double>(s.count * s.elementSize()), 0));
  return estimateOf(ringAllReduceTerms(ctx, s, p, ctx.channelRings(p, s.count)));
}

Estimate ringReduceScatterCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  if (n == 1) return estimateOf(ctx.gammaCost(static_cast<double>(s.count * es), 0));
  const CostContext::RingPieces pc = CostContext::ringPieces(s.count, es, p, 1);
  const CostContext::ChannelRings cr = ctx.channelRings(p, s.count);
  return estimateOf(ctx.ringsPhase(cr.rings, cr.mult, static_cast<double>(pc.pieceElems * es), cr.channels, n - 1,
                                   n - 1, pc.rounds, /*recvWaitsSend=*/true));
}

Estimate ringAllGatherCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  const CostTerms copy = ctx.gammaMax(static_cast<double>(s.count * es));  // own block in -> out, beside the ring
  if (n == 1) return estimateOf(copy);
  const CostContext::RingPieces pc = CostContext::ringPieces(s.count, es, p, 1);
  const CostContext::ChannelRings cr = ctx.channelRings(p, s.count);
  return estimateOf(CostTerms::max(
      ctx.ringsPhase(cr.rings, cr.mult, static_cast<double>(pc.pieceElems * es), cr.channels, n - 1, 0, pc.rounds),
      copy));
}

}  // namespace

AlgorithmInfo ringAllReduceAlgorithm() {
  return {.name = "ring",
          .collective = Collective::AllReduce,
          .summary = "ring reduce-scatter + all-gather, 2(n-1) steps, bandwidth optimal",
          .build = ringAllReduce,
          .cost = ringAllReduceCost,
          .traits = {.usesChunkBytes = true, .usesChannels = true, .simRingModel = true, .transfers = ringTransfers}};
}

AlgorithmInfo ringReduceScatterAlgorithm() {
  return {.name = "ring",
          .collective = Collective::ReduceScatter,
          .summary = "ring reduce-scatter, n-1 steps",
          .build = ringReduceScatter,
          .cost = ringReduceScatterCost,
          .traits = {.usesChunkBytes = true, .usesChannels = true, .transfers = ringTransfers}};
}

AlgorithmInfo ringAllGatherAlgorithm() {
  return {.name = "ring",
          .collective = Collective::AllGather,
          .summary = "ring all-gather, n-1 steps",
          .build = ringAllGather,
          .cost = ringAllGatherCost,
          .traits = {.usesChunkBytes = true, .usesChannels = true, .transfers = ringTransfers}};
}

}  // namespace collbench::algo
