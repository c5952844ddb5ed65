#pragma once
// Helpers shared by the generators: building per-rank op lists with zero-byte ops elided (their dependents inherit
// their deps, so ordering is kept), and even partitions of an element range.
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/schedule.h"

namespace collbench::algo {

/// Handle to an op added through ScheduleBuilder; may stand for no op (elided) or for a set of ops.
using OpId = int;
inline constexpr OpId kNoOp = -1;

class ScheduleBuilder {
 public:
  ScheduleBuilder(const CollectiveSpec& spec, std::string algorithm, bool keepEmptyOps = false);
  /// The schedule also carries what of `params` is schedule-wide data (AlgoParams::protocol).
  ScheduleBuilder(const CollectiveSpec& spec, std::string algorithm, const AlgoParams& params,
                  bool keepEmptyOps = false);

  const CollectiveSpec& spec() const { return schedule_.spec; }
  int nranks() const { return schedule_.spec.nranks; }
  std::size_t elemSize() const { return elemSize_; }

  /// Adds an op on `rank` after the given deps (virtual ids from earlier calls on the same rank; kNoOp ignored).
  /// Byte offsets and sizes are given in elements and converted here.
  OpId send(int rank, int peer, BufRef src, std::size_t elems, std::initializer_list<OpId> deps, int channel = 0);
  OpId recv(int rank, int peer, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps, int channel = 0);
  OpId recvReduce(int rank, int peer, BufRef src, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps,
                  int channel = 0);
  OpId copy(int rank, BufRef src, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps);
  OpId reduce(int rank, BufRef src, BufRef dst, std::size_t elems, std::initializer_list<OpId> deps);
  /// A switch op (OpKind::SwitchReduce or Multicast, schedule.h) of switch group `group` (from switchGroup) with root
  /// `root`; every member adds each.
  OpId switchOp(OpKind kind, int rank, int group, int root, BufRef src, BufRef dst, std::size_t elems,
                std::initializer_list<OpId> deps, int channel = 0);
  /// Adds a switch group of these ranks (ascending); returns its index.
  int switchGroup(std::vector<int> ranks);
  /// An op id standing for all of `ids` (a join point).
  OpId join(int rank, const std::vector<OpId>& ids);

  /// Scratch is sized to the largest byte touched; call with element offsets.
  void needScratch(int rank, std::size_t elems);

  Schedule finish();

 private:
  OpId add(int rank, Op op, std::initializer_list<OpId> deps);
  OpId addVirtual(int rank, std::vector<int> realOps);

  Schedule schedule_;
  std::size_t elemSize_;
  bool keepEmptyOps_;
  // Per rank: virtual id -> real op indices it stands for.
  std::vector<std::vector<std::vector<int>>> virtuals_;
};

/// Element-offset references (converted to bytes by the builder).
inline BufRef in(std::size_t elem) { return {BufferKind::Input, elem}; }
inline BufRef out(std::size_t elem) { return {BufferKind::Output, elem}; }
inline BufRef scratch(std::size_t elem) { return {BufferKind::Scratch, elem}; }

/// Splits [0, total) into `parts` contiguous pieces whose sizes differ by at most one (larger first).
struct Partition {
  std::size_t total;
  std::size_t parts;
  std::size_t offset(std::size_t i) const {
    const std::size_t base = total / parts, rem = total % parts;
    return i * base + (i < rem ? i : rem);
  }
  std::size_t size(std::size_t i) const { return total / parts + (i < total % parts ? 1 : 0); }
};

/// Number of pipeline pieces for `elems` elements of `elemSize` bytes with chunk bytes `chunkBytes` (0 -> default).
std::size_t pipelineChunks(std::size_t elems, std::size_t elemSize, std::size_t chunkBytes,
                           std::size_t defaultChunkBytes);

/// ceil(log2 n); 0 for n <= 1.
std::size_t ceilLog2(std::size_t n);

/// Transfers of a pipeline over `slicesPerChannel` x p.channels slices in chunks (pipelineChunks with
/// kDefaultPipelineChunkBytes) with `transfersPerChunk` transfers per chunk.
std::size_t pipelineTransfers(const CollectiveSpec& spec, const AlgoParams& p, int slicesPerChannel,
                              std::size_t transfersPerChunk);

inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace collbench::algo
