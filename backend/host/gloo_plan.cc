// A schedule as this rank's plan: logical times, stream indices and data slots, staging arenas, and the Gloo
// unbound buffers of every piece and header.
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

std::uint64_t dataSlot(std::uint64_t seq, int channel, std::size_t index, std::size_t piece) {
  const std::uint64_t seqPart = seq & ((std::uint64_t{1} << kSeqBits) - 1);
  return kDataSlotBit | (seqPart << (kChannelBits + kIndexBits + kPieceBits)) |
         (static_cast<std::uint64_t>(channel) << (kIndexBits + kPieceBits)) |
         (static_cast<std::uint64_t>(index) << kPieceBits) | piece;
}

/// Logical completion round of every op of `rank` in a lockstep run of the whole schedule: local ops finish one
/// round after their deps, a matched pair in the round after both sides' deps.
std::vector<int> logicalTimes(const Schedule& s, const Matching& m, int rank) {
  const int n = s.spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  std::vector<std::vector<int>> time(nu), readyAt(nu);
  std::vector<OpGraph> graphs;
  std::vector<ReadyOps> ready;
  graphs.reserve(nu);  // ReadyOps point into graphs
  ready.reserve(nu);
  for (std::size_t r = 0; r < nu; ++r) {
    const auto& ops = s.ranks[r].ops;
    time[r].assign(ops.size(), -1);
    readyAt[r].assign(ops.size(), -1);
    graphs.emplace_back(ops);
    ready.emplace_back(graphs.back());
  }
  auto finish = [&](int r, int i, int t) {
    time[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = t;
    ready[static_cast<std::size_t>(r)].complete(i);
  };
  // Any order of visiting ready ops gives the same times: an op's time depends only on its deps' and partner's.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      while (ready[ru].any()) {
        progress = true;
        const int i = ready[ru].pop();
        const Op& op = s.ranks[ru].ops[static_cast<std::size_t>(i)];
        int at = 0;
        for (int d : op.deps) at = std::max(at, time[ru][static_cast<std::size_t>(d)] + 1);
        if (!op.isComm()) {
          finish(r, i, at);
          continue;
        }
        readyAt[ru][static_cast<std::size_t>(i)] = at;
        const Match& mt = m.matches[static_cast<std::size_t>(m.opMatch[ru][static_cast<std::size_t>(i)])];
        const int pr = mt.srcRank == r && mt.srcOp == i ? mt.dstRank : mt.srcRank;
        const int pi = mt.srcRank == r && mt.srcOp == i ? mt.dstOp : mt.srcOp;
        const int partnerReady = readyAt[static_cast<std::size_t>(pr)][static_cast<std::size_t>(pi)];
        if (partnerReady < 0) continue;  // the partner finishes both when its deps are done
        const int t = std::max(at, partnerReady);
        finish(r, i, t);
        finish(pr, pi, t);
      }
    }
  }
  const auto& mine = time[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] < 0) {
      throw Error(Errc::InvalidSchedule,
                  fmt::format("schedule '{}' cannot complete: rank {} op {} never becomes ready", s.algorithm, rank, i),
                  rank);
    }
  }
  return mine;
}

std::byte* GlooBackend::resolve(const RunPlan& p, const BufRef& ref) const {
  switch (ref.buffer) {
    case BufferKind::Input:
      return p.input + ref.offset;
    case BufferKind::Output:
      return p.output + ref.offset;
    case BufferKind::Scratch:
      return p.scratch + ref.offset;
  }
  return nullptr;
}

std::unique_ptr<RunPlan> GlooBackend::makePlan(const Schedule& s, const RankBuffers& b, bool headers, bool ownMemory,
                                               bool allNeighbours) {
  auto plan = std::make_unique<RunPlan>();
  RunPlan& p = *plan;
  const auto ru = static_cast<std::size_t>(rank_);
  const auto n = static_cast<std::size_t>(world_.world);
  p.schedule = &s;
  p.ops = &s.ranks[ru].ops;
  p.headers = headers;
  p.elemSize = s.spec.kind == Collective::Barrier ? 1 : dtypeSize(s.spec.dtype);
  const auto& ops = *p.ops;
  const std::size_t nops = ops.size();
  const Matching m = matchSchedule(s);
  const std::vector<int> times = world_.world > 1 ? logicalTimes(s, m, rank_) : std::vector<int>(nops, 0);
  p.graph = OpGraph(ops);  // ReadyOps hands out roots in program order: transfers are posted in that order
  p.input = static_cast<std::byte*>(const_cast<void*>(b.input));
  p.output = static_cast<std::byte*>(b.output);
  std::vector<std::byte>& scratch = ownMemory ? p.ownScratch : scratch_;
  if (scratch.size() < s.ranks[ru].scratchBytes) scratch.resize(s.ranks[ru].scratchBytes);
  p.scratch = scratch.data();
  p.resultBytes = s.needsAvgScale() ? s.resultBytes(rank_) : 0;

  // Stream indices, staging, pieces.
  std::map<std::tuple<int, int, bool>, std::size_t> streams;  // (peer, channel, isSend) -> next index
  std::vector<char> isNeighbour(n, allNeighbours ? 1 : 0);
  isNeighbour[ru] = 0;
  std::size_t stagingBytes = 0;
  p.op.resize(nops);
  for (std::size_t i = 0; i < nops; ++i) {
    const Op& op = ops[i];
    OpPlan& o = p.op[i];
    o.time = times[i];
    if (!op.isComm()) continue;
    if (op.channel < 0 || op.channel >= (1 << kChannelBits)) {
      throw Error(Errc::Unsupported, fmt::format("gloo backend: channel {} of rank {} op {} exceeds {}", op.channel,
                                                 rank_, i, (1 << kChannelBits) - 1));
    }
    o.streamIndex = streams[{op.peer, op.channel, op.kind == OpKind::Send}]++;
    if (o.streamIndex >= (std::size_t{1} << kIndexBits)) {
      throw Error(Errc::Unsupported, fmt::format("gloo backend: more than {} transfers between two ranks on one "
                                                 "channel",
                                                 std::size_t{1} << kIndexBits));
    }
    isNeighbour[static_cast<std::size_t>(op.peer)] = 1;
    o.staged = op.kind == OpKind::RecvReduce || (op.kind == OpKind::Recv && op.bytes <= kStagedRecvMaxBytes);
    if (o.staged) {
      o.stagingOffset = stagingBytes;
      stagingBytes += (op.bytes + 63) & ~std::size_t{63};
    }
  }
  // Neighbours are symmetric (a rank that only receives from us still exchanges headers with us), computed from
  // the whole schedule so that both sides agree.
  for (std::size_t r = 0; r < n; ++r) {
    if (r == ru) continue;
    for (const Op& op : s.ranks[r].ops) {
      if (op.isComm() && op.peer == rank_) {
        isNeighbour[r] = 1;
        break;
      }
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (isNeighbour[r]) p.neighbours.push_back(static_cast<int>(r));
  }
  p.doubled = headers && stagingBytes <= kDoubleStagingMaxBytes;
  const std::size_t arenas = p.doubled ? 2 : 1;
  std::vector<std::byte>& staging = ownMemory ? p.ownStaging : staging_;
  if (staging.size() < stagingBytes * arenas) {
    staging = std::vector<std::byte>();  // free first: the old and new arena need not coexist
    staging.resize(stagingBytes * arenas);
  }
  p.staging = staging.data();
  p.arenaBytes = stagingBytes;
  static std::byte dummy[1];
  for (std::size_t i = 0; i < nops; ++i) {
    const Op& op = ops[i];
    if (!op.isComm()) continue;
    OpPlan& o = p.op[i];
    const std::size_t elems = op.bytes / p.elemSize;
    const std::size_t pieces = op.bytes == 0
                                   ? 1
                                   : std::clamp<std::size_t>((op.bytes + kWirePieceBytes - 1) / kWirePieceBytes, 1,
                                                             std::min(kMaxPieces, std::max<std::size_t>(1, elems)));
    const std::size_t perPiece = (elems + pieces - 1) / pieces * p.elemSize;
    for (std::size_t arena = 0; arena < (o.staged ? arenas : 1); ++arena) {
      std::byte* base = o.staged                  ? p.staging + arena * stagingBytes + o.stagingOffset
                        : op.kind == OpKind::Send ? resolve(p, op.src)
                                                  : resolve(p, op.dst);
      for (std::size_t k = 0, off = 0; k < pieces; ++k) {
        const std::size_t len = k + 1 == pieces ? op.bytes - off : std::min(perPiece, op.bytes - off);
        Piece pc;
        pc.offset = off;
        pc.bytes = len;
        pc.buf = context_->createUnboundBuffer(len ? base + off : dummy, std::max<std::size_t>(len, 1));
        o.pieces[arena].push_back(std::move(pc));
        off += len;
      }
    }
  }
  if (headers) {
    p.fingerprint = scheduleFingerprint(s);
    for (std::size_t arena = 0; arena < arenas; ++arena) {
      HeaderSet& h = p.header[arena];
      h.in.resize(n);
      h.send.resize(n);
      h.recv.resize(n);
      for (int q : p.neighbours) {
        const auto qu = static_cast<std::size_t>(q);
        h.send[qu] = context_->createUnboundBuffer(h.out.data(), h.out.size());
        h.recv[qu] = context_->createUnboundBuffer(h.in[qu].data(), h.in[qu].size());
      }
    }
  }
  return plan;
}

}  // namespace collbench::host::gloo_impl
