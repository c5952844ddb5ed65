#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
