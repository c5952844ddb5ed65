#include "collbench/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

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

/// Binary exponents of a float dtype's normal numbers (IEEE 754: emin = 1 - bias, emax = bias) and its stored
/// mantissa bits. Integers: exponent 0 only.
struct FloatRange {
  int minNormalExp, maxExp, mantissaBits;
};
FloatRange floatRange(DType t) {
  switch (t) {
    case DType::F16: return {-14, 15, 10};
    case DType::BF16: return {-126, 127, 7};
    case DType::F32: return {-126, 127, 23};
    case DType::F64: return {-1022, 1023, 52};
    case DType::I32:
    case DType::I64: break;
  }
  return {0, 0, 0};
}

int ceilLog2(int n) {
  int e = 0;
  while ((1 << e) < n) ++e;
  return e;
}

/// A well-mixed 64-bit hash (splitmix64's finaliser), for patterns that never repeat with a short period.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Every finite value of a 16-bit float dtype but -0, ascending: the most values that dtype can tell apart.
const std::vector<double>& finiteValues(DType t) {
  auto build = [](auto decode) {
    std::vector<double> v;
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
      const float f = decode(static_cast<std::uint16_t>(h));
      if (std::isfinite(f) && h != 0x8000u) v.push_back(f);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  static const std::vector<double> half = build(halfToFloat), bf16 = build(bf16ToFloat);
  return t == DType::F16 ? half : bf16;
}

/// The inputs of one spec (see inputValue() in reference.h for the why). Cheap to build: no allocation.
class InputPattern {
 public:
  explicit InputPattern(const CollectiveSpec& spec) : spec_(spec), n_(static_cast<std::uint64_t>(std::max(1, spec.nranks))) {
    const double limit = exactLimit(spec.dtype);
    if (spec.reduces() && (spec.op == ReduceOp::Sum || spec.op == ReduceOp::Avg)) {
      kind_ = Kind::Sum;
      // |every partial sum| <= n * maxMantissa < limit: exact in any order.
      maxMantissa_ = std::max<std::uint64_t>(1, static_cast<std::uint64_t>((limit - 1) / static_cast<double>(n_)));
      if (isFloating(spec.dtype)) {
        const FloatRange r = floatRange(spec.dtype);
        // Scales 2^e with every sum normal (avg: also sum / n) and below the largest finite value, at most
        // 2^kMaxScale either way. A width coprime with the mantissa cycle makes the combined period their product.
        constexpr int kMaxScale = 30;
        const int lo = std::max(-kMaxScale, r.minNormalExp + (spec.op == ReduceOp::Avg ? ceilLog2(spec.nranks) : 0));
        const int hi = std::min(kMaxScale, r.maxExp - r.mantissaBits);
        scaleLo_ = lo;
        scales_ = std::max(1, hi - lo + 1);
        const std::uint64_t cycle = 2 * maxMantissa_ / std::gcd(n_, 2 * maxMantissa_);
        while (scales_ > 1 && std::gcd(static_cast<std::uint64_t>(scales_), cycle) != 1) --scales_;
      }
    } else if (spec.reduces() && spec.op == ReduceOp::Prod) {
      kind_ = Kind::Prod;
      // Factors +-2^k, k in {-1, 0, 1} (integers: {0, 1}), with at most ceil(n / period) ranks doubling and as many
      // halving at any index, so every partial product stays a normal (or in-range integer) power of two.
      int room = 30;  // i32: |product| <= 2^30
      if (spec.dtype == DType::I64) room = 52;
      if (isFloating(spec.dtype)) {
        const FloatRange r = floatRange(spec.dtype);
        room = std::min(r.maxExp - 1, -r.minNormalExp);
      }
      prodPeriod_ = std::max<std::uint64_t>(3, (n_ + static_cast<std::uint64_t>(room) - 1) / static_cast<std::uint64_t>(room));
    } else {
      kind_ = Kind::Distinct;
      distinctLimit_ = static_cast<std::uint64_t>(limit);
    }
  }

  double value(int rank, std::size_t index) const {
    const auto r = static_cast<std::uint64_t>(rank);
    const std::uint64_t i = index;
    // Each (rank, index) its own position; rotating ranks by index moves the smallest and largest value (and the
    // largest addend) from rank to rank, so a result that always came from one rank would not pass.
    const std::uint64_t k = i * n_ + (r + i) % n_;
    switch (kind_) {
      case Kind::Sum: {
        // Nonzero mantissas -M..-1, 1..M in a cycle of 2M positions (n consecutive ones distinct when n <= 2M), so
        // a missing or doubled addend always shows; scaled by a power of two that changes with every element.
        const std::uint64_t c = k % (2 * maxMantissa_);
        const double m = c < maxMantissa_ ? static_cast<double>(c + 1) : -static_cast<double>(c - maxMantissa_ + 1);
        return std::ldexp(m, scaleLo_ + static_cast<int>(i % static_cast<std::uint64_t>(scales_)));
      }
      case Kind::Prod: {
        const std::uint64_t c = (r + i) % prodPeriod_;
        const int e = c == 0 ? 1 : (c == 1 && isFloating(spec_.dtype)) ? -1 : 0;
        const double magnitude = std::ldexp(1.0, e);
        return (mix(k) & 1u) ? -magnitude : magnitude;
      }
      case Kind::Distinct:
        if (spec_.dtype == DType::F16 || spec_.dtype == DType::BF16) {
          const auto& v = finiteValues(spec_.dtype);
          return v[static_cast<std::size_t>(k % v.size())];
        }
        return static_cast<double>(k % distinctLimit_);
    }
    return 0;
  }

 private:
  enum class Kind { Sum, Prod, Distinct };
  CollectiveSpec spec_;
  std::uint64_t n_;
  Kind kind_ = Kind::Distinct;
  std::uint64_t maxMantissa_ = 1;
  int scaleLo_ = 0, scales_ = 1;
  std::uint64_t prodPeriod_ = 3;
  std::uint64_t distinctLimit_ = 1;
};

}  // namespace

double inputValue(const CollectiveSpec& spec, int rank, std::size_t index) {
  return InputPattern(spec).value(rank, index);
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

RankBufferSet::RankBufferSet(const CollectiveSpec& spec, bool inPlace) : spec_(spec), inPlace_(inPlace) {
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

/// Input values of `rank` for elements [0, n).
void rankInputs(const CollectiveSpec& spec, int rank, std::size_t n, std::vector<double>& out) {
  out.resize(n);
  const InputPattern pattern(spec);
  for (std::size_t i = 0; i < n; ++i) out[i] = pattern.value(rank, i);
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
  const double v = loadAsDouble(spec_.dtype, out, index);
  // Doubling changes every nonzero float, whatever its magnitude (adding 1 would vanish in rounding above 2^mantissa).
  const double changed = !isFloating(spec_.dtype) ? (v < 0 ? v + 1 : v - 1) : v == 0 ? 1.0 : 2 * v;
  storeFromDouble(spec_.dtype, out, index, changed);
}

}  // namespace collbench
