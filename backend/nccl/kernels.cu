// Element-wise reduce and divide kernels. Grid-stride loops over 16-byte packs (one 128-bit load per operand per
// thread: the widest global memory transaction) when the three pointers share one misalignment modulo 16 bytes: a
// head of fewer than 16 bytes is peeled off element by element and the rest is vectorised. Pointers whose
// misalignments differ (or are not whole elements) go element by element. Exact aliasing (dst == a or dst == b) is
// safe: each element is read before it is written by the same thread, and no element belongs to two threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels.h"

namespace collbench::nccl {
namespace {

/// Threads per block: a multiple of the warp size that leaves the scheduler room to hide memory latency with
/// several resident blocks per SM on sm_80/sm_90 (these kernels use no shared memory and few registers).
constexpr int kThreads = 256;
/// Grid cap for the grid-stride loops: 132 SMs (H100 SXM) x 8 resident blocks of 256 threads is about 1056 blocks;
/// 4096 keeps every SM of A100/H100/H200 busy with several waves of blocks without a block per element.
constexpr unsigned kMaxBlocks = 4096;
/// Width of one vector access (uint4).
constexpr std::size_t kVectorBytes = 16;

template <typename S>
struct Codec {
  using C = S;
  __device__ static C load(S v) { return v; }
  __device__ static S store(C v) { return v; }
};
template <>
struct Codec<__half> {
  using C = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Codec<__nv_bfloat16> {
  using C = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

// Integers wrap (two's complement through unsigned arithmetic, as the host reference), floats are IEEE.
struct SumOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename T>
  __device__ static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename S>
struct alignas(kVectorBytes) Pack {
  static constexpr int kElems = static_cast<int>(kVectorBytes / sizeof(S));
  S e[kElems];
};

template <typename S, typename O>
__device__ S combine(S a, S b) {
  using K = Codec<S>;
  return K::store(O::template apply<typename K::C>(K::load(a), K::load(b)));
}

/// d[i] = a[i] op b[i]. With `vectorized`, elements [0, head) are the scalar head that brings all three pointers to
/// a 16-byte boundary (head < one pack, so threads 0..head-1 take one each), then whole packs, then the scalar tail.
template <typename S, typename O>
__global__ void reduceKernel(S* d, const S* a, const S* b, std::size_t n, std::size_t head, bool vectorized) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t tail = 0;
  if (vectorized) {
    using P = Pack<S>;
    if (tid < head) d[tid] = combine<S, O>(a[tid], b[tid]);
    const std::size_t packs = (n - head) / P::kElems;
    const P* pa = reinterpret_cast<const P*>(a + head);
    const P* pb = reinterpret_cast<const P*>(b + head);
    P* pd = reinterpret_cast<P*>(d + head);
    for (std::size_t p = tid; p < packs; p += stride) {
      const P x = pa[p];
      const P y = pb[p];
      P z;
#pragma unroll
      for (int k = 0; k < P::kElems; ++k) z.e[k] = combine<S, O>(x.e[k], y.e[k]);
      pd[p] = z;
    }
    tail = head + packs * P::kElems;
  }
  for (std::size_t i = tail + tid; i < n; i += stride) d[i] = combine<S, O>(a[i], b[i]);
}

template <typename S>
__global__ void divideKernel(S* d, std::size_t n, int divisor) {
  using K = Codec<S>;
  using C = typename K::C;
  const C div = static_cast<C>(divisor);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    d[i] = K::store(K::load(d[i]) / div);
  }
}

unsigned blocksFor(std::size_t work) {
  const std::size_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

template <typename S, typename O>
cudaError_t launchTyped(void* dst, const void* a, const void* b, std::size_t n, cudaStream_t stream) {
  const ReducePlan plan = planReduce(dst, a, b, sizeof(S), n);
  const std::size_t rest = n - plan.head;
  const std::size_t work = plan.vectorized ? rest / Pack<S>::kElems + rest % Pack<S>::kElems : n;  // >= 1 block > head
  reduceKernel<S, O><<<blocksFor(work), kThreads, 0, stream>>>(static_cast<S*>(dst), static_cast<const S*>(a),
                                                               static_cast<const S*>(b), n, plan.head, plan.vectorized);
  return cudaGetLastError();
}

template <typename S>
cudaError_t launchOp(ReduceOp op, void* dst, const void* a, const void* b, std::size_t n, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return launchTyped<S, SumOp>(dst, a, b, n, stream);
    case ReduceOp::Prod:
      return launchTyped<S, ProdOp>(dst, a, b, n, stream);
    case ReduceOp::Min:
      return launchTyped<S, MinOp>(dst, a, b, n, stream);
    case ReduceOp::Max:
      return launchTyped<S, MaxOp>(dst, a, b, n, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename S>
cudaError_t launchDivideTyped(void* dst, std::size_t n, int divisor, cudaStream_t stream) {
  divideKernel<S><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<S*>(dst), n, divisor);
  return cudaGetLastError();
}

}  // namespace

ReducePlan planReduce(const void* dst, const void* a, const void* b, std::size_t elemSize, std::size_t count) {
  auto misalignment = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVectorBytes; };
  const std::size_t mis = misalignment(dst);
  if (misalignment(a) != mis || misalignment(b) != mis || mis % elemSize != 0) return {false, 0};
  return {true, std::min(count, (kVectorBytes - mis) % kVectorBytes / elemSize)};
}

cudaError_t launchReduce(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::F32:
      return launchOp<float>(op, dst, a, b, count, stream);
    case DType::F64:
      return launchOp<double>(op, dst, a, b, count, stream);
    case DType::F16:
      return launchOp<__half>(op, dst, a, b, count, stream);
    case DType::BF16:
      return launchOp<__nv_bfloat16>(op, dst, a, b, count, stream);
    case DType::I32:
      return launchOp<std::int32_t>(op, dst, a, b, count, stream);
    case DType::I64:
      return launchOp<std::int64_t>(op, dst, a, b, count, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchDivide(DType t, void* dst, std::size_t count, int divisor, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (divisor <= 0) return cudaErrorInvalidValue;
  switch (t) {
    case DType::F32:
      return launchDivideTyped<float>(dst, count, divisor, stream);
    case DType::F64:
      return launchDivideTyped<double>(dst, count, divisor, stream);
    case DType::F16:
      return launchDivideTyped<__half>(dst, count, divisor, stream);
    case DType::BF16:
      return launchDivideTyped<__nv_bfloat16>(dst, count, divisor, stream);
    case DType::I32:
      return launchDivideTyped<std::int32_t>(dst, count, divisor, stream);
    case DType::I64:
      return launchDivideTyped<std::int64_t>(dst, count, divisor, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace collbench::nccl
