#include "collbench/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collbench/error.h"
#include "collbench/reduce.h"

namespace collbench {
namespace {

/// Largest integer magnitude below which every integer is exact: 2^(mantissa bits + 1).
double exactLimit(DType t) {
  switch (t) {
    case DType::F32: return 16777216.0;           // 2^24
    case DType::F64: return 9007199254740992.0;   // 2^53
    case DType::F16: return 2048.0;               // 2^11
    case DType::BF16: return 256.0;               // 2^8
    case DType::I32: return 2147483648.0;         // 2^31
    case DType::I64: return 9007199254740992.0;   // kept within double's exact range for the reference
  }
  return 1;
}

std::size_t inputElems(const CollectiveSpec& s) {
  return s.kind == Collective::ReduceScatter ? s.count * static_cast<std::size_t>(s.nranks) : s.count;
}

}  // namespace

double inputValue(const CollectiveSpec& spec, int rank, std::size_t index) {
  const std::size_t unique = static_cast<std::size_t>(rank) * inputElems(spec) + index;
  if (spec.op == ReduceOp::Prod && spec.reduces()) {
    const auto e = static_cast<int>((static_cast<std::size_t>(rank) + index) % 3);
    if (!isFloating(spec.dtype)) return e == 0 ? 2.0 : 1.0;
    return std::ldexp(1.0, e - 1);
  }
  const double fold = std::max(1.0, std::floor(exactLimit(spec.dtype) / std::max(1, spec.nranks)));
  return std::fmod(static_cast<double>(unique), fold);
}

double expectedValue(const CollectiveSpec& spec, int rank, std::size_t index) {
  const int n = spec.nranks;
  switch (spec.kind) {
    case Collective::AllGather: return inputValue(spec, static_cast<int>(index / spec.count), index % spec.count);
    case Collective::Broadcast: return inputValue(spec, spec.root, index);
    case Collective::Barrier: return 0;
    default: break;
  }
  const std::size_t at = spec.kind == Collective::ReduceScatter ? static_cast<std::size_t>(rank) * spec.count + index
                                                                : index;
  double acc = inputValue(spec, 0, at);
  for (int r = 1; r < n; ++r) {
    const double v = inputValue(spec, r, at);
    switch (spec.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += v; break;
      case ReduceOp::Prod: acc *= v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
    }
  }
  if (spec.op == ReduceOp::Avg) acc = isFloating(spec.dtype) ? acc / n : std::trunc(acc / n);
  return acc;
}

bool matches(const CollectiveSpec& spec, double got, double want) {
  if (got == want) return true;
  if (!isFloating(spec.dtype) || spec.op != ReduceOp::Avg || !spec.reduces()) return false;
  // One ulp of the dtype at `want`.
  int exp = 0;
  std::frexp(want, &exp);
  const int mantissaBits = spec.dtype == DType::F64 ? 52 : spec.dtype == DType::F32 ? 23 : spec.dtype == DType::F16 ? 10 : 7;
  return std::fabs(got - want) <= std::ldexp(1.0, exp - 1 - mantissaBits);
}

RankBufferSet::RankBufferSet(const CollectiveSpec& spec, bool inPlace) : spec_(spec) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t inB = spec.inputBytes(), outB = spec.outputBytes();
  views_.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    const int rank = static_cast<int>(r);
    if (inPlace) {
      const std::size_t bytes = std::max(inB, outB);
      storage_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(bytes, 1)));
      storageBytes_.push_back(bytes);
      std::byte* base = storage_.back().get();
      views_[r] = RankBuffers{base + spec.inPlaceInputOffset(rank), base + spec.inPlaceOutputOffset(rank)};
    } else {
      storage_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(inB, 1)));
      storageBytes_.push_back(inB);
      storage_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(outB, 1)));
      storageBytes_.push_back(outB);
      views_[r] = RankBuffers{storage_[storage_.size() - 2].get(), storage_.back().get()};
    }
  }
}

namespace {

/// Input values of `rank` for elements [0, n) (inputValue() without re-deriving the fold per element).
void rankInputs(const CollectiveSpec& spec, int rank, std::size_t n, std::vector<double>& out) {
  out.resize(n);
  const std::size_t unique0 = static_cast<std::size_t>(rank) * inputElems(spec);
  if (spec.op == ReduceOp::Prod && spec.reduces()) {
    for (std::size_t i = 0; i < n; ++i) out[i] = inputValue(spec, rank, i);
    return;
  }
  const auto fold = static_cast<std::size_t>(std::max(1.0, std::floor(exactLimit(spec.dtype) / std::max(1, spec.nranks))));
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>((unique0 + i) % fold);
}

void storeAll(DType t, void* base, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) storeFromDouble(t, base, i, v[i]);
}

}  // namespace

void RankBufferSet::fill() {
  for (auto i = 0u; i < storage_.size(); ++i) std::memset(storage_[i].get(), 0, storageBytes_[i]);
  if (spec_.kind == Collective::Barrier) return;
  const std::size_t elems = spec_.inputBytes() / spec_.elementSize();
  std::vector<double> vals;
  for (int r = 0; r < spec_.nranks; ++r) {
    rankInputs(spec_, r, elems, vals);
    storeAll(spec_.dtype, const_cast<void*>(views_[static_cast<std::size_t>(r)].input), vals);
  }
}

std::size_t RankBufferSet::countWrong() const {
  if (spec_.kind == Collective::Barrier) return 0;
  const int n = spec_.nranks;
  const std::size_t inElems = spec_.inputBytes() / spec_.elementSize();
  const std::size_t outElems = spec_.outputBytes() / spec_.elementSize();
  // Expected values over the whole input index space (reductions) or the gathered output (all-gather).
  std::vector<double> expect, vals;
  if (spec_.kind == Collective::AllGather) {
    expect.resize(outElems);
    for (int r = 0; r < n; ++r) {
      rankInputs(spec_, r, spec_.count, vals);
      std::copy(vals.begin(), vals.end(), expect.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * spec_.count));
    }
  } else if (spec_.kind == Collective::Broadcast) {
    rankInputs(spec_, spec_.root, inElems, expect);
  } else {
    rankInputs(spec_, 0, inElems, expect);
    for (int r = 1; r < n; ++r) {
      rankInputs(spec_, r, inElems, vals);
      for (std::size_t i = 0; i < inElems; ++i) {
        double& acc = expect[i];
        const double v = vals[i];
        switch (spec_.op) {
          case ReduceOp::Sum:
          case ReduceOp::Avg: acc += v; break;
          case ReduceOp::Prod: acc *= v; break;
          case ReduceOp::Min: acc = std::min(acc, v); break;
          case ReduceOp::Max: acc = std::max(acc, v); break;
        }
      }
    }
    if (spec_.op == ReduceOp::Avg) {
      for (double& v : expect) v = isFloating(spec_.dtype) ? v / n : std::trunc(v / n);
    }
  }
  // Round expectations to the dtype: that is the closest the dtype can hold.
  std::vector<std::uint64_t> rounded(expect.size());
  for (std::size_t i = 0; i < expect.size(); ++i) {
    storeFromDouble(spec_.dtype, &rounded[i], 0, expect[i]);
    expect[i] = loadAsDouble(spec_.dtype, &rounded[i], 0);
  }
  std::size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    if (spec_.kind == Collective::Reduce && r != spec_.root) continue;
    const std::size_t base = spec_.kind == Collective::ReduceScatter ? static_cast<std::size_t>(r) * spec_.count : 0;
    const void* out = views_[static_cast<std::size_t>(r)].output;
    for (std::size_t i = 0; i < outElems; ++i) {
      if (!matches(spec_, loadAsDouble(spec_.dtype, out, i), expect[base + i])) ++wrong;
    }
  }
  return wrong;
}

void RankBufferSet::corruptOutput(int rank, std::size_t index) {
  void* out = views_[static_cast<std::size_t>(rank)].output;
  storeFromDouble(spec_.dtype, out, index, loadAsDouble(spec_.dtype, out, index) + 1.0);
}

}  // namespace collbench
