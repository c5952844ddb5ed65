// The "nccl" backend: one rank per GPU, native NCCL collectives and our schedules as ncclSend/ncclRecv groups plus
// reduce kernels, issued wave by wave (wave_plan.h) on each rank's stream.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "backend_options.h"
#include "collbench/backends/nccl.h"
#include "collbench/error.h"
#include "device_rank.h"
#include "kernels.h"
#include "wave_plan.h"

namespace collbench::nccl {
namespace {

using Clock = std::chrono::steady_clock;

/// How long ncclCommFinalize may take on teardown before the communicator is aborted instead.
constexpr double kFinalizeTimeoutSeconds = 10.0;
/// Poll interval while a nonblocking communicator is in progress.
constexpr auto kSettleSlice = std::chrono::microseconds(20);

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "backend_options.h must know the ncclUniqueId size");

std::string toHex(const ncclUniqueId& id) { return hexEncode(std::string(id.internal, sizeof id.internal)); }

ncclUniqueId fromHex(const std::string& hex) {
  const std::string bytes = decodeUniqueIdHex(hex);
  ncclUniqueId id{};
  std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  return id;
}

/// ncclGroupStart/End with an end that always runs: a throw between the two must not leave this thread's NCCL calls
/// silently buffered into an open group.
class Group {
 public:
  explicit Group(int rank) : rank_(rank) { COLLBENCH_NCCL_RANK(rank_, nullptr, ncclGroupStart()); }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() {
    if (open_) (void)ncclGroupEnd();
  }
  void end() {
    open_ = false;
    COLLBENCH_NCCL_RANK(rank_, nullptr, ncclGroupEnd());
  }

 private:
  int rank_;
  bool open_ = true;
};

/// NCCL_ALGO / NCCL_PROTO as the communicators saw them: NCCL reads them when a communicator is created, so a later
/// change of the environment does not change what runs (and must not change the label).
struct NcclTuning {
  static NcclTuning fromEnvironment() { return {envOrDefault("NCCL_ALGO"), envOrDefault("NCCL_PROTO")}; }
  std::string label() const { return fmt::format("nccl (NCCL_ALGO={}, NCCL_PROTO={})", algo, proto); }
  std::string algo, proto;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(int nranks, const BackendOptions& options) {
    const DeviceProbe& probe = probeDevices();
    if (probe.count == 0) throw Error(Errc::Unsupported, fmt::format("nccl backend: {}", probe.reason));
    initTimeout_ = secondsOption(options, "timeout", kDefaultTimeoutSeconds);
    if (!options.count("nccl_id") && intOption(options, "world", 1) > 1) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("nccl backend: world={} (one rank per process) needs option nccl_id, rank 0's "
                              "newUniqueIdHex() handed to every rank",
                              options.at("world")));
    }
    if (options.count("nccl_id")) {
      multiProcess_ = true;
      id_ = fromHex(options.at("nccl_id"));
      world_ = intOption(options, "world", -1);
      const int rank = intOption(options, "rank", -1);
      if (world_ < 1 || rank < 0 || rank >= world_) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("nccl backend: option nccl_id needs rank (0..world-1) and world >= 1, got rank {} "
                                "world {}",
                                rank, world_));
      }
      if (nranks != 1 && nranks != world_) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("nccl backend: {} ranks requested but option world is {}", nranks, world_));
      }
      const int device = intOption(options, "device", rank % probe.count);
      if (device < 0 || device >= probe.count) {
        throw Error(
            Errc::InvalidArgument,
            fmt::format("nccl backend: rank {}: device {} does not exist ({} visible)", rank, device, probe.count),
            rank);
      }
      ranks_.push_back(std::make_unique<DeviceRank>(rank, device));
    } else {
      world_ = nranks;
      std::vector<int> devices;
      if (auto it = options.find("devices"); it != options.end()) {
        devices = parseDeviceList(it->second);
        if (static_cast<int>(devices.size()) != nranks) {
          throw Error(Errc::InvalidArgument, fmt::format("nccl backend: devices='{}' lists {} devices for {} ranks",
                                                         it->second, devices.size(), nranks));
        }
      } else {
        if (nranks > probe.count) {
          throw Error(Errc::Unsupported,
                      fmt::format("nccl backend: {} ranks need {} GPUs in one process, this machine has {} (NCCL "
                                  "cannot put two ranks of a communicator on one GPU; the cuda-1gpu backend runs "
                                  "several ranks on one device)",
                                  nranks, nranks, probe.count));
        }
        for (int r = 0; r < nranks; ++r) devices.push_back(r);
      }
      for (int r = 0; r < nranks; ++r) {
        if (devices[static_cast<std::size_t>(r)] >= probe.count) {
          throw Error(Errc::InvalidArgument,
                      fmt::format("nccl backend: rank {}: device {} does not exist ({} visible)", r,
                                  devices[static_cast<std::size_t>(r)], probe.count),
                      r);
        }
        ranks_.push_back(std::make_unique<DeviceRank>(r, devices[static_cast<std::size_t>(r)]));
      }
    }
    initComms();
    int version = 0;
    (void)ncclGetVersion(&version);
    spdlog::info("nccl backend: {} of {} ranks in this process, NCCL {}, NCCL_ALGO={}, NCCL_PROTO={}", ranks_.size(),
                 world_, version, tuning_.algo, tuning_.proto);
  }

  ~NcclBackend() override { destroyComms(); }

  std::string_view name() const override { return "nccl"; }
  int nranks() const override { return world_; }

  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override {
    if (s.spec.nranks != world_) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("schedule is for {} ranks but the nccl backend runs {}", s.spec.nranks, world_));
    }
    const bool all = static_cast<int>(bufs.size()) == world_;
    if (!all && bufs.size() != ranks_.size()) {
      throw Error(Errc::InvalidArgument, fmt::format("got buffers for {} ranks, need {} (all ranks) or {} (this "
                                                     "process's ranks)",
                                                     bufs.size(), world_, ranks_.size()));
    }
    if (comms_.empty()) {
      if (multiProcess_) {
        throw Error(Errc::BackendError,
                    fmt::format("rank {}: the NCCL communicator was aborted by an earlier failure; create a new "
                                "backend with a new nccl_id on every rank",
                                ranks_.front()->rank()),
                    ranks_.front()->rank());
      }
      initComms();
    }
    // An in-network algorithm runs as NCCL's own implementation of it, on communicators made for that (NCCL reads
    // NCCL_ALGO when a communicator is created): its switch ops cannot be issued as ncclSend/ncclRecv.
    const std::optional<NcclNativeAlgorithm> theirs = ncclNativeAlgorithm(s.algorithm);
    if (s.usesSwitch() && !theirs) {
      throw Error(Errc::Unsupported,
                  fmt::format("algorithm '{}' has switch ops, which the nccl backend's schedule executor cannot issue, "
                              "and NCCL has no algorithm of that name",
                              s.algorithm));
    }
    if (theirs && s.spec.kind != Collective::AllReduce) {
      throw Error(Errc::Unsupported, fmt::format("algorithm '{}' runs as NCCL's {} all-reduce; got a {}", s.algorithm,
                                                 theirs->ncclAlgo, toString(s.spec.kind)));
    }
    const bool native = s.native || s.algorithm == kNativeAlgorithm || theirs.has_value();
    if (s.native && s.algorithm != kNativeAlgorithm) {
      throw Error(Errc::Unsupported, fmt::format("algorithm '{}' is another library's own call; the nccl backend runs "
                                                 "native '{}' and collbench schedules",
                                                 s.algorithm, kNativeAlgorithm));
    }
    std::vector<ncclComm_t>& comms = theirs ? commsFor(*theirs).comms : comms_;
    const NcclTuning& tuning = theirs ? commsFor(*theirs).tuning : tuning_;
    WavePlan plan;
    if (!native) {
      if (static_cast<int>(s.ranks.size()) != world_) {
        throw Error(Errc::InvalidSchedule, fmt::format("schedule {} has programs for {} ranks, expected {}",
                                                       s.algorithm, s.ranks.size(), world_));
      }
      plan = planWaves(s);
    }
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      DeviceRank& r = *ranks_[i];
      const auto g = static_cast<std::size_t>(r.rank());
      // Native barrier all-reduces one int32 in the staging buffer.
      const std::size_t staging = native ? sizeof(std::int32_t) : plan.stagingBytes[g];
      r.bind(s.spec, bufs[all ? g : i], native ? 0 : s.ranks[g].scratchBytes, staging);
      r.ensureIterationEvents(static_cast<std::size_t>(opt.warmup) + static_cast<std::size_t>(opt.iterations));
      COLLBENCH_CUDA_RANK(r.rank(), cudaDeviceSynchronize());
    }

    std::vector<RunMonitor::Watched> watched;
    for (std::size_t i = 0; i < ranks_.size(); ++i) watched.push_back({ranks_[i].get(), comms[i]});
    {
      RunMonitor monitor(
          std::move(watched), opt.timeoutSeconds,
          [toAbort = comms] {
            for (ncclComm_t c : toAbort) (void)ncclCommAbort(c);
          },
          progressStride(s.spec));
      try {
        const int total = opt.warmup + opt.iterations;
        for (int it = 0; it < total; ++it) {
          if (it == opt.warmup) recordAll(&DeviceRank::startEvent);
          if (native) {
            issueNative(s.spec, comms, monitor);
          } else {
            issueSchedule(s, plan, monitor);
          }
          monitor.endIteration(static_cast<std::size_t>(it), static_cast<std::size_t>(total));
        }
        if (opt.iterations <= 0) recordAll(&DeviceRank::startEvent);
        recordAll(&DeviceRank::stopEvent);
        monitor.waitAll();
      } catch (const Error& e) {
        const Error first = monitor.fail(e);
        afterFault(theirs);
        throw first;
      } catch (const std::exception& e) {
        const Error first = monitor.fail(Error(Errc::BackendError, e.what()));
        afterFault(theirs);
        throw first;
      }
    }

    RunResult res;
    res.algorithm = native ? tuning.label() : s.algorithm;
    double sum = 0;
    for (auto& rp : ranks_) {
      DeviceRank& r = *rp;
      float ms = 0;
      if (opt.iterations > 0) {
        r.activate();
        COLLBENCH_CUDA_RANK(r.rank(), cudaEventElapsedTime(&ms, r.startEvent(), r.stopEvent()));
      }
      const double t = opt.iterations > 0 ? ms * 1e-3 / opt.iterations : 0.0;
      res.rankSeconds.push_back(t);
      sum += t;
      r.copyOut();
    }
    res.seconds = sum / static_cast<double>(ranks_.size());
    return res;
  }

 private:
  /// The rank a group-level NCCL error names: this process's rank, or none when it drives several.
  int groupRank() const { return ranks_.size() == 1 ? ranks_.front()->rank() : Error::kNoRank; }

  void recordAll(cudaEvent_t (DeviceRank::*which)() const) {
    for (auto& rp : ranks_) {
      rp->activate();
      COLLBENCH_CUDA_RANK(rp->rank(), cudaEventRecord(((*rp).*which)(), rp->stream()));
    }
  }

  void initComms() {
    tuning_ = NcclTuning::fromEnvironment();
    comms_ = createComms(nullptr);
  }

  /// One communicator per rank of this process: ncclCommInitAll when this process drives every rank; with one rank
  /// per process, from the shared id when `parent` is null, else split from `parent` (an id makes one communicator).
  std::vector<ncclComm_t> createComms(ncclComm_t parent) {
    std::vector<ncclComm_t> comms(ranks_.size(), nullptr);
    if (!multiProcess_) {
      std::vector<int> devices;
      for (auto& r : ranks_) devices.push_back(r->device());
      COLLBENCH_NCCL_RANK(Error::kNoRank, nullptr,
                          ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
      return comms;
    }
    // One rank per process: a nonblocking communicator, so that setup and every later call can be given up on
    // (ncclCommAbort) when a peer never arrives, instead of blocking this process forever.
    DeviceRank& r = *ranks_.front();
    r.activate();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    if (parent) {
      COLLBENCH_NCCL_RANK(r.rank(), parent, ncclCommSplit(parent, 0, r.rank(), &comm, &config));
    } else {
      COLLBENCH_NCCL_RANK(r.rank(), nullptr, ncclCommInitRankConfig(&comm, world_, id_, r.rank(), &config));
    }
    const char* call = parent ? "ncclCommSplit" : "ncclCommInitRankConfig";
    const auto deadline = Clock::now() + std::chrono::duration<double>(initTimeout_);
    for (;;) {
      ncclResult_t state = ncclInProgress;
      COLLBENCH_NCCL_RANK(r.rank(), comm, ncclCommGetAsyncError(comm, &state));
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        (void)ncclCommAbort(comm);
        checkNccl(state, call, __FILE__, __LINE__, r.rank());
      }
      if (Clock::now() > deadline) {
        (void)ncclCommAbort(comm);
        // NCCL does not say which ranks arrived; with two there is only one it can be.
        const int peer = world_ == 2 ? 1 - r.rank() : Error::kNoRank;
        const std::string missing = world_ == 2 ? fmt::format("rank {}", peer)
                                                : fmt::format("the other {} ranks of 0..{}", world_ - 1, world_ - 1);
        throw Error(Errc::Timeout,
                    fmt::format("rank {}: NCCL communicator setup ({}) timed out after {} s waiting for {} (same "
                                "nccl_id on every rank? all started?)",
                                r.rank(), call, initTimeout_, missing),
                    r.rank(), peer);
      }
      std::this_thread::sleep_for(kSettleSlice);
    }
    comms[0] = comm;
    return comms;
  }

  /// Communicators made with one NCCL_ALGO (NcclNativeAlgorithm), and the tuning they saw.
  struct AlgorithmComms {
    NcclTuning tuning;
    std::vector<ncclComm_t> comms;
  };

  /// The communicators that run NCCL's algorithm `a`, made on first use inside its environment (every rank of the
  /// world asks for them in the same run, as for any collective call).
  AlgorithmComms& commsFor(const NcclNativeAlgorithm& a) {
    const std::string key(a.ncclAlgo);
    if (auto it = algorithmComms_.find(key); it != algorithmComms_.end()) return it->second;
    AlgorithmComms made;
    {
      // Held until setup has finished: a nonblocking communicator reads the environment while it initialises.
      const ScopedEnvironment env(ncclAlgorithmEnvironment(a));
      made.tuning = NcclTuning::fromEnvironment();
      made.comms = createComms(multiProcess_ ? comms_.front() : nullptr);
    }
    spdlog::info("nccl backend: communicators for NCCL_ALGO={}{}", key, a.collnet ? " with NCCL_COLLNET_ENABLE=1" : "");
    return algorithmComms_.emplace(key, std::move(made)).first->second;
  }

  void destroyComms() {
    // Split communicators before their parent.
    for (auto& [algo, set] : algorithmComms_) destroy(set.comms);
    algorithmComms_.clear();
    destroy(comms_);
  }

  void destroy(std::vector<ncclComm_t>& comms) {
    for (std::size_t i = 0; i < comms.size(); ++i) {
      ncclComm_t c = comms[i];
      if (!c) continue;
      if (!multiProcess_) {
        (void)ncclCommDestroy(c);
        continue;
      }
      // Nonblocking: finalize flushes outstanding work; abort if a peer keeps it from finishing.
      (void)cudaSetDevice(ranks_[i]->device());
      ncclResult_t r = ncclCommFinalize(c);
      const auto deadline = Clock::now() + std::chrono::duration<double>(kFinalizeTimeoutSeconds);
      ncclResult_t state = r;
      while (state == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(kSettleSlice);
        if (ncclCommGetAsyncError(c, &state) != ncclSuccess) break;
      }
      if (state == ncclSuccess) {
        (void)ncclCommDestroy(c);
      } else {
        (void)ncclCommAbort(c);
      }
    }
    comms.clear();
  }

  /// After a fault the monitor has aborted the run's communicators (those of NCCL's algorithm `theirs`, or the
  /// backend's own): drain the streams (aborted NCCL kernels exit) and forget the handles, so the next run re-creates
  /// them (one process) or refuses (multi-process).
  void afterFault(const std::optional<NcclNativeAlgorithm>& theirs) {
    for (auto& r : ranks_) {
      (void)cudaSetDevice(r->device());
      (void)cudaStreamSynchronize(r->stream());
      (void)cudaGetLastError();
    }
    if (theirs) {
      algorithmComms_.erase(std::string(theirs->ncclAlgo));
    } else {
      comms_.clear();
    }
  }

  /// Nonblocking communicators may still be enqueuing a group when ncclGroupEnd returns; nothing else may go on
  /// their streams (our reduce kernels read what the receives wrote) until they settle.
  void settle(const std::vector<ncclComm_t>& comms, RunMonitor& monitor) {
    if (!multiProcess_) return;
    for (std::size_t i = 0; i < comms.size(); ++i) {
      for (;;) {
        if (monitor.failed()) monitor.rethrow();
        ncclResult_t state = ncclSuccess;
        COLLBENCH_NCCL_RANK(ranks_[i]->rank(), comms[i], ncclCommGetAsyncError(comms[i], &state));
        if (state == ncclSuccess) break;
        checkNccl(state, "ncclGroupEnd (asynchronous)", __FILE__, __LINE__, ranks_[i]->rank(), comms[i]);
        std::this_thread::sleep_for(kSettleSlice);
      }
    }
  }

  void issueNative(const CollectiveSpec& spec, const std::vector<ncclComm_t>& comms, RunMonitor& monitor) {
    if (monitor.failed()) monitor.rethrow();
    const ncclDataType_t dt = toNccl(spec.dtype);
    const ncclRedOp_t op = toNccl(spec.op);
    // Several ranks in this process must be issued as one group; a lone rank needs none (measured at up to 5% of a
    // host-bound 1 MiB call).
    std::optional<Group> group;
    if (ranks_.size() > 1) group.emplace(groupRank());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      DeviceRank& r = *ranks_[i];
      ncclComm_t c = comms[i];
      const int rank = r.rank();
      void* out = r.output();
      const void* in = r.input();
      switch (spec.kind) {
        case Collective::AllReduce:
          COLLBENCH_NCCL_RANK(rank, c, ncclAllReduce(in, out, spec.count, dt, op, c, r.stream()));
          break;
        case Collective::ReduceScatter:
          COLLBENCH_NCCL_RANK(rank, c, ncclReduceScatter(in, out, spec.count, dt, op, c, r.stream()));
          break;
        case Collective::AllGather:
          COLLBENCH_NCCL_RANK(rank, c, ncclAllGather(in, out, spec.count, dt, c, r.stream()));
          break;
        case Collective::Broadcast:
          COLLBENCH_NCCL_RANK(rank, c, ncclBroadcast(in, out, spec.count, dt, spec.root, c, r.stream()));
          break;
        case Collective::Reduce:
          COLLBENCH_NCCL_RANK(rank, c, ncclReduce(in, out, spec.count, dt, op, spec.root, c, r.stream()));
          break;
        case Collective::Barrier:
          COLLBENCH_NCCL_RANK(rank, c, ncclAllReduce(r.staging(), r.staging(), 1, ncclInt32, ncclSum, c, r.stream()));
          break;
      }
    }
    if (group) group->end();
    settle(comms, monitor);
    // No noteIssued() here: one call per iteration, and the progress events (noteRecorded) already mark issue
    // progress at least every kMaxProgressStride calls; a clock read per call is 1% of a host-bound 1 MiB call.
  }

  void issueSchedule(const Schedule& s, const WavePlan& plan, RunMonitor& monitor) {
    const std::size_t es = s.spec.elementSize();
    for (const Wave& w : plan.waves) {
      if (monitor.failed()) monitor.rethrow();
      bool anyComm = false;
      for (auto& r : ranks_) anyComm = anyComm || !w.ranks[static_cast<std::size_t>(r->rank())].comm.empty();
      if (anyComm) {
        Group group(groupRank());
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
          DeviceRank& r = *ranks_[i];
          const auto g = static_cast<std::size_t>(r.rank());
          const auto& ops = s.ranks[g].ops;
          ncclComm_t c = comms_[i];
          for (int k : w.ranks[g].comm) {
            const Op& op = ops[static_cast<std::size_t>(k)];
            switch (op.kind) {
              case OpKind::Send:
                COLLBENCH_NCCL_RANK(r.rank(), c,
                                    ncclSend(r.resolve(op.src), op.bytes, ncclUint8, op.peer, c, r.stream()));
                break;
              case OpKind::Recv:
                COLLBENCH_NCCL_RANK(r.rank(), c,
                                    ncclRecv(r.resolve(op.dst), op.bytes, ncclUint8, op.peer, c, r.stream()));
                break;
              case OpKind::RecvReduce:
                COLLBENCH_NCCL_RANK(r.rank(), c,
                                    ncclRecv(r.staging() + plan.stagingOffset[g][static_cast<std::size_t>(k)], op.bytes,
                                             ncclUint8, op.peer, c, r.stream()));
                break;
              default:
                COLLBENCH_CHECK(false, "local op {} in a comm list", k);
            }
          }
        }
        group.end();
        settle(comms_, monitor);
      }
      for (auto& rp : ranks_) {
        DeviceRank& r = *rp;
        const auto g = static_cast<std::size_t>(r.rank());
        const RankWave& rw = w.ranks[g];
        if (rw.empty()) continue;
        const auto& ops = s.ranks[g].ops;
        r.activate();
        for (int k : rw.comm) {
          const Op& op = ops[static_cast<std::size_t>(k)];
          if (op.kind != OpKind::RecvReduce) continue;
          COLLBENCH_CUDA_RANK(r.rank(), launchReduce(s.spec.dtype, s.spec.op, r.resolve(op.dst), r.resolve(op.src),
                                                     r.staging() + plan.stagingOffset[g][static_cast<std::size_t>(k)],
                                                     op.bytes / es, r.stream()));
        }
        for (int k : rw.local) issueLocal(s, r, ops[static_cast<std::size_t>(k)]);
      }
      monitor.noteIssued();
    }
    if (s.needsAvgScale()) {
      for (auto& rp : ranks_) {
        const std::size_t bytes = s.resultBytes(rp->rank());
        if (!bytes) continue;
        rp->activate();
        COLLBENCH_CUDA_RANK(rp->rank(), launchDivide(s.spec.dtype, rp->output(), bytes / es, world_, rp->stream()));
      }
    }
  }

  static void issueLocal(const Schedule& s, DeviceRank& r, const Op& op) {
    std::byte* dst = r.resolve(op.dst);
    const std::byte* src = r.resolve(op.src);
    if (op.kind == OpKind::Copy) {
      if (dst != src && op.bytes) {
        COLLBENCH_CUDA_RANK(r.rank(), cudaMemcpyAsync(dst, src, op.bytes, cudaMemcpyDeviceToDevice, r.stream()));
      }
      return;
    }
    COLLBENCH_CUDA_RANK(
        r.rank(), launchReduce(s.spec.dtype, s.spec.op, dst, dst, src, op.bytes / s.spec.elementSize(), r.stream()));
  }

  int world_ = 0;
  bool multiProcess_ = false;
  double initTimeout_ = kDefaultTimeoutSeconds;
  ncclUniqueId id_{};
  NcclTuning tuning_;                                     ///< when the communicators were created
  std::vector<std::unique_ptr<DeviceRank>> ranks_;        ///< the ranks this process executes
  std::vector<ncclComm_t> comms_;                         ///< one per entry of ranks_; empty after an abort
  std::map<std::string, AlgorithmComms> algorithmComms_;  ///< by NCCL_ALGO: NCCL's in-network algorithms
};

}  // namespace

std::unique_ptr<Backend> makeNcclBackend(int nranks, const BackendOptions& options) {
  return std::make_unique<NcclBackend>(nranks, options);
}

std::string newUniqueIdHex() {
  ncclUniqueId id{};
  COLLBENCH_NCCL_RANK(Error::kNoRank, nullptr, ncclGetUniqueId(&id));
  return toHex(id);
}

}  // namespace collbench::nccl
