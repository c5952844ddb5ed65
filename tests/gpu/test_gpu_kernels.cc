// The device reduce and divide kernels against the host reference (collbench/reduce.h), bit for bit: every dtype
// and op, counts around the 16-byte vector width, aligned pointers, pointers sharing one misalignment (peeled head,
// then vectorised), pointers misaligned differently (scalar), and dst aliasing a or b. The split itself
// (planReduce) is checked without a device.
#include <fmt/format.h>

#include <cstring>
#include <random>
#include <vector>

#include "collbench/reduce.h"
#include "gpu_test_util.h"
#include "kernels.h"

namespace collbench::nccl {
namespace {

/// Finite values with fractional parts and both signs (floats round in every op), full-range integers (sums and
/// products wrap).
std::vector<std::byte> randomElements(DType t, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n * dtypeSize(t));
  std::uniform_real_distribution<double> real(-300.0, 300.0);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::I32: {
        const auto x = static_cast<std::int32_t>(rng());
        std::memcpy(v.data() + i * 4, &x, 4);
        break;
      }
      case DType::I64: {
        const auto x = static_cast<std::int64_t>(rng());
        std::memcpy(v.data() + i * 8, &x, 8);
        break;
      }
      default:
        storeFromDouble(t, v.data(), i, real(rng));
        break;
    }
  }
  return v;
}

struct KernelCase {
  DType dtype;
  ReduceOp op;
  std::size_t count;
  KernelAlias alias;
  std::size_t offset;        ///< elements past a 256-byte boundary, for a, b and dst
  std::size_t dstShift = 0;  ///< dst further along by this many elements (a different misalignment)
};

std::vector<KernelCase> kernelCases() {
  std::vector<KernelCase> cases;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::size_t count : {0u, 1u, 7u, 8u, 9u, 1000u, 65537u}) {
        for (KernelAlias alias : {KernelAlias::None, KernelAlias::DstIsA, KernelAlias::DstIsB}) {
          for (std::size_t offset : {0u, 1u, 3u}) cases.push_back({t, op, count, alias, offset});
        }
        for (std::size_t offset : {0u, 1u}) cases.push_back({t, op, count, KernelAlias::None, offset, 1});
      }
    }
  }
  return cases;
}

class GpuKernels : public ::testing::TestWithParam<KernelCase> {};

TEST_P(GpuKernels, ReduceMatchesHostReference) {
  COLLBENCH_REQUIRE_GPUS(1);
  const KernelCase& c = GetParam();
  const auto a = randomElements(c.dtype, c.count, 1 + c.count);
  const auto b = randomElements(c.dtype, c.count, 2 + c.count * 3);
  std::vector<std::byte> want(a.size()), got(a.size(), std::byte{0x7f});
  reduceElements(c.dtype, c.op, want.data(), a.data(), b.data(), c.count);
  reduceOnDevice(c.dtype, c.op, got.data(), a.data(), b.data(), c.count, c.alias, c.offset, c.dstShift);
  for (std::size_t i = 0; i < c.count; ++i) {
    const std::size_t es = dtypeSize(c.dtype);
    ASSERT_EQ(std::memcmp(got.data() + i * es, want.data() + i * es, es), 0)
        << "element " << i << ": device " << loadAsDouble(c.dtype, got.data(), i) << ", host "
        << loadAsDouble(c.dtype, want.data(), i) << " (a " << loadAsDouble(c.dtype, a.data(), i) << ", b "
        << loadAsDouble(c.dtype, b.data(), i) << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuKernels, ::testing::ValuesIn(kernelCases()), [](const auto& paramInfo) {
  const KernelCase& c = paramInfo.param;
  const char* alias = c.alias == KernelAlias::None ? "dst" : c.alias == KernelAlias::DstIsA ? "dstIsA" : "dstIsB";
  return fmt::format("{}_{}_c{}_{}_off{}{}", toString(c.dtype), toString(c.op), c.count, alias, c.offset,
                     c.dstShift ? fmt::format("_dstShift{}", c.dstShift) : "");
});

TEST(GpuKernelsDivide, MatchesHostReference) {
  COLLBENCH_REQUIRE_GPUS(1);
  for (DType t : kAllDTypes) {
    for (int divisor : {1, 3, 7, 8}) {
      for (std::size_t count : {1u, 1000u, 65537u}) {
        auto want = randomElements(t, count, 99 + count);
        auto got = want;
        divideElements(t, want.data(), count, divisor);
        divideOnDevice(t, got.data(), count, divisor);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0)
            << toString(t) << " / " << divisor << " count " << count;
      }
    }
  }
}

TEST(GpuKernelsBench, HooksTimeSomething) {
  COLLBENCH_REQUIRE_GPUS(1);
  EXPECT_GT(timeDeviceCopy(1 << 20, 3), 0.0);
  EXPECT_GT(timeReduceKernel(DType::BF16, ReduceOp::Sum, 1 << 20, 3), 0.0);
}

// ---- No device: how launchReduce splits the elements (planReduce only looks at the addresses) ----

TEST(HostKernelPlan, PeelsAHeadWhenAllPointersShareTheMisalignment) {
  alignas(16) static std::byte base[256];
  auto at = [](std::size_t byteOffset) -> const void* { return base + byteOffset; };
  const ReducePlan aligned = planReduce(at(0), at(64), at(128), 4, 100);
  EXPECT_TRUE(aligned.vectorized);
  EXPECT_EQ(aligned.head, 0u);
  // bf16 two bytes past a boundary: 7 elements reach the next one, whatever each pointer's boundary is.
  const ReducePlan bf16 = planReduce(at(2), at(34), at(130), 2, 1000);
  EXPECT_TRUE(bf16.vectorized);
  EXPECT_EQ(bf16.head, 7u);
  const ReducePlan f32 = planReduce(at(4), at(20), at(36), 4, 1000);
  EXPECT_TRUE(f32.vectorized);
  EXPECT_EQ(f32.head, 3u);
  EXPECT_EQ(planReduce(at(8), at(24), at(40), 8, 1000).head, 1u);  // f64 one element short
  EXPECT_EQ(planReduce(at(4), at(20), at(36), 4, 2).head, 2u);     // never more than count
}

TEST(HostKernelPlan, DifferentMisalignmentsGoElementByElement) {
  alignas(16) static std::byte base[256];
  auto at = [](std::size_t byteOffset) -> const void* { return base + byteOffset; };
  EXPECT_FALSE(planReduce(at(4), at(8), at(4), 4, 1000).vectorized);    // a differs
  EXPECT_FALSE(planReduce(at(0), at(0), at(2), 2, 1000).vectorized);    // b differs
  EXPECT_FALSE(planReduce(at(2), at(18), at(34), 4, 1000).vectorized);  // not a whole f32 from the boundary
  EXPECT_EQ(planReduce(at(2), at(18), at(34), 4, 1000).head, 0u);
}

}  // namespace
}  // namespace collbench::nccl
