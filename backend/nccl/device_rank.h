#pragma once
// What both GPU executors keep per rank (stream, events, device buffers bound to the host buffers of a run) and the
// watchdog that turns hangs and asynchronous NCCL errors into collbench::Error (internal).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "collbench/backend.h"
#include "cuda_util.h"

namespace collbench::nccl {

class DeviceRank {
 public:
  DeviceRank(int rank, int device);
  DeviceRank(const DeviceRank&) = delete;
  DeviceRank& operator=(const DeviceRank&) = delete;
  ~DeviceRank();

  int rank() const { return rank_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  /// Makes this rank's device current (every CUDA call for the rank is preceded by it).
  void activate() const;

  /// Allocates device buffers for `spec` and copies the host buffers in (see nccl_backend.h for the in-place rule).
  void bind(const CollectiveSpec& spec, const RankBuffers& host, std::size_t scratchBytes, std::size_t stagingBytes);
  /// Copies the device output back into the host output of the last bind().
  void copyOut();
  std::byte* input() const { return in_; }
  std::byte* output() const { return out_; }
  std::byte* staging() const { return staging_.get(); }
  std::byte* resolve(const BufRef& ref) const;

  /// Timing and progress events: start/stop around the timed loop, a "done" event slot per iteration (recorded
  /// only where recordsProgress() says so).
  cudaEvent_t startEvent() const { return start_; }
  cudaEvent_t stopEvent() const { return stop_; }
  const std::vector<cudaEvent_t>& iterationEvents() const { return iterDone_; }
  void ensureIterationEvents(std::size_t count);

 private:
  int rank_, device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<cudaEvent_t> iterDone_;
  DeviceMemory region_, inMem_, outMem_, scratch_, staging_;
  std::byte* in_ = nullptr;
  std::byte* out_ = nullptr;
  void* hostOut_ = nullptr;
  std::size_t outBytes_ = 0;
};

/// Progress events are recorded after every `stride`-th iteration and after the last one, not after each: on a
/// host-bound call (a 1 MiB all-reduce on one H200 issues in 4-5 us) recording an event cost 2-7% of the call, and
/// the target for the native path is 2% over a bare ncclAllReduce loop (device check of 2026-12-04). The
/// stride covers kProgressEventBytes of payload (64 ms of traffic at 1 GB/s), so a hang is still seen long before
/// any timeout a user would set.
inline constexpr std::size_t kProgressEventBytes = std::size_t{64} << 20;
/// ... and at most this many iterations (a barrier moves 4 bytes but may wait a millisecond on a slow network).
inline constexpr std::size_t kMaxProgressStride = 64;
/// Iterations per progress event for a run of `spec`: 1 at 64 MiB and above, 64 at 1 MiB and below.
std::size_t progressStride(const CollectiveSpec& spec);
/// Whether iteration `iteration` (0-based) of `total` ends with a progress event.
bool recordsProgress(std::size_t iteration, std::size_t total, std::size_t stride);
/// The iteration count at the next progress event after `done` finished iterations, given that events up to
/// `recorded` iterations were recorded (done < recorded; `recorded` is always at an event).
std::size_t nextProgressMark(std::size_t done, std::size_t recorded, std::size_t stride);

/// Watches one run from a background thread: counts finished iterations per rank (their events, only those the
/// issuing thread has recorded), polls ncclCommGetAsyncError, and when a communicator reports an error, a CUDA
/// event query fails, or nothing progressed (neither issued nor finished) for `timeoutSeconds`, records an Error
/// naming the rank and calls `abort` (ncclCommAbort of every communicator; that also unblocks an issuing thread
/// stuck on a full launch queue behind a hung NCCL kernel).
class RunMonitor {
 public:
  struct Watched {
    const DeviceRank* rank;
    ncclComm_t comm;  ///< null for the single-GPU backend
  };
  /// `stride`: iterations per progress event (progressStride); the issuing thread records event `iteration` of
  /// DeviceRank::iterationEvents() only where recordsProgress() says so.
  RunMonitor(std::vector<Watched> ranks, double timeoutSeconds, std::function<void()> abort, std::size_t stride = 1);
  RunMonitor(const RunMonitor&) = delete;
  RunMonitor& operator=(const RunMonitor&) = delete;
  ~RunMonitor();

  /// The issuing thread finished issuing iteration `iteration` (0-based, in order) of `total` on every watched rank:
  /// records each rank's progress event on its stream where recordsProgress() says so, and notes it.
  void endIteration(std::size_t iteration, std::size_t total);
  /// The issuing thread recorded the progress event of iteration `iteration` of watched rank `index` (0-based, in
  /// order; only iterations where recordsProgress() holds).
  void noteRecorded(std::size_t index, std::size_t iteration);
  /// The issuing thread made progress without recording an iteration event (a wave was issued).
  void noteIssued();
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  /// Throws the recorded error (call only when failed()).
  [[noreturn]] void rethrow() const;
  /// Waits for every watched rank's stop event; throws the monitor's error if it fires first.
  void waitAll();
  /// Records a failure found by the issuing thread (an error from a CUDA/NCCL call) and aborts, unless one was
  /// recorded already; returns the error to throw (the first one).
  Error fail(const Error& e);

 private:
  void loop();
  void check();
  void trip(Error e);

  std::vector<Watched> ranks_;
  std::chrono::duration<double> timeout_;
  std::function<void()> abort_;
  std::size_t stride_;
  /// Per rank: iterations up to the last recorded progress event, and up to the last one seen finished.
  std::vector<std::atomic<std::size_t>> recorded_, finished_;
  std::atomic<std::int64_t> lastProgressNs_;
  std::atomic<bool> failed_{false}, stop_{false};
  mutable std::mutex mutex_;  ///< guards error_ and stop_ (with wake_)
  /// Held while the watchdog queries events and communicators and while `abort` runs: ncclCommAbort frees the
  /// communicator, so no query may overlap it.
  std::mutex checkMutex_;
  std::condition_variable wake_;
  std::optional<Error> error_;
  std::thread thread_;
};

/// Host-side view of a rank's buffers for a run: checks sizes and null pointers; true when in place.
bool isInPlace(const CollectiveSpec& spec, int rank, const RankBuffers& host);

}  // namespace collbench::nccl
