// The gloo backend's executor. One thread executes this rank's ops: it posts every op whose deps are
// done (Gloo sends and receives progress in Gloo's own I/O thread) and waits on one posted op at a time, always the
// one with the smallest logical time (its round in a lockstep execution of the whole schedule). Every op a peer
// needs before it can complete ours has a smaller time, so by induction every wait ends: the executor never
// deadlocks on an order of its own making, and needs no thread per pending op. Unbound buffers have no
// non-blocking test, which is why the order must be right rather than polled.
#include <gloo/transport/unbound_buffer.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <queue>
#include <tuple>

#include "collbench/algorithms.h"
#include "collbench/reduce.h"
#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

void GlooBackend::await(UnboundBuffer* b, bool isRecv, int peer, const Op* op, int opIndex) {
  for (;;) {
    {
      std::lock_guard lock(failMutex_);
      if (failure_) throwFailureLocked();
      current_ = CurrentWait{b, isRecv, Clock::now() + opTimeout_, false};
    }
    bool ok = false;
    bool ioError = false;
    std::string ioWhat;
    try {
      ok = isRecv ? b->waitRecv(nullptr, opTimeout_ + kGlooBackstop) : b->waitSend(nullptr, opTimeout_ + kGlooBackstop);
    } catch (const std::exception& e) {
      ioError = true;
      ioWhat = glooWhat(e);
    }
    bool expired;
    {
      std::unique_lock lock(failMutex_);
      expired = current_.expired;
      current_ = CurrentWait{};
      if (ok) return;
      if (ioError && !failure_) failCv_.wait_for(lock, kCauseGrace, [&] { return failure_.has_value(); });
      if (failure_) throwFailureLocked();
    }
    const std::string what =
        op ? fmt::format("op {}: {} of {} bytes, channel {}", opIndex, toString(op->kind), op->bytes, op->channel)
           : std::string("collective header");
    if (expired || (ioError && ioWhat.find("Timed out") != std::string::npos))
      raise(timeoutReport(peer, what, std::chrono::duration<double>(opTimeout_).count()));
    if (ioError) raise(lostPeer(peer, ioWhat, what));
    // Aborted without cause: a late watchdog abort meant for an earlier wait on this buffer. Wait again.
  }
}

template <typename F>
void GlooBackend::post(int peer, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::unique_lock lock(failMutex_);
    if (!failure_) failCv_.wait_for(lock, kCauseGrace, [&] { return failure_.has_value(); });
    if (failure_) throwFailureLocked();
    raise(lostPeer(peer, glooWhat(e), "posting a transfer"));
  }
}

void GlooBackend::postAhead(RunPlan& p, std::uint64_t seq, std::uint32_t headerEpochs) {
  const int arena = p.arenaOf(seq);
  const auto au = static_cast<std::size_t>(arena);
  COLLBENCH_CHECK(p.postedFor[au] < 0, "rank {}: arena {} still holds collective {} (posting {})", rank_, arena,
                  p.postedFor[au], seq);
  p.postedFor[au] = static_cast<long long>(seq);
  if (p.headers && headerEpochs > 0) {
    HeaderSet& h = p.header[au];
    h.mine = CollectiveHeader::of(*p.schedule, rank_, seq, p.fingerprint);
    h.mine.epochs = headerEpochs;
    h.out = h.mine.encode();
    for (int q : p.neighbours) {
      const auto qu = static_cast<std::size_t>(q);
      post(q, [&] {
        h.recv[qu]->recv(q, kHeaderSlot, 0, CollectiveHeader::kBytes);
        h.send[qu]->send(q, kHeaderSlot, 0, CollectiveHeader::kBytes);
      });
    }
  }
  const auto& ops = *p.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const OpPlan& o = p.op[i];
    if (o.staged) postRecv(p, static_cast<int>(i), seq, arena);
  }
}

void GlooBackend::postRecv(RunPlan& p, int i, std::uint64_t seq, int arena) {
  const Op& op = (*p.ops)[static_cast<std::size_t>(i)];
  OpPlan& o = p.op[static_cast<std::size_t>(i)];
  auto& pieces = o.pieces[static_cast<std::size_t>(arena)];
  post(op.peer, [&] {
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      pieces[k].buf->recv(op.peer, dataSlot(seq, op.channel, o.streamIndex, k), 0, pieces[k].bytes);
    }
  });
}

void GlooBackend::runEpochs(RunPlan& p, int count) {
  for (int i = 0; i < count; ++i) runEpoch(p, i == 0 ? static_cast<std::uint32_t>(count) : 0, i + 1 < count);
}

void GlooBackend::runEpoch(RunPlan& p, std::uint32_t headerEpochs, bool postNext) {
  const std::uint64_t seq = sequence_++;
  const auto& ops = *p.ops;
  const Schedule& s = *p.schedule;
  const DType dtype = s.spec.dtype;
  const ReduceOp rop = s.spec.op;
  const std::size_t nops = ops.size();
  const bool withHeader = p.headers && headerEpochs > 0;
  const auto arena = static_cast<std::size_t>(p.arenaOf(seq));
  if (p.postedFor[arena] < 0) postAhead(p, seq, headerEpochs);
  COLLBENCH_CHECK(p.postedFor[arena] == static_cast<long long>(seq),
                  "rank {}: collective {} found arena {} posted for {}", rank_, seq, arena, p.postedFor[arena]);
  // The next collective's receives are posted once this one's first sends are out (their notices would delay them).
  bool postNextAhead = postNext && p.doubled;
  const HeaderSet& hs = p.header[arena];
  const std::byte* const landing = p.staging + arena * p.arenaBytes;
  ReadyOps ready(p.graph);
  const auto n = static_cast<std::size_t>(world_.world);
  std::vector<char> headerOk(n, withHeader ? 0 : 1);
  // Sends to a peer whose header has not been checked yet wait for it, so that no data of a mismatched call
  // reaches the peer (whose receives, posted ahead, rely on this), and so that they follow our receives' notices
  // (see sendsToPost).
  std::vector<std::vector<int>> deferredSends(withHeader ? n : 0);
  // Min-heap on (logical time, op); header receives are (-1, 0, -1 - peer) so they come first.
  // Among ops of equal time receives come first: a receive-reduce folds its pieces as they arrive, while a send
  // completing only means the kernel took its bytes (ties may be broken freely: equal-time ops never wait for
  // each other to be noticed).
  using Entry = std::tuple<int, int, int>;  // (time, 1 for sends, op)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> pending;
  if (withHeader) {
    for (int q : p.neighbours) pending.emplace(-1, 0, -1 - q);
  }
  // Sends that became ready, posted once the ready list is drained: every receive notice (Gloo's "recv ready",
  // which lets the peer start sending) then goes onto its connection ahead of our data instead of waiting behind
  // it. Otherwise, between two ranks that exchange data both ways, each side's next transfer would wait until the
  // other's has been written out: the directions alternate and the pair runs at half its bandwidth (seen on a
  // 1 Gbit/s shaped link; on loopback the data drains too fast to notice).
  std::vector<int> sendsToPost;
  auto postSend = [&](int i) {
    const Op& op = ops[static_cast<std::size_t>(i)];
    OpPlan& o = p.op[static_cast<std::size_t>(i)];
    post(op.peer, [&] {
      for (std::size_t k = 0; k < o.pieces[0].size(); ++k) {
        o.pieces[0][k].buf->send(op.peer, dataSlot(seq, op.channel, o.streamIndex, k), 0, o.pieces[0][k].bytes);
      }
    });
    pending.emplace(o.time, 1, i);
  };
  auto awaitOp = [&](int i) {
    const Op& op = ops[static_cast<std::size_t>(i)];
    OpPlan& o = p.op[static_cast<std::size_t>(i)];
    const bool isRecv = op.kind != OpKind::Send;
    for (Piece& pc : o.pieces[o.staged ? arena : 0]) {
      await(pc.buf.get(), isRecv, op.peer, &op, i);
      if (!o.staged || !pc.bytes) continue;
      const std::byte* landed = landing + o.stagingOffset + pc.offset;
      if (op.kind == OpKind::RecvReduce) {
        reduceElements(dtype, rop, resolve(p, op.dst) + pc.offset, resolve(p, op.src) + pc.offset, landed,
                       pc.bytes / p.elemSize);
      } else {
        std::memcpy(resolve(p, op.dst) + pc.offset, landed, pc.bytes);
      }
    }
    ready.complete(i);
  };
  for (;;) {
    while (ready.any() || !sendsToPost.empty()) {
      if (!ready.any()) {
        for (int i : sendsToPost) {
          const auto peer = static_cast<std::size_t>(ops[static_cast<std::size_t>(i)].peer);
          if (headerOk[peer]) {
            postSend(i);
          } else {
            deferredSends[peer].push_back(i);
          }
        }
        sendsToPost.clear();
        break;
      }
      const int i = ready.pop();
      const Op& op = ops[static_cast<std::size_t>(i)];
      switch (op.kind) {
        case OpKind::SwitchReduce:
        case OpKind::Multicast:
          COLLBENCH_CHECK(false, "switch ops are refused before a run (requireNoSwitchOps)");
          break;
        case OpKind::Copy:
        case OpKind::Reduce:
          runLocalOp(op, resolve(p, op.dst), resolve(p, op.src), dtype, rop, p.elemSize);
          ready.complete(i);
          break;
        case OpKind::Send:
          sendsToPost.push_back(i);
          break;
        case OpKind::Recv:
        case OpKind::RecvReduce:
          if (!p.op[static_cast<std::size_t>(i)].staged) postRecv(p, i, seq, 0);  // staged ones are posted
          pending.emplace(p.op[static_cast<std::size_t>(i)].time, 0, i);
          break;
      }
    }
    if (postNextAhead) {
      postAhead(p, seq + 1, 0);
      postNextAhead = false;
    }
    if (pending.empty()) break;
    const auto [t, isSend, i] = pending.top();
    pending.pop();
    if (i < 0) {
      const int q = -1 - i;
      const auto qu = static_cast<std::size_t>(q);
      await(hs.recv[qu].get(), true, q, nullptr, -1);
      std::string whyNot;
      const CollectiveHeader theirs = CollectiveHeader::decode(hs.in[qu], &whyNot);
      std::string mismatch = whyNot.empty()
                                 ? describeMismatch(hs.mine, theirs)
                                 : fmt::format("{} sent a bad collective header: {}", world_.describeRank(q), whyNot);
      if (whyNot.empty() && theirs.rank != q) {
        mismatch = fmt::format("{} sent a header claiming to be rank {}", world_.describeRank(q), theirs.rank);
      }
      if (!mismatch.empty()) {
        spdlog::error("collbench gloo: {}", mismatch);
        std::string neutral = mismatch;
        if (const auto at = neutral.find(" (this process)"); at != std::string::npos) neutral.erase(at, 15);
        raise(Report{Errc::InvalidArgument, q, mismatch, neutral});
      }
      headerOk[qu] = 1;
      for (int d : deferredSends[qu]) postSend(d);
      deferredSends[qu].clear();
      continue;
    }
    awaitOp(i);
    if (isSend) continue;
    // Sends of this round or earlier have usually finished already (Gloo completes a send once the kernel has
    // taken its bytes): collect them before posting what this receive released, so that the receives they
    // release are posted in the same drain, ahead of the new sends.
    while (!pending.empty()) {
      const auto [t2, isSend2, j] = pending.top();
      if (j < 0 || !isSend2 || t2 > t) break;
      pending.pop();
      awaitOp(j);
    }
  }
  COLLBENCH_CHECK(ready.done() == nops, "rank {} finished {} of {} ops of '{}'", rank_, ready.done(), nops,
                  s.algorithm);
  if (withHeader) {
    for (int q : p.neighbours) await(hs.send[static_cast<std::size_t>(q)].get(), false, q, nullptr, -1);
  }
  p.postedFor[arena] = -1;
  if (p.resultBytes) divideElements(dtype, p.output, p.resultBytes / p.elemSize, world_.world);
  if (postNext && !p.doubled) postAhead(p, seq + 1, 0);
}

void GlooBackend::buildInternalPlans() {
  const int n = world_.world;
  gatherOut_.assign(static_cast<std::size_t>(n), 0.0);
  barrierSchedule_ = buildSchedule(CollectiveSpec{Collective::Barrier, n, 0, DType::F32}, "dissemination");
  // Internal collectives carry headers too: a rank that runs more iterations than another would otherwise meet
  // the other's barrier or gather with a data transfer of another size.
  const bool headers = n > 1;
  barrierPlan_ = makePlan(barrierSchedule_, RankBuffers{&gatherIn_, gatherOut_.data()}, headers, true);
  gatherSchedule_ = buildSchedule(CollectiveSpec{Collective::AllGather, n, 1, DType::F64}, "ring");
  gatherPlan_ = makePlan(gatherSchedule_, RankBuffers{&gatherIn_, gatherOut_.data()}, headers, true);
}

std::vector<double> GlooBackend::gatherSeconds(double mine) {
  gatherIn_ = mine;
  runEpochs(*gatherPlan_, 1);
  return gatherOut_;
}

RunResult GlooBackend::finish(const std::string& algorithm, double mySeconds) {
  RunResult res;
  res.algorithm = algorithm;
  res.rankSeconds = world_.world > 1 ? gatherSeconds(mySeconds) : std::vector<double>{mySeconds};
  double sum = 0;
  for (double t : res.rankSeconds) sum += t;
  res.seconds = sum / static_cast<double>(res.rankSeconds.size());
  return res;
}

RunResult GlooBackend::runSchedule(const Schedule& s, const RankBuffers& b, const RunOptions& opt) {
  auto plan = makePlan(s, b, world_.world > 1, false);
  return guarded([&] {
    runEpochs(*plan, opt.warmup);
    if (world_.world > 1) runEpochs(*barrierPlan_, 1);
    const auto t0 = Clock::now();
    runEpochs(*plan, opt.iterations);
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    return finish(s.algorithm, opt.iterations > 0 ? elapsed / opt.iterations : 0.0);
  });
}

}  // namespace collbench::host::gloo_impl
