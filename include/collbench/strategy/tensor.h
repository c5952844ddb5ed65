#pragma once
/// The values the strategy API moves: a small dense Tensor (dtype from core, shape, contiguous row-major storage).
/// No ML framework dependency; the example model maps the storage into Eigen.
///
/// Elements of F16 and BF16 tensors are stored as their 16-bit patterns; typed access (data<T>()) is for F32, F64,
/// I32 and I64, and at()/set() convert every dtype through double.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "collbench/error.h"
#include "collbench/types.h"

namespace collbench::strategy {

/// Dimensions, outermost first. A TensorSpec may hold kUnknownDim (TF's None) where a size is not known statically.
using Shape = std::vector<std::int64_t>;
inline constexpr std::int64_t kUnknownDim = -1;

/// "[2, 3]"; unknown dims print as "?" ("[?, 3]").
std::string toString(const Shape& shape);
/// Product of the dims (1 for a scalar). Throws Error{InvalidArgument} for a negative dim.
std::size_t numElements(const Shape& shape);

/// The DType of a C++ element type: float F32, double F64, int32_t I32, int64_t I64.
template <typename T>
constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::I64;
  else
    static_assert(sizeof(T) == 0, "Tensor element types are float, double, int32_t and int64_t");
}

class Tensor {
 public:
  /// An empty F32 tensor of shape [0].
  Tensor() : Tensor(DType::F32, Shape{0}) {}
  /// Zeros of `dtype` and `shape`. Throws Error{InvalidArgument} for a negative dim.
  Tensor(DType dtype, Shape shape);

  /// A tensor holding `values`; `shape` defaults to [values.size()]. Throws when the shape's size differs.
  template <typename T>
  static Tensor fromVector(const std::vector<T>& values, Shape shape);
  template <typename T>
  static Tensor fromVector(const std::vector<T>& values) {
    return fromVector(values, Shape{static_cast<std::int64_t>(values.size())});
  }
  template <typename T>
  static Tensor scalar(T value) {
    return fromVector(std::vector<T>{value}, Shape{});
  }
  /// Any dtype from doubles (core's storeFromDouble: integers truncate toward zero, 16-bit floats round to nearest).
  static Tensor fromDoubles(DType dtype, const std::vector<double>& values, Shape shape);
  static Tensor zeros(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape)); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension `axis`; negative axes count from the end (TF). Throws when out of range.
  std::int64_t dim(int axis) const;
  std::size_t numElements() const { return data_.size() / dtypeSize(dtype_); }
  std::size_t numBytes() const { return data_.size(); }

  void* raw() { return data_.data(); }
  const void* raw() const { return data_.data(); }
  /// Typed view; throws Error{InvalidArgument} when T does not match dtype().
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  template <typename T>
  std::vector<T> toVector() const;

  /// Flat element i as double / set from double (any dtype). Throws when i is out of range.
  double at(std::size_t i) const;
  void set(std::size_t i, double value);
  /// All elements as doubles.
  std::vector<double> toDoubles() const;

  /// Same data, new shape with the same element count (one dim may be kUnknownDim and is inferred, as TF's -1).
  Tensor reshaped(Shape shape) const;
  /// Rows [begin, end) of dimension 0 (rank >= 1; 0 <= begin <= end <= dim(0)).
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  /// Stacks equal-shaped tensors along a new dimension 0 (TF's stack; what Dataset.batch does). Errors name the
  /// index of the first tensor whose dtype or shape differs from tensors[0]'s. An empty list is an error.
  static Tensor stack(const std::vector<Tensor>& tensors);
  /// Concatenates along dimension 0; the other dims and the dtype must agree (errors name the index).
  static Tensor concat(const std::vector<Tensor>& tensors);
  /// TF's reduce_sum over one axis (negative counts from the end): the axis is removed. Accumulates in double.
  Tensor sumAlongAxis(int axis) const;
  /// Converts every element through double.
  Tensor cast(DType dtype) const;

  /// "float[2, 3]".
  std::string describe() const;
  /// Same dtype, shape and bytes.
  bool operator==(const Tensor& other) const {
    return dtype_ == other.dtype_ && shape_ == other.shape_ && data_ == other.data_;
  }

 private:
  template <typename T>
  void checkType() const;
  std::size_t normalizeAxis(int axis) const;

  DType dtype_;
  Shape shape_;
  std::vector<std::byte> data_;
};

// ---------------------------------------------------------------------------------------------------------------
// Template definitions

[[noreturn]] void throwTensorTypeMismatch(DType have, DType want);

template <typename T>
void Tensor::checkType() const {
  if (dtypeOf<T>() != dtype_) throwTensorTypeMismatch(dtype_, dtypeOf<T>());
}

template <typename T>
T* Tensor::data() {
  checkType<T>();
  return reinterpret_cast<T*>(data_.data());
}

template <typename T>
const T* Tensor::data() const {
  checkType<T>();
  return reinterpret_cast<const T*>(data_.data());
}

template <typename T>
std::vector<T> Tensor::toVector() const {
  const T* p = data<T>();
  return std::vector<T>(p, p + numElements());
}

template <typename T>
Tensor Tensor::fromVector(const std::vector<T>& values, Shape shape) {
  Tensor t(dtypeOf<T>(), std::move(shape));
  if (t.numElements() != values.size()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("Tensor::fromVector: {} values do not fill shape {}", values.size(), toString(t.shape())));
  }
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace collbench::strategy
