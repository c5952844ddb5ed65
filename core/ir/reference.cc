#include "collbench/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "collbench/error.h"
#include "collbench/reduce.h"

namespace collbench {
namespace {

/// Largest integer magnitude below which every integer is exact: 2^(mantissa bits + 1).
double exactLimit(DType t) {
  switch (t) {
    case DType::F32:
      return 16777216.0;  // 2^24
    case DType::F64:
      return 9007199254740992.0;  // 2^53
    case DType::F16:
      return 2048.0;  // 2^11
    case DType::BF16:
      return 256.0;  // 2^8
    case DType::I32:
      return 2147483648.0;  // 2^31
    case DType::I64:
      return 9007199254740992.0;  // kept within double's exact range for the reference
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
    case DType::F16:
      return {-14, 15, 10};
    case DType::BF16:
      return {-126, 127, 7};
    case DType::F32:
      return {-126, 127, 23};
    case DType::F64:
      return {-1022, 1023, 52};
    case DType::I32:
    case DType::I64:
      break;
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
  explicit InputPattern(const CollectiveSpec& spec)
      : spec_(spec), n_(static_cast<std::uint64_t>(std::max(1, spec.nranks))) {
    const double limit = exactLimit(spec.dtype);
    if (spec.reduces() && (spec.op == ReduceOp::Sum || spec.op == ReduceOp::Avg)) {
      kind_ = Kind::Sum;
      // |every partial sum| <= n * maxMantissa < limit: exact in any order.
      maxMantissa_ = std::max<std::uint64_t>(1, static_cast<std::uint64_t>((limit - 1) / static_cast<double>(n_)));
      modulus_ = 2 * maxMantissa_;
      if (isFloating(spec.dtype)) {
        const FloatRange r = floatRange(spec.dtype);
        // Scales 2^e with every sum normal (avg: also sum / n) and below the largest finite value, at most
        // 2^kMaxScale either way. A width coprime with the mantissa cycle makes the combined period their product.
        constexpr int kMaxScale = (kMaxScales - 1) / 2;
        const int lo = std::max(-kMaxScale, r.minNormalExp + (spec.op == ReduceOp::Avg ? ceilLog2(spec.nranks) : 0));
        const int hi = std::min(kMaxScale, r.maxExp - r.mantissaBits);
        scales_ = std::max(1, hi - lo + 1);
        const std::uint64_t cycle = 2 * maxMantissa_ / std::gcd(n_, 2 * maxMantissa_);
        while (scales_ > 1 && std::gcd(static_cast<std::uint64_t>(scales_), cycle) != 1) --scales_;
        for (int j = 0; j < scales_; ++j) scale_[j] = std::ldexp(1.0, lo + j);
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
      prodPeriod_ =
          std::max<std::uint64_t>(3, (n_ + static_cast<std::uint64_t>(room) - 1) / static_cast<std::uint64_t>(room));
    } else {
      kind_ = Kind::Distinct;
      modulus_ = static_cast<std::uint64_t>(limit);
      if (spec.dtype == DType::F16 || spec.dtype == DType::BF16) {
        distinct16_ = &finiteValues(spec.dtype);
        modulus_ = distinct16_->size();
      }
    }
  }

  double value(int rank, std::size_t index) const {
    const auto r = static_cast<std::uint64_t>(rank);
    const std::uint64_t i = index;
    // Each (rank, index) its own position; rotating ranks by index moves the smallest and largest value (and the
    // largest addend) from rank to rank, so a result that always came from one rank would not pass.
    const std::uint64_t k = i * n_ + (r + i) % n_;
    switch (kind_) {
      case Kind::Sum:
        return sumValue(k % modulus_, i % static_cast<std::uint64_t>(scales_));
      case Kind::Prod:
        return prodValue(k, (r + i) % prodPeriod_);
      case Kind::Distinct:
        return distinctValue(k % modulus_);
    }
    return 0;
  }

  /// value(rank, i) for i in [0, count), with value()'s divisions replaced by running counters (the checks of a
  /// large sweep spend most of their time here).
  void fill(int rank, std::size_t count, std::vector<double>& out) const { fill(rank, 0, count, out); }
  /// value(rank, i) for i in [first, first + count).
  void fill(int rank, std::size_t first, std::size_t count, std::vector<double>& out) const {
    out.resize(count);
    switch (kind_) {
      case Kind::Sum:
        return fillWith(rank, first, out, [&](std::uint64_t, std::uint64_t kMod, std::uint64_t scale, std::uint64_t) {
          return sumValue(kMod, scale);
        });
      case Kind::Prod:
        return fillWith(rank, first, out, [&](std::uint64_t k, std::uint64_t, std::uint64_t, std::uint64_t phase) {
          return prodValue(k, phase);
        });
      case Kind::Distinct:
        return fillWith(rank, first, out, [&](std::uint64_t, std::uint64_t kMod, std::uint64_t, std::uint64_t) {
          return distinctValue(kMod);
        });
    }
  }

 private:
  /// Runs the counters of value() over out's elements; valueAt(k, k mod modulus_, scale index, prod phase).
  template <typename F>
  void fillWith(int rank, std::size_t first, std::vector<double>& out, F valueAt) const {
    const auto r = static_cast<std::uint64_t>(rank);
    const std::uint64_t i0 = first;
    // The counters at element `first`, as value() computes them there.
    std::uint64_t rotated = (r + i0) % n_, k = i0 * n_ + rotated, kMod = k % modulus_;
    std::uint64_t scale = i0 % static_cast<std::uint64_t>(scales_), prodPhase = (r + i0) % prodPeriod_;
    // From element i to i+1, k grows by n + 1, or by 1 where the rotation wraps.
    const std::uint64_t step = (n_ + 1) % modulus_, wrapStep = 1 % modulus_;
    const auto scales = static_cast<std::uint64_t>(scales_);
    for (double& v : out) {
      v = valueAt(k, kMod, scale, prodPhase);
      const bool wraps = ++rotated == n_;
      if (wraps) rotated = 0;
      k += wraps ? 1 : n_ + 1;
      kMod += wraps ? wrapStep : step;
      if (kMod >= modulus_) kMod -= modulus_;
      if (++scale == scales) scale = 0;
      if (++prodPhase == prodPeriod_) prodPhase = 0;
    }
  }

  /// Sum: nonzero mantissas -M..-1, 1..M in a cycle of 2M positions (n consecutive ones distinct when n <= 2M),
  /// so a missing or doubled addend always shows; scaled by a power of two that changes with every element.
  double sumValue(std::uint64_t c, std::uint64_t scale) const {
    const double m = c < maxMantissa_ ? static_cast<double>(c + 1) : -static_cast<double>(c - maxMantissa_ + 1);
    return m * scale_[scale];
  }
  /// Prod: phase (rank + i) mod period picks the doubling (0) and halving (1, floats) ranks; the sign is hashed.
  double prodValue(std::uint64_t k, std::uint64_t phase) const {
    const double magnitude = phase == 0 ? 2.0 : (phase == 1 && isFloating(spec_.dtype)) ? 0.5 : 1.0;
    return (mix(k) & 1u) ? -magnitude : magnitude;
  }
  double distinctValue(std::uint64_t d) const {
    return distinct16_ ? (*distinct16_)[static_cast<std::size_t>(d)] : static_cast<double>(d);
  }

  enum class Kind { Sum, Prod, Distinct };
  static constexpr int kMaxScales = 61;  // 2^-30 .. 2^30
  CollectiveSpec spec_;
  std::uint64_t n_;
  Kind kind_ = Kind::Distinct;
  std::uint64_t maxMantissa_ = 1;
  int scales_ = 1;
  double scale_[kMaxScales] = {1.0};  // 2^(lowest scale + j)
  std::uint64_t prodPeriod_ = 3;
  std::uint64_t modulus_ = 1;  // of position k: 2M (sum), the number of distinct values (min/max, movement)
  const std::vector<double>* distinct16_ = nullptr;
};

}  // namespace

double inputValue(const CollectiveSpec& spec, int rank, std::size_t index) {
  return InputPattern(spec).value(rank, index);
}

double expectedValue(const CollectiveSpec& spec, int rank, std::size_t index) {
  const int n = spec.nranks;
  switch (spec.kind) {
    case Collective::AllGather:
      return inputValue(spec, static_cast<int>(index / spec.count), index % spec.count);
    case Collective::Broadcast:
      return inputValue(spec, spec.root, index);
    case Collective::Barrier:
      return 0;
    default:
      break;
  }
  const std::size_t at =
      spec.kind == Collective::ReduceScatter ? static_cast<std::size_t>(rank) * spec.count + index : index;
  double acc = inputValue(spec, 0, at);
  for (int r = 1; r < n; ++r) {
    const double v = inputValue(spec, r, at);
    switch (spec.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
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
  const int mantissaBits = spec.dtype == DType::F64   ? 52
                           : spec.dtype == DType::F32 ? 23
                           : spec.dtype == DType::F16 ? 10
                                                      : 7;
  return std::fabs(got - want) <= std::ldexp(1.0, exp - 1 - mantissaBits);
}

void FreeBytes::operator()(std::byte* p) const { std::free(p); }

PageAlignedBytes allocatePageAligned(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;  // x86-64 and aarch64 base page; 4K aliasing compares the low 12 address bits
  // posix_memalign, not aligned_alloc: the size stays exact (not rounded to pages), so ASan still sees an overrun by
  // one byte.
  void* p = nullptr;
  if (::posix_memalign(&p, kPage, std::max<std::size_t>(bytes, 1)) != 0) throw std::bad_alloc();
  return PageAlignedBytes(static_cast<std::byte*>(p));
}

RankBufferSet::RankBufferSet(const CollectiveSpec& spec, bool inPlace) : spec_(spec) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t inB = spec.inputBytes(), outB = spec.outputBytes();
  views_.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    const int rank = static_cast<int>(r);
    if (inPlace) {
      const std::size_t bytes = std::max(inB, outB);
      storage_.push_back(allocatePageAligned(bytes));
      storageBytes_.push_back(bytes);
      std::byte* base = storage_.back().get();
      views_[r] = RankBuffers{base + spec.inPlaceInputOffset(rank), base + spec.inPlaceOutputOffset(rank)};
    } else {
      storage_.push_back(allocatePageAligned(inB));
      storageBytes_.push_back(inB);
      storage_.push_back(allocatePageAligned(outB));
      storageBytes_.push_back(outB);
      views_[r] = RankBuffers{storage_[storage_.size() - 2].get(), storage_.back().get()};
    }
  }
}

namespace {

/// The reference's reduction of two values (exact for the inputs above).
double combine(ReduceOp op, double acc, double v) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return acc + v;
    case ReduceOp::Prod:
      return acc * v;
    case ReduceOp::Min:
      return std::min(acc, v);
    case ReduceOp::Max:
      return std::max(acc, v);
  }
  return acc;
}

/// Input values of `rank` for elements [0, n).
void rankInputs(const CollectiveSpec& spec, int rank, std::size_t n, std::vector<double>& out) {
  InputPattern(spec).fill(rank, n, out);
}

void storeAll(DType t, void* base, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) storeFromDouble(t, base, i, v[i]);
}

/// v[i] = loadAsDouble(t, base, i) for i < n, a dtype at a time (16-bit floats through the SIMD conversions).
void loadAll(DType t, const void* base, std::size_t n, std::vector<double>& v) {
  v.resize(n);
  auto widen = [&](const auto* p) { std::copy(p, p + n, v.begin()); };
  switch (t) {
    case DType::F32:
      return widen(static_cast<const float*>(base));
    case DType::F64:
      return widen(static_cast<const double*>(base));
    case DType::I32:
      return widen(static_cast<const std::int32_t*>(base));
    case DType::I64:
      return widen(static_cast<const std::int64_t*>(base));
    case DType::F16:
    case DType::BF16: {
      std::vector<float> f(n);
      const auto* h = static_cast<const std::uint16_t*>(base);
      t == DType::F16 ? halvesToFloats(h, f.data(), n) : bf16sToFloats(h, f.data(), n);
      return widen(f.data());
    }
  }
}

/// Rounds every value to the nearest the dtype holds, as storeFromDouble() then loadAsDouble() would.
void roundTo(DType t, std::vector<double>& v) {
  if (t == DType::F64) return;
  if (t == DType::F16 || t == DType::BF16) {
    std::vector<float> f(v.begin(), v.end());
    std::vector<std::uint16_t> h(v.size());
    t == DType::F16 ? floatsToHalves(f.data(), h.data(), f.size()) : floatsToBf16s(f.data(), h.data(), f.size());
    return loadAll(t, h.data(), h.size(), v);
  }
  for (double& x : v) {
    if (t == DType::F32) x = static_cast<float>(x);
    if (t == DType::I32) x = static_cast<std::int32_t>(x);
    if (t == DType::I64) x = static_cast<double>(static_cast<std::int64_t>(x));
  }
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
      std::copy(vals.begin(), vals.end(),
                expect.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * spec_.count));
    }
  } else if (spec_.kind == Collective::Broadcast) {
    rankInputs(spec_, spec_.root, inElems, expect);
  } else {
    rankInputs(spec_, 0, inElems, expect);
    for (int r = 1; r < n; ++r) {
      rankInputs(spec_, r, inElems, vals);
      for (std::size_t i = 0; i < inElems; ++i) {
        expect[i] = combine(spec_.op, expect[i], vals[i]);
      }
    }
    if (spec_.op == ReduceOp::Avg) {
      for (double& v : expect) v = isFloating(spec_.dtype) ? v / n : std::trunc(v / n);
    }
  }
  // Round expectations to the dtype: that is the closest the dtype can hold.
  roundTo(spec_.dtype, expect);
  std::size_t wrong = 0;
  std::vector<double> got;
  for (int r = 0; r < n; ++r) {
    if (spec_.kind == Collective::Reduce && r != spec_.root) continue;
    const std::size_t base = spec_.kind == Collective::ReduceScatter ? static_cast<std::size_t>(r) * spec_.count : 0;
    loadAll(spec_.dtype, views_[static_cast<std::size_t>(r)].output, outElems, got);
    for (std::size_t i = 0; i < outElems; ++i) {
      if (!matches(spec_, got[i], expect[base + i])) ++wrong;
    }
  }
  return wrong;
}

namespace {
/// Elements per block of the one-rank functions: their scratch stays a few MiB whatever the buffer size (a process
/// rank's buffers are all its memory should hold).
constexpr std::size_t kBlockElements = std::size_t{1} << 18;
}  // namespace

void fillRankInput(const CollectiveSpec& spec, int rank, void* input) {
  if (spec.kind == Collective::Barrier) return;
  const InputPattern pattern(spec);
  const std::size_t elems = spec.inputBytes() / spec.elementSize();
  std::vector<double> vals;
  for (std::size_t first = 0; first < elems; first += kBlockElements) {
    pattern.fill(rank, first, std::min(kBlockElements, elems - first), vals);
    for (std::size_t i = 0; i < vals.size(); ++i) storeFromDouble(spec.dtype, input, first + i, vals[i]);
  }
}

std::size_t countWrongOnRank(const CollectiveSpec& spec, int rank, const void* output) {
  if (spec.kind == Collective::Barrier || (spec.kind == Collective::Reduce && rank != spec.root)) return 0;
  const InputPattern pattern(spec);
  const int n = spec.nranks;
  const std::size_t outElems = spec.outputBytes() / spec.elementSize();
  const std::size_t esize = spec.elementSize();
  std::vector<double> expect, vals, got;
  std::size_t wrong = 0;
  for (std::size_t first = 0; first < outElems; first += kBlockElements) {
    const std::size_t len = std::min(kBlockElements, outElems - first);
    if (spec.kind == Collective::AllGather) {
      // Output element i is input element i mod count of rank i / count; a block may span ranks.
      expect.resize(len);
      for (std::size_t done = 0; done < len;) {
        const std::size_t i = first + done;
        const auto src = static_cast<int>(i / spec.count);
        const std::size_t at = i % spec.count, take = std::min(len - done, spec.count - at);
        pattern.fill(src, at, take, vals);
        std::copy(vals.begin(), vals.end(), expect.begin() + static_cast<std::ptrdiff_t>(done));
        done += take;
      }
    } else if (spec.kind == Collective::Broadcast) {
      pattern.fill(spec.root, first, len, expect);
    } else {
      const std::size_t at =
          (spec.kind == Collective::ReduceScatter ? static_cast<std::size_t>(rank) * spec.count : 0) + first;
      pattern.fill(0, at, len, expect);
      for (int r = 1; r < n; ++r) {
        pattern.fill(r, at, len, vals);
        for (std::size_t i = 0; i < len; ++i) expect[i] = combine(spec.op, expect[i], vals[i]);
      }
      if (spec.op == ReduceOp::Avg) {
        for (double& v : expect) v = isFloating(spec.dtype) ? v / n : std::trunc(v / n);
      }
    }
    roundTo(spec.dtype, expect);
    loadAll(spec.dtype, static_cast<const std::byte*>(output) + first * esize, len, got);
    for (std::size_t i = 0; i < len; ++i) {
      if (!matches(spec, got[i], expect[i])) ++wrong;
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
