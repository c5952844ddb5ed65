#pragma once
// CUDA/NCCL error conversion, device memory, and the type/op mappings shared by the GPU executors (internal).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "collbench/error.h"
#include "collbench/types.h"

namespace collbench::nccl {

/// Error{BackendError} "rank R: <call> failed: <cuda message> (<name>) at backend/nccl/<file>:<line>".
[[noreturn]] void throwCuda(cudaError_t e, const char* call, const char* file, int line, int rank);
inline void checkCuda(cudaError_t e, const char* call, const char* file, int line, int rank = Error::kNoRank) {
  if (e != cudaSuccess) throwCuda(e, call, file, line, rank);
}
/// ncclInProgress is a success here: nonblocking communicators return it from calls still being processed.
[[noreturn]] void throwNccl(ncclResult_t r, const char* call, const char* file, int line, int rank, ncclComm_t comm);
inline void checkNccl(ncclResult_t r, const char* call, const char* file, int line, int rank = Error::kNoRank,
                      ncclComm_t comm = nullptr) {
  if (r != ncclSuccess && r != ncclInProgress) throwNccl(r, call, file, line, rank, comm);
}
/// Strips the build machine's path prefix so messages read "backend/nccl/x.cc:42".
std::string shortFile(const char* file);

}  // namespace collbench::nccl

#define COLLBENCH_CUDA(call) ::collbench::nccl::checkCuda((call), #call, __FILE__, __LINE__)
#define COLLBENCH_CUDA_RANK(rank, call) ::collbench::nccl::checkCuda((call), #call, __FILE__, __LINE__, (rank))
#define COLLBENCH_NCCL_RANK(rank, comm, call) \
  ::collbench::nccl::checkNccl((call), #call, __FILE__, __LINE__, (rank), (comm))

namespace collbench::nccl {

ncclDataType_t toNccl(DType t);
ncclRedOp_t toNccl(ReduceOp op);

/// A grow-only device allocation on one device (cudaMalloc on first use and when a run needs more).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { release(); }
  /// At least `bytes` on `device` (which must be current); contents are not preserved on growth.
  std::byte* ensure(std::size_t bytes, int device, int rank);
  void release();
  std::byte* get() const { return ptr_; }

 private:
  std::byte* ptr_ = nullptr;
  std::size_t capacity_ = 0;
  int device_ = -1;
};

/// Value of the environment variable or "default" (for recording NCCL_ALGO / NCCL_PROTO).
std::string envOrDefault(const char* name);

}  // namespace collbench::nccl
