#pragma once
/// CPU reduction kernels over contiguous element ranges; f16/bf16 accumulate in f32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/types.h"

namespace collbench {

/// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b exactly (not partially). Avg combines as Sum.
/// Integer sums and products wrap; min is `b < a ? b : a` and max `a < b ? b : a` (so a NaN in b gives a).
void reduceElements(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
/// dst[i] /= divisor (Avg's final step). Integers divide with truncation, as NCCL does.
void divideElements(DType t, void* dst, std::size_t count, int divisor);

/// Conversions used by kernels, references and tests.
float halfToFloat(std::uint16_t h);
std::uint16_t floatToHalf(float f);
float bf16ToFloat(std::uint16_t h);
std::uint16_t floatToBf16(float f);
/// Bulk versions of the four conversions, with the kernels' SIMD code; they give the same bits as the scalar ones.
void halvesToFloats(const std::uint16_t* in, float* out, std::size_t n);
void floatsToHalves(const float* in, std::uint16_t* out, std::size_t n);
void bf16sToFloats(const std::uint16_t* in, float* out, std::size_t n);
void floatsToBf16s(const float* in, std::uint16_t* out, std::size_t n);

/// The SIMD instruction sets the kernels were built for that this CPU runs, best first (Highway's names, e.g.
/// "AVX2", "SSE4", "EMU128"), and the one they use now.
std::vector<std::string> reduceTargets();
std::string reduceTarget();
/// Makes the kernels use `target` (one of reduceTargets()); "" goes back to the best. For tests and benches: not
/// safe while another thread runs a kernel.
void useReduceTarget(std::string_view target);

/// Element i of a typed buffer as double, and the reverse (rounding to nearest).
double loadAsDouble(DType t, const void* base, std::size_t i);
void storeFromDouble(DType t, void* base, std::size_t i, double v);

}  // namespace collbench
