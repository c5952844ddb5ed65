// Threads-as-ranks executor of schedules. Each matched send/recv pair owns a slot: the sender publishes its source
// pointer, the receiver copies or reduces straight out of it and marks the slot consumed, which completes the
// send (rendezvous). Iterations are told apart by an epoch stamped on each slot, so nothing is reset between them.
// Small messages go eagerly instead: the sender copies them into one of the slot's two buffers (by epoch parity)
// and is done, so a rank waits once per message rather than twice, and a peer can run up to an epoch ahead; that
// halves the handoffs of a small all-reduce, and when ranks share a core each wake-up moves more work along.
// Ranks run on min(n, cores) threads, rank r on thread r % threads: the calling thread is thread 0 (rank 0 and every
// threads-th rank after it) and persistent workers are the others, so a run() wakes threads - 1 workers and nobody
// waits for the caller to be scheduled again. A thread with several ranks steps them in turn (no op ever blocks), so
// ranks beyond the cores cost no context switch per handoff: one thread per rank, 4 ranks on 2 vCPUs time-sliced and
// the same configuration's time swung 2x between runs. A thread with nothing to do spins briefly, yields, then
// sleeps on a futex.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "collbench/backend_info.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"
#include "futex.h"
#include "op_graph.h"

namespace collbench::host {
namespace {

using Clock = std::chrono::steady_clock;

/// How long an idle thread polls before it sleeps in the kernel (futex). A peer
/// that is running answers within a poll or two (a cross-core handoff is ~0.2 us), so a short spin catches it; when
/// other processes share the cores, the peer is often not running, and every microsecond spent spinning is taken
/// from it or from whoever runs next. Measured on 2 shared cores (8-byte all-reduce, 2 ranks, load 6-8): median
/// 14-24 us per iteration with a ~2 us spin, 84-150 us with a 50 us spin; ~0.4 us either way when the cores are
/// free.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(2);
/// After the spin, how long an idle thread keeps polling with sched_yield() between polls before it sleeps. On this
/// VM a futex wake of an idle vCPU costs tens to hundreds of microseconds, which a 2 us spin alone pays on most
/// handoffs; yielding keeps the waiter awake without taking the core from a runnable peer. Measured on 2 quiet cores,
/// `perf -g 2 -b 8 -e 1M -f 8 -n 200 -w 20 -c 0`: without it 8 B took 1.4-70 us; with 20 us, 8 B 0.3-1.9 us but 16-256
/// KiB 120-570 us; with 200 us, 8 B 0.4-5 us and 256 KiB 27-43 us. Under two busy loops on the cores rendezvous sizes
/// take milliseconds whatever this is (the peer waits for a time slice), so it only matters on a quiet machine.
constexpr auto kYieldBeforeSleep = std::chrono::microseconds(200);
/// Sleep granularity: how often a sleeping rank re-checks the abort flag and its deadline.
constexpr auto kSleepSlice = std::chrono::milliseconds(20);
/// Idle polling: pause instructions between polls of the pending ops (~0.1 us), and polls between reads of the clock.
constexpr int kPausesPerPoll = 8;
constexpr int kPollsPerClockRead = 8;

/// Messages up to this size are copied into the slot (eager); larger ones are read from the sender's buffer, which
/// saves a copy of every byte. 4 KiB copy in ~100 ns from cache, about one cross-core handoff.
constexpr std::size_t kEagerBytes = 4096;
constexpr std::size_t kCacheLine = 64;

/// Bytes between the two parity buffers of an eager slot, and between slots: whole cache lines, so that the sender
/// filling one buffer never shares a line with the receiver reading the other (false sharing).
std::size_t eagerStride(std::size_t bytes) { return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine; }

struct alignas(64) Slot {
  std::atomic<const std::byte*> ptr{nullptr};
  /// Last epoch the sender posted and the receiver consumed (monotonic: epochs are never reused).
  std::atomic<std::uint64_t> posted{0};
  std::atomic<std::uint64_t> consumed{0};
  /// Eager slots: two message buffers, epoch e in eager + (e % 2) * eagerStride(bytes); null for rendezvous slots.
  std::byte* eager = nullptr;
  std::byte* eagerBuffer(std::uint64_t epoch, std::size_t bytes) const {
    return eager + (epoch % 2) * eagerStride(bytes);
  }
};

/// Per-rank, per-run precomputation.
struct RankPlan {
  const std::vector<Op>* ops = nullptr;
  OpGraph graph;
  std::optional<ReadyOps> ready;  // reset each epoch, points into graph
  std::vector<int> pending;       // posted sends and receives not yet finished, reused each epoch
  std::vector<int> slot;          // op -> slot index (-1 local)
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
  std::byte* scratch = nullptr;
  std::size_t resultBytes = 0;
};

struct Job {
  const Schedule* schedule = nullptr;
  std::vector<RankPlan> plans;
  std::vector<Slot> slots;
  std::vector<int> slotSender, slotReceiver;
  PageAlignedBytes eagerArena;  // page-aligned like every buffer an op touches (allocatePageAligned: 4K aliasing)
  std::uint64_t firstEpoch = 0;
  int iterations = 0;
  double timeoutSeconds = kDefaultTimeoutSeconds;
  /// Ranks meet here before the timed loop, so that waking the workers is not timed.
  std::atomic<int> arrived{0};
  int arrivalTarget = 0;
  WakeWord allArrived;
  std::vector<double> rankSeconds;
};

class ThreadsBackend final : public Backend {
 public:
  ThreadsBackend(int nranks, int threads)
      : nranks_(nranks),
        threads_(std::clamp(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()), 1,
                            std::max(nranks, 1))),
        wake_(static_cast<std::size_t>(threads_)),
        scratch_(static_cast<std::size_t>(nranks)),
        scratchBytes_(static_cast<std::size_t>(nranks), 0) {
    for (int t = 1; t < threads_; ++t) workers_.emplace_back([this, t] { workerLoop(t); });
  }

  ~ThreadsBackend() override {
    stop_.store(true);
    generation_.notify();
    for (auto& t : workers_) t.join();
  }

  std::string_view name() const override { return "host"; }
  int nranks() const override { return nranks_; }

  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override {
    if (s.spec.nranks != nranks_) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("schedule is for {} ranks but the host backend runs {}", s.spec.nranks, nranks_));
    }
    if (s.native) {
      throw Error(Errc::Unsupported, fmt::format("algorithm '{}' is a peer library's own call; the host threads "
                                                 "backend runs only collbench schedules",
                                                 s.algorithm));
    }
    requireNoSwitchOps(s, "host");
    if (static_cast<int>(bufs.size()) != nranks_) {
      throw Error(Errc::InvalidArgument, fmt::format("got buffers for {} ranks, need {}", bufs.size(), nranks_));
    }
    Job job;
    prepare(s, bufs, opt, job);
    job_ = &job;
    if (opt.warmup > 0) dispatch(job, opt.warmup);
    dispatch(job, opt.iterations);
    job_ = nullptr;
    RunResult res;
    res.algorithm = s.algorithm;
    res.rankSeconds.resize(static_cast<std::size_t>(nranks_));
    double sum = 0;
    for (int r = 0; r < nranks_; ++r) {
      const double t = opt.iterations > 0 ? job.rankSeconds[static_cast<std::size_t>(r)] / opt.iterations : 0.0;
      res.rankSeconds[static_cast<std::size_t>(r)] = t;
      sum += t;
    }
    res.seconds = sum / nranks_;
    return res;
  }

 private:
  void prepare(const Schedule& s, const Buffers& bufs, const RunOptions& opt, Job& job) {
    const Matching m = matchSchedule(s);
    job.schedule = &s;
    job.timeoutSeconds = opt.timeoutSeconds;
    job.slots = std::vector<Slot>(m.matches.size());
    job.slotSender.resize(m.matches.size());
    job.slotReceiver.resize(m.matches.size());
    auto messageBytes = [&](const Match& mt) {
      return s.ranks[static_cast<std::size_t>(mt.srcRank)].ops[static_cast<std::size_t>(mt.srcOp)].bytes;
    };
    std::size_t arenaBytes = 0;
    for (const Match& mt : m.matches) {
      if (messageBytes(mt) <= kEagerBytes) arenaBytes += 2 * eagerStride(messageBytes(mt));
    }
    if (arenaBytes) job.eagerArena = allocatePageAligned(arenaBytes);
    std::size_t arenaAt = 0;
    for (std::size_t k = 0; k < m.matches.size(); ++k) {
      job.slotSender[k] = m.matches[k].srcRank;
      job.slotReceiver[k] = m.matches[k].dstRank;
      // Everything up to now counts as posted and consumed: the first epoch of this job is nextEpoch_ + 1.
      job.slots[k].posted.store(nextEpoch_, std::memory_order_relaxed);
      job.slots[k].consumed.store(nextEpoch_, std::memory_order_relaxed);
      if (const std::size_t bytes = messageBytes(m.matches[k]); bytes <= kEagerBytes) {
        job.slots[k].eager = job.eagerArena.get() + arenaAt;
        arenaAt += 2 * eagerStride(bytes);
      }
    }
    job.plans.resize(static_cast<std::size_t>(nranks_));
    for (int r = 0; r < nranks_; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      const auto& prog = s.ranks[ru];
      RankPlan& p = job.plans[ru];
      p.ops = &prog.ops;
      p.graph = OpGraph(prog.ops);
      p.ready.emplace(p.graph);
      p.pending.reserve(prog.ops.size());
      p.slot = m.opMatch[ru];
      const std::size_t inBytes = s.spec.inputBytes(), outBytes = s.spec.outputBytes();
      if ((inBytes && !bufs[ru].input) || (outBytes && !bufs[ru].output)) {
        throw Error(Errc::InvalidArgument, fmt::format("rank {}: missing input or output buffer", r), r);
      }
      p.input = static_cast<const std::byte*>(bufs[ru].input);
      p.output = static_cast<std::byte*>(bufs[ru].output);
      if (scratchBytes_[ru] < prog.scratchBytes) {
        scratch_[ru] = allocatePageAligned(prog.scratchBytes);
        scratchBytes_[ru] = prog.scratchBytes;
      }
      p.scratch = scratch_[ru].get();
      p.resultBytes = s.needsAvgScale() ? s.resultBytes(r) : 0;
    }
  }

  /// Runs `iterations` epochs on every rank (thread 0, this one, runs rank 0 and its other ranks) and waits for all of
  /// them; rethrows the first rank error.
  void dispatch(Job& job, int iterations) {
    job.iterations = iterations;
    job.arrivalTarget += threads_;
    job.rankSeconds.assign(static_cast<std::size_t>(nranks_), 0.0);
    job.firstEpoch = nextEpoch_;
    nextEpoch_ += static_cast<std::uint64_t>(iterations);
    {
      std::lock_guard lock(errorMutex_);
      error_ = nullptr;
    }
    abort_.store(false);
    finished_.store(0);
    generation_.notify();
    runThread(job, 0);
    spinThenWait(done_, kSpinBeforeSleep, kYieldBeforeSleep, kSleepSlice,
                 [&] { return finished_.load(std::memory_order_acquire) == threads_ - 1; });
    std::lock_guard lock(errorMutex_);
    if (error_) std::rethrow_exception(error_);
  }

  void workerLoop(int thread) {
    // The generation before any dispatch: observing it here instead could miss a dispatch made while this thread
    // was starting.
    std::uint32_t seenGeneration = 0;
    for (;;) {
      spinThenWait(generation_, kSpinBeforeSleep, kYieldBeforeSleep, kSleepSlice,
                   [&] { return generation_.observe() != seenGeneration || stop_.load(); });
      if (stop_.load()) return;
      seenGeneration = generation_.observe();
      runThread(*job_, thread);
      if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_ - 1) done_.notify();
    }
  }

  int ownerOf(int rank) const { return rank % threads_; }

  /// One thread's share of a dispatch; an error is recorded (the first one wins) and makes the other ranks abort.
  void runThread(Job& job, int thread) {
    try {
      if (job.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == job.arrivalTarget) {
        job.allArrived.notify();
      } else {
        spinThenWait(job.allArrived, kSpinBeforeSleep, kYieldBeforeSleep, kSleepSlice,
                     [&] { return job.arrived.load(std::memory_order_acquire) >= job.arrivalTarget || abort_.load(); });
      }
      runRanks(job, thread);
    } catch (...) {
      {
        std::lock_guard lock(errorMutex_);
        if (!error_) error_ = std::current_exception();
      }
      abort_.store(true);
      for (auto& w : wake_) w.notify();
      job.allArrived.notify();
    }
  }

  std::byte* resolve(const RankPlan& p, const BufRef& ref) const {
    switch (ref.buffer) {
      case BufferKind::Input:
        return const_cast<std::byte*>(p.input) + ref.offset;
      case BufferKind::Output:
        return p.output + ref.offset;
      case BufferKind::Scratch:
        return p.scratch + ref.offset;
    }
    return nullptr;
  }

  /// The thread's ranks (thread, thread + threads_, ...) through their epochs, interleaved: a pass steps every rank
  /// once, a rank that finishes an epoch starts the next, and the thread waits only when no rank of it moved.
  void runRanks(Job& job, int thread) {
    struct Cursor {
      int rank;
      std::uint64_t epoch;
    };
    const std::uint64_t lastEpoch = job.firstEpoch + static_cast<std::uint64_t>(job.iterations);
    std::vector<Cursor> active;
    for (int r = thread; r < nranks_ && job.iterations > 0; r += threads_) {
      active.push_back({r, job.firstEpoch + 1});
      beginEpoch(job.plans[static_cast<std::size_t>(r)]);
    }
    WakeWord& myWake = wake_[static_cast<std::size_t>(thread)];
    const auto t0 = Clock::now();
    auto lastProgress = t0;
    int idlePolls = 0;
    const auto timeout = std::chrono::duration<double>(job.timeoutSeconds);
    while (!active.empty()) {
      const std::uint32_t seen = myWake.observe();
      bool progress = false;
      for (std::size_t k = 0; k < active.size();) {
        Cursor& c = active[k];
        RankPlan& p = job.plans[static_cast<std::size_t>(c.rank)];
        progress = step(job, c.rank, c.epoch) || progress;
        if (!p.ready->finished()) {
          ++k;
          continue;
        }
        finishEpoch(job, p);
        progress = true;
        if (c.epoch == lastEpoch) {
          job.rankSeconds[static_cast<std::size_t>(c.rank)] = std::chrono::duration<double>(Clock::now() - t0).count();
          active[k] = active.back();
          active.pop_back();
          continue;
        }
        ++c.epoch;
        beginEpoch(p);
      }
      if (progress) {
        idlePolls = 0;
        continue;
      }
      const int waiting = active.front().rank;
      if (abort_.load(std::memory_order_relaxed)) {
        throw Error(Errc::PeerFailure, fmt::format("rank {} aborted: another rank failed", waiting), waiting);
      }
      // Read the clock only every few idle polls: it costs as much as a poll.
      if (idlePolls++ == 0) lastProgress = Clock::now();
      for (int k = 0; k < kPausesPerPoll; ++k) cpuRelax();
      if (idlePolls % kPollsPerClockRead != 0) continue;
      const auto now = Clock::now();
      if (now - lastProgress > timeout)
        timeoutError(job, waiting, job.plans[static_cast<std::size_t>(waiting)].pending);
      if (now - lastProgress < kSpinBeforeSleep) continue;
      if (now - lastProgress < kSpinBeforeSleep + kYieldBeforeSleep) {
        std::this_thread::yield();
        continue;
      }
      myWake.waitFor(seen, kSleepSlice);
    }
  }

  static void beginEpoch(RankPlan& p) {
    p.ready->reset();
    p.pending.clear();
  }

  void finishEpoch(const Job& job, RankPlan& p) const {
    const CollectiveSpec& spec = job.schedule->spec;
    if (p.resultBytes) divideElements(spec.dtype, p.output, p.resultBytes / dtypeSize(spec.dtype), nranks_);
  }

  /// One pass over a rank's ready and posted ops in `epoch`: runs what is ready, finishes what its peer has answered.
  /// Never waits; true when anything moved.
  bool step(Job& job, int rank, std::uint64_t epoch) {
    RankPlan& p = job.plans[static_cast<std::size_t>(rank)];
    const auto& ops = *p.ops;
    const DType dtype = job.schedule->spec.dtype;
    const ReduceOp rop = job.schedule->spec.op;
    const std::size_t es = job.schedule->spec.kind == Collective::Barrier ? 1 : dtypeSize(dtype);
    ReadyOps& ready = *p.ready;
    std::vector<int>& pending = p.pending;
    bool progress = false;
    while (ready.any()) {
      const int i = ready.pop();
      const Op& op = ops[static_cast<std::size_t>(i)];
      progress = true;
      switch (op.kind) {
        case OpKind::SwitchReduce:
        case OpKind::Multicast:
          COLLBENCH_CHECK(false, "switch ops are refused before a run (requireNoSwitchOps)");
          break;
        case OpKind::Copy:
        case OpKind::Reduce:
          runLocalOp(op, resolve(p, op.dst), resolve(p, op.src), dtype, rop, es);
          ready.complete(i);
          break;
        case OpKind::Send: {
          Slot& sl = job.slots[static_cast<std::size_t>(p.slot[static_cast<std::size_t>(i)])];
          if (sl.eager) {
            if (postEager(sl, p, op, epoch)) {
              ready.complete(i);
            } else {
              pending.push_back(i);  // the receiver still holds this parity's buffer (it is an epoch behind)
            }
            break;
          }
          sl.ptr.store(resolve(p, op.src), std::memory_order_relaxed);
          sl.posted.store(epoch, std::memory_order_release);
          wake_[static_cast<std::size_t>(ownerOf(op.peer))].notify();
          pending.push_back(i);
          break;
        }
        case OpKind::Recv:
        case OpKind::RecvReduce:
          pending.push_back(i);
          break;
      }
    }
    for (std::size_t k = 0; k < pending.size();) {
      const int i = pending[k];
      const Op& op = ops[static_cast<std::size_t>(i)];
      Slot& sl = job.slots[static_cast<std::size_t>(p.slot[static_cast<std::size_t>(i)])];
      bool finished = false;
      if (op.kind == OpKind::Send) {
        finished = sl.eager ? postEager(sl, p, op, epoch) : sl.consumed.load(std::memory_order_acquire) >= epoch;
      } else if (sl.posted.load(std::memory_order_acquire) >= epoch) {
        const std::byte* incoming = sl.eager ? sl.eagerBuffer(epoch, op.bytes) : sl.ptr.load(std::memory_order_relaxed);
        std::byte* dst = resolve(p, op.dst);
        if (op.kind == OpKind::Recv) {
          std::memcpy(dst, incoming, op.bytes);
        } else {
          reduceElements(dtype, rop, dst, resolve(p, op.src), incoming, op.bytes / es);
        }
        sl.consumed.store(epoch, std::memory_order_release);
        wake_[static_cast<std::size_t>(ownerOf(op.peer))].notify();
        finished = true;
      }
      if (finished) {
        pending[k] = pending.back();
        pending.pop_back();
        ready.complete(i);
        progress = true;
      } else {
        ++k;
      }
    }
    return progress;
  }

  /// Copies an eager send into the slot's buffer for this epoch's parity and posts it, unless the receiver has
  /// not consumed the message that buffer held two epochs ago.
  bool postEager(Slot& sl, const RankPlan& p, const Op& op, std::uint64_t epoch) {
    if (sl.consumed.load(std::memory_order_acquire) + 2 < epoch) return false;
    std::memcpy(sl.eagerBuffer(epoch, op.bytes), resolve(p, op.src), op.bytes);
    sl.posted.store(epoch, std::memory_order_release);
    wake_[static_cast<std::size_t>(ownerOf(op.peer))].notify();
    return true;
  }

  [[noreturn]] void timeoutError(const Job& job, int rank, const std::vector<int>& pending) {
    const auto& ops = *job.plans[static_cast<std::size_t>(rank)].ops;
    const int i = pending.empty() ? -1 : *std::min_element(pending.begin(), pending.end());
    const int peer = i < 0 ? -1 : ops[static_cast<std::size_t>(i)].peer;
    throw Error(Errc::Timeout,
                fmt::format("rank {} timed out after {} s waiting for rank {} (op {}: {})", rank, job.timeoutSeconds,
                            peer, i, i < 0 ? "?" : toString(ops[static_cast<std::size_t>(i)].kind)),
                rank, peer);
  }

  int nranks_;
  int threads_;                            ///< min(nranks, cores): rank r runs on thread r % threads_
  std::vector<WakeWord> wake_;             ///< per thread
  std::vector<PageAlignedBytes> scratch_;  // per rank, reused by later runs; page-aligned as rank buffers are
  std::vector<std::size_t> scratchBytes_;
  std::vector<std::thread> workers_;
  WakeWord generation_, done_;
  std::atomic<bool> stop_{false}, abort_{false};
  std::atomic<int> finished_{0};
  Job* job_ = nullptr;
  std::uint64_t nextEpoch_ = 0;
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

}  // namespace

/// The host threads backend's bound on ranks (BackendCapabilities::maxRanks): a ring all-reduce makes 2n(n-1)
/// handoffs, measured here at 9 s for a 1 KiB call of 256 ranks on 2 cores, so 4096 ranks would take about 40 minutes
/// a call.
constexpr int kMaxThreadRanks = 4096;

std::unique_ptr<Backend> makeThreadsBackend(int nranks, int threads) {
  return std::make_unique<ThreadsBackend>(nranks, threads);
}

void registerHostBackends() {
  BackendCapabilities caps;
  caps.device = DeviceKind::Cpu;
  caps.ranksPerProcess = RanksPerProcess::All;
  caps.maxRanks = kMaxThreadRanks;
  caps.maxRanksReason =
      "every rank's ops run on this machine's cores and a call's work grows with the square of the ranks: a 1 KiB "
      "ring all-reduce of 256 ranks took 9 s on 2 cores, of 1024 over a minute";
  registerBackend(
      "host", "CPU threads as ranks over shared memory",
      [](int nranks, const BackendOptions&) { return makeThreadsBackend(nranks); }, caps);
}

}  // namespace collbench::host
