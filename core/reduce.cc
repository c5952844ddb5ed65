// CPU reduction kernels. Plain element loops over restrict-qualified pointers that GCC vectorises at -O2/-O3;
// the aliasing cases (dst == a, dst == b) get their own instantiations so that restrict stays truthful.
// f16 and bf16 are widened to f32, combined, and rounded back to nearest-even.
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "collbench/error.h"
#include "collbench/reduce.h"

namespace collbench {

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

namespace {

struct Half { static float load(std::uint16_t v) { return halfToFloat(v); } static std::uint16_t store(float v) { return floatToHalf(v); } };
struct Bf16 { static float load(std::uint16_t v) { return bf16ToFloat(v); } static std::uint16_t store(float v) { return floatToBf16(v); } };

template <typename T>
struct Native {
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};

template <typename T>
T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

struct SumOp { template <typename T> static T apply(T a, T b) { return wrapAdd(a, b); } };
struct ProdOp { template <typename T> static T apply(T a, T b) { return wrapMul(a, b); } };
struct MinOp { template <typename T> static T apply(T a, T b) { return b < a ? b : a; } };
struct MaxOp { template <typename T> static T apply(T a, T b) { return a < b ? b : a; } };

// Storage type S, compute type C, codec K (load/store between them).
template <typename S, typename C, typename K, typename O>
void kernel3(S* __restrict d, const S* __restrict a, const S* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = K::store(O::template apply<C>(K::load(a[i]), K::load(b[i])));
}
template <typename S, typename C, typename K, typename O>
void kernelInto(S* __restrict d, const S* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = K::store(O::template apply<C>(K::load(d[i]), K::load(b[i])));
}

template <typename S, typename C, typename K, typename O>
void dispatchAlias(void* dst, const void* a, const void* b, std::size_t n) {
  auto* d = static_cast<S*>(dst);
  const auto* x = static_cast<const S*>(a);
  const auto* y = static_cast<const S*>(b);
  if (d == x && d == y) {
    // a (op) a: copy x to a temporary-free form by treating b as a distinct read of the same values.
    for (std::size_t i = 0; i < n; ++i) d[i] = K::store(O::template apply<C>(K::load(d[i]), K::load(d[i])));
  } else if (d == x) {
    kernelInto<S, C, K, O>(d, y, n);
  } else if (d == y) {
    kernelInto<S, C, K, O>(d, x, n);  // all supported ops are commutative
  } else {
    kernel3<S, C, K, O>(d, x, y, n);
  }
}

template <typename S, typename C, typename K>
void dispatchOp(ReduceOp op, void* d, const void* a, const void* b, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return dispatchAlias<S, C, K, SumOp>(d, a, b, n);
    case ReduceOp::Prod: return dispatchAlias<S, C, K, ProdOp>(d, a, b, n);
    case ReduceOp::Min: return dispatchAlias<S, C, K, MinOp>(d, a, b, n);
    case ReduceOp::Max: return dispatchAlias<S, C, K, MaxOp>(d, a, b, n);
  }
}

template <typename S, typename K>
void divideLoop(void* dst, std::size_t n, int divisor) {
  auto* d = static_cast<S*>(dst);
  // Decide on the compute type, not the storage type: f16/bf16 are stored as uint16_t.
  if constexpr (std::is_integral_v<decltype(K::load(S{}))>) {
    const S div = static_cast<S>(divisor);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<S>(d[i] / div);
  } else {
    using C = decltype(K::load(d[0]));
    const C div = static_cast<C>(divisor);
    for (std::size_t i = 0; i < n; ++i) d[i] = K::store(K::load(d[i]) / div);
  }
}

}  // namespace

void reduceElements(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (count == 0) return;
  switch (t) {
    case DType::F32: return dispatchOp<float, float, Native<float>>(op, dst, a, b, count);
    case DType::F64: return dispatchOp<double, double, Native<double>>(op, dst, a, b, count);
    case DType::F16: return dispatchOp<std::uint16_t, float, Half>(op, dst, a, b, count);
    case DType::BF16: return dispatchOp<std::uint16_t, float, Bf16>(op, dst, a, b, count);
    case DType::I32: return dispatchOp<std::int32_t, std::int32_t, Native<std::int32_t>>(op, dst, a, b, count);
    case DType::I64: return dispatchOp<std::int64_t, std::int64_t, Native<std::int64_t>>(op, dst, a, b, count);
  }
}

void divideElements(DType t, void* dst, std::size_t count, int divisor) {
  COLLBENCH_CHECK(divisor > 0, "divisor {}", divisor);
  switch (t) {
    case DType::F32: return divideLoop<float, Native<float>>(dst, count, divisor);
    case DType::F64: return divideLoop<double, Native<double>>(dst, count, divisor);
    case DType::F16: return divideLoop<std::uint16_t, Half>(dst, count, divisor);
    case DType::BF16: return divideLoop<std::uint16_t, Bf16>(dst, count, divisor);
    case DType::I32: return divideLoop<std::int32_t, Native<std::int32_t>>(dst, count, divisor);
    case DType::I64: return divideLoop<std::int64_t, Native<std::int64_t>>(dst, count, divisor);
  }
}

double loadAsDouble(DType t, const void* base, std::size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::F16: return halfToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::BF16: return bf16ToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DType::I32: return static_cast<const std::int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

void storeFromDouble(DType t, void* base, std::size_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::F64: static_cast<double*>(base)[i] = v; return;
    case DType::F16: static_cast<std::uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v)); return;
    case DType::BF16: static_cast<std::uint16_t*>(base)[i] = floatToBf16(static_cast<float>(v)); return;
    case DType::I32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); return;
    case DType::I64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); return;
  }
}

}  // namespace collbench
