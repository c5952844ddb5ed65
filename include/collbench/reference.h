#pragma once
/// Reference data for checking collectives (nccl-tests' -c): per-element inputs chosen so that every reduction
/// order gives the same, exactly representable result, and the expected outputs computed independently of any
/// schedule.
#include <cstddef>
#include <memory>
#include <vector>

#include "collbench/backend.h"
#include "collbench/types.h"

namespace collbench {

/// Input element `index` of `rank`: as distinct across elements and ranks as exactness allows, so that a block
/// read from or written to the wrong place, or a rank's contribution dropped, doubled or swapped, changes the result.
/// Each (rank, index) has its own position k = index * n + (rank + index) mod n (ranks rotate with the index).
/// - min/max, and data movement (all-gather, broadcast): distinct values by k, no folding: integers k (modulo the
///   dtype's exact range), and for f16/bf16 the k-th of all their finite values (modulo their count, ~64K).
/// - sum/avg: m * 2^e with m a nonzero integer, |m| <= M = (2^(mantissa+1) - 1) / n so that every partial sum is
///   exact in any order, cycling through -M..-1, 1..M with k; e changes with every element (floats: up to 61
///   scales, all sums normal), so the pattern repeats only every lcm(scales, 2M) elements (bf16 at n=17: 1830).
/// - prod: +-2^{-1,0,1} (integers +-{1,2}), signs from a hash of k (no period), at most ceil(n/3) doublings and as
///   many halvings per element, so every partial product is an exact power of two.
double inputValue(const CollectiveSpec& spec, int rank, std::size_t index);
/// Expected value of output element `index` on `rank` (meaningless on non-root ranks of reduce).
double expectedValue(const CollectiveSpec& spec, int rank, std::size_t index);
/// Whether `got` matches `want` for this spec: exact for integers and for sum/prod/min/max (inputs make them
/// exact), within one unit in the last place for float avg (its division rounds).
bool matches(const CollectiveSpec& spec, double got, double want);

/// One rank's side of the above, for a process that holds only its own buffers, a block at a time (scratch of a few
/// MiB): writes inputValue(spec, rank, i) into every input element, and counts the output elements that differ from
/// expectedValue() (0 for barrier and on non-root ranks of reduce).
void fillRankInput(const CollectiveSpec& spec, int rank, void* input);
std::size_t countWrongOnRank(const CollectiveSpec& spec, int rank, const void* output);

/// Frees what allocatePageAligned() returned.
struct FreeBytes {
  void operator()(std::byte* p) const;
};
using PageAlignedBytes = std::unique_ptr<std::byte[], FreeBytes>;

/// `bytes` (at least 1) starting on a 4 KiB page, as cudaMalloc'd buffers do. Rank buffers must: heap neighbours sit
/// a few bytes apart modulo 4 KiB, and a reduction that stores to one while loading the next vector of the other
/// then stalls on 4K aliasing (measured: out-of-place 2-rank all-reduce at 16-256 KiB ran at 1.3 GB/s busbw on heap
/// buffers, 9 GB/s in place).
PageAlignedBytes allocatePageAligned(std::size_t bytes);

/// Owned per-rank buffers laid out as NCCL and nccl-tests do (in place: output and input share one allocation at
/// CollectiveSpec::inPlace*Offset).
class RankBufferSet {
 public:
  RankBufferSet(const CollectiveSpec& spec, bool inPlace);
  const Buffers& views() const { return views_; }
  /// Writes inputValue() into every rank's input and clears the output outside the input.
  void fill();
  /// Elements differing from expectedValue(), over all ranks that hold a result.
  std::size_t countWrong() const;
  /// Overwrites one output element (tests of the checker).
  void corruptOutput(int rank, std::size_t index);

 private:
  CollectiveSpec spec_;
  std::vector<PageAlignedBytes> storage_;
  std::vector<std::size_t> storageBytes_;
  Buffers views_;
};

}  // namespace collbench
