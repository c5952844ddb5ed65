// What this rank knows about its peers: the hello handshake after rendezvous, per-peer watcher threads and
// heartbeats, and the failure reports every rank agrees on.
//
// Around the executor (gloo_executor.cc): per-peer watcher threads hold a receive on a control slot, which fails the
// moment the peer's connection closes (or delivers a peer's abort notice), and a watchdog enforces the per-op timeout
// by aborting the current wait (Gloo's own wait timeout closes every connection, so it is only a backstop).
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <spdlog/spdlog.h>

#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

void GlooBackend::handshake(Ms timeout) {
  const int n = world_.world;
  const std::uint64_t digest = Hello::digest(world_.token);
  Hello hello;
  hello.rank = rank_;
  hello.world = n;
  hello.tokenDigest = digest;
  auto out = hello.encode();
  std::vector<std::array<std::byte, Hello::kBytes>> in(static_cast<std::size_t>(n));
  std::vector<std::unique_ptr<UnboundBuffer>> sends(static_cast<std::size_t>(n)), recvs(static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    const auto pu = static_cast<std::size_t>(p);
    sends[pu] = context_->createUnboundBuffer(out.data(), out.size());
    recvs[pu] = context_->createUnboundBuffer(in[pu].data(), in[pu].size());
    recvs[pu]->recv(p, kHelloSlot);
    sends[pu]->send(p, kHelloSlot);
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    const auto pu = static_cast<std::size_t>(p);
    try {
      recvs[pu]->waitRecv(nullptr, timeout);
    } catch (const std::exception& e) {
      throw Error(Errc::Timeout,
                  fmt::format("rendezvous: {} did not complete the handshake with {} (this process) within {:.3g} "
                              "s: {}",
                              world_.describeRank(p), world_.describeRank(rank_),
                              std::chrono::duration<double>(timeout).count(), glooWhat(e)),
                  rank_, p);
    }
    const std::string why = Hello::check(in[pu], p, n, digest);
    if (!why.empty()) {
      spdlog::error("collbench gloo: {} refused the connection from {}: {}", world_.describeRank(rank_),
                    world_.describeRank(p), why);
      throw Error(Errc::InvalidArgument,
                  fmt::format("{} (this process) refused the connection from {}: {}", world_.describeRank(rank_),
                              world_.describeRank(p), why),
                  rank_, p);
    }
  }
  for (int p = 0; p < n; ++p) {
    if (p != rank_) sends[static_cast<std::size_t>(p)]->waitSend(nullptr, timeout);
  }
}

void GlooBackend::startWatchers() {
  const auto n = static_cast<std::size_t>(world_.world);
  ctrlIn_.resize(n);
  ctrlInBuf_.resize(n);
  peerLeft_ = std::vector<std::atomic<bool>>(n);
  lastHeard_ = std::vector<std::atomic<long long>>(n);
  heartbeatSentAfter_.assign(n, 0);
  heartbeatBuf_.resize(n);
  heartbeat_ = ControlMessage{ControlMessage::Kind::Heartbeat, Errc::PeerFailure, rank_, -1, ""}.encode();
  const long long now = Clock::now().time_since_epoch().count();
  for (int p = 0; p < world_.world; ++p) {
    if (p == rank_) continue;
    const auto pu = static_cast<std::size_t>(p);
    ctrlInBuf_[pu] = context_->createUnboundBuffer(ctrlIn_[pu].data(), ctrlIn_[pu].size());
    heartbeatBuf_[pu] = context_->createUnboundBuffer(heartbeat_.data(), heartbeat_.size());
    lastHeard_[pu].store(now);
  }
  for (int p = 0; p < world_.world; ++p) {
    if (p != rank_) watchers_.emplace_back([this, p] { watch(p); });
  }
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

void GlooBackend::watch(int p) {
  const auto pu = static_cast<std::size_t>(p);
  struct Done {
    GlooBackend* self;
    ~Done() {
      std::lock_guard lock(self->failMutex_);
      ++self->watchersDone_;
      self->failCv_.notify_all();
    }
  } done{this};
  try {
    for (;;) {
      ctrlInBuf_[pu]->recv(p, kControlSlot);
      if (!ctrlInBuf_[pu]->waitRecv(nullptr, kForever)) return;  // stopping
      lastHeard_[pu].store(Clock::now().time_since_epoch().count());
      const auto msg = ControlMessage::decode(ctrlIn_[pu]);
      if (!msg) {
        const std::string what = fmt::format("{} sent a malformed control message to {{}}", world_.describeRank(p));
        recordFailure(Report{Errc::BackendError, p, fmt::format(fmt::runtime(what), self(true)),
                             fmt::format(fmt::runtime(what), self(false))});
        return;
      }
      if (msg->kind == ControlMessage::Kind::Heartbeat) continue;
      if (msg->kind == ControlMessage::Kind::Goodbye) {
        peerLeft_[pu].store(true);
        return;
      }
      recordFailure(
          Report{msg->code, msg->culprit,
                 fmt::format("{} (reported by {} to {})", msg->reason, world_.describeRank(msg->origin), self(true)),
                 msg->reason});
      return;
    }
  } catch (const std::exception& e) {
    if (stopping_.load() || peerLeft_[pu].load()) return;
    const std::string what = glooWhat(e);
    if (what.find("Application timeout") != std::string::npos) {
      // One of this process's waits timed out in Gloo, which then closes every connection: not news about p.
      recordFailure(timeoutReport(-1, what, connectionTimeoutSeconds()));
    } else if (what.find("timeout") != std::string::npos) {
      // Gloo's own algorithms (native baselines) wait on bound buffers, whose timeout closes the connection to the
      // peer they waited for ("Read timeout <peer address>").
      recordFailure(timeoutReport(p, fmt::format("Gloo closed the connection: {}", what), connectionTimeoutSeconds()));
    } else {
      recordFailure(lostPeer(p, what, ""));
    }
  }
}

void GlooBackend::sendHeartbeats() {
  if (leaving_.load()) return;
  for (int p = 0; p < world_.world; ++p) {
    const auto pu = static_cast<std::size_t>(p);
    if (p == rank_ || peerLeft_[pu].load()) continue;
    const long long heard = lastHeard_[pu].load();
    if (heartbeatSentAfter_[pu] > heard) continue;  // the last one is not answered by any sign of life yet
    try {
      heartbeatBuf_[pu]->send(p, kControlSlot);
      heartbeatSentAfter_[pu] = heard + 1;
    } catch (const std::exception&) {
      // The connection is gone; its watcher reports it.
    }
  }
}

std::optional<std::pair<int, double>> GlooBackend::silentPeer() const {
  if (lastHeard_.empty()) return std::nullopt;
  const long long now = Clock::now().time_since_epoch().count();
  std::optional<std::pair<int, double>> worst;
  for (int p = 0; p < world_.world; ++p) {
    const auto pu = static_cast<std::size_t>(p);
    if (p == rank_ || peerLeft_[pu].load()) continue;
    const double quiet = std::chrono::duration<double>(Clock::duration(now - lastHeard_[pu].load())).count();
    if (quiet >= std::chrono::duration<double>(kSilenceLimit).count() && (!worst || quiet > worst->second)) {
      worst = std::pair{p, quiet};
    }
  }
  return worst;
}

GlooBackend::Report GlooBackend::timeoutReport(int peer, const std::string& what, double waited) const {
  std::string f = peer >= 0 ? fmt::format("{{}} timed out after {:.3g} s waiting for {} ({})", waited,
                                          world_.describeRank(peer), what)
                            : fmt::format("{{}} timed out after {:.3g} s ({})", waited, what);
  int culprit = peer;
  if (const auto quiet = silentPeer()) {
    culprit = quiet->first;
    const std::string silence = fmt::format("sent nothing (not even a heartbeat) for {:.1f} s", quiet->second);
    f += quiet->first == peer ? fmt::format(", which has {}: stopped or hung", silence)
                              : fmt::format("; {} has {}: stopped or hung, the likely cause",
                                            world_.describeRank(quiet->first), silence);
  }
  return Report{Errc::Timeout, culprit, fmt::format(fmt::runtime(f), self(true)),
                fmt::format(fmt::runtime(f), self(false))};
}

std::string GlooBackend::self(bool local) const {
  return local ? fmt::format("this process, {}", world_.describeRank(rank_)) : world_.describeRank(rank_);
}

GlooBackend::Report GlooBackend::lostPeer(int p, const std::string& why, const std::string& during) const {
  const std::string tail = during.empty() ? why : fmt::format("{}; {}", why, during);
  return Report{Errc::PeerFailure, p,
                fmt::format("{} failed: its connection to {} broke ({})", world_.describeRank(p), self(true), tail),
                fmt::format("{} failed: its connection to {} broke ({})", world_.describeRank(p), self(false), tail)};
}

void GlooBackend::raise(const Report& r) {
  neutral_ = r.neutral;
  throw Error(r.code, r.local, rank_, r.culprit);
}

void GlooBackend::recordFailure(Report r) {
  std::lock_guard lock(failMutex_);
  if (failure_) return;
  failure_ = std::move(r);
  if (current_.buf) current_.isRecv ? current_.buf->abortWaitRecv() : current_.buf->abortWaitSend();
  failCv_.notify_all();
}

void GlooBackend::watchdogLoop() {
  std::unique_lock lock(failMutex_);
  auto nextHeartbeat = Clock::now();
  while (!stopping_.load()) {
    watchdogCv_.wait_for(lock, kWatchdogTick);
    const auto now = Clock::now();
    if (current_.buf && !current_.expired && now >= current_.deadline) {
      current_.expired = true;
      current_.isRecv ? current_.buf->abortWaitRecv() : current_.buf->abortWaitSend();
    }
    if (now >= nextHeartbeat) {
      nextHeartbeat = now + kHeartbeatInterval;
      lock.unlock();  // posting takes Gloo's pair locks; never hold ours meanwhile
      sendHeartbeats();
      lock.lock();
    }
  }
}

void GlooBackend::sendNotices(const ControlMessage& m) {
  const auto bytes = m.encode();
  std::vector<std::unique_ptr<UnboundBuffer>> sent;
  for (int p = 0; p < world_.world; ++p) {
    const bool dead = m.kind == ControlMessage::Kind::Abort && m.code == Errc::PeerFailure && p == m.culprit;
    if (p == rank_ || dead || peerLeft_[static_cast<std::size_t>(p)].load()) continue;
    try {
      auto b = context_->createUnboundBuffer(const_cast<std::byte*>(bytes.data()), bytes.size());
      b->send(p, kControlSlot);
      sent.push_back(std::move(b));
    } catch (const std::exception&) {
      // That connection is gone already; nobody there to tell.
    }
  }
  const auto deadline = Clock::now() + kNoticeFlushTimeout;
  for (auto& b : sent) {
    try {
      b->waitSend(nullptr, std::max(Ms(1), std::chrono::duration_cast<Ms>(deadline - Clock::now())));
    } catch (const std::exception&) {
      break;  // Gloo's timeout closed every connection; the rest will see the close instead
    }
  }
}

void GlooBackend::fail(const Error& e) {
  if (world_.world > 1) {
    {
      std::lock_guard lock(failMutex_);
      if (!failure_) failure_ = Report{e.code(), e.peer(), e.what(), neutral_};  // later closes are not news
    }
    // Pass the news on, naming the real culprit, so that ranks which cannot see it directly name it too (their
    // own view would be this process closing its connections). Duplicates are harmless: the first cause wins.
    leaving_.store(true);
    sendNotices(ControlMessage{ControlMessage::Kind::Abort, e.code(), rank_, e.peer(),
                               neutral_.empty() ? std::string(e.what()) : neutral_});
  }
  failed_ = std::make_exception_ptr(e);
  throw e;
}

}  // namespace collbench::host::gloo_impl
