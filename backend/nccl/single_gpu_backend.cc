// The "cuda-1gpu" backend: n ranks as buffers and streams on one GPU, so that schedules and kernels are validated on
// a machine with one device. A Recv is a device copy and a RecvReduce a reduce kernel on the receiver's stream,
// reading the sender's buffer directly. Streams are ordered with one event per rank, re-recorded after each wave:
// - before a rank reads a peer's buffer (wave k), it waits for the peer's latest event (the peer's writes of waves
//   < k are done);
// - before a rank writes again after peers read its buffers, it waits for those readers' latest events (the
//   rendezvous rule: a send's source stays unchanged until the receive completed).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "backend_options.h"
#include "collbench/backends/nccl.h"
#include "collbench/error.h"
#include "device_rank.h"
#include "kernels.h"
#include "wave_plan.h"

namespace collbench::nccl {
namespace {

class SingleGpuBackend final : public Backend {
 public:
  SingleGpuBackend(int nranks, const BackendOptions& options) : nranks_(nranks) {
    const DeviceProbe& probe = probeDevices();
    if (probe.count == 0) throw Error(Errc::Unsupported, fmt::format("cuda-1gpu backend: {}", probe.reason));
    device_ = intOption(options, "device", 0);
    if (device_ < 0 || device_ >= probe.count) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("cuda-1gpu backend: device {} does not exist ({} visible)", device_, probe.count));
    }
    for (int r = 0; r < nranks; ++r) ranks_.push_back(std::make_unique<DeviceRank>(r, device_));
    COLLBENCH_CUDA(cudaSetDevice(device_));
    waveDone_.assign(static_cast<std::size_t>(nranks), nullptr);
    for (auto& e : waveDone_) COLLBENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    spdlog::info("cuda-1gpu backend: {} ranks on device {}", nranks, device_);
  }

  ~SingleGpuBackend() override {
    (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    for (cudaEvent_t e : waveDone_) {
      if (e) (void)cudaEventDestroy(e);
    }
  }

  std::string_view name() const override { return "cuda-1gpu"; }
  int nranks() const override { return nranks_; }

  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override {
    if (s.native || s.algorithm == kNativeAlgorithm) {
      throw Error(Errc::Unsupported,
                  fmt::format("cuda-1gpu backend runs collbench schedules only, not '{}' (NCCL does not put several "
                              "ranks of one communicator on one GPU; use --backend nccl for the native call)",
                              s.algorithm));
    }
    requireNoSwitchOps(s, "cuda-1gpu");
    if (s.spec.nranks != nranks_ || static_cast<int>(s.ranks.size()) != nranks_) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("schedule is for {} ranks but the cuda-1gpu backend runs {}", s.spec.nranks, nranks_));
    }
    if (static_cast<int>(bufs.size()) != nranks_) {
      throw Error(Errc::InvalidArgument, fmt::format("got buffers for {} ranks, need {}", bufs.size(), nranks_));
    }
    const WavePlan plan = planWaves(s);
    for (int r = 0; r < nranks_; ++r) {
      DeviceRank& dr = *ranks_[static_cast<std::size_t>(r)];
      dr.bind(s.spec, bufs[static_cast<std::size_t>(r)], s.ranks[static_cast<std::size_t>(r)].scratchBytes, 0);
      dr.ensureIterationEvents(static_cast<std::size_t>(opt.warmup) + static_cast<std::size_t>(opt.iterations));
    }
    COLLBENCH_CUDA(cudaSetDevice(device_));
    COLLBENCH_CUDA(cudaDeviceSynchronize());
    readers_.assign(static_cast<std::size_t>(nranks_), {});

    std::vector<RunMonitor::Watched> watched;
    for (auto& r : ranks_) watched.push_back({r.get(), nullptr});
    {
      // Nothing to abort on one device: kernels and copies cannot wait on a peer forever, so a timeout here only
      // reports a device that stopped making progress.
      RunMonitor monitor(std::move(watched), opt.timeoutSeconds, nullptr, progressStride(s.spec));
      try {
        const int total = opt.warmup + opt.iterations;
        for (int it = 0; it < total; ++it) {
          if (it == opt.warmup) recordAll(&DeviceRank::startEvent);
          issueIteration(s, plan, monitor);
          monitor.endIteration(static_cast<std::size_t>(it), static_cast<std::size_t>(total));
        }
        if (opt.iterations <= 0) recordAll(&DeviceRank::startEvent);
        recordAll(&DeviceRank::stopEvent);
        monitor.waitAll();
      } catch (const Error& e) {
        const Error first = monitor.fail(e);
        drain();
        throw first;
      } catch (const std::exception& e) {
        const Error first = monitor.fail(Error(Errc::BackendError, e.what()));
        drain();
        throw first;
      }
    }
    RunResult res;
    res.algorithm = s.algorithm;
    double sum = 0;
    for (auto& rp : ranks_) {
      float ms = 0;
      if (opt.iterations > 0) {
        COLLBENCH_CUDA_RANK(rp->rank(), cudaEventElapsedTime(&ms, rp->startEvent(), rp->stopEvent()));
      }
      const double t = opt.iterations > 0 ? ms * 1e-3 / opt.iterations : 0.0;
      res.rankSeconds.push_back(t);
      sum += t;
      rp->copyOut();
    }
    res.seconds = nranks_ ? sum / nranks_ : 0.0;
    return res;
  }

 private:
  void recordAll(cudaEvent_t (DeviceRank::*which)() const) {
    for (auto& rp : ranks_) COLLBENCH_CUDA_RANK(rp->rank(), cudaEventRecord(((*rp).*which)(), rp->stream()));
  }

  /// After a failure: let issued work finish before the next run's bind() rewrites the buffers it uses.
  void drain() {
    (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
  }

  /// Makes rank r's stream wait for the peers that read its buffers since it last issued work, plus `extra`.
  void waitBeforeIssue(int r, const std::vector<int>& extra) {
    auto& rd = readers_[static_cast<std::size_t>(r)];
    rd.insert(rd.end(), extra.begin(), extra.end());
    std::sort(rd.begin(), rd.end());
    rd.erase(std::unique(rd.begin(), rd.end()), rd.end());
    const DeviceRank& dr = *ranks_[static_cast<std::size_t>(r)];
    for (int p : rd) {
      if (p == r) continue;
      COLLBENCH_CUDA_RANK(r, cudaStreamWaitEvent(dr.stream(), waveDone_[static_cast<std::size_t>(p)], 0));
    }
    rd.clear();
  }

  void issueIteration(const Schedule& s, const WavePlan& plan, RunMonitor& monitor) {
    const std::size_t es = s.spec.elementSize();
    const auto& matches = plan.matching.matches;
    std::vector<int> senders;
    std::vector<std::pair<int, int>> reads;  // (sender, receiver) of this wave
    for (const Wave& w : plan.waves) {
      if (monitor.failed()) monitor.rethrow();
      reads.clear();
      for (int r = 0; r < nranks_; ++r) {
        const RankWave& rw = w.ranks[static_cast<std::size_t>(r)];
        if (rw.empty()) continue;
        const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
        const auto& opMatch = plan.matching.opMatch[static_cast<std::size_t>(r)];
        senders.clear();
        for (int k : rw.comm) {
          const Op& op = ops[static_cast<std::size_t>(k)];
          if (op.kind != OpKind::Send) senders.push_back(op.peer);
        }
        waitBeforeIssue(r, senders);
        DeviceRank& dr = *ranks_[static_cast<std::size_t>(r)];
        for (int k : rw.comm) {
          const Op& op = ops[static_cast<std::size_t>(k)];
          if (op.kind == OpKind::Send) continue;  // the receiver moves the data
          const Match& m = matches[static_cast<std::size_t>(opMatch[static_cast<std::size_t>(k)])];
          const DeviceRank& sender = *ranks_[static_cast<std::size_t>(m.srcRank)];
          const Op& sop = s.ranks[static_cast<std::size_t>(m.srcRank)].ops[static_cast<std::size_t>(m.srcOp)];
          const std::byte* incoming = sender.resolve(sop.src);
          if (op.kind == OpKind::Recv) {
            if (op.bytes) {
              COLLBENCH_CUDA_RANK(
                  r, cudaMemcpyAsync(dr.resolve(op.dst), incoming, op.bytes, cudaMemcpyDeviceToDevice, dr.stream()));
            }
          } else {
            COLLBENCH_CUDA_RANK(r, launchReduce(s.spec.dtype, s.spec.op, dr.resolve(op.dst), dr.resolve(op.src),
                                                incoming, op.bytes / es, dr.stream()));
          }
          reads.emplace_back(m.srcRank, r);
        }
        for (int k : rw.local) {
          const Op& op = ops[static_cast<std::size_t>(k)];
          std::byte* dst = dr.resolve(op.dst);
          const std::byte* src = dr.resolve(op.src);
          if (op.kind == OpKind::Copy) {
            if (dst != src && op.bytes) {
              COLLBENCH_CUDA_RANK(r, cudaMemcpyAsync(dst, src, op.bytes, cudaMemcpyDeviceToDevice, dr.stream()));
            }
          } else {
            COLLBENCH_CUDA_RANK(r, launchReduce(s.spec.dtype, s.spec.op, dst, dst, src, op.bytes / es, dr.stream()));
          }
        }
      }
      // Record after the whole wave is issued, so that waits above saw only earlier waves' work.
      for (int r = 0; r < nranks_; ++r) {
        if (w.ranks[static_cast<std::size_t>(r)].empty()) continue;
        const DeviceRank& dr = *ranks_[static_cast<std::size_t>(r)];
        COLLBENCH_CUDA_RANK(r, cudaEventRecord(waveDone_[static_cast<std::size_t>(r)], dr.stream()));
      }
      for (const auto& [sender, receiver] : reads) readers_[static_cast<std::size_t>(sender)].push_back(receiver);
      monitor.noteIssued();
    }
    // Avg's division writes the output: it waits for the peers that read it, like any other write.
    for (int r = 0; r < nranks_; ++r) {
      const std::size_t bytes = s.needsAvgScale() ? s.resultBytes(r) : 0;
      waitBeforeIssue(r, {});
      DeviceRank& dr = *ranks_[static_cast<std::size_t>(r)];
      if (bytes) COLLBENCH_CUDA_RANK(r, launchDivide(s.spec.dtype, dr.output(), bytes / es, nranks_, dr.stream()));
      COLLBENCH_CUDA_RANK(r, cudaEventRecord(waveDone_[static_cast<std::size_t>(r)], dr.stream()));
    }
  }

  int nranks_;
  int device_ = 0;
  std::vector<std::unique_ptr<DeviceRank>> ranks_;
  std::vector<cudaEvent_t> waveDone_;      ///< per rank, re-recorded after each wave it takes part in
  std::vector<std::vector<int>> readers_;  ///< per rank: peers that read its buffers since its last issue
};

}  // namespace

std::unique_ptr<Backend> makeSingleGpuBackend(int nranks, const BackendOptions& options) {
  return std::make_unique<SingleGpuBackend>(nranks, options);
}

}  // namespace collbench::nccl
