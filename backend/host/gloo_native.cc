// Gloo's own all-reduce algorithms (gloo_ring, gloo_ring_chunked, gloo_halving_doubling, gloo_bcube) run as native
// schedules: peer baselines measured in the same harness, guarded by the same collective header.
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "collbench/reduce.h"
#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

namespace {

template <typename T>
std::unique_ptr<gloo::Algorithm> makeNative(std::string_view name, const std::shared_ptr<gloo::Context>& ctx, T* ptr,
                                            int count, ReduceOp op) {
  const gloo::ReductionFunction<T>* fn = gloo::ReductionFunction<T>::sum;
  if (op == ReduceOp::Prod) fn = gloo::ReductionFunction<T>::product;
  if (op == ReduceOp::Min) fn = gloo::ReductionFunction<T>::min;
  if (op == ReduceOp::Max) fn = gloo::ReductionFunction<T>::max;
  const std::vector<T*> ptrs{ptr};
  if (name == "gloo_ring") return std::make_unique<gloo::AllreduceRing<T>>(ctx, ptrs, count, fn);
  if (name == "gloo_ring_chunked") return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx, ptrs, count, fn);
  if (name == "gloo_halving_doubling") {
    return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs, count, fn);
  }
  return std::make_unique<gloo::AllreduceBcube<T>>(ctx, ptrs, count, fn);
}

}  // namespace

/// Smallest b >= 2 with n a power of b: gloo::AllreduceBcube needs the world to be base^k.
int bcubeBase(int n) {
  for (int b = 2; b <= std::max(2, n); ++b) {
    long long p = 1;
    while (p < n) p *= b;
    if (p == n) return b;
  }
  return std::max(2, n);
}

RunResult GlooBackend::runNative(const Schedule& s, const RankBuffers& b, const RunOptions& opt) {
  const auto known = std::find(kGlooNativeAlgorithms.begin(), kGlooNativeAlgorithms.end(), s.algorithm);
  if (known == kGlooNativeAlgorithms.end() || s.spec.kind != Collective::AllReduce) {
    throw Error(Errc::Unsupported, fmt::format("the gloo backend runs Gloo's all-reduce ({}); '{}' for {} is not one "
                                               "of them",
                                               "gloo_ring, gloo_ring_chunked, gloo_halving_doubling, gloo_bcube",
                                               s.algorithm, toString(s.spec.kind)));
  }
  const DType dt = s.spec.dtype;
  if (dt != DType::F32 && dt != DType::F64 && dt != DType::I32 && dt != DType::I64) {
    throw Error(Errc::Unsupported,
                fmt::format("{} runs float, double, int32 and int64 here, not {}", s.algorithm, toString(dt)));
  }
  if (s.spec.count > static_cast<std::size_t>(INT_MAX)) {
    throw Error(Errc::Unsupported,
                fmt::format("{} takes an int element count; {} is too many", s.algorithm, s.spec.count));
  }
  const int count = static_cast<int>(s.spec.count);
  const std::size_t bytes = s.spec.inputBytes();
  // The header exchange guards the native call too: Gloo's own buffers would abort the process on a size
  // mismatch, so disagreeing ranks must never reach it.
  Schedule empty = s;
  empty.native = true;
  auto headerPlan = makePlan(empty, b, true, true, /*allNeighbours=*/true);
  headerPlan->resultBytes = 0;  // headers only: Avg's division belongs to the native call
  void* out = b.output;
  const void* in = b.input;
  std::unique_ptr<gloo::Algorithm> algo;
  auto once = [&] {
    if (in != out && bytes) std::memcpy(out, in, bytes);
    try {
      algo->run();
    } catch (const std::exception& e) {
      std::unique_lock lock(failMutex_);
      if (!failure_) failCv_.wait_for(lock, kCauseGrace, [&] { return failure_.has_value(); });
      if (failure_) throwFailureLocked();
      const std::string what = glooWhat(e);
      const bool timedOut = what.find("imed out") != std::string::npos;
      std::string f = fmt::format("{} failed on {{}}: {}", s.algorithm, what);
      int culprit = -1;
      if (const auto quiet = timedOut ? silentPeer() : std::nullopt) {
        culprit = quiet->first;
        f += fmt::format("; {} has sent nothing (not even a heartbeat) for {:.1f} s: stopped or hung",
                         world_.describeRank(quiet->first), quiet->second);
      }
      raise(Report{timedOut ? Errc::Timeout : Errc::PeerFailure, culprit, fmt::format(fmt::runtime(f), self(true)),
                   fmt::format(fmt::runtime(f), self(false))});
    }
    if (s.needsAvgScale()) divideElements(dt, out, s.spec.count, world_.world);
  };
  // `algo` (Gloo's buffers) lives outside guarded() so that a failure's notices can leave behind its transfers.
  // After a failure a connection may still be receiving into `algo`'s buffers (bytes the peer sent before it went),
  // and Gloo's ring frees its inbox before its buffers unregister from the connections (~AllreduceRing): ASan
  // caught the late read writing freed memory (GlooFaults.KillDuringGloosOwnAllReduceNamesTheDeadRank, 2 runs in
  // 6). guarded() throws only after fail(), and a failed backend runs nothing more, so the algorithm is kept until
  // the destructor has closed the connections.
  try {
    return guarded([&] {
      runEpochs(*headerPlan, 1);
      switch (dt) {
        case DType::F32:
          algo = makeNative(s.algorithm, context_, static_cast<float*>(out), count, s.spec.op);
          break;
        case DType::F64:
          algo = makeNative(s.algorithm, context_, static_cast<double*>(out), count, s.spec.op);
          break;
        case DType::I32:
          algo = makeNative(s.algorithm, context_, static_cast<std::int32_t*>(out), count, s.spec.op);
          break;
        default:
          algo = makeNative(s.algorithm, context_, static_cast<std::int64_t*>(out), count, s.spec.op);
          break;
      }
      for (int i = 0; i < opt.warmup; ++i) once();
      if (world_.world > 1) runEpochs(*barrierPlan_, 1);
      const auto t0 = Clock::now();
      for (int i = 0; i < opt.iterations; ++i) once();
      const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      return finish(s.algorithm, opt.iterations > 0 ? elapsed / opt.iterations : 0.0);
    });
  } catch (...) {
    if (algo) afterFailure_.push_back(std::move(algo));
    throw;
  }
}

}  // namespace collbench::host::gloo_impl
