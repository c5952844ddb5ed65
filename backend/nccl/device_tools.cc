// Registration, device probing, environment description, and the kernel test/benchmark hooks of nccl_backend.h.
#include <cstring>
#include <map>
#include <memory>

#include "backend_options.h"
#include "collbench/backend_info.h"
#include "collbench/backends/nccl.h"
#include "collbench/error.h"
#include "cuda_util.h"
#include "kernels.h"

namespace collbench::nccl {
namespace {

/// Device buffers of the hooks start this far into their allocation at most (offsetElems * element size).
constexpr std::size_t kHookAlignBytes = 256;

DeviceProbe runProbe() {
  DeviceProbe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // Without a GPU (or driver) this reads "CUDA driver version is insufficient for CUDA runtime version" or "no
    // CUDA-capable device is detected": either way there is no device to run on.
    p.reason = fmt::format("no CUDA device (cudaGetDeviceCount: {}, {})", cudaGetErrorString(e), cudaGetErrorName(e));
    return p;
  }
  if (n <= 0) {
    p.reason = "no CUDA device (cudaGetDeviceCount returned 0)";
    return p;
  }
  p.count = n;
  return p;
}

void requireDevice(int device) {
  const DeviceProbe& p = probeDevices();
  if (p.count == 0) throw Error(Errc::Unsupported, p.reason);
  if (device < 0 || device >= p.count) {
    throw Error(Errc::InvalidArgument, fmt::format("device {} does not exist ({} visible)", device, p.count));
  }
  COLLBENCH_CUDA(cudaSetDevice(device));
}

/// RAII device buffer for the hooks (DeviceMemory is per rank and grow-only; these are one-shot).
struct Scratch {
  explicit Scratch(std::size_t bytes) { COLLBENCH_CUDA(cudaMalloc(&ptr, bytes ? bytes : 1)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { (void)cudaFree(ptr); }
  std::byte* bytes() const { return static_cast<std::byte*>(ptr); }
  void* ptr = nullptr;
};

struct Events {
  Events() {
    COLLBENCH_CUDA(cudaEventCreate(&start));
    COLLBENCH_CUDA(cudaEventCreate(&stop));
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
  }
  double elapsedSeconds() const {
    float ms = 0;
    COLLBENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e-3;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
};

}  // namespace

const DeviceProbe& probeDevices() {
  static const DeviceProbe probe = runProbe();
  return probe;
}

void registerNcclBackends(NcclIdExchange exchange) {
  BackendCapabilities multiGpu;
  multiGpu.device = DeviceKind::Gpu;
  multiGpu.ranksPerProcess = RanksPerProcess::OneWhenLaunched;  // one process drives every GPU unless launched
  multiGpu.nativeAlgorithms = {kNativeAlgorithm};
  BackendCapabilities oneGpu;
  oneGpu.device = DeviceKind::Gpu;
  oneGpu.ranksPerProcess = RanksPerProcess::All;
  oneGpu.sharedDevice = true;
  registerBackend(
      "nccl", "NCCL on GPUs, one rank per GPU (native collectives and schedules as ncclSend/ncclRecv)",
      [exchange](int nranks, const BackendOptions& o) {
        // Without a device the backend refuses at once: no rank should wait at the store first.
        const bool needsId = o.count("world") && !o.count("nccl_id") && intOption(o, "world", 1) > 1;
        if (exchange && needsId && probeDevices().count > 0) {
          BackendOptions withId = o;
          withId["nccl_id"] = exchange(o, newUniqueIdHex);
          return makeNcclBackend(nranks, withId);
        }
        return makeNcclBackend(nranks, o);
      },
      multiGpu);
  registerBackend(
      "cuda-1gpu", "several ranks on one GPU (device copies and reduce kernels), for validation",
      [](int nranks, const BackendOptions& o) { return makeSingleGpuBackend(nranks, o); }, oneGpu);
  registerEnvironmentProbe("nccl", probeGpuEnvironment);
}

std::map<std::string, std::string> probeGpuEnvironment() {
  std::map<std::string, std::string> out;
  // Each call is checked on its own: without a GPU the NCCL version is still known, and without a driver
  // cudaDriverGetVersion reports 0 (or fails) while cudaGetDeviceCount fails.
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess && nccl > 0) {
    // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
    out["nccl_version"] = fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100);
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    out["driver"] = fmt::format("{}.{}", driver / 1000, driver % 1000 / 10);  // the CUDA version the driver supports
  }
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess && runtime > 0) {
    out["cuda_runtime"] = fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10);
  }
  (void)cudaGetLastError();
  const DeviceProbe& p = probeDevices();
  std::string names;
  for (int d = 0; d < p.count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    // One name when every device is the same model (the usual node), else all of them in device order.
    if (names.empty()) {
      names = prop.name;
    } else if (names.find(prop.name) == std::string::npos) {
      names += std::string(", ") + prop.name;
    }
  }
  if (!names.empty()) {
    out["gpu"] = names;
    out["gpu_count"] = std::to_string(p.count);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> describeGpuEnvironment() {
  std::vector<std::pair<std::string, std::string>> out;
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
    out.emplace_back("nccl_version", fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100));
  }
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    out.emplace_back("cuda_runtime", fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10));
  }
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    out.emplace_back("cuda_driver", fmt::format("{}.{}", driver / 1000, driver % 1000 / 10));
  }
  (void)cudaGetLastError();
  const DeviceProbe& p = probeDevices();
  if (p.count == 0) out.emplace_back("gpu", p.reason);
  for (int d = 0; d < p.count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    out.emplace_back(fmt::format("gpu{}", d),
                     fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                                 prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30)));
  }
  out.emplace_back("NCCL_ALGO", envOrDefault("NCCL_ALGO"));
  out.emplace_back("NCCL_PROTO", envOrDefault("NCCL_PROTO"));
  return out;
}

void reduceOnDevice(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count, KernelAlias alias,
                    std::size_t offsetElems, std::size_t dstShiftElems) {
  requireDevice(0);
  const std::size_t es = dtypeSize(t), bytes = count * es, off = offsetElems * es, dstOff = off + dstShiftElems * es;
  COLLBENCH_CHECK(dstOff < kHookAlignBytes, "offsetElems {} + dstShiftElems {} is past the {}-byte pad", offsetElems,
                  dstShiftElems, kHookAlignBytes);
  // Three separately padded regions of one allocation; each starts at a 256-byte boundary plus `off`.
  const std::size_t stride = (bytes + kHookAlignBytes - 1) / kHookAlignBytes * kHookAlignBytes + kHookAlignBytes;
  Scratch mem(3 * stride);
  std::byte* da = mem.bytes() + off;
  std::byte* db = mem.bytes() + stride + off;
  std::byte* dd = alias == KernelAlias::DstIsA   ? da
                  : alias == KernelAlias::DstIsB ? db
                                                 : mem.bytes() + 2 * stride + dstOff;
  COLLBENCH_CUDA(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
  COLLBENCH_CUDA(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
  COLLBENCH_CUDA(launchReduce(t, op, dd, da, db, count, nullptr));
  COLLBENCH_CUDA(cudaDeviceSynchronize());
  COLLBENCH_CUDA(cudaMemcpy(dst, dd, bytes, cudaMemcpyDeviceToHost));
}

void divideOnDevice(DType t, void* data, std::size_t count, int divisor) {
  requireDevice(0);
  const std::size_t bytes = count * dtypeSize(t);
  Scratch mem(bytes);
  COLLBENCH_CUDA(cudaMemcpy(mem.ptr, data, bytes, cudaMemcpyHostToDevice));
  COLLBENCH_CUDA(launchDivide(t, mem.ptr, count, divisor, nullptr));
  COLLBENCH_CUDA(cudaDeviceSynchronize());
  COLLBENCH_CUDA(cudaMemcpy(data, mem.ptr, bytes, cudaMemcpyDeviceToHost));
}

double timeDeviceCopy(std::size_t bytes, int iterations, int device) {
  requireDevice(device);
  Scratch src(bytes), dst(bytes);
  COLLBENCH_CUDA(cudaMemset(src.ptr, 1, bytes));
  Events ev;
  COLLBENCH_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, nullptr));  // warmup
  COLLBENCH_CUDA(cudaEventRecord(ev.start, nullptr));
  for (int i = 0; i < iterations; ++i) {
    COLLBENCH_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, nullptr));
  }
  COLLBENCH_CUDA(cudaEventRecord(ev.stop, nullptr));
  COLLBENCH_CUDA(cudaEventSynchronize(ev.stop));
  return iterations > 0 ? ev.elapsedSeconds() / iterations : 0.0;
}

struct BareAllReduceLoop::Impl {
  Impl(DType t, std::size_t n, int dev)
      : dtype(toNccl(t)), count(n), device(dev), in(n * dtypeSize(t)), out(n * dtypeSize(t)) {
    COLLBENCH_CUDA(cudaMemset(in.ptr, 0, n * dtypeSize(t)));
    COLLBENCH_NCCL_RANK(0, nullptr, ncclCommInitAll(&comm, 1, &device));
    COLLBENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    (void)cudaSetDevice(device);
    (void)cudaStreamDestroy(stream);
    (void)ncclCommDestroy(comm);
  }
  void issue(int calls) {
    for (int i = 0; i < calls; ++i) {
      COLLBENCH_NCCL_RANK(0, comm, ncclAllReduce(in.ptr, out.ptr, count, dtype, ncclSum, comm, stream));
    }
  }
  ncclDataType_t dtype;
  std::size_t count;
  int device;
  Scratch in, out;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

BareAllReduceLoop::BareAllReduceLoop(DType t, std::size_t count, int device) {
  requireDevice(device);
  impl_ = std::make_unique<Impl>(t, count, device);
}

BareAllReduceLoop::~BareAllReduceLoop() = default;

double BareAllReduceLoop::time(int iterations, int warmup) {
  COLLBENCH_CUDA(cudaSetDevice(impl_->device));
  impl_->issue(warmup);
  Events ev;
  COLLBENCH_CUDA(cudaEventRecord(ev.start, impl_->stream));
  impl_->issue(iterations);
  COLLBENCH_CUDA(cudaEventRecord(ev.stop, impl_->stream));
  COLLBENCH_CUDA(cudaEventSynchronize(ev.stop));
  return iterations > 0 ? ev.elapsedSeconds() / iterations : 0.0;
}

double timeReduceKernel(DType t, ReduceOp op, std::size_t count, int iterations, int device) {
  requireDevice(device);
  const std::size_t bytes = count * dtypeSize(t);
  Scratch a(bytes), b(bytes), d(bytes);
  // 0x3c bytes are finite normal values in every float format (f16 0x3c3c is about 1.06), so the timing never
  // involves NaN or infinity; the result is not accumulated, so products cannot overflow either.
  COLLBENCH_CUDA(cudaMemset(a.ptr, 0x3c, bytes));
  COLLBENCH_CUDA(cudaMemset(b.ptr, 0x3c, bytes));
  Events ev;
  COLLBENCH_CUDA(launchReduce(t, op, d.ptr, a.ptr, b.ptr, count, nullptr));  // warmup
  COLLBENCH_CUDA(cudaEventRecord(ev.start, nullptr));
  for (int i = 0; i < iterations; ++i) COLLBENCH_CUDA(launchReduce(t, op, d.ptr, a.ptr, b.ptr, count, nullptr));
  COLLBENCH_CUDA(cudaEventRecord(ev.stop, nullptr));
  COLLBENCH_CUDA(cudaEventSynchronize(ev.stop));
  return iterations > 0 ? ev.elapsedSeconds() / iterations : 0.0;
}

}  // namespace collbench::nccl
