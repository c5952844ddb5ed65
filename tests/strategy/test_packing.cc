// Gradient packing (TF group_by_size on the reversed list) and its use by the strategy's batch all-reduce.
#include <gtest/gtest.h>

#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/strategy/packing.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using testing::expectInvalid;
using testing::makeStrategy;

std::vector<std::vector<std::size_t>> indicesOf(const std::vector<Pack>& packs) {
  std::vector<std::vector<std::size_t>> out;
  for (const Pack& p : packs) out.push_back(p.indices);
  return out;
}

std::vector<PackInput> f32Sizes(std::initializer_list<std::size_t> bytes) {
  std::vector<PackInput> out;
  for (std::size_t b : bytes) out.push_back({DType::F32, b});
  return out;
}

TEST(Packing, NewPackOnlyWhenTheCurrentHoldsMoreThanBytesPerPack) {
  // Reversed: 10, 300 | 50, 200, 100. The first pack reaches 310 > 250; the second holds exactly 250 after b, which
  // is not more than 250, so a joins it.
  const auto packs = packValues(f32Sizes({100, 200, 50, 300, 10}), 250);
  EXPECT_EQ(indicesOf(packs), (std::vector<std::vector<std::size_t>>{{4, 3}, {2, 1, 0}}));
  EXPECT_EQ(packs[0].bytes, 310u);
  EXPECT_EQ(packs[1].bytes, 350u);
  for (std::size_t i = 0; i + 1 < packs.size(); ++i) EXPECT_GT(packs[i].bytes, 250u) << "every pack but the last";
}

TEST(Packing, ZeroMeansOnePackInReversedOrder) {
  EXPECT_EQ(indicesOf(packValues(f32Sizes({4, 4, 4}), 0)), (std::vector<std::vector<std::size_t>>{{2, 1, 0}}));
  EXPECT_EQ(indicesOf(packValues(f32Sizes({4, 4, 4}), 1)), (std::vector<std::vector<std::size_t>>{{2}, {1}, {0}}));
  EXPECT_EQ(indicesOf(packValues(f32Sizes({4, 4, 4}), 4)), (std::vector<std::vector<std::size_t>>{{2, 1}, {0}}));
  EXPECT_TRUE(packValues({}, 16).empty());
  expectInvalid([] { packValues(f32Sizes({4}), -1); }, {"bytes_per_pack must be >= 0", "-1"});
}

TEST(Packing, DtypeChangeStartsAPack) {
  const std::vector<PackInput> values = {{DType::F32, 8}, {DType::F64, 8}, {DType::F64, 8}, {DType::F32, 8}};
  const auto packs = packValues(values, 0);
  EXPECT_EQ(indicesOf(packs), (std::vector<std::vector<std::size_t>>{{3}, {2, 1}, {0}}));
  EXPECT_EQ(packs[1].dtype, DType::F64);
}

TEST(Packing, BatchAllReducePacksAndRestoresOrder) {
  // Five gradients of 4, 8, 12, 16, 20 floats (16..80 bytes), bytes_per_pack 40: reversed 80 | 64 | 48 | 32, 16.
  auto s = makeStrategy(1, 3, {40, std::nullopt, CommunicationImplementation::Ring});
  const PerReplicaValues<std::vector<Tensor>> out = s->run([] {
    const float id = static_cast<float>(getReplicaContext()->replicaIdInSyncGroup());
    std::vector<Tensor> grads;
    for (int k = 1; k <= 5; ++k) {
      std::vector<float> g(static_cast<std::size_t>(4 * k));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = 1000.0f * static_cast<float>(k) + static_cast<float>(i) + id;
      grads.push_back(Tensor::fromVector(g));
    }
    return getReplicaContext()->allReduce(ReduceOp::Mean, grads);
  });
  for (int h = 0; h < 3; ++h) {
    ASSERT_EQ(out[h].size(), 5u);
    for (int k = 1; k <= 5; ++k) {
      const Tensor& g = out[h][static_cast<std::size_t>(k - 1)];
      ASSERT_EQ(g.numElements(), static_cast<std::size_t>(4 * k));
      for (std::size_t i = 0; i < g.numElements(); ++i) {
        EXPECT_EQ(g.at(i), 1000.0 * k + static_cast<double>(i) + 1.0) << "gradient " << k << " element " << i;
      }
    }
  }
  const Trace t = s->trace();
  ASSERT_EQ(t.events.size(), 4u);
  const std::vector<std::size_t> bytes = {80, 64, 48, 48};
  for (std::size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(t.events[p].pack, static_cast<int>(p));
    EXPECT_EQ(t.events[p].bytes, bytes[p]);
    EXPECT_EQ(t.events[p].step, 0);
  }
}

TEST(Packing, PerCallOptionsOverride) {
  auto s = makeStrategy(1, 2);
  s->run([] {
    std::vector<Tensor> grads(4, Tensor(DType::F32, {4}));
    getReplicaContext()->allReduce(ReduceOp::Sum, grads);  // one pack
    getReplicaContext()->allReduce(ReduceOp::Sum, grads, {1, std::nullopt, CommunicationImplementation::Ring});  // 4
  });
  const Trace t = s->trace();
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[0].bytes, 64u);
  EXPECT_EQ(t.events[4].pack, 3);
  EXPECT_EQ(t.events[4].algorithm, "ring");
}

}  // namespace
}  // namespace collbench::strategy
