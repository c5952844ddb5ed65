#include "device_rank.h"

#include <algorithm>
#include <cstring>

namespace collbench::nccl {
namespace {

using Clock = std::chrono::steady_clock;

/// How often the watchdog polls events and communicators, starting one slice after the run begins: fine enough that
/// a 0.05 s test timeout fires on time, coarse enough that its CUDA calls, which contend with the issuing thread
/// for the driver, do not slow host-bound calls (a watchdog polling every 2 ms from the start cost a 1 MiB
/// all-reduce 3-5% on an H200, 2026-12-04). Short timed loops (100 such calls take 0.5 ms) never meet it.
constexpr auto kWatchdogSlice = std::chrono::milliseconds(10);
/// The waiting thread re-checks its stop events this often; a short sleep keeps the CPU free for NCCL's proxy thread
/// without adding measurable latency (timings come from CUDA events, not from this loop).
constexpr auto kWaitSlice = std::chrono::microseconds(20);

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

bool isInPlace(const CollectiveSpec& spec, int rank, const RankBuffers& host) {
  if (!host.input || !host.output) return false;
  // In place when the input sits inside the output allocation exactly where NCCL's convention puts it. Separate
  // live allocations cannot satisfy this (the output block would overlap the input allocation).
  const auto* in = static_cast<const std::byte*>(host.input);
  const auto* out = static_cast<const std::byte*>(host.output);
  return in - spec.inPlaceInputOffset(rank) == out - spec.inPlaceOutputOffset(rank);
}

DeviceRank::DeviceRank(int rank, int device) : rank_(rank), device_(device) {
  activate();
  // Non-blocking: the synchronous cudaMemcpy of bind()/copyOut() on the legacy stream must not serialise with it.
  COLLBENCH_CUDA_RANK(rank_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  COLLBENCH_CUDA_RANK(rank_, cudaEventCreate(&start_));
  COLLBENCH_CUDA_RANK(rank_, cudaEventCreate(&stop_));
}

DeviceRank::~DeviceRank() {
  (void)cudaSetDevice(device_);
  // Pending work (after a fault) must finish before its buffers go.
  if (stream_) (void)cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : iterDone_) (void)cudaEventDestroy(e);
  if (start_) (void)cudaEventDestroy(start_);
  if (stop_) (void)cudaEventDestroy(stop_);
  region_.release();
  inMem_.release();
  outMem_.release();
  scratch_.release();
  staging_.release();
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void DeviceRank::activate() const { COLLBENCH_CUDA_RANK(rank_, cudaSetDevice(device_)); }

void DeviceRank::ensureIterationEvents(std::size_t count) {
  activate();
  while (iterDone_.size() < count) {
    cudaEvent_t e = nullptr;
    // Progress markers only: no timing, which makes record and query cheaper.
    COLLBENCH_CUDA_RANK(rank_, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    iterDone_.push_back(e);
  }
}

void DeviceRank::bind(const CollectiveSpec& spec, const RankBuffers& host, std::size_t scratchBytes,
                      std::size_t stagingBytes) {
  activate();
  const std::size_t inB = spec.inputBytes(), outB = spec.outputBytes();
  if ((inB && !host.input) || (outB && !host.output)) {
    throw Error(Errc::InvalidArgument, fmt::format("rank {}: missing input or output buffer", rank_), rank_);
  }
  if (isInPlace(spec, rank_, host)) {
    const std::size_t bytes = std::max(inB, outB);
    std::byte* base = region_.ensure(bytes, device_, rank_);
    const auto* hostBase = static_cast<const std::byte*>(host.output) - spec.inPlaceOutputOffset(rank_);
    COLLBENCH_CUDA_RANK(rank_, cudaMemcpy(base, hostBase, bytes, cudaMemcpyHostToDevice));
    in_ = base + spec.inPlaceInputOffset(rank_);
    out_ = base + spec.inPlaceOutputOffset(rank_);
    inMem_.release();
    outMem_.release();
  } else {
    in_ = inMem_.ensure(inB, device_, rank_);
    out_ = outMem_.ensure(outB, device_, rank_);
    if (inB) COLLBENCH_CUDA_RANK(rank_, cudaMemcpy(in_, host.input, inB, cudaMemcpyHostToDevice));
    // The output too: ranks that do not write all of it (reduce's non-roots) must read back what they were given.
    if (outB) COLLBENCH_CUDA_RANK(rank_, cudaMemcpy(out_, host.output, outB, cudaMemcpyHostToDevice));
    region_.release();
  }
  scratch_.ensure(scratchBytes, device_, rank_);
  staging_.ensure(stagingBytes, device_, rank_);
  hostOut_ = host.output;
  outBytes_ = outB;
}

void DeviceRank::copyOut() {
  if (!outBytes_) return;
  activate();
  COLLBENCH_CUDA_RANK(rank_, cudaMemcpy(hostOut_, out_, outBytes_, cudaMemcpyDeviceToHost));
}

std::byte* DeviceRank::resolve(const BufRef& ref) const {
  switch (ref.buffer) {
    case BufferKind::Input:
      return in_ + ref.offset;
    case BufferKind::Output:
      return out_ + ref.offset;
    case BufferKind::Scratch:
      return scratch_.get() + ref.offset;
  }
  return nullptr;
}

std::size_t progressStride(const CollectiveSpec& spec) {
  const std::size_t payload = std::max({spec.inputBytes(), spec.outputBytes(), std::size_t{1}});
  return std::clamp(kProgressEventBytes / payload, std::size_t{1}, kMaxProgressStride);
}

bool recordsProgress(std::size_t iteration, std::size_t total, std::size_t stride) {
  return (iteration + 1) % stride == 0 || iteration + 1 == total;
}

std::size_t nextProgressMark(std::size_t done, std::size_t recorded, std::size_t stride) {
  return std::min((done / stride + 1) * stride, recorded);
}

RunMonitor::RunMonitor(std::vector<Watched> ranks, double timeoutSeconds, std::function<void()> abort,
                       std::size_t stride)
    : ranks_(std::move(ranks)),
      timeout_(timeoutSeconds),
      abort_(std::move(abort)),
      stride_(std::max(stride, std::size_t{1})),
      recorded_(ranks_.size()),
      finished_(ranks_.size()),
      lastProgressNs_(nowNs()) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    recorded_[i].store(0);
    finished_[i].store(0);
  }
  thread_ = std::thread([this] { loop(); });
}

RunMonitor::~RunMonitor() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  thread_.join();
}

void RunMonitor::endIteration(std::size_t iteration, std::size_t total) {
  if (!recordsProgress(iteration, total, stride_)) return;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const DeviceRank& r = *ranks_[i].rank;
    r.activate();
    COLLBENCH_CUDA_RANK(r.rank(), cudaEventRecord(r.iterationEvents()[iteration], r.stream()));
    noteRecorded(i, iteration);
  }
}

void RunMonitor::noteRecorded(std::size_t index, std::size_t iteration) {
  recorded_[index].store(iteration + 1, std::memory_order_release);
  lastProgressNs_.store(nowNs(), std::memory_order_relaxed);
}

void RunMonitor::noteIssued() { lastProgressNs_.store(nowNs(), std::memory_order_relaxed); }

void RunMonitor::loop() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, kWatchdogSlice, [this] { return stop_.load(); })) {
    lock.unlock();
    {
      std::lock_guard guard(checkMutex_);
      if (!failed()) check();
    }
    lock.lock();
  }
}

void RunMonitor::check() {
  bool progress = false;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const DeviceRank& r = *ranks_[i].rank;
    const std::size_t recorded = recorded_[i].load(std::memory_order_acquire);
    std::size_t done = finished_[i].load(std::memory_order_relaxed);
    // The runtime's current device is per thread; set it for this rank's events and communicator.
    if (done < recorded || ranks_[i].comm) (void)cudaSetDevice(r.device());
    // Events not yet recorded in this run report success (or an older state): only look at recorded ones.
    while (done < recorded) {
      const std::size_t mark = nextProgressMark(done, recorded, stride_);
      const cudaError_t e = cudaEventQuery(r.iterationEvents()[mark - 1]);
      if (e == cudaErrorNotReady) break;
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const std::string which =
            mark - done == 1 ? fmt::format("iteration {}", done) : fmt::format("iterations {}..{}", done, mark - 1);
        trip(Error(Errc::BackendError,
                   fmt::format("rank {}: {} failed on device {}: {} ({})", r.rank(), which, r.device(),
                               cudaGetErrorString(e), cudaGetErrorName(e)),
                   r.rank()));
        return;
      }
      done = mark;
      progress = true;
    }
    finished_[i].store(done, std::memory_order_release);
    if (ranks_[i].comm) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(ranks_[i].comm, &state);
      const ncclResult_t bad = q != ncclSuccess ? q : state;
      if (bad != ncclSuccess && bad != ncclInProgress) {
        const char* last = ncclGetLastError(ranks_[i].comm);
        trip(Error(bad == ncclRemoteError ? Errc::PeerFailure : Errc::BackendError,
                   fmt::format("rank {}: NCCL communicator reported an asynchronous error: {}{}{}", r.rank(),
                               ncclGetErrorString(bad), last && *last ? ": " : "", last ? last : ""),
                   r.rank()));
        return;
      }
    }
  }
  const std::int64_t now = nowNs();
  if (progress) {
    lastProgressNs_.store(now, std::memory_order_relaxed);
    return;
  }
  const double idle = static_cast<double>(now - lastProgressNs_.load(std::memory_order_relaxed)) * 1e-9;
  if (idle <= timeout_.count()) return;
  // Blame the rank that is furthest behind among those with work outstanding.
  std::size_t worst = ranks_.size();
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (finished_[i].load() >= recorded_[i].load()) continue;
    if (worst == ranks_.size() || finished_[i].load() < finished_[worst].load()) worst = i;
  }
  if (worst == ranks_.size()) worst = 0;
  const DeviceRank& r = *ranks_[worst].rank;
  trip(Error(Errc::Timeout,
             fmt::format("rank {} timed out after {} s without progress on device {} ({} of {} issued iterations "
                         "finished){}",
                         r.rank(), timeout_.count(), r.device(), finished_[worst].load(), recorded_[worst].load(),
                         ranks_[worst].comm ? "; NCCL communicators aborted" : ""),
             r.rank()));
}

void RunMonitor::trip(Error e) {
  {
    std::lock_guard lock(mutex_);
    if (error_) return;
    error_ = std::move(e);
  }
  failed_.store(true, std::memory_order_release);
  if (abort_) abort_();
}

Error RunMonitor::fail(const Error& e) {
  {
    std::lock_guard guard(checkMutex_);
    trip(e);
  }
  std::lock_guard lock(mutex_);
  return *error_;
}

void RunMonitor::rethrow() const {
  std::lock_guard lock(mutex_);
  COLLBENCH_CHECK(error_.has_value(), "rethrow without a recorded error");
  throw *error_;
}

void RunMonitor::waitAll() {
  for (const Watched& w : ranks_) {
    const DeviceRank& r = *w.rank;
    r.activate();
    for (;;) {
      if (failed()) rethrow();
      const cudaError_t e = cudaEventQuery(r.stopEvent());
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        (void)cudaGetLastError();
        throw fail(Error(Errc::BackendError,
                         fmt::format("rank {}: waiting for the run on device {} failed: {} ({})", r.rank(), r.device(),
                                     cudaGetErrorString(e), cudaGetErrorName(e)),
                         r.rank()));
      }
      std::this_thread::sleep_for(kWaitSlice);
    }
  }
  if (failed()) rethrow();
}

}  // namespace collbench::nccl
