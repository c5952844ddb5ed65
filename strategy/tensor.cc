#include "collbench/strategy/tensor.h"

#include <fmt/format.h>

#include <limits>

#include "collbench/reduce.h"

namespace collbench::strategy {

std::string toString(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += shape[i] == kUnknownDim ? std::string("?") : std::to_string(shape[i]);
  }
  return out + "]";
}

std::size_t numElements(const Shape& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(Errc::InvalidArgument, fmt::format("shape {} has a negative dimension", toString(shape)));
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

void throwTensorTypeMismatch(DType have, DType want) {
  throw Error(Errc::InvalidArgument,
              fmt::format("tensor holds {} elements, accessed as {}", toString(have), toString(want)));
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), data_(strategy::numElements(shape_) * dtypeSize(dtype)) {}

Tensor Tensor::fromDoubles(DType dtype, const std::vector<double>& values, Shape shape) {
  Tensor t(dtype, std::move(shape));
  if (t.numElements() != values.size()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("Tensor::fromDoubles: {} values do not fill shape {}", values.size(), toString(t.shape())));
  }
  for (std::size_t i = 0; i < values.size(); ++i) storeFromDouble(dtype, t.raw(), i, values[i]);
  return t;
}

std::size_t Tensor::normalizeAxis(int axis) const {
  const int r = rank();
  const int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw Error(Errc::InvalidArgument, fmt::format("axis {} is out of range for {} (rank {})", axis, describe(), r));
  }
  return static_cast<std::size_t>(a);
}

std::int64_t Tensor::dim(int axis) const { return shape_[normalizeAxis(axis)]; }

double Tensor::at(std::size_t i) const {
  if (i >= numElements()) {
    throw Error(Errc::InvalidArgument, fmt::format("element {} is out of range for {}", i, describe()));
  }
  return loadAsDouble(dtype_, raw(), i);
}

void Tensor::set(std::size_t i, double value) {
  if (i >= numElements()) {
    throw Error(Errc::InvalidArgument, fmt::format("element {} is out of range for {}", i, describe()));
  }
  storeFromDouble(dtype_, raw(), i, value);
}

std::vector<double> Tensor::toDoubles() const {
  std::vector<double> out(numElements());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = loadAsDouble(dtype_, raw(), i);
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  int unknown = -1;
  std::size_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == kUnknownDim) {
      if (unknown >= 0) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("reshape to {}: at most one dimension may be -1", toString(shape)));
      }
      unknown = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw Error(Errc::InvalidArgument, fmt::format("reshape to {}: negative dimension", toString(shape)));
    } else {
      known *= static_cast<std::size_t>(shape[i]);
    }
  }
  if (unknown >= 0) {
    if (known == 0 || numElements() % known != 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("cannot reshape {} ({} elements) to {}", describe(), numElements(), toString(shape)));
    }
    shape[static_cast<std::size_t>(unknown)] = static_cast<std::int64_t>(numElements() / known);
    known = numElements();
  }
  if (known != numElements()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("cannot reshape {} ({} elements) to {}", describe(), numElements(), toString(shape)));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  if (rank() < 1) throw Error(Errc::InvalidArgument, fmt::format("cannot slice the scalar {}", describe()));
  if (begin < 0 || begin > end || end > shape_[0]) {
    throw Error(Errc::InvalidArgument, fmt::format("slice [{}, {}) is out of range for {}", begin, end, describe()));
  }
  Shape s = shape_;
  s[0] = end - begin;
  Tensor t(dtype_, s);
  const std::size_t rowBytes = shape_[0] == 0 ? 0 : data_.size() / static_cast<std::size_t>(shape_[0]);
  if (t.numBytes()) std::memcpy(t.raw(), data_.data() + static_cast<std::size_t>(begin) * rowBytes, t.numBytes());
  return t;
}

Tensor Tensor::stack(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw Error(Errc::InvalidArgument, "stack: no tensors");
  const Tensor& first = tensors.front();
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].dtype_ != first.dtype_ || tensors[i].shape_ != first.shape_) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("stack: tensor {} is {} but tensor 0 is {}", i, tensors[i].describe(), first.describe()));
    }
  }
  Shape s = first.shape_;
  s.insert(s.begin(), static_cast<std::int64_t>(tensors.size()));
  Tensor t(first.dtype_, s);
  std::size_t offset = 0;
  for (const Tensor& x : tensors) {
    if (x.numBytes()) std::memcpy(t.data_.data() + offset, x.raw(), x.numBytes());
    offset += x.numBytes();
  }
  return t;
}

Tensor Tensor::concat(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw Error(Errc::InvalidArgument, "concat: no tensors");
  const Tensor& first = tensors.front();
  if (first.rank() < 1) throw Error(Errc::InvalidArgument, "concat: tensor 0 is a scalar");
  Shape s = first.shape_;
  s[0] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& x = tensors[i];
    const bool sameRest =
        x.rank() == first.rank() && std::equal(x.shape_.begin() + 1, x.shape_.end(), first.shape_.begin() + 1);
    if (x.dtype_ != first.dtype_ || !sameRest) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("concat: tensor {} is {} but tensor 0 is {}", i, x.describe(), first.describe()));
    }
    s[0] += x.shape_[0];
  }
  Tensor t(first.dtype_, s);
  std::size_t offset = 0;
  for (const Tensor& x : tensors) {
    if (x.numBytes()) std::memcpy(t.data_.data() + offset, x.raw(), x.numBytes());
    offset += x.numBytes();
  }
  return t;
}

Tensor Tensor::sumAlongAxis(int axis) const {
  const std::size_t a = normalizeAxis(axis);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < a; ++i) outer *= static_cast<std::size_t>(shape_[i]);
  for (std::size_t i = a + 1; i < shape_.size(); ++i) inner *= static_cast<std::size_t>(shape_[i]);
  const auto n = static_cast<std::size_t>(shape_[a]);
  Shape s = shape_;
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(a));
  Tensor t(dtype_, s);
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t in = 0; in < inner; ++in) {
      double acc = 0;
      for (std::size_t k = 0; k < n; ++k) acc += loadAsDouble(dtype_, raw(), (o * n + k) * inner + in);
      storeFromDouble(dtype_, t.raw(), o * inner + in, acc);
    }
  }
  return t;
}

Tensor Tensor::cast(DType dtype) const {
  Tensor t(dtype, shape_);
  for (std::size_t i = 0; i < numElements(); ++i) storeFromDouble(dtype, t.raw(), i, loadAsDouble(dtype_, raw(), i));
  return t;
}

std::string Tensor::describe() const { return fmt::format("{}{}", collbench::toString(dtype_), toString(shape_)); }

}  // namespace collbench::strategy
