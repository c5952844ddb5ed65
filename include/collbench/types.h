#pragma once
/// Basic vocabulary of collbench: element types, reduction operators, collectives and their specs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace collbench {

enum class DType { F32, F64, F16, BF16, I32, I64 };
enum class ReduceOp { Sum, Prod, Min, Max, Avg };
enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                             ReduceOp::Avg};

std::size_t dtypeSize(DType t);
bool isFloating(DType t);
/// nccl-tests names: float, double, half, bfloat16, int32, int64.
std::string_view toString(DType t);
/// nccl-tests names: sum, prod, min, max, avg.
std::string_view toString(ReduceOp op);
/// Snake-case names as the nccl-tests binaries: all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier.
std::string_view toString(Collective c);

/// Parsers accept the nccl-tests names and common aliases (f32, float32, fp16, bf16, i32, ...), case-insensitive;
/// unknown names throw Error{InvalidArgument} naming the value and the accepted ones.
DType parseDType(std::string_view s);
ReduceOp parseReduceOp(std::string_view s);
Collective parseCollective(std::string_view s);

/// What every rank calls. `count` follows NCCL: elements per rank buffer for all-reduce, broadcast and reduce;
/// elements each rank receives for reduce-scatter; elements each rank sends for all-gather.
struct CollectiveSpec {
  Collective kind = Collective::AllReduce;
  int nranks = 1;
  std::size_t count = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;

  std::size_t elementSize() const { return dtypeSize(dtype); }
  /// Bytes of each rank's input and output buffer, as NCCL sizes them.
  std::size_t inputBytes() const;
  std::size_t outputBytes() const;
  /// Offset of the input inside the output when the call is in place (NCCL's convention: reduce-scatter's output
  /// is the rank's block of the input, all-gather's input is the rank's block of the output).
  std::size_t inPlaceInputOffset(int rank) const;
  std::size_t inPlaceOutputOffset(int rank) const;
  /// True for collectives that combine values with `op`.
  bool reduces() const;
};

/// nccl-tests rounds the per-rank counts of reduce-scatter and all-gather down to 16-byte blocks (src/common.cu).
inline constexpr std::size_t kNcclTestsBlockAlignBytes = 16;

/// The one rule from a size in bytes to CollectiveSpec::count. `bytes` is the nccl-tests size (the larger of a
/// rank's input and output: the whole buffer for reduce-scatter and all-gather, whose count is then per rank,
/// rounded down to a multiple of `alignBytes`). Inverse of max(inputBytes(), outputBytes()), rounding down.
std::size_t countForBytes(Collective kind, int nranks, std::size_t bytes, DType dtype,
                          std::size_t alignBytes = kNcclTestsBlockAlignBytes);

/// "all_reduce(n=4, count=1000, float, sum, root=0)" for messages.
std::string describe(const CollectiveSpec& s);

/// busbw / algbw of nccl-tests (doc/PERFORMANCE.md): all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n,
/// broadcast, reduce and barrier 1. busbw is then comparable with the link bandwidth whatever n is.
double busBandwidthFactor(Collective c, int nranks);

}  // namespace collbench
