// CPU reduction kernels, vectorised with Highway and dispatched at run time to the best SIMD target this CPU runs
// (foreach_target compiles this file once per target). f16 and bf16 are widened to f32, combined, and rounded back
// to nearest-even; on x86 targets with F16C (AVX2 and up) f16 uses the hardware conversions, elsewhere (and for
// bf16 everywhere) branch-free integer versions of the scalar conversions below, so every target gives the same bits
// (but for NaN payloads: any NaN stays a NaN of the same sign).
// GCC does not vectorise the scalar conversions (their branches and 16<->32-bit lane changes), which left the f16
// kernels at ~1 GB/s; see bench_host's reduce/ benchmarks.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ir/reduce.cc"  // this file, found through core/ on the include path
#include "collbench/reduce.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collbench/error.h"

// Highway's per-target code names its functions in CamelCase (HWY_EXPORT and HWY_DYNAMIC_DISPATCH build the table
// and dispatcher names from them, and its ops are Load/Store...): this block follows that convention, not ours.
// NOLINTBEGIN(readability-identifier-naming)
HWY_BEFORE_NAMESPACE();
namespace collbench::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// x86 targets from AVX2 up imply F16C (vcvtph2ps/vcvtps2ph round to nearest-even and keep NaN, inf, subnormals);
/// Highway 1.0's emulation on the others truncates and mishandles inf/NaN, so those use halfToFloatBits below.
constexpr bool kHardwareF16 = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2;

/// The scalar halfToFloat() on lanes, without branches: 16-bit patterns in, f32 out.
template <class DF, class VU16>
hn::Vec<DF> HalfToFloat(DF df, VU16 bits) {
  if constexpr (kHardwareF16) {
    return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), bits));
  } else {
    const hn::RebindToUnsigned<DF> du;
    const auto h = hn::PromoteTo(du, bits);
    const auto expMant = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7FFFu)));
    const auto exp = hn::And(expMant, hn::Set(du, 0x7C00u << 13));
    const auto normal = hn::Add(expMant, hn::Set(du, 112u << 23));  // rebias 15 -> 127
    const auto infNan = hn::Add(normal, hn::Set(du, 112u << 23));   // exponent 31 -> 255
    // Zero and subnormals: 2^-14 * (1 + mant/1024) - 2^-14 = mant * 2^-24, exact in f32.
    const auto sub = hn::BitCast(
        du, hn::Sub(hn::BitCast(df, hn::Add(normal, hn::Set(du, 1u << 23))), hn::Set(df, 6.103515625e-05f)));
    auto out = hn::IfThenElse(hn::Eq(exp, hn::Set(du, 0x7C00u << 13)), infNan, normal);
    out = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub, out);
    return hn::BitCast(df, hn::Or(out, hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)))));
  }
}

/// The scalar floatToHalf() on lanes, without branches: f32 in, 16-bit patterns out.
template <class DF, class VF>
auto FloatToHalf(DF df, VF v) {
  const hn::Rebind<std::uint16_t, DF> du16;
  if constexpr (kHardwareF16) {
    return hn::BitCast(du16, hn::DemoteTo(hn::Rebind<hwy::float16_t, DF>(), v));
  } else {
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const auto bits = hn::BitCast(du, v);
    const auto sign = hn::And(bits, hn::Set(du, 0x80000000u));
    const auto mag = hn::Xor(bits, sign);
    const auto magI = hn::BitCast(di, mag);  // < 2^31, so signed compares order it
    const auto big = hn::IfThenElse(hn::RebindMask(du, hn::Gt(magI, hn::Set(di, 0x7F800000))), hn::Set(du, 0x7E00u),
                                    hn::Set(du, 0x7C00u));
    const auto sub =
        hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, mag), hn::Set(df, std::bit_cast<float>(kDenormMagic)))),
                hn::Set(du, kDenormMagic));
    const auto mantOdd = hn::And(hn::ShiftRight<13>(mag), hn::Set(du, 1u));
    const auto normal = hn::ShiftRight<13>(
        hn::Add(hn::Add(mag, hn::Set(du, (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFu)), mantOdd));
    auto out = hn::IfThenElse(hn::RebindMask(du, hn::Lt(magI, hn::Set(di, 113 << 23))), sub, normal);
    out = hn::IfThenElse(hn::RebindMask(du, hn::Gt(magI, hn::Set(di, (143 << 23) - 1))), big, out);
    out = hn::Or(out, hn::ShiftRight<16>(sign));
    return hn::DemoteTo(du16, hn::BitCast(di, out));  // every lane < 2^16
  }
}

template <class DF, class VU16>
hn::Vec<DF> Bf16ToFloat(DF df, VU16 bits) {
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, bits)));
}

/// The scalar floatToBf16() on lanes (Highway 1.0's DemoteTo truncates).
template <class DF, class VF>
auto FloatToBf16(DF /*df*/, VF v) {
  const hn::Rebind<std::uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto isNan = hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7FFFFFFFu))), hn::Set(di, 0x7F800000));
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb));
  const auto quiet = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  return hn::DemoteTo(du16, hn::BitCast(di, hn::IfThenElse(hn::RebindMask(du, isNan), quiet, rounded)));
}

/// How a storage type reaches its compute lanes: Load/Store take the compute tag (float lanes for f16/bf16).
template <typename T>
struct Native {
  using Storage = T;
  using Compute = T;
  template <class D>
  static hn::Vec<D> Load(D d, const T* p) {
    return hn::LoadU(d, p);
  }
  template <class D, class V>
  static void Store(D d, V v, T* p) {
    hn::StoreU(v, d, p);
  }
};
struct Half {
  using Storage = std::uint16_t;
  using Compute = float;
  template <class D>
  static hn::Vec<D> Load(D d, const std::uint16_t* p) {
    return HalfToFloat(d, hn::LoadU(hn::Rebind<std::uint16_t, D>(), p));
  }
  template <class D, class V>
  static void Store(D d, V v, std::uint16_t* p) {
    hn::StoreU(FloatToHalf(d, v), hn::Rebind<std::uint16_t, D>(), p);
  }
};
struct Bf16 {
  using Storage = std::uint16_t;
  using Compute = float;
  template <class D>
  static hn::Vec<D> Load(D d, const std::uint16_t* p) {
    return Bf16ToFloat(d, hn::LoadU(hn::Rebind<std::uint16_t, D>(), p));
  }
  template <class D, class V>
  static void Store(D d, V v, std::uint16_t* p) {
    hn::StoreU(FloatToBf16(d, v), hn::Rebind<std::uint16_t, D>(), p);
  }
};

// Integer Add/Mul wrap (two's complement lanes). Min/Max are spelled as compare-and-select rather than hn::Min/Max,
// whose NaN and signed-zero results differ between targets: here every target gives a unless b is smaller (larger).
struct SumOp {
  template <class V>
  static V Apply(V a, V b) {
    return hn::Add(a, b);
  }
};
struct ProdOp {
  template <class V>
  static V Apply(V a, V b) {
    return hn::Mul(a, b);
  }
};
struct MinOp {
  template <class V>
  static V Apply(V a, V b) {
    return hn::IfThenElse(hn::Lt(b, a), b, a);
  }
};
struct MaxOp {
  template <class V>
  static V Apply(V a, V b) {
    return hn::IfThenElse(hn::Lt(a, b), b, a);
  }
};

/// d = a (op) b. d may alias a or b exactly: each step loads its operands before storing. The tail runs on
/// one-lane vectors so it rounds exactly as the body does.
template <class K, class O>
void Combine(typename K::Storage* d, const typename K::Storage* a, const typename K::Storage* b, std::size_t n) {
  const hn::ScalableTag<typename K::Compute> dc;
  const std::size_t lanes = hn::Lanes(dc);
  std::size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto x0 = K::Load(dc, a + i), x1 = K::Load(dc, a + i + lanes);
    const auto y0 = K::Load(dc, b + i), y1 = K::Load(dc, b + i + lanes);
    K::Store(dc, O::Apply(x0, y0), d + i);
    K::Store(dc, O::Apply(x1, y1), d + i + lanes);
  }
  for (; i + lanes <= n; i += lanes) K::Store(dc, O::Apply(K::Load(dc, a + i), K::Load(dc, b + i)), d + i);
  const hn::CappedTag<typename K::Compute, 1> d1;
  for (; i < n; ++i) K::Store(d1, O::Apply(K::Load(d1, a + i), K::Load(d1, b + i)), d + i);
}

/// 64-bit integer products: no SIMD multiply for them before AVX-512DQ, and Highway 1.0 has none.
void ProdI64(std::int64_t* d, const std::int64_t* a, const std::int64_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(a[i]) * static_cast<std::uint64_t>(b[i]));
  }
}

template <class K>
void ByOp(ReduceOp op, void* d, const void* a, const void* b, std::size_t n) {
  using S = typename K::Storage;
  auto* dd = static_cast<S*>(d);
  const auto* aa = static_cast<const S*>(a);
  const auto* bb = static_cast<const S*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return Combine<K, SumOp>(dd, aa, bb, n);
    case ReduceOp::Prod:
      if constexpr (std::is_same_v<S, std::int64_t>) {
        return ProdI64(dd, aa, bb, n);
      } else {
        return Combine<K, ProdOp>(dd, aa, bb, n);
      }
    case ReduceOp::Min:
      return Combine<K, MinOp>(dd, aa, bb, n);
    case ReduceOp::Max:
      return Combine<K, MaxOp>(dd, aa, bb, n);
  }
}

void Reduce(DType t, ReduceOp op, void* d, const void* a, const void* b, std::size_t n) {
  switch (t) {
    case DType::F32:
      return ByOp<Native<float>>(op, d, a, b, n);
    case DType::F64:
      return ByOp<Native<double>>(op, d, a, b, n);
    case DType::F16:
      return ByOp<Half>(op, d, a, b, n);
    case DType::BF16:
      return ByOp<Bf16>(op, d, a, b, n);
    case DType::I32:
      return ByOp<Native<std::int32_t>>(op, d, a, b, n);
    case DType::I64:
      return ByOp<Native<std::int64_t>>(op, d, a, b, n);
  }
}

template <class K>
void DivideFloat(void* d, std::size_t n, int divisor) {
  auto* p = static_cast<typename K::Storage*>(d);
  const hn::ScalableTag<typename K::Compute> dc;
  const auto div = hn::Set(dc, static_cast<typename K::Compute>(divisor));
  const std::size_t lanes = hn::Lanes(dc);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) K::Store(dc, hn::Div(K::Load(dc, p + i), div), p + i);
  const hn::CappedTag<typename K::Compute, 1> d1;
  const auto div1 = hn::Set(d1, static_cast<typename K::Compute>(divisor));
  for (; i < n; ++i) K::Store(d1, hn::Div(K::Load(d1, p + i), div1), p + i);
}

/// Integers divide with truncation, as NCCL does (no SIMD integer division; this runs once per result element).
template <typename T>
void DivideInt(void* d, std::size_t n, int divisor) {
  auto* p = static_cast<T*>(d);
  const auto div = static_cast<T>(divisor);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / div);
}

void Divide(DType t, void* d, std::size_t n, int divisor) {
  switch (t) {
    case DType::F32:
      return DivideFloat<Native<float>>(d, n, divisor);
    case DType::F64:
      return DivideFloat<Native<double>>(d, n, divisor);
    case DType::F16:
      return DivideFloat<Half>(d, n, divisor);
    case DType::BF16:
      return DivideFloat<Bf16>(d, n, divisor);
    case DType::I32:
      return DivideInt<std::int32_t>(d, n, divisor);
    case DType::I64:
      return DivideInt<std::int64_t>(d, n, divisor);
  }
}

/// Bulk conversions between f32 and the 16-bit floats (`to16`: f32 -> 16 bits), with the kernels' own code.
template <class K>
void Convert(bool to16, const void* in, void* out, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 1> d1;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  if (to16) {
    const auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<std::uint16_t*>(out);
    for (; i + lanes <= n; i += lanes) K::Store(df, hn::LoadU(df, src + i), dst + i);
    for (; i < n; ++i) K::Store(d1, hn::LoadU(d1, src + i), dst + i);
  } else {
    const auto* src = static_cast<const std::uint16_t*>(in);
    auto* dst = static_cast<float*>(out);
    for (; i + lanes <= n; i += lanes) hn::StoreU(K::Load(df, src + i), df, dst + i);
    for (; i < n; ++i) hn::StoreU(K::Load(d1, src + i), d1, dst + i);
  }
}

void ConvertHalf(bool to16, const void* in, void* out, std::size_t n) { Convert<Half>(to16, in, out, n); }
void ConvertBf16(bool to16, const void* in, void* out, std::size_t n) { Convert<Bf16>(to16, in, out, n); }

std::int64_t Target() { return HWY_TARGET; }

}  // namespace collbench::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace collbench {
namespace kernels {
HWY_EXPORT(Reduce);
HWY_EXPORT(Divide);
HWY_EXPORT(ConvertHalf);
HWY_EXPORT(ConvertBf16);
HWY_EXPORT(Target);
}  // namespace kernels
// NOLINTEND(readability-identifier-naming)

float halfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = h & 0x7C00u;
  const std::uint32_t mant = h & 0x03FFu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24.
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
  }
  if (exp == 0x7C00u) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  // Rebias the exponent from 15 to 127: add (127 - 15) << 10 before shifting into place.
  return std::bit_cast<float>(sign | ((exp + (112u << 10)) << 13) | (mant << 13));
}

std::uint16_t floatToHalf(float f) {
  constexpr std::uint32_t kF32Infinity = 255u << 23;
  constexpr std::uint32_t kF16Overflow = (127u + 16u) << 23;  // 2^16: rounds to infinity in f16
  constexpr std::uint32_t kF16MinNormal = 113u << 23;         // 2^-14
  // Adding 0.5 (biased to the f16 subnormal ulp) lets the FPU do the round-to-nearest-even of subnormals.
  constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint32_t o;
  if (u >= kF16Overflow) {
    o = u > kF32Infinity ? 0x7E00u : 0x7C00u;
  } else if (u < kF16MinNormal) {
    const float t = std::bit_cast<float>(u) + std::bit_cast<float>(kDenormMagic);
    o = std::bit_cast<std::uint32_t>(t) - kDenormMagic;
  } else {
    const std::uint32_t mantOdd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFu + mantOdd;
    o = u >> 13;
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

float bf16ToFloat(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

std::uint16_t floatToBf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void reduceElements(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(kernels::Reduce)(t, op, dst, a, b, count);
}

void divideElements(DType t, void* dst, std::size_t count, int divisor) {
  COLLBENCH_CHECK(divisor > 0, "divisor {}", divisor);
  HWY_DYNAMIC_DISPATCH(kernels::Divide)(t, dst, count, divisor);
}

void halvesToFloats(const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(kernels::ConvertHalf)(false, in, out, n);
}
void floatsToHalves(const float* in, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(kernels::ConvertHalf)(true, in, out, n);
}
void bf16sToFloats(const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(kernels::ConvertBf16)(false, in, out, n);
}
void floatsToBf16s(const float* in, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(kernels::ConvertBf16)(true, in, out, n);
}

namespace {
/// What the CPU supports, captured before useReduceTarget() narrows what Highway reports.
const std::vector<std::int64_t>& availableTargets() {
  static const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets;
}
}  // namespace

std::vector<std::string> reduceTargets() {
  std::vector<std::string> names;
  for (const std::int64_t t : availableTargets()) names.emplace_back(hwy::TargetName(t));
  return names;
}

void useReduceTarget(std::string_view name) {
  std::int64_t chosen = 0;
  if (!name.empty()) {
    for (const std::int64_t t : availableTargets()) {
      if (name == hwy::TargetName(t)) chosen = t;
    }
    if (chosen == 0) throw Error(Errc::InvalidArgument, fmt::format("SIMD target '{}' is not available here", name));
  }
  hwy::SetSupportedTargetsForTest(chosen);
}

std::string reduceTarget() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(kernels::Target)()); }

double loadAsDouble(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::F64:
      return static_cast<const double*>(base)[i];
    case DType::F16:
      return halfToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BF16:
      return bf16ToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::I32:
      return static_cast<const std::int32_t*>(base)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

void storeFromDouble(DType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::F64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::F16:
      static_cast<std::uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v));
      return;
    case DType::BF16:
      static_cast<std::uint16_t*>(base)[i] = floatToBf16(static_cast<float>(v));
      return;
    case DType::I32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      return;
    case DType::I64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

}  // namespace collbench
#endif  // HWY_ONCE
