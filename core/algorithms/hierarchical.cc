// Hierarchical all-reduce (as Horovod's and NCCL's two-level schemes): ring reduce-scatter inside each host, ring
// all-reduce across hosts among the ranks with the same local index (one cross-host ring per local index, so all
// NICs/rails carry 1/L of the data at once), then ring all-gather inside each host. Inter-host traffic per rank is
// 2(H-1)/(H L) of the buffer instead of the flat ring's 2(n-1)/n over the slowest link.
#include <fmt/format.h>

#include <map>

#include "builder.h"
#include "collbench/error.h"
#include "generators.h"

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
  std::map<int, std::vector<int>> byHost;
  for (int r = 0; r < n; ++r) byHost[params.rankHost[static_cast<std::size_t>(r)]].push_back(r);
  std::vector<std::vector<int>> hosts;
  for (auto& [h, ranks] : byHost) hosts.push_back(ranks);
  const std::size_t local = hosts.front().size();
  for (const auto& h : hosts) {
    if (h.size() != local) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("hierarchical all-reduce needs the same number of ranks on every host; host of rank {} "
                              "has {}, host of rank {} has {}",
                              hosts.front().front(), local, h.front(), h.size()));
    }
  }
  ScheduleBuilder b(spec, "hierarchical");
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

}  // namespace collbench::algo
