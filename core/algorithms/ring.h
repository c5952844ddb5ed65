#pragma once
// The ring's building blocks, shared by the ring algorithms (ring.cc) and their variants (ring_bidir.cc): the
// schedule of one ring instance, the transfer count, and the cost model's ring all-reduce.
#include <cstddef>
#include <vector>

#include "builder.h"
#include "generators.h"
#include "models/cost_context.h"

namespace collbench::algo {

/// A contiguous element range of every block that one ring instance (channel c, round k) handles.
struct Piece {
  std::size_t offset;
  std::size_t length;
  int channel;
};

/// Pieces of [0, elems): split across p.channels, then into rounds of at most chunk elements (per block).
std::vector<Piece> pieces(std::size_t elems, std::size_t elemSize, const AlgoParams& p, std::size_t blocksPerRound);

/// Ring reduce-scatter then all-gather of `piece` around `ring` (position -> rank, transfers from q to q+1) on the
/// piece's channel: 2(n-1) steps of one block of piece.length / n elements each (n = b.nranks() >= 2).
void ringAllReducePiece(ScheduleBuilder& b, const Piece& piece, const std::vector<int>& ring);

/// Transfers of the ring schedules for `spec` with p.channels channels: 2(n-1) (all-reduce) or n-1 steps per rank
/// for every piece.
std::size_t ringTransfers(const CollectiveSpec& spec, const AlgoParams& p);

/// The cost model's ring all-reduce of `spec` in pieces(p) over `rings` (the rings of the data-carrying channels).
CostTerms ringAllReduceTerms(const CostContext& ctx, const CollectiveSpec& spec, const AlgoParams& p,
                             const CostContext::ChannelRings& rings);

}  // namespace collbench::algo
