// Ring algorithms (NCCL/Baidu ring): all-reduce = reduce-scatter then all-gather around the ring r -> r+1, and the
// reduce-scatter and all-gather halves on their own. Data is split across channels, then into pipeline rounds
// of n blocks (chunk_bytes per block; 0 = one round), each round a complete ring on its channel.
#include <algorithm>

#include "builder.h"
#include "generators.h"

namespace collbench::algo {
namespace {

/// A contiguous element range of every block that one ring instance (channel c, round k) handles.
struct Piece {
  std::size_t offset;
  std::size_t length;
  int channel;
};

/// Pieces of [0, elems): split across channels, then into rounds of at most chunk elements (per block).
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

}  // namespace

Schedule ringAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring");
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  const auto nu = static_cast<std::size_t>(n);
  for (const Piece& piece : pieces(spec.count, b.elemSize(), params, nu)) {
    const Partition blocks{piece.length, nu};
    auto at = [&](int block) { return piece.offset + blocks.offset(static_cast<std::size_t>(block)); };
    auto len = [&](int block) { return blocks.size(static_cast<std::size_t>(block)); };
    for (int r = 0; r < n; ++r) {
      const int next = mod(r + 1, n), prev = mod(r - 1, n);
      std::vector<OpId> rsSend(nu);
      OpId reduced = kNoOp;
      // Reduce-scatter: at step s send block r-s, fold block r-s-1 arriving from prev.
      for (int s = 0; s < n - 1; ++s) {
        const int sb = mod(r - s, n);
        rsSend[static_cast<std::size_t>(s)] =
            b.send(r, next, s == 0 ? in(at(sb)) : out(at(sb)), len(sb), {reduced}, piece.channel);
        const int rb = mod(r - s - 1, n);
        reduced = b.recvReduce(r, prev, in(at(rb)), out(at(rb)), len(rb), {}, piece.channel);
      }
      // All-gather: block r+1 is complete here; pass blocks on, receiving block r-t.
      OpId received = reduced;
      for (int t = 0; t < n - 1; ++t) {
        const int sb = mod(r + 1 - t, n);
        b.send(r, next, out(at(sb)), len(sb), {received}, piece.channel);
        const int rb = mod(r - t, n);
        // rsSend[t] read block r-t (from the input, which may alias the output) before it is overwritten.
        received = b.recv(r, prev, out(at(rb)), len(rb), {rsSend[static_cast<std::size_t>(t)]}, piece.channel);
      }
    }
  }
  return b.finish();
}

Schedule ringReduceScatter(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring");
  const int n = spec.nranks;
  const std::size_t count = spec.count;  // elements each rank receives; input block j goes to rank j
  if (n == 1) {
    b.copy(0, in(0), out(0), count, {});
    return b.finish();
  }
  for (const Piece& piece : pieces(count, b.elemSize(), params, 1)) {
    const std::size_t o = piece.offset, len = piece.length;
    for (int r = 0; r < n; ++r) {
      const int next = mod(r + 1, n), prev = mod(r - 1, n);
      // Partial sums travel in two alternating scratch slots per piece; the last step lands in the output.
      auto slot = [&](int s) { return scratch(2 * o + static_cast<std::size_t>(s % 2) * len); };
      b.needScratch(r, 2 * (o + len));
      OpId reduced = kNoOp, lastSend = kNoOp;
      BufRef partial{};
      for (int s = 0; s < n - 1; ++s) {
        const int sb = mod(r - s - 1, n);
        const BufRef src = s == 0 ? in(static_cast<std::size_t>(sb) * count + o) : partial;
        const OpId sent = b.send(r, next, src, len, {reduced}, piece.channel);
        const int rb = mod(r - s - 2, n);
        const BufRef dst = s == n - 2 ? out(o) : slot(s);
        // The slot written now was read by the previous step's send.
        reduced = b.recvReduce(r, prev, in(static_cast<std::size_t>(rb) * count + o), dst, len, {lastSend},
                               piece.channel);
        lastSend = sent;
        partial = dst;
      }
    }
  }
  return b.finish();
}

Schedule ringAllGather(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "ring");
  const int n = spec.nranks;
  const std::size_t count = spec.count;  // elements each rank contributes
  for (const Piece& piece : pieces(count, b.elemSize(), params, 1)) {
    const std::size_t o = piece.offset, len = piece.length;
    for (int r = 0; r < n; ++r) {
      const int next = mod(r + 1, n), prev = mod(r - 1, n);
      b.copy(r, in(o), out(static_cast<std::size_t>(r) * count + o), len, {});
      OpId received = kNoOp;
      for (int t = 0; t < n - 1; ++t) {
        const int sb = mod(r - t, n);
        const BufRef src = t == 0 ? in(o) : out(static_cast<std::size_t>(sb) * count + o);
        b.send(r, next, src, len, {received}, piece.channel);
        const int rb = mod(r - t - 1, n);
        received = b.recv(r, prev, out(static_cast<std::size_t>(rb) * count + o), len, {}, piece.channel);
      }
    }
  }
  return b.finish();
}

}  // namespace collbench::algo
