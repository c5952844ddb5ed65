// The process backend "gloo": construction (transport, rendezvous, handshake, watchers), teardown and run(); the
// other jobs are in the gloo_*.cc files gloo_internal.h lists.
#include <gloo/algorithm.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include "collbench/backend_info.h"
#include "gloo_internal.h"

namespace collbench::host::gloo_impl {

namespace {

/// Gloo writes with writev(2), which raises SIGPIPE when the peer has gone: the default action would kill this
/// process silently instead of letting it report which rank failed. A handler the program installed is kept.
void ignoreSigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

std::pair<std::string, int> splitHostPort(const std::string& a) {
  const std::size_t colon = a.rfind(':');
  std::string host = a.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(a.substr(colon + 1))};
}

std::string glooWhat(const std::exception& e) {
  std::string w = e.what();
  if (!w.empty() && w.front() == '[') {
    const std::size_t close = w.find("] ");
    if (close != std::string::npos) w = w.substr(close + 2);
  }
  return w;
}

GlooBackend::GlooBackend(ProcessWorld w) : world_(std::move(w)) {
  rank_ = world_.rank;
  ignoreSigpipe();
  const Ms timeout = toMs(world_.timeoutSeconds.value_or(kDefaultTimeoutSeconds));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = world_.hostOf(rank_);
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, world_.world, bcubeBase(world_.world));
    context_->setTimeout(timeout);
    if (world_.world == 1) {
      gloo::rendezvous::HashStore store;
      context_->connectFullMesh(store, device_);
    } else {
      if (rank_ == 0 && world_.store == "tcp") {
        const auto [host, port] = splitHostPort(world_.master);
        server_ = std::make_unique<StoreServer>(host, port, world_.token);
      }
      connectFullMesh(*context_, device_, world_, timeout);
      handshake(timeout);
      // Everyone has said hello to everyone, so every rank is past its last store access.
      server_.reset();
    }
  } catch (const Error& e) {
    throw withStoreRefusals(e);
  } catch (const std::exception& e) {
    throw Error(Errc::PeerFailure,
                fmt::format("rendezvous of {} (this process) failed: {}", world_.describeRank(rank_), glooWhat(e)),
                rank_);
  }
  if (world_.world > 1) startWatchers();
  buildInternalPlans();
}

GlooBackend::~GlooBackend() {
  if (world_.world > 1) {
    leaving_.store(true);  // no heartbeats behind the goodbye: the peers stop reading after it
    if (!failed_) sendNotices(ControlMessage{ControlMessage::Kind::Goodbye, Errc::PeerFailure, rank_, -1, ""});
    // Gloo closes connections with a reset, which drops whatever is still queued to send: wait until every peer
    // has said goodbye, sent its own notice, or gone, so that ours have been read first. A failed rank waits
    // only briefly (its peers are failing too or cannot be helped).
    {
      const Ms limit = failed_ ? kFailedCloseWait : toMs(world_.timeoutSeconds.value_or(kDefaultTimeoutSeconds));
      std::unique_lock lock(failMutex_);
      failCv_.wait_for(lock, limit, [&] { return watchersDone_ == world_.world - 1; });
    }
    stopping_.store(true);
    {
      std::lock_guard lock(failMutex_);
      for (auto& b : ctrlInBuf_) {
        if (b) b->abortWaitRecv();
      }
    }
    for (auto& t : watchers_) t.join();
    watchdogCv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  barrierPlan_.reset();
  gatherPlan_.reset();
  ctrlInBuf_.clear();
  if (!afterFailure_.empty()) {
    // Close first (a read in progress finishes before its connection closes), then free what it read into.
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // Nothing left to tell anyone; the buffers go either way.
    }
    afterFailure_.clear();
  }
}

RunResult GlooBackend::run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) {
  if (failed_) std::rethrow_exception(failed_);
  if (s.spec.nranks != world_.world) {
    throw Error(Errc::InvalidArgument, fmt::format("schedule is for {} ranks but this gloo world has {} processes",
                                                   s.spec.nranks, world_.world));
  }
  requireNoSwitchOps(s, "gloo");
  if (bufs.size() != 1 && static_cast<int>(bufs.size()) != world_.world) {
    throw Error(Errc::InvalidArgument,
                fmt::format("the gloo backend runs one rank per process: pass this rank's buffers (1 entry), got {}",
                            bufs.size()));
  }
  const RankBuffers& mine = bufs.size() == 1 ? bufs[0] : bufs[static_cast<std::size_t>(rank_)];
  if ((s.spec.inputBytes() && !mine.input) || (s.spec.outputBytes() && !mine.output)) {
    throw Error(Errc::InvalidArgument, fmt::format("rank {}: missing input or output buffer", rank_), rank_);
  }
  opTimeout_ = toMs(world_.timeoutSeconds.value_or(opt.timeoutSeconds));
  return s.native ? runNative(s, mine, opt) : runSchedule(s, mine, opt);
}

Error GlooBackend::withStoreRefusals(const Error& e) const {
  if (!server_) return e;
  const StoreServerStats st = server_->stats();
  if (st.refusedToken + st.refusedVersion + st.refusedFrame == 0) return e;
  return Error(e.code(),
               fmt::format("{}; meanwhile the store refused {} connection(s) with a wrong cluster token, {} with "
                           "another protocol version and {} with malformed frames",
                           e.what(), st.refusedToken, st.refusedVersion, st.refusedFrame),
               e.rank(), e.peer());
}

}  // namespace collbench::host::gloo_impl

namespace collbench::host {

std::unique_ptr<Backend> makeGlooBackend(const ProcessWorld& world) {
  return std::make_unique<gloo_impl::GlooBackend>(world);
}

void registerGlooBackend() {
  BackendCapabilities caps;
  caps.device = DeviceKind::Cpu;
  caps.ranksPerProcess = RanksPerProcess::One;
  caps.nativeAlgorithms = {kGlooNativeAlgorithms.begin(), kGlooNativeAlgorithms.end()};
  registerBackend(
      "gloo", "one rank per process over Gloo's TCP transport (run under `collbench launch`)",
      [](int, const BackendOptions& o) { return makeGlooBackend(ProcessWorld::fromOptions(o)); }, std::move(caps));
}

}  // namespace collbench::host
