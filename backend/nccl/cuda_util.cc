#include "cuda_util.h"

#include <cstdlib>
#include <string_view>

namespace collbench::nccl {

std::string shortFile(const char* file) {
  const std::string_view f(file);
  for (std::string_view marker : {"backend/nccl/", "tests/gpu/", "bench/gpu/"}) {
    const auto at = f.rfind(marker);
    if (at != std::string_view::npos) return std::string(f.substr(at));
  }
  return std::string(f);
}

namespace {

std::string rankPrefix(int rank) { return rank == Error::kNoRank ? std::string() : fmt::format("rank {}: ", rank); }

}  // namespace

void throwCuda(cudaError_t e, const char* call, const char* file, int line, int rank) {
  // Clear the sticky "last error" of non-fatal failures, so that the next call does not report this one again.
  (void)cudaGetLastError();
  throw Error(Errc::BackendError,
              fmt::format("{}{} failed: {} ({}) at {}:{}", rankPrefix(rank), call, cudaGetErrorString(e),
                          cudaGetErrorName(e), shortFile(file), line),
              rank);
}

void throwNccl(ncclResult_t r, const char* call, const char* file, int line, int rank, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  const std::string detail = last && *last ? fmt::format(" ({})", last) : std::string();
  // ncclRemoteError: a peer failed or went away; everything else is a local fault or misuse.
  throw Error(r == ncclRemoteError ? Errc::PeerFailure : Errc::BackendError,
              fmt::format("{}{} failed: {}{} at {}:{}", rankPrefix(rank), call, ncclGetErrorString(r), detail,
                          shortFile(file), line),
              rank);
}

ncclDataType_t toNccl(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
  }
  COLLBENCH_CHECK(false, "unknown dtype {}", static_cast<int>(t));
  return ncclFloat32;
}

ncclRedOp_t toNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Prod:
      return ncclProd;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Avg:
      return ncclAvg;
  }
  COLLBENCH_CHECK(false, "unknown reduce op {}", static_cast<int>(op));
  return ncclSum;
}

std::byte* DeviceMemory::ensure(std::size_t bytes, int device, int rank) {
  if (ptr_ && capacity_ >= bytes && device_ == device) return ptr_;
  release();
  // cudaMalloc(0) returns no pointer; one byte keeps "bound" buffers non-null for zero-byte collectives.
  const std::size_t want = bytes ? bytes : 1;
  void* p = nullptr;
  COLLBENCH_CUDA_RANK(rank, cudaMalloc(&p, want));
  ptr_ = static_cast<std::byte*>(p);
  capacity_ = want;
  device_ = device;
  return ptr_;
}

void DeviceMemory::release() {
  if (!ptr_) return;
  int current = 0;
  // Best effort: frees happen in destructors and after faults, where throwing would hide the first error.
  if (cudaGetDevice(&current) == cudaSuccess && current != device_) {
    (void)cudaSetDevice(device_);
    (void)cudaFree(ptr_);
    (void)cudaSetDevice(current);
  } else {
    (void)cudaFree(ptr_);
  }
  ptr_ = nullptr;
  capacity_ = 0;
}

std::string envOrDefault(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string("default");
}

}  // namespace collbench::nccl
