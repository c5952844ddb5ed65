#pragma once
// Device reduction kernels (kernels.cu, the only nvcc translation unit). One templated kernel per (dtype, op), chosen
// by a switch: 6 dtypes x 4 ops (Avg runs as Sum) plus 6 divide kernels, so the build stays small.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "collbench/types.h"

namespace collbench::nccl {

/// dst[i] = a[i] (op) b[i] on `stream`; dst may alias a or b exactly. f16/bf16 combine in f32 and round to nearest
/// even, integers wrap, min/max compare as the host reference (collbench/reduce.h) does, so results match
/// reduceElements() bit for bit. Returns the launch status (cudaSuccess for count 0, which launches nothing).
cudaError_t launchReduce(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count,
                         cudaStream_t stream);
/// How launchReduce covers `count` elements of `elemSize` bytes at these addresses: when the three pointers lie the
/// same number of bytes (a whole number of elements) past a 16-byte boundary, `head` elements one by one up to that
/// boundary and the rest in 16-byte packs (`vectorized`); otherwise every element one by one.
struct ReducePlan {
  bool vectorized = false;
  std::size_t head = 0;
};
ReducePlan planReduce(const void* dst, const void* a, const void* b, std::size_t elemSize, std::size_t count);

/// dst[i] /= divisor (integers truncate), as divideElements().
cudaError_t launchDivide(DType t, void* dst, std::size_t count, int divisor, cudaStream_t stream);

}  // namespace collbench::nccl
