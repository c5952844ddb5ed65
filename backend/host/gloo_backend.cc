// Process backend over Gloo's TCP transport. One thread executes this rank's ops: it posts every op whose deps are
// done (Gloo sends and receives progress in Gloo's own I/O thread) and waits on one posted op at a time, always the
// one with the smallest logical time (its round in a lockstep execution of the whole schedule). Every op a peer
// needs before it can complete ours has a smaller time, so by induction every wait ends: the executor never
// deadlocks on an order of its own making, and needs no thread per pending op. Unbound buffers have no
// non-blocking test, which is why the order must be right rather than polled.
//
// Around the executor: per-peer watcher threads hold a receive on a control slot, which fails the moment the
// peer's connection closes (or delivers a peer's abort notice), and a watchdog enforces the per-op timeout by
// aborting the current wait (Gloo's own wait timeout closes every connection, so it is only a backstop).
#include "gloo_backend.h"

#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <tuple>

#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "host_backend.h"
#include "op_graph.h"
#include "store.h"

namespace collbench::host {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;
using Ms = std::chrono::milliseconds;

// Unbound-buffer slots (Gloo matches a send with a receive of the same slot on the same pair, FIFO per slot).
constexpr std::uint64_t kHelloSlot = 1;
constexpr std::uint64_t kHeaderSlot = 2;
constexpr std::uint64_t kControlSlot = 3;
// Data slots: top bit set, then collective sequence, channel, the op's index in its (pair, direction, channel)
// stream, and the piece of the op.
constexpr std::uint64_t kDataSlotBit = 1ull << 63;
constexpr int kSeqBits = 20, kChannelBits = 11, kIndexBits = 26, kPieceBits = 6;
static_assert(1 + kSeqBits + kChannelBits + kIndexBits + kPieceBits == 64);

/// Transfers are cut into pieces of about this size (at most 2^kPieceBits of them), so that a receive-reduce folds
/// piece k while piece k+1 is still arriving: reduction overlaps the transfer without changing the schedule.
constexpr std::size_t kWirePieceBytes = 1u << 20;
constexpr std::size_t kMaxPieces = std::size_t{1} << kPieceBits;
/// Gloo sends an unbound buffer only once the receiver's "ready" notice has arrived, so a receive posted when its op
/// becomes ready costs a message latency on top of the transfer. Receives up to this size land in staging instead,
/// posted before the collective starts, and are copied into place when the op is ready: the copy (tens of
/// microseconds at this size) is cheaper than the notice's round trip on a loaded machine; larger transfers take
/// long enough that the notice's latency hides behind them.
constexpr std::size_t kStagedRecvMaxBytes = 256u << 10;
/// Plans whose staging fits in this keep two arenas, so that the next collective's receives can be posted while
/// this one runs (doubling this much memory is cheap; beyond it the transfers dwarf one message latency).
constexpr std::size_t kDoubleStagingMaxBytes = 16u << 20;

/// Waits that must outlast any collective (watchers). Gloo's timeout tears down every connection, so it must never
/// fire on them; 30 days keeps steady_clock arithmetic far from overflow.
constexpr Ms kForever = std::chrono::hours(24 * 30);
/// Gloo's own wait timeout sits this far behind ours (the watchdog's): a backstop only.
constexpr Ms kGlooBackstop = std::chrono::seconds(5);
/// How often the watchdog checks the current wait's deadline (timeout precision).
constexpr Ms kWatchdogTick{20};
/// A failing rank waits this long for its abort notices to leave before it gives up on them.
constexpr Ms kNoticeFlushTimeout{1000};
/// After a failure, how long this rank's destructor waits for its peers to read its notice and close, before Gloo
/// resets the connections.
constexpr Ms kFailedCloseWait{2000};
/// After a connection error, how long the executor lets the watchers report the real cause (a peer's abort notice
/// travels ahead of its closing socket) before it blames the peer it was waiting for.
constexpr Ms kCauseGrace{500};
/// Every rank sends each peer a heartbeat this often (from the watchdog thread, so a rank blocked in a wait still
/// sends them). 256 bytes per peer four times a second: nothing next to the collectives' traffic.
constexpr Ms kHeartbeatInterval{250};
/// A peer not heard from for this long (four missed heartbeats) counts as stopped when a wait times out: it is
/// named instead of the peer the wait was for, which may itself be waiting on it. Waits shorter than this cannot
/// tell a stopped peer from a slow one and name the peer they waited for.
constexpr Ms kSilenceLimit{1000};

Ms toMs(double seconds) { return Ms(static_cast<long long>(std::max(1.0, seconds * 1000.0))); }

std::pair<std::string, int> splitHostPort(const std::string& a) {
  const std::size_t colon = a.rfind(':');
  std::string host = a.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(a.substr(colon + 1))};
}

/// Gloo messages start with "[file:line] "; users need the part after it.
std::string glooWhat(const std::exception& e) {
  std::string w = e.what();
  if (!w.empty() && w.front() == '[') {
    const std::size_t close = w.find("] ");
    if (close != std::string::npos) w = w.substr(close + 2);
  }
  return w;
}

/// Smallest b >= 2 with n a power of b: gloo::AllreduceBcube needs the world to be base^k.
int bcubeBase(int n) {
  for (int b = 2; b <= std::max(2, n); ++b) {
    long long p = 1;
    while (p < n) p *= b;
    if (p == n) return b;
  }
  return std::max(2, n);
}

std::uint64_t dataSlot(std::uint64_t seq, int channel, std::size_t index, std::size_t piece) {
  const std::uint64_t seqPart = seq & ((std::uint64_t{1} << kSeqBits) - 1);
  return kDataSlotBit | (seqPart << (kChannelBits + kIndexBits + kPieceBits)) |
         (static_cast<std::uint64_t>(channel) << (kIndexBits + kPieceBits)) |
         (static_cast<std::uint64_t>(index) << kPieceBits) | piece;
}

/// Gloo writes with writev(2), which raises SIGPIPE when the peer has gone: the default action would kill this
/// process silently instead of letting it report which rank failed. A handler the program installed is kept.
void ignoreSigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

// ---------------------------------------------------------------------------------------------------------------
// Rendezvous store: our TCP store or Gloo's file store, with keys scoped to this cluster and timeouts turned into
// errors that name the task that did not arrive.

class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(const ProcessWorld& w, Ms timeout) : world_(w), timeout_(timeout) {
    prefix_ = fmt::format("collbench-{:016x}-", Hello::digest(w.token));
    if (w.store == "tcp") {
      const auto [host, port] = splitHostPort(w.master);
      try {
        tcp_ = std::make_unique<StoreClient>(host, port, w.token, timeout);
      } catch (const Error& e) {
        if (e.code() != Errc::Timeout) throw;
        throw Error(Errc::Timeout,
                    fmt::format("rendezvous: {}, which serves the store at {}, did not answer within {:.3g} s ({} "
                                "waited for it)",
                                w.describeRank(0), w.master, seconds(timeout), w.describeRank(w.rank)),
                    w.rank, 0);
      }
      kind_ = fmt::format("TCP store at {}", w.master);
    } else {
      const std::string dir = w.store.substr(5);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      file_ = std::make_unique<gloo::rendezvous::FileStore>(dir);
      kind_ = fmt::format("file store in {}", dir);
    }
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    if (tcp_) {
      tcp_->set(prefix_ + key, data);
      return;
    }
    try {
      file_->set(prefix_ + key, data);
    } catch (const std::exception& e) {
      const std::string what = glooWhat(e);
      if (what.find("File already exists") != std::string::npos) {
        // Keys are scoped by the cluster token, so an earlier run with the same token (a derived one: same addresses)
        // left them; other ranks may read its stale addresses, so stop here.
        throw Error(
            Errc::InvalidArgument,
            fmt::format("rendezvous: the {} already holds '{}' of this cluster from an earlier run with the same "
                        "cluster token; give each job a fresh directory (COLLBENCH_STORE=file:<new dir>), empty "
                        "this one, or set {} to a value unique to the run (collbench launch does)",
                        kind_, key, kClusterTokenEnv),
            world_.rank);
      }
      throw Error(Errc::InvalidArgument,
                  fmt::format("rendezvous: cannot publish '{}' in the {}: {} (use a fresh directory per job)", key,
                              kind_, what),
                  world_.rank);
    }
  }

  std::vector<char> get(const std::string& key) override {
    if (tcp_) {
      auto v = tcp_->get(prefix_ + key, timeout_);
      if (!v) missing(key);
      return std::move(*v);
    }
    waitOne(key, timeout_);
    return file_->get(prefix_ + key);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const Ms& timeout) override {
    const auto deadline = Clock::now() + std::min(timeout, timeout_);
    for (const auto& k : keys) waitOne(k, std::max(Ms(1), std::chrono::duration_cast<Ms>(deadline - Clock::now())));
  }

 private:
  static double seconds(Ms m) { return std::chrono::duration<double>(m).count(); }

  void waitOne(const std::string& key, Ms timeout) {
    if (tcp_) {
      if (!tcp_->wait(prefix_ + key, timeout)) missing(key);
      return;
    }
    try {
      file_->wait({prefix_ + key}, timeout);
    } catch (const gloo::IoException&) {
      missing(key);
    }
  }

  /// Gloo's keys are "rank_<i>" (host names) and "<i>" (transport addresses) of rank i.
  [[noreturn]] void missing(const std::string& key) {
    int r = -1;
    const std::string digits = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      r = std::stoi(digits);
    }
    throw Error(Errc::Timeout,
                fmt::format("rendezvous: {} did not join within {:.3g} s ({} waited for it at the {})",
                            world_.describeRank(r), seconds(timeout_), world_.describeRank(world_.rank), kind_),
                world_.rank, r);
  }

  const ProcessWorld& world_;
  Ms timeout_;
  std::string prefix_;
  std::string kind_;
  std::unique_ptr<StoreClient> tcp_;
  std::unique_ptr<gloo::rendezvous::FileStore> file_;
};

// ---------------------------------------------------------------------------------------------------------------
// Per-run plan of this rank's program.

struct Piece {
  std::size_t offset = 0;  ///< within the op's range
  std::size_t bytes = 0;
  std::unique_ptr<UnboundBuffer> buf;
};

struct OpPlan {
  int time = 0;  ///< logical completion round (see the file comment)
  std::size_t streamIndex = 0;
  std::size_t stagingOffset = 0;
  /// A receive that lands in staging (every RecvReduce, and Recv up to kStagedRecvMaxBytes): it is posted before
  /// the collective starts, whatever its deps, and its bytes are folded or copied into place once the deps are done.
  bool staged = false;
  /// pieces[k]: the transfer's buffers in staging arena k (sends and direct receives use pieces[0] only).
  std::array<std::vector<Piece>, 2> pieces;
};

/// A collective's headers in flight: this rank's (sent to every neighbour) and each neighbour's.
struct HeaderSet {
  CollectiveHeader mine;
  std::array<std::byte, CollectiveHeader::kBytes> out{};
  std::vector<std::array<std::byte, CollectiveHeader::kBytes>> in;
  std::vector<std::unique_ptr<UnboundBuffer>> send, recv;
};

struct RunPlan {
  const Schedule* schedule = nullptr;
  const std::vector<Op>* ops = nullptr;
  OpGraph graph;
  std::vector<OpPlan> op;
  bool headers = true;
  std::vector<int> neighbours;
  std::uint64_t fingerprint = 0;
  std::byte* input = nullptr;
  std::byte* output = nullptr;
  std::byte* scratch = nullptr;
  std::byte* staging = nullptr;
  std::vector<std::byte> ownScratch, ownStaging;  ///< internal plans' memory (user plans share the backend's)
  std::size_t arenaBytes = 0;                     ///< staging bytes of one arena
  std::size_t resultBytes = 0;
  std::size_t elemSize = 1;
  /// Two staging arenas and header sets, used by alternate collectives: the next collective's staged receives are
  /// posted when this one starts (see runEpoch). Only for plans whose staging is small.
  bool doubled = false;
  std::array<HeaderSet, 2> header;
  /// Collective whose headers and staged receives are posted in arena k (-1: none).
  std::array<long long, 2> postedFor{-1, -1};
  int arenaOf(std::uint64_t seq) const { return doubled ? static_cast<int>(seq & 1) : 0; }
};

/// Logical completion round of every op of `rank` in a lockstep run of the whole schedule: local ops finish one
/// round after their deps, a matched pair in the round after both sides' deps.
std::vector<int> logicalTimes(const Schedule& s, const Matching& m, int rank) {
  const int n = s.spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  std::vector<std::vector<int>> time(nu), readyAt(nu);
  std::vector<OpGraph> graphs;
  std::vector<ReadyOps> ready;
  graphs.reserve(nu);  // ReadyOps point into graphs
  ready.reserve(nu);
  for (std::size_t r = 0; r < nu; ++r) {
    const auto& ops = s.ranks[r].ops;
    time[r].assign(ops.size(), -1);
    readyAt[r].assign(ops.size(), -1);
    graphs.emplace_back(ops);
    ready.emplace_back(graphs.back());
  }
  auto finish = [&](int r, int i, int t) {
    time[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = t;
    ready[static_cast<std::size_t>(r)].complete(i);
  };
  // Any order of visiting ready ops gives the same times: an op's time depends only on its deps' and partner's.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      while (ready[ru].any()) {
        progress = true;
        const int i = ready[ru].pop();
        const Op& op = s.ranks[ru].ops[static_cast<std::size_t>(i)];
        int at = 0;
        for (int d : op.deps) at = std::max(at, time[ru][static_cast<std::size_t>(d)] + 1);
        if (!op.isComm()) {
          finish(r, i, at);
          continue;
        }
        readyAt[ru][static_cast<std::size_t>(i)] = at;
        const Match& mt = m.matches[static_cast<std::size_t>(m.opMatch[ru][static_cast<std::size_t>(i)])];
        const int pr = mt.srcRank == r && mt.srcOp == i ? mt.dstRank : mt.srcRank;
        const int pi = mt.srcRank == r && mt.srcOp == i ? mt.dstOp : mt.srcOp;
        const int partnerReady = readyAt[static_cast<std::size_t>(pr)][static_cast<std::size_t>(pi)];
        if (partnerReady < 0) continue;  // the partner finishes both when its deps are done
        const int t = std::max(at, partnerReady);
        finish(r, i, t);
        finish(pr, pi, t);
      }
    }
  }
  const auto& mine = time[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] < 0) {
      throw Error(Errc::InvalidSchedule,
                  fmt::format("schedule '{}' cannot complete: rank {} op {} never becomes ready", s.algorithm, rank, i),
                  rank);
    }
  }
  return mine;
}

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

// ---------------------------------------------------------------------------------------------------------------

class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(ProcessWorld w) : world_(std::move(w)) {
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
        {
          RendezvousStore store(world_, timeout);
          context_->connectFullMesh(store, device_);
        }
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

  ~GlooBackend() override {
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

  std::string_view name() const override { return "gloo"; }
  int nranks() const override { return world_.world; }

  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override {
    if (failed_) std::rethrow_exception(failed_);
    if (s.spec.nranks != world_.world) {
      throw Error(Errc::InvalidArgument, fmt::format("schedule is for {} ranks but this gloo world has {} processes",
                                                     s.spec.nranks, world_.world));
    }
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

 private:
  /// A failure as this process reports it (`local`, naming "this process") and as it tells the others
  /// (`neutral`, naming every rank by its task).
  struct Report {
    Errc code;
    int culprit;
    std::string local, neutral;
  };
  struct CurrentWait {
    UnboundBuffer* buf = nullptr;
    bool isRecv = false;
    Clock::time_point deadline{};
    bool expired = false;
  };

  // ---- setup ----

  /// A rendezvous error on the chief, with what its store refused meanwhile (a task with the wrong token or
  /// version shows up here as a refusal, then as missing).
  Error withStoreRefusals(const Error& e) const {
    if (!server_) return e;
    const StoreServerStats st = server_->stats();
    if (st.refusedToken + st.refusedVersion + st.refusedFrame == 0) return e;
    return Error(e.code(),
                 fmt::format("{}; meanwhile the store refused {} connection(s) with a wrong cluster token, {} with "
                             "another protocol version and {} with malformed frames",
                             e.what(), st.refusedToken, st.refusedVersion, st.refusedFrame),
                 e.rank(), e.peer());
  }

  void handshake(Ms timeout) {
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

  void startWatchers() {
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

  void watch(int p) {
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
        recordFailure(
            timeoutReport(p, fmt::format("Gloo closed the connection: {}", what), connectionTimeoutSeconds()));
      } else {
        recordFailure(lostPeer(p, what, ""));
      }
    }
  }

  /// Sends a heartbeat to every peer still there, each at most one ahead of what we heard from it: a stopped peer
  /// does not read them, and they must not pile up in Gloo's queue. Runs on the watchdog thread.
  void sendHeartbeats() {
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

  /// The timeout of Gloo's connections (set at rendezvous), which its own algorithms' waits use.
  double connectionTimeoutSeconds() const { return world_.timeoutSeconds.value_or(kDefaultTimeoutSeconds); }

  /// The peer (other than this rank) silent for longest, if it has been silent for kSilenceLimit or more.
  std::optional<std::pair<int, double>> silentPeer() const {
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

  /// A timeout of this process's wait for `peer` (-1: unknown; `what` says which wait): names `peer`, or the peer
  /// that has gone silent meanwhile (stopped, not dead: its connections stay open), which is the one the whole world
  /// waits for.
  Report timeoutReport(int peer, const std::string& what, double waited) const {
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

  /// "this process, worker[0] (rank 0, host:port)" in messages this process prints, the bare task name in those
  /// it sends to the others.
  std::string self(bool local) const {
    return local ? fmt::format("this process, {}", world_.describeRank(rank_)) : world_.describeRank(rank_);
  }

  Report lostPeer(int p, const std::string& why, const std::string& during) const {
    const std::string tail = during.empty() ? why : fmt::format("{}; {}", why, during);
    return Report{Errc::PeerFailure, p,
                  fmt::format("{} failed: its connection to {} broke ({})", world_.describeRank(p), self(true), tail),
                  fmt::format("{} failed: its connection to {} broke ({})", world_.describeRank(p), self(false), tail)};
  }

  [[noreturn]] void raise(const Report& r) {
    neutral_ = r.neutral;
    throw Error(r.code, r.local, rank_, r.culprit);
  }

  void recordFailure(Report r) {
    std::lock_guard lock(failMutex_);
    if (failure_) return;
    failure_ = std::move(r);
    if (current_.buf) current_.isRecv ? current_.buf->abortWaitRecv() : current_.buf->abortWaitSend();
    failCv_.notify_all();
  }

  void watchdogLoop() {
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

  /// Tells every peer still connected why this process stops (or that it leaves normally), and waits briefly for
  /// the notices to leave.
  void sendNotices(const ControlMessage& m) {
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

  /// Turns a failure of this rank into the backend's terminal state: tells the peers, remembers, rethrows.
  /// Runs one collective's transfers; a failure inside becomes the backend's terminal state (fail()) while the
  /// caller's plan, and so every buffer Gloo may still be sending from, is alive.
  template <typename F>
  RunResult guarded(F&& body) {
    try {
      RunResult r = body();
      return r;
    } catch (const Error& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(Error(Errc::BackendError, fmt::format("{}: {}", self(true), glooWhat(e)), rank_));
    }
  }

  /// Tells the peers why this process stops, remembers and rethrows. Must run while the failed collective's buffers
  /// are alive: a notice is queued behind the transfers already on its connection, and Gloo stalls a connection
  /// whose queued send lost its buffer, so the notice would never leave.
  [[noreturn]] void fail(const Error& e) {
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

  // ---- waiting ----

  [[noreturn]] void throwFailureLocked() { raise(*failure_); }

  /// Waits for one posted transfer with the per-op timeout; throws Error naming the peer otherwise.
  void await(UnboundBuffer* b, bool isRecv, int peer, const Op* op, int opIndex) {
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
        ok = isRecv ? b->waitRecv(nullptr, opTimeout_ + kGlooBackstop)
                    : b->waitSend(nullptr, opTimeout_ + kGlooBackstop);
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

  /// Posting a transfer on a connection that has failed throws; report it like a failed wait.
  template <typename F>
  void post(int peer, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::unique_lock lock(failMutex_);
      if (!failure_) failCv_.wait_for(lock, kCauseGrace, [&] { return failure_.has_value(); });
      if (failure_) throwFailureLocked();
      raise(lostPeer(peer, glooWhat(e), "posting a transfer"));
    }
  }

  // ---- schedules ----

  std::byte* resolve(const RunPlan& p, const BufRef& ref) const {
    switch (ref.buffer) {
      case BufferKind::Input:
        return p.input + ref.offset;
      case BufferKind::Output:
        return p.output + ref.offset;
      case BufferKind::Scratch:
        return p.scratch + ref.offset;
    }
    return nullptr;
  }

  /// Builds this rank's plan. Internal plans (`ownMemory`) keep their own scratch and staging; user plans share the
  /// backend's. `allNeighbours`: headers go to every rank (native calls, whose pattern the schedule does not show).
  std::unique_ptr<RunPlan> makePlan(const Schedule& s, const RankBuffers& b, bool headers, bool ownMemory,
                                    bool allNeighbours = false) {
    auto plan = std::make_unique<RunPlan>();
    RunPlan& p = *plan;
    const auto ru = static_cast<std::size_t>(rank_);
    const auto n = static_cast<std::size_t>(world_.world);
    p.schedule = &s;
    p.ops = &s.ranks[ru].ops;
    p.headers = headers;
    p.elemSize = s.spec.kind == Collective::Barrier ? 1 : dtypeSize(s.spec.dtype);
    const auto& ops = *p.ops;
    const std::size_t nops = ops.size();
    const Matching m = matchSchedule(s);
    const std::vector<int> times = world_.world > 1 ? logicalTimes(s, m, rank_) : std::vector<int>(nops, 0);
    p.graph = OpGraph(ops);  // ReadyOps hands out roots in program order: transfers are posted in that order
    p.input = static_cast<std::byte*>(const_cast<void*>(b.input));
    p.output = static_cast<std::byte*>(b.output);
    std::vector<std::byte>& scratch = ownMemory ? p.ownScratch : scratch_;
    if (scratch.size() < s.ranks[ru].scratchBytes) scratch.resize(s.ranks[ru].scratchBytes);
    p.scratch = scratch.data();
    p.resultBytes = s.needsAvgScale() ? s.resultBytes(rank_) : 0;

    // Stream indices, staging, pieces.
    std::map<std::tuple<int, int, bool>, std::size_t> streams;  // (peer, channel, isSend) -> next index
    std::vector<char> isNeighbour(n, allNeighbours ? 1 : 0);
    isNeighbour[ru] = 0;
    std::size_t stagingBytes = 0;
    p.op.resize(nops);
    for (std::size_t i = 0; i < nops; ++i) {
      const Op& op = ops[i];
      OpPlan& o = p.op[i];
      o.time = times[i];
      if (!op.isComm()) continue;
      if (op.channel < 0 || op.channel >= (1 << kChannelBits)) {
        throw Error(Errc::Unsupported, fmt::format("gloo backend: channel {} of rank {} op {} exceeds {}", op.channel,
                                                   rank_, i, (1 << kChannelBits) - 1));
      }
      o.streamIndex = streams[{op.peer, op.channel, op.kind == OpKind::Send}]++;
      if (o.streamIndex >= (std::size_t{1} << kIndexBits)) {
        throw Error(Errc::Unsupported, fmt::format("gloo backend: more than {} transfers between two ranks on one "
                                                   "channel",
                                                   std::size_t{1} << kIndexBits));
      }
      isNeighbour[static_cast<std::size_t>(op.peer)] = 1;
      o.staged = op.kind == OpKind::RecvReduce || (op.kind == OpKind::Recv && op.bytes <= kStagedRecvMaxBytes);
      if (o.staged) {
        o.stagingOffset = stagingBytes;
        stagingBytes += (op.bytes + 63) & ~std::size_t{63};
      }
    }
    // Neighbours are symmetric (a rank that only receives from us still exchanges headers with us), computed from
    // the whole schedule so that both sides agree.
    for (std::size_t r = 0; r < n; ++r) {
      if (r == ru) continue;
      for (const Op& op : s.ranks[r].ops) {
        if (op.isComm() && op.peer == rank_) {
          isNeighbour[r] = 1;
          break;
        }
      }
    }
    for (std::size_t r = 0; r < n; ++r) {
      if (isNeighbour[r]) p.neighbours.push_back(static_cast<int>(r));
    }
    p.doubled = headers && stagingBytes <= kDoubleStagingMaxBytes;
    const std::size_t arenas = p.doubled ? 2 : 1;
    std::vector<std::byte>& staging = ownMemory ? p.ownStaging : staging_;
    if (staging.size() < stagingBytes * arenas) {
      staging = std::vector<std::byte>();  // free first: the old and new arena need not coexist
      staging.resize(stagingBytes * arenas);
    }
    p.staging = staging.data();
    p.arenaBytes = stagingBytes;
    static std::byte dummy[1];
    for (std::size_t i = 0; i < nops; ++i) {
      const Op& op = ops[i];
      if (!op.isComm()) continue;
      OpPlan& o = p.op[i];
      const std::size_t elems = op.bytes / p.elemSize;
      const std::size_t pieces = op.bytes == 0
                                     ? 1
                                     : std::clamp<std::size_t>((op.bytes + kWirePieceBytes - 1) / kWirePieceBytes, 1,
                                                               std::min(kMaxPieces, std::max<std::size_t>(1, elems)));
      const std::size_t perPiece = (elems + pieces - 1) / pieces * p.elemSize;
      for (std::size_t arena = 0; arena < (o.staged ? arenas : 1); ++arena) {
        std::byte* base = o.staged                  ? p.staging + arena * stagingBytes + o.stagingOffset
                          : op.kind == OpKind::Send ? resolve(p, op.src)
                                                    : resolve(p, op.dst);
        for (std::size_t k = 0, off = 0; k < pieces; ++k) {
          const std::size_t len = k + 1 == pieces ? op.bytes - off : std::min(perPiece, op.bytes - off);
          Piece pc;
          pc.offset = off;
          pc.bytes = len;
          pc.buf = context_->createUnboundBuffer(len ? base + off : dummy, std::max<std::size_t>(len, 1));
          o.pieces[arena].push_back(std::move(pc));
          off += len;
        }
      }
    }
    if (headers) {
      p.fingerprint = scheduleFingerprint(s);
      for (std::size_t arena = 0; arena < arenas; ++arena) {
        HeaderSet& h = p.header[arena];
        h.in.resize(n);
        h.send.resize(n);
        h.recv.resize(n);
        for (int q : p.neighbours) {
          const auto qu = static_cast<std::size_t>(q);
          h.send[qu] = context_->createUnboundBuffer(h.out.data(), h.out.size());
          h.recv[qu] = context_->createUnboundBuffer(h.in[qu].data(), h.in[qu].size());
        }
      }
    }
    return plan;
  }

  /// Posts, for collective `seq` of this plan, its staged receives and, when it starts a run of `headerEpochs` > 0
  /// collectives, this rank's header to every neighbour and the receives of theirs. Safe before the collective's
  /// deps (or the peers' headers) are known: the receives land in staging, and a peer sends nothing before it has
  /// checked our header against its own.
  void postAhead(RunPlan& p, std::uint64_t seq, std::uint32_t headerEpochs) {
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

  void postRecv(RunPlan& p, int i, std::uint64_t seq, int arena) {
    const Op& op = (*p.ops)[static_cast<std::size_t>(i)];
    OpPlan& o = p.op[static_cast<std::size_t>(i)];
    auto& pieces = o.pieces[static_cast<std::size_t>(arena)];
    post(op.peer, [&] {
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        pieces[k].buf->recv(op.peer, dataSlot(seq, op.channel, o.streamIndex, k), 0, pieces[k].bytes);
      }
    });
  }

  /// Runs `count` collectives of the plan back to back. One header exchange covers them all (it carries the count):
  /// both sides have then agreed on every one of them, and the later ones start without a message round.
  void runEpochs(RunPlan& p, int count) {
    for (int i = 0; i < count; ++i) runEpoch(p, i == 0 ? static_cast<std::uint32_t>(count) : 0, i + 1 < count);
  }

  /// One execution of the plan (one collective); the first of a run of `headerEpochs` exchanges headers (0: covered
  /// by an earlier header). With `postNext`, the next collective runs this same plan right after: its staged
  /// receives are posted as this one starts (a doubled plan) or ends, so that the peers' first sends find them.
  void runEpoch(RunPlan& p, std::uint32_t headerEpochs, bool postNext) {
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

  void buildInternalPlans() {
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

  /// Every rank's seconds, exchanged so that each process reports the same per-rank times (nccl-tests -a).
  std::vector<double> gatherSeconds(double mine) {
    gatherIn_ = mine;
    runEpochs(*gatherPlan_, 1);
    return gatherOut_;
  }

  RunResult finish(const std::string& algorithm, double mySeconds) {
    RunResult res;
    res.algorithm = algorithm;
    res.rankSeconds = world_.world > 1 ? gatherSeconds(mySeconds) : std::vector<double>{mySeconds};
    double sum = 0;
    for (double t : res.rankSeconds) sum += t;
    res.seconds = sum / static_cast<double>(res.rankSeconds.size());
    return res;
  }

  RunResult runSchedule(const Schedule& s, const RankBuffers& b, const RunOptions& opt) {
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

  RunResult runNative(const Schedule& s, const RankBuffers& b, const RunOptions& opt) {
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

  ProcessWorld world_;
  int rank_ = 0;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<StoreServer> server_;
  Ms opTimeout_{static_cast<long long>(kDefaultTimeoutSeconds * 1000)};
  std::uint64_t sequence_ = 0;
  std::exception_ptr failed_;
  /// Native algorithms of a failed run, kept until the connections that may still write into them are closed.
  std::vector<std::unique_ptr<gloo::Algorithm>> afterFailure_;

  std::vector<std::byte> scratch_, staging_;
  Schedule barrierSchedule_, gatherSchedule_;
  std::unique_ptr<RunPlan> barrierPlan_, gatherPlan_;
  double gatherIn_ = 0;
  std::vector<double> gatherOut_;

  // Failure detection.
  std::vector<std::array<std::byte, ControlMessage::kBytes>> ctrlIn_;
  std::vector<std::unique_ptr<UnboundBuffer>> ctrlInBuf_;
  std::vector<std::atomic<bool>> peerLeft_;
  std::vector<std::atomic<long long>> lastHeard_;  // per peer: steady_clock ticks of its last control message
  std::vector<long long> heartbeatSentAfter_;      // watchdog thread only: lastHeard_ + 1 when the last one left
  std::array<std::byte, ControlMessage::kBytes> heartbeat_{};
  std::vector<std::unique_ptr<UnboundBuffer>> heartbeatBuf_;
  std::atomic<bool> leaving_{false};
  std::vector<std::thread> watchers_;
  std::thread watchdog_;
  std::condition_variable watchdogCv_;
  std::atomic<bool> stopping_{false};
  std::mutex failMutex_;
  std::condition_variable failCv_;
  std::optional<Report> failure_;
  int watchersDone_ = 0;  // watchers whose peer said goodbye, aborted or went away
  std::string neutral_;   // how the last error raised here reads for the other ranks
  CurrentWait current_;
};

}  // namespace

std::unique_ptr<Backend> makeGlooBackend(const ProcessWorld& world) { return std::make_unique<GlooBackend>(world); }

void registerGlooBackend() {
  registerBackend("gloo", "one rank per process over Gloo's TCP transport (run under `collbench launch`)",
                  [](int, const BackendOptions& o) { return makeGlooBackend(ProcessWorld::fromOptions(o)); });
  registerNativeAlgorithms("gloo", {kGlooNativeAlgorithms.begin(), kGlooNativeAlgorithms.end()});
}

}  // namespace collbench::host
