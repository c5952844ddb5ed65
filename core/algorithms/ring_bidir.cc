// Bidirectional ring all-reduce: two counter-rotating rings per channel, each a ring reduce-scatter + all-gather of
// half of the channel's data, the second around the ring order reversed. Every rank sends to both neighbours at once,
// so rings of full-duplex links (ring and torus topologies) carry data both ways, as NCCL's NVLS-less rings do not.
#include <algorithm>

#include "ring.h"

namespace collbench::algo {
namespace {

/// Two sub-channels per channel: 2c carries the first half of channel c's data, 2c+1 the second.
AlgoParams halves(const AlgoParams& p) {
  AlgoParams h = p;
  h.channels = 2 * p.channels;
  return h;
}

/// Sub-channel `sub` runs around ringOrder(n, p, sub / 2), reversed for odd `sub`.
std::vector<int> subRing(int n, const AlgoParams& p, int sub) {
  std::vector<int> ring = ringOrder(n, p, sub / 2);
  if (sub % 2 == 1) std::reverse(ring.begin(), ring.end());
  return ring;
}

Schedule ringBidirAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring_bidir", params);
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  for (const Piece& piece : pieces(spec.count, b.elemSize(), halves(params), static_cast<std::size_t>(n))) {
    ringAllReducePiece(b, piece, subRing(n, params, piece.channel));
  }
  return b.finish();
}

/// The ring's all-reduce over both rings of every channel at once (their flows share the links).
Estimate ringBidirCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  if (ctx.n == 1) return estimateOf(ctx.gammaCost(static_cast<double>(s.count * s.elementSize()), 0));
  const AlgoParams h = halves(p);
  CostContext::ChannelRings rings;
  rings.channels =
      static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(h.channels), s.count)));
  for (int sub = 0; sub < rings.channels; ++sub) rings.add(subRing(ctx.n, p, sub));
  return estimateOf(ringAllReduceTerms(ctx, s, h, rings));
}

std::size_t ringBidirTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  return ringTransfers(spec, halves(p));
}

}  // namespace

AlgorithmInfo ringBidirAllReduceAlgorithm() {
  // Off the default model: on the default flat switch it costs what the ring on twice the channels costs.
  return {
      .name = "ring_bidir",
      .collective = Collective::AllReduce,
      .summary = "two counter-rotating rings, each reduce-scatter + all-gather of half",
      .build = ringBidirAllReduce,
      .cost = ringBidirCost,
      .traits = {.usesChunkBytes = true, .usesChannels = true, .defaultModel = false, .transfers = ringBidirTransfers}};
}

}  // namespace collbench::algo
