#include <gtest/gtest.h>

#include "collbench/strategy/tensor.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using testing::expectInvalid;

TEST(Tensor, ZerosShapeAndBytes) {
  Tensor t(DType::F64, {2, 3});
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.numElements(), 6u);
  EXPECT_EQ(t.numBytes(), 48u);
  EXPECT_EQ(t.dim(-1), 3);
  for (double v : t.toDoubles()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(t.describe(), "double[2, 3]");
  EXPECT_EQ(Tensor().describe(), "float[0]");
  EXPECT_EQ(Tensor::scalar(3.5f).shape(), Shape{});
  EXPECT_EQ(Tensor::scalar(3.5f).numElements(), 1u);
}

TEST(Tensor, FromVectorAndTypedAccess) {
  Tensor t = Tensor::fromVector(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::I32);
  EXPECT_EQ(t.data<std::int32_t>()[4], 5);
  EXPECT_EQ(t.at(5), 6.0);
  t.set(0, 9.0);
  EXPECT_EQ(t.toVector<std::int32_t>().front(), 9);
  expectInvalid([&] { t.data<float>(); }, {"int32", "float"});
  expectInvalid([] { Tensor::fromVector(std::vector<float>{1, 2, 3}, {2, 2}); }, {"3 values", "[2, 2]"});
  expectInvalid([] { Tensor(DType::F32, {2, -1}); }, {"negative", "[2, ?]"});
  expectInvalid([&] { t.at(6); }, {"element 6", "int32[2, 3]"});
  expectInvalid([&] { t.dim(2); }, {"axis 2", "rank 2"});
}

TEST(Tensor, HalfPrecisionThroughDoubles) {
  Tensor h = Tensor::fromDoubles(DType::F16, {0.5, -2.0, 1024.0}, {3});
  EXPECT_EQ(h.numBytes(), 6u);
  EXPECT_EQ(h.toDoubles(), (std::vector<double>{0.5, -2.0, 1024.0}));
  Tensor b = h.cast(DType::BF16);
  EXPECT_EQ(b.toDoubles(), (std::vector<double>{0.5, -2.0, 1024.0}));
}

TEST(Tensor, ReshapeSliceStackConcat) {
  Tensor t = Tensor::fromVector(std::vector<float>{0, 1, 2, 3, 4, 5});
  EXPECT_EQ(t.reshaped({3, kUnknownDim}).shape(), (Shape{3, 2}));
  expectInvalid([&] { t.reshaped({4, 2}); }, {"cannot reshape", "[4, 2]"});
  expectInvalid([&] { t.reshaped({-1, -1}); }, {"at most one"});
  Tensor m = t.reshaped({3, 2});
  Tensor rows = m.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.toVector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(m.slice(3, 3).shape(), (Shape{0, 2}));
  expectInvalid([&] { m.slice(2, 4); }, {"[2, 4)", "float[3, 2]"});
  expectInvalid([] { Tensor::scalar(1.0f).slice(0, 0); }, {"scalar"});

  Tensor s =
      Tensor::stack({Tensor::fromVector(std::vector<float>{1, 2}), Tensor::fromVector(std::vector<float>{3, 4})});
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.toVector<float>(), (std::vector<float>{1, 2, 3, 4}));
  expectInvalid([] { Tensor::stack({Tensor(DType::F32, {2}), Tensor(DType::F32, {3})}); }, {"tensor 1", "float[3]"});
  expectInvalid([] { Tensor::stack({}); }, {"no tensors"});

  Tensor c = Tensor::concat({m, rows});
  EXPECT_EQ(c.shape(), (Shape{5, 2}));
  expectInvalid([&] { Tensor::concat({m, Tensor(DType::F32, {1, 3})}); }, {"tensor 1", "float[1, 3]"});
  expectInvalid([&] { Tensor::concat({m, Tensor(DType::F64, {1, 2})}); }, {"tensor 1", "double[1, 2]"});
}

TEST(Tensor, SumAlongAxis) {
  Tensor m = Tensor::fromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(m.sumAlongAxis(0).toVector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(m.sumAlongAxis(1).toVector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(m.sumAlongAxis(-1).shape(), (Shape{2}));
  EXPECT_EQ(Tensor(DType::F32, {0, 3}).sumAlongAxis(0).toVector<float>(), (std::vector<float>{0, 0, 0}));
  expectInvalid([&] { m.sumAlongAxis(2); }, {"axis 2"});
  expectInvalid([&] { m.sumAlongAxis(-3); }, {"axis -3"});
}

TEST(Tensor, EqualityComparesDtypeShapeBytes) {
  Tensor a = Tensor::fromVector(std::vector<float>{1, 2});
  EXPECT_EQ(a, Tensor::fromVector(std::vector<float>{1, 2}));
  EXPECT_FALSE(a == a.reshaped({1, 2}));
  EXPECT_FALSE(a == a.cast(DType::F64));
  EXPECT_EQ(toString(Shape{kUnknownDim, 3}), "[?, 3]");
}

}  // namespace
}  // namespace collbench::strategy
