#pragma once
/// CPU reduction kernels over contiguous element ranges; f16/bf16 accumulate in f32.
#include <cstddef>

#include "collbench/types.h"

namespace collbench {

/// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b exactly. Avg combines as Sum.
void reduceElements(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
/// dst[i] /= divisor (Avg's final step). Integers divide with truncation, as NCCL does.
void divideElements(DType t, void* dst, std::size_t count, int divisor);

/// Conversions used by kernels, references and tests.
float halfToFloat(std::uint16_t h);
std::uint16_t floatToHalf(float f);
float bf16ToFloat(std::uint16_t h);
std::uint16_t floatToBf16(float f);
/// Element i of a typed buffer as double, and the reverse (rounding to nearest).
double loadAsDouble(DType t, const void* base, std::size_t i);
void storeFromDouble(DType t, void* base, std::size_t i, double v);

}  // namespace collbench
