#pragma once
/// GPU backends (CUDA + NCCL), registered by registerNcclBackends():
/// - "nccl": one rank per GPU, in one process (ncclCommInitAll over the first n devices, or BackendOptions
///   "devices" = "0,2,3") or in many (one rank per process: options "nccl_id" = newUniqueIdHex() of rank 0, "rank",
///   "world", optional "device"; without "nccl_id", the NcclIdExchange given to registerNcclBackends gets it). The
///   native schedule of algorithm kNativeAlgorithm (core registers it: buildSchedule(spec, "nccl")) runs the NCCL
///   collective itself; any other schedule runs as ncclSend/ncclRecv groups plus reduce kernels (see wave_plan.h), so
///   both are timed in the same harness.
/// - "cuda-1gpu": n ranks as buffers and streams on one GPU (option "device"); sends are device copies, receive-
///   reduces are kernels reading the sender's buffer. For validating schedules and kernels on one GPU.
///
/// Buffers stay on the host side of the Backend interface: run() allocates device buffers (kept between runs, grown
/// as needed), copies every rank's input (and output, so untouched parts compare equal) host->device before the
/// timed loop and the output device->host after it. Only the loop is timed, with CUDA events on each rank's stream,
/// so `collbench perf -c 1` checks device results with the host reference. In-place calls are recognised from the
/// pointers (input and output inside one allocation at CollectiveSpec::inPlace*Offset, as RankBufferSet lays them
/// out) and run in place on the device.
///
/// Failures are collbench::Error naming the rank: CUDA and NCCL errors (Errc::BackendError, or PeerFailure for
/// ncclRemoteError) carry the failing call and file:line; a rank that makes no progress for RunOptions::
/// timeoutSeconds gets Errc::Timeout, after ncclCommAbort on every communicator of this process (the backend then
/// re-creates them on the next run in the one-process mode; a multi-process backend must be recreated with a new id).
///
/// This header includes no CUDA or NCCL header: tools/ include it.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collbench/backend.h"

namespace collbench::nccl {

/// Schedule::algorithm that asks the "nccl" backend for the native collective (ncclAllReduce, ...). NCCL picks its
/// own algorithm and protocol unless the NCCL_ALGO / NCCL_PROTO environment variables say otherwise; RunResult::
/// algorithm records their values.
inline constexpr const char* kNativeAlgorithm = "nccl";

/// How a one-rank-per-process "nccl" backend gets its nccl_id when its options name a world ("rank", "world" > 1)
/// but no "nccl_id": called with those options and newUniqueIdHex, it returns the id that rank 0 created, the same
/// on every rank (the CLI's passes it through its rendezvous store: tools/world_options.h, exchangeNcclId).
using NcclIdExchange =
    std::function<std::string(const BackendOptions& options, const std::function<std::string()>& newId)>;

/// Registers "nccl" and "cuda-1gpu"; `exchange` serves "nccl" worlds without an nccl_id (without it they are refused).
void registerNcclBackends(NcclIdExchange exchange = {});

/// Options: "devices" (one process) or "nccl_id", "rank", "world", "device" (one rank per process). Throws
/// Error{Unsupported} naming the reason when there is no usable device or too few of them.
std::unique_ptr<Backend> makeNcclBackend(int nranks, const BackendOptions& options = {});
/// Options: "device" (default 0). Throws Error{Unsupported} without a device.
std::unique_ptr<Backend> makeSingleGpuBackend(int nranks, const BackendOptions& options = {});

/// How many CUDA devices this process sees; when none, `reason` says why (cudaGetDeviceCount fails with "CUDA
/// driver version is insufficient..." on machines without a GPU: any error counts as "no device").
struct DeviceProbe {
  int count = 0;
  std::string reason;
};
const DeviceProbe& probeDevices();

/// ncclGetUniqueId as 256 hex digits, for option "nccl_id" (rank 0 creates it, the launcher hands it to all).
std::string newUniqueIdHex();

/// The environment probe registerNcclBackends() registers (collbench::probeEnvironment): "nccl_version"
/// (ncclGetVersion, also without a GPU), "driver" (cudaDriverGetVersion: the CUDA version the driver supports, "13.0"),
/// "cuda_runtime", "gpu" (device name(s)) and "gpu_count"; a field whose call fails is absent. Never throws.
std::map<std::string, std::string> probeGpuEnvironment();

/// NCCL and CUDA versions, devices, and the NCCL_ALGO / NCCL_PROTO settings, as (key, value) for run headers.
std::vector<std::pair<std::string, std::string>> describeGpuEnvironment();

// ---- Test and benchmark hooks (the kernels the executors use, on host data or device timings) ----

enum class KernelAlias { None, DstIsA, DstIsB };
/// dst[i] = a[i] (op) b[i] computed by the device reduce kernel: a and b are copied to device buffers that start
/// `offsetElems` elements past a 256-byte boundary, the kernel runs with dst aliasing a or b as `alias` says (or in
/// its own buffer, `dstShiftElems` further along than a and b), and the result is copied into `dst`. Equal offsets
/// take the vectorised path after a peeled head; a dst shift that changes the offset modulo 16 bytes, the scalar one.
void reduceOnDevice(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count,
                    KernelAlias alias = KernelAlias::None, std::size_t offsetElems = 0, std::size_t dstShiftElems = 0);
/// data[i] /= divisor by the device kernel (Avg's last step).
void divideOnDevice(DType t, void* data, std::size_t count, int divisor);

/// Mean seconds of a device-to-device cudaMemcpyAsync of `bytes` on `device` (CUDA events, after one warmup).
double timeDeviceCopy(std::size_t bytes, int iterations, int device = 0);
/// A bare ncclAllReduce loop, the baseline of the native path's overhead: a one-rank communicator on `device`, a
/// non-blocking stream, in and out buffers of `count` elements, and nothing else. The "nccl" backend's native
/// path at the same count and RunOptions{iterations, warmup} adds its groups, events and watchdog to this.
class BareAllReduceLoop {
 public:
  BareAllReduceLoop(DType t, std::size_t count, int device = 0);
  ~BareAllReduceLoop();
  BareAllReduceLoop(const BareAllReduceLoop&) = delete;
  BareAllReduceLoop& operator=(const BareAllReduceLoop&) = delete;
  /// Mean seconds per call: `warmup` out-of-place sums, then CUDA events around `iterations` more.
  double time(int iterations, int warmup);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Mean seconds of one reduce kernel over `count` elements (reads 2 and writes 1 buffer of count elements).
double timeReduceKernel(DType t, ReduceOp op, std::size_t count, int iterations, int device = 0);

}  // namespace collbench::nccl
