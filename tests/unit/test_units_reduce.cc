#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/units.h"

namespace collbench {
namespace {

TEST(Units, ParsesSuffixes) {
  EXPECT_EQ(parseBytes("8"), 8u);
  EXPECT_EQ(parseBytes("64K"), 65536u);
  EXPECT_EQ(parseBytes("32M"), 32u << 20);
  EXPECT_EQ(parseBytes("1G"), 1u << 30);
  EXPECT_EQ(parseBytes("1.5G"), 3u << 29);
  EXPECT_EQ(parseBytes("4KiB"), 4096u);
  EXPECT_EQ(parseBytes("2mb"), 2u << 20);
}

TEST(Units, RejectsGarbage) {
  for (const char* bad : {"", "-1", "abc", "1X", "0.5", "1.2.3", "99999999999T", "1KK"}) {
    try {
      parseBytes(bad, "-b");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fmt::format("invalid -b '{}'", bad)), std::string::npos) << e.what();
    }
  }
}

TEST(Half, RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    const float f = halfToFloat(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(floatToHalf(f), v) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(halfToFloat(floatToHalf(2049.0f)), 2048.0f);  // tie -> even
  EXPECT_EQ(halfToFloat(floatToHalf(2051.0f)), 2052.0f);  // tie -> even
  EXPECT_EQ(halfToFloat(floatToHalf(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(floatToHalf(5.96e-8f)), 5.9604644775390625e-8f);  // smallest subnormal
}

TEST(Bf16, Rounds) {
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(257.0f)), 256.0f);  // tie -> even
  EXPECT_EQ(bf16ToFloat(floatToBf16(259.0f)), 260.0f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

/// What a 16-bit float pattern means, from the IEEE 754 binary16 definition (independent of the code under test).
double halfValue(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const double mag = exp == 31
                         ? (mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                     : exp == 0 ? std::ldexp(mant, -24)
                                : std::ldexp(1024 + mant, exp - 25);
  return sign ? -mag : mag;
}
bool isHalfNaN(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool isBf16NaN(std::uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

/// Runs `check` once with the scalar code (target "") and once per SIMD target the kernels have on this CPU.
template <typename F>
void forEachTarget(F check) {
  check(std::string());
  for (const std::string& t : reduceTargets()) {
    useReduceTarget(t);
    EXPECT_EQ(reduceTarget(), t);
    check(t);
  }
  useReduceTarget("");
}

/// Counts mismatches between got and want as patterns, except that a NaN only has to stay a NaN: of the same sign
/// for conversions, of any sign for arithmetic (IEEE 754 leaves the sign of a NaN result, and with two NaN operands
/// which one propagates, unspecified; GCC swaps the operands of commutative instructions freely).
enum class NaNSign { Kept, Any };
template <typename T, typename IsNaN>
std::size_t countDiffs(const std::vector<T>& got, const std::vector<T>& want, IsNaN isNaN, const std::string& what,
                       NaNSign nanSign = NaNSign::Kept) {
  constexpr int kSignShift = 8 * sizeof(T) - 1;
  std::size_t diffs = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool same = isNaN(want[i])
                          ? isNaN(got[i]) && (nanSign == NaNSign::Any || got[i] >> kSignShift == want[i] >> kSignShift)
                          : got[i] == want[i];
    if (!same && ++diffs <= 5) ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
  return diffs;
}

/// Every f16 pattern h with its exact value; and f32 values around each rounding boundary with the f16 pattern
/// that round-to-nearest-even gives: the midpoint between neighbours h and h+1 (ties go to the even mantissa), the
/// f32 values just below and above it, for both signs, from the smallest subnormal through the overflow threshold
/// 65520 (the midpoint between 65504 and infinity, which rounds to infinity).
struct HalfCases {
  std::vector<std::uint16_t> patterns;
  std::vector<float> decoded;  // exact, NaN for NaNs
  std::vector<float> toRound;
  std::vector<std::uint16_t> rounded;
};
HalfCases halfCases() {
  HalfCases c;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    c.patterns.push_back(static_cast<std::uint16_t>(h));
    c.decoded.push_back(static_cast<float>(halfValue(static_cast<std::uint16_t>(h))));
  }
  auto add = [&](float f, std::uint16_t h) {
    c.toRound.push_back(f);
    c.rounded.push_back(h);
    c.toRound.push_back(-f);
    c.rounded.push_back(static_cast<std::uint16_t>(h | 0x8000u));
  };
  for (std::uint16_t h = 0; h < 0x7C00u; ++h) {
    const auto next = static_cast<std::uint16_t>(h + 1);
    const double lo = halfValue(h);
    const double hi = next == 0x7C00u ? 65536.0 : halfValue(next);  // 2^16: where the next binade would start
    const auto mid = static_cast<float>((lo + hi) / 2);             // exact: 12 significant bits
    add(static_cast<float>(lo), h);
    add(mid, (h & 1u) ? next : h);
    add(std::nextafter(mid, 0.0f), h);
    add(std::nextafter(mid, std::numeric_limits<float>::infinity()), next);
  }
  add(std::numeric_limits<float>::infinity(), 0x7C00u);
  add(std::numeric_limits<float>::max(), 0x7C00u);
  add(std::numeric_limits<float>::denorm_min(), 0);  // f32 subnormals are far below half the smallest f16
  add(std::numeric_limits<float>::min(), 0);
  return c;
}

TEST(Half, EveryPatternDecodesToItsValue) {
  const HalfCases c = halfCases();
  forEachTarget([&](const std::string& target) {
    std::vector<float> got(c.patterns.size());
    if (target.empty()) {
      for (std::size_t i = 0; i < got.size(); ++i) got[i] = halfToFloat(c.patterns[i]);
    } else {
      halvesToFloats(c.patterns.data(), got.data(), got.size());
    }
    std::vector<std::uint32_t> g, w;
    for (std::size_t i = 0; i < got.size(); ++i) {
      g.push_back(bits(got[i]));
      w.push_back(bits(c.decoded[i]));
    }
    EXPECT_EQ(countDiffs(
                  g, w, [](std::uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }, "decode " + target),
              0u);
  });
}

TEST(Half, EveryPatternRoundTripsAndEveryBoundaryRoundsToNearestEven) {
  const HalfCases c = halfCases();
  forEachTarget([&](const std::string& target) {
    std::vector<std::uint16_t> back(c.decoded.size()), rounded(c.toRound.size());
    if (target.empty()) {
      for (std::size_t i = 0; i < back.size(); ++i) back[i] = floatToHalf(c.decoded[i]);
      for (std::size_t i = 0; i < rounded.size(); ++i) rounded[i] = floatToHalf(c.toRound[i]);
    } else {
      floatsToHalves(c.decoded.data(), back.data(), back.size());
      floatsToHalves(c.toRound.data(), rounded.data(), rounded.size());
    }
    EXPECT_EQ(countDiffs(back, c.patterns, isHalfNaN, "round trip " + target), 0u);
    EXPECT_EQ(countDiffs(rounded, c.rounded, isHalfNaN, "rounding " + target), 0u);
  });
}

TEST(Bf16, EveryPatternRoundTripsAndEveryBoundaryRoundsToNearestEven) {
  // bf16 is the top half of an f32: pattern h means the f32 h << 16; the midpoint to h+1 is (h << 16) + 0x8000.
  std::vector<std::uint16_t> patterns, rounded;
  std::vector<float> decoded, toRound;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    patterns.push_back(static_cast<std::uint16_t>(h));
    decoded.push_back(std::bit_cast<float>(h << 16));
    if ((h & 0x7FFFu) >= 0x7F80u) continue;  // infinities and NaNs have no upper neighbour
    const std::uint32_t mid = (h << 16) + 0x8000u;
    const auto next = static_cast<std::uint16_t>(h + 1);  // for 0x7F7F: infinity, which the tie rounds to
    for (auto [f, want] : {std::pair{mid, (h & 1u) ? next : static_cast<std::uint16_t>(h)},
                           std::pair{mid - 1, static_cast<std::uint16_t>(h)}, std::pair{mid + 1, next}}) {
      toRound.push_back(std::bit_cast<float>(f));
      rounded.push_back(want);
    }
  }
  forEachTarget([&](const std::string& target) {
    std::vector<float> got(patterns.size());
    std::vector<std::uint16_t> back(decoded.size()), r(toRound.size());
    if (target.empty()) {
      for (std::size_t i = 0; i < got.size(); ++i) got[i] = bf16ToFloat(patterns[i]);
      for (std::size_t i = 0; i < back.size(); ++i) back[i] = floatToBf16(decoded[i]);
      for (std::size_t i = 0; i < r.size(); ++i) r[i] = floatToBf16(toRound[i]);
    } else {
      bf16sToFloats(patterns.data(), got.data(), got.size());
      floatsToBf16s(decoded.data(), back.data(), back.size());
      floatsToBf16s(toRound.data(), r.data(), r.size());
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(bits(got[i]), bits(decoded[i])) << target << " " << i;
    }
    EXPECT_EQ(countDiffs(back, patterns, isBf16NaN, "bf16 round trip " + target), 0u);
    EXPECT_EQ(countDiffs(r, rounded, isBf16NaN, "bf16 rounding " + target), 0u);
  });
}

/// One element of a (op) b as the scalar definition gives it: computed in f32 for the 16-bit floats.
template <typename T, typename Load, typename Store>
T scalarCombine(ReduceOp op, T a, T b, Load load, Store store) {
  const auto x = load(a), y = load(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return store(x + y);
    case ReduceOp::Prod:
      return store(x * y);
    case ReduceOp::Min:
      return store(y < x ? y : x);
    case ReduceOp::Max:
      return store(x < y ? y : x);
  }
  return T{};
}

TEST(Reduce, EveryTargetMatchesTheScalarDefinitionOnEvery16BitPattern) {
  // a runs over all 65536 patterns, b over a scrambled order of them, so specials meet every kind of value. The
  // length (2^16 + 7) leaves a tail after the vector body.
  const std::size_t n = 0x10000u + 7;
  std::vector<std::uint16_t> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<std::uint16_t>(i);
    b[i] = static_cast<std::uint16_t>(i * 40503u + 12345u);
  }
  for (DType t : {DType::F16, DType::BF16}) {
    const bool half = t == DType::F16;
    auto load = [&](std::uint16_t v) { return half ? halfToFloat(v) : bf16ToFloat(v); };
    auto store = [&](float f) { return half ? floatToHalf(f) : floatToBf16(f); };
    auto isNaN = [&](std::uint16_t v) { return half ? isHalfNaN(v) : isBf16NaN(v); };
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      std::vector<std::uint16_t> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = scalarCombine(op, a[i], b[i], load, store);
      forEachTarget([&](const std::string& target) {
        if (target.empty()) return;
        const std::string what = fmt::format("{} {} {}", toString(t), toString(op), target);
        std::vector<std::uint16_t> got(n);
        reduceElements(t, op, got.data(), a.data(), b.data(), n);
        EXPECT_EQ(countDiffs(got, want, isNaN, what, NaNSign::Any), 0u);
        got = a;  // in place, as RecvReduce into the output runs
        reduceElements(t, op, got.data(), got.data(), b.data(), n);
        EXPECT_EQ(countDiffs(got, want, isNaN, what + " dst=a", NaNSign::Any), 0u);
        got = b;
        reduceElements(t, op, got.data(), a.data(), got.data(), n);
        EXPECT_EQ(countDiffs(got, want, isNaN, what + " dst=b", NaNSign::Any), 0u);
      });
    }
  }
}

TEST(Reduce, EveryTargetMatchesTheScalarDefinitionForWideTypes) {
  const std::size_t n = 1000 + 3;
  auto check = [&](auto sample, DType t) {
    using T = decltype(sample);
    std::vector<T> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<T>((static_cast<std::int64_t>(i * 2654435761u) % 2001) - 1000);
      b[i] = static_cast<T>((static_cast<std::int64_t>(i * 40503u) % 1999) - 999);
    }
    if constexpr (std::is_integral_v<T>) {
      a[1] = std::numeric_limits<T>::max();  // sums and products wrap
      b[1] = 3;
    } else {
      a[2] = std::numeric_limits<T>::quiet_NaN();
      b[3] = std::numeric_limits<T>::quiet_NaN();
      a[4] = -0.0;
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      std::vector<T> want(n);
      for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          const auto x = static_cast<U>(a[i]), y = static_cast<U>(b[i]);
          want[i] = op == ReduceOp::Sum    ? static_cast<T>(x + y)
                    : op == ReduceOp::Prod ? static_cast<T>(x * y)
                                           : scalarCombine(
                                                 op, a[i], b[i], [](T v) { return v; }, [](T v) { return v; });
        } else {
          want[i] = scalarCombine(
              op, a[i], b[i], [](T v) { return v; }, [](T v) { return v; });
        }
      }
      forEachTarget([&](const std::string& target) {
        if (target.empty()) return;
        std::vector<T> got(n);
        reduceElements(t, op, got.data(), a.data(), b.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          const bool same = std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
          ASSERT_TRUE(same) << toString(t) << " " << toString(op) << " " << target << " element " << i;
        }
      });
    }
  };
  check(float{}, DType::F32);
  check(double{}, DType::F64);
  check(std::int32_t{}, DType::I32);
  check(std::int64_t{}, DType::I64);
}

TEST(Reduce, EveryTargetDividesLikeTheScalarDefinition) {
  std::vector<std::uint16_t> h(0x7C00u);  // every finite non-negative f16
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  forEachTarget([&](const std::string& target) {
    if (target.empty()) return;
    for (int divisor : {3, 7, 17}) {
      std::vector<std::uint16_t> got = h, want(h.size());
      divideElements(DType::F16, got.data(), got.size(), divisor);
      for (std::size_t i = 0; i < h.size(); ++i) want[i] = floatToHalf(halfToFloat(h[i]) / static_cast<float>(divisor));
      EXPECT_EQ(countDiffs(got, want, isHalfNaN, fmt::format("f16 / {} {}", divisor, target)), 0u);
    }
  });
}

TEST(Reduce, KernelsAndAliasing) {
  std::vector<float> a{1, 5, -3}, b{4, 2, 7}, d(3);
  reduceElements(DType::F32, ReduceOp::Sum, d.data(), a.data(), b.data(), 3);
  EXPECT_EQ(d, (std::vector<float>{5, 7, 4}));
  reduceElements(DType::F32, ReduceOp::Max, a.data(), a.data(), b.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{4, 5, 7}));
  reduceElements(DType::F32, ReduceOp::Min, b.data(), a.data(), b.data(), 3);
  EXPECT_EQ(b, (std::vector<float>{4, 2, 7}));
  std::vector<std::int32_t> i{2147483647, -4}, j{1, 3};
  reduceElements(DType::I32, ReduceOp::Sum, i.data(), i.data(), j.data(), 2);
  EXPECT_EQ(i, (std::vector<std::int32_t>{-2147483647 - 1, -1}));  // wraps, no UB
  std::vector<std::int64_t> p{7, -9};
  divideElements(DType::I64, p.data(), 2, 2);
  EXPECT_EQ(p, (std::vector<std::int64_t>{3, -4}));
  std::vector<std::uint16_t> h{floatToHalf(1.5f)}, g{floatToHalf(2.25f)};
  reduceElements(DType::F16, ReduceOp::Prod, h.data(), h.data(), g.data(), 1);
  EXPECT_EQ(halfToFloat(h[0]), 3.375f);
}

}  // namespace
}  // namespace collbench
