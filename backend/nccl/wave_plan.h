#pragma once
/// Dependency "waves" of a Schedule, the form in which the GPU executors issue it (no CUDA in here, so it is tested
/// on machines without a device).
///
/// A wave is every op whose deps completed in earlier waves, except comm ops whose partner is not ready yet: a
/// matched (send, receive) pair joins a wave only when both of its sides are ready, which is the schedule's
/// rendezvous rule. Each rank issues its comm ops of a wave sorted by global match id, so the k-th ncclSend from A
/// to B in a group meets the k-th ncclRecv from A on B (NCCL pairs p2p calls per peer in issue order; the schedule
/// pairs per (src, dst, channel), and sorting by match id makes the two agree).
#include <cstddef>
#include <vector>

#include "collbench/schedule.h"

namespace collbench::nccl {

/// Staging offsets are rounded up to this, so that every staging range starts 16-byte aligned for the vectorised
/// reduce kernel; 256 is cudaMalloc's own alignment guarantee, kept for symmetry with the user buffers.
inline constexpr std::size_t kStagingAlignBytes = 256;

struct RankWave {
  std::vector<int> comm;   ///< Send/Recv/RecvReduce op indices, sorted by match id
  std::vector<int> local;  ///< Copy/Reduce op indices
  bool empty() const { return comm.empty() && local.empty(); }
};

struct Wave {
  std::vector<RankWave> ranks;  ///< one per rank of the schedule
};

struct WavePlan {
  std::vector<Wave> waves;
  Matching matching;
  /// [rank][op]: where a RecvReduce receives its incoming bytes in the rank's staging buffer before the reduce
  /// kernel combines them (the NCCL executor; the single-GPU executor reduces straight from the sender). Ranges of
  /// one wave are disjoint; later waves reuse them (stream order puts the reduce before the next wave's receive).
  std::vector<std::vector<std::size_t>> stagingOffset;
  std::vector<std::size_t> stagingBytes;  ///< per rank
  std::size_t commOps = 0, localOps = 0;  ///< totals over all ranks (for logs and tests)
};

/// Builds the waves. Throws Error{InvalidSchedule} (from matchSchedule, or naming the blocked rank, op and peer when
/// no wave can make progress: a deadlock under rendezvous semantics).
WavePlan planWaves(const Schedule& s);

}  // namespace collbench::nccl
