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

/// Input element `index` of `rank`. Sum/avg/min/max: (rank * inputElems + index), folded below the dtype's exact
/// integer range divided by nranks (unique per element wherever the dtype can hold it); prod: a power of two in
/// {1/2, 1, 2} for floats, {1, 2} for integers, so products stay exact.
double inputValue(const CollectiveSpec& spec, int rank, std::size_t index);
/// Expected value of output element `index` on `rank` (meaningless on non-root ranks of reduce).
double expectedValue(const CollectiveSpec& spec, int rank, std::size_t index);
/// Whether `got` matches `want` for this spec: exact for integers and for sum/prod/min/max (inputs make them
/// exact), within one unit in the last place for float avg (its division rounds).
bool matches(const CollectiveSpec& spec, double got, double want);

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
  std::vector<std::unique_ptr<std::byte[]>> storage_;
  std::vector<std::size_t> storageBytes_;
  Buffers views_;
};

}  // namespace collbench
