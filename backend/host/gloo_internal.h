#pragma once
// The gloo backend's private face, shared by its gloo_*.cc files (one job each): gloo_backend.cc (construction,
// teardown, run), gloo_store.cc (Gloo's store interface over collbench's rendezvous store), gloo_peers.cc (hello
// handshake, heartbeats, watchers and failure reports), gloo_plan.cc (a schedule as this rank's plan of Gloo
// buffers), gloo_executor.cc (runs plans), gloo_native.cc (Gloo's own all-reduce algorithms). Gloo's types are only
// declared here; their headers are included by the gloo_*.cc files, the only ones built with Gloo.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collbench/backend.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/schedule.h"
#include "op_graph.h"
#include "process_world.h"
#include "store.h"

namespace gloo {
class Algorithm;
namespace rendezvous {
class Context;
}  // namespace rendezvous
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace collbench::host::gloo_impl {

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

inline Ms toMs(double seconds) { return Ms(static_cast<long long>(std::max(1.0, seconds * 1000.0))); }
/// "host:port" or "[v6]:port" split into host and port.
std::pair<std::string, int> splitHostPort(const std::string& a);
/// Gloo messages start with "[file:line] "; users need the part after it.
std::string glooWhat(const std::exception& e);
/// The unbound-buffer slot of piece `piece` of the transfer `index` on `channel` of collective `seq`.
std::uint64_t dataSlot(std::uint64_t seq, int channel, std::size_t index, std::size_t piece);
/// Smallest b >= 2 with n a power of b: gloo::AllreduceBcube needs the world to be base^k.
int bcubeBase(int n);

// ---- The store adapter (gloo_store.cc) ----

/// Connects `context` to every rank through the world's rendezvous store (our TCP store, or Gloo's file store for
/// store=file:<dir>), with keys scoped to the cluster token; throws Error{Timeout} naming the task that did not
/// arrive within `timeout`.
void connectFullMesh(gloo::rendezvous::Context& context, std::shared_ptr<gloo::transport::Device>& device,
                     const ProcessWorld& world, Ms timeout);

// ---- Per-run plan of this rank's program (gloo_plan.cc) ----

struct Piece {
  std::size_t offset = 0;  ///< within the op's range
  std::size_t bytes = 0;
  std::unique_ptr<UnboundBuffer> buf;
};

struct OpPlan {
  int time = 0;  ///< logical completion round (see gloo_executor.cc)
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
std::vector<int> logicalTimes(const Schedule& s, const Matching& m, int rank);

// ---- The backend ----

class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(ProcessWorld w);
  ~GlooBackend() override;
  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override;
  std::string_view name() const override { return "gloo"; }
  int nranks() const override { return world_.world; }

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

  // ---- setup and teardown (gloo_backend.cc) ----

  /// A rendezvous error on the chief, with what its store refused meanwhile (a task with the wrong token or
  /// version shows up here as a refusal, then as missing).
  Error withStoreRefusals(const Error& e) const;

  // ---- handshake, heartbeats, watchers and failure reports (gloo_peers.cc) ----

  void handshake(Ms timeout);
  void startWatchers();
  void watch(int p);
  /// Sends a heartbeat to every peer still there, each at most one ahead of what we heard from it: a stopped peer
  /// does not read them, and they must not pile up in Gloo's queue. Runs on the watchdog thread.
  void sendHeartbeats();
  /// The peer (other than this rank) silent for longest, if it has been silent for kSilenceLimit or more.
  std::optional<std::pair<int, double>> silentPeer() const;
  /// A timeout of this process's wait for `peer` (-1: unknown; `what` says which wait): names `peer`, or the peer
  /// that has gone silent meanwhile (stopped, not dead: its connections stay open), which is the one the whole world
  /// waits for.
  Report timeoutReport(int peer, const std::string& what, double waited) const;
  /// "this process, worker[0] (rank 0, host:port)" in messages this process prints, the bare task name in those
  /// it sends to the others.
  std::string self(bool local) const;
  Report lostPeer(int p, const std::string& why, const std::string& during) const;
  [[noreturn]] void raise(const Report& r);
  void recordFailure(Report r);
  void watchdogLoop();
  /// Tells every peer still connected why this process stops (or that it leaves normally), and waits briefly for
  /// the notices to leave.
  void sendNotices(const ControlMessage& m);
  /// Tells the peers why this process stops, remembers and rethrows. Must run while the failed collective's buffers
  /// are alive: a notice is queued behind the transfers already on its connection, and Gloo stalls a connection
  /// whose queued send lost its buffer, so the notice would never leave.
  [[noreturn]] void fail(const Error& e);
  /// The timeout of Gloo's connections (set at rendezvous), which its own algorithms' waits use.
  double connectionTimeoutSeconds() const { return world_.timeoutSeconds.value_or(kDefaultTimeoutSeconds); }
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
  [[noreturn]] void throwFailureLocked() { raise(*failure_); }

  // ---- plans (gloo_plan.cc) ----

  std::byte* resolve(const RunPlan& p, const BufRef& ref) const;
  /// Builds this rank's plan. Internal plans (`ownMemory`) keep their own scratch and staging; user plans share the
  /// backend's. `allNeighbours`: headers go to every rank (native calls, whose pattern the schedule does not show).
  std::unique_ptr<RunPlan> makePlan(const Schedule& s, const RankBuffers& b, bool headers, bool ownMemory,
                                    bool allNeighbours = false);

  // ---- running plans (gloo_executor.cc) ----

  /// Waits for one posted transfer with the per-op timeout; throws Error naming the peer otherwise.
  void await(UnboundBuffer* b, bool isRecv, int peer, const Op* op, int opIndex);
  /// Posting a transfer on a connection that has failed throws; report it like a failed wait.
  template <typename F>
  void post(int peer, F&& f);
  /// Posts, for collective `seq` of this plan, its staged receives and, when it starts a run of `headerEpochs` > 0
  /// collectives, this rank's header to every neighbour and the receives of theirs. Safe before the collective's
  /// deps (or the peers' headers) are known: the receives land in staging, and a peer sends nothing before it has
  /// checked our header against its own.
  void postAhead(RunPlan& p, std::uint64_t seq, std::uint32_t headerEpochs);
  void postRecv(RunPlan& p, int i, std::uint64_t seq, int arena);
  /// Runs `count` collectives of the plan back to back. One header exchange covers them all (it carries the count):
  /// both sides have then agreed on every one of them, and the later ones start without a message round.
  void runEpochs(RunPlan& p, int count);
  /// One execution of the plan (one collective); the first of a run of `headerEpochs` exchanges headers (0: covered
  /// by an earlier header). With `postNext`, the next collective runs this same plan right after: its staged
  /// receives are posted as this one starts (a doubled plan) or ends, so that the peers' first sends find them.
  void runEpoch(RunPlan& p, std::uint32_t headerEpochs, bool postNext);
  void buildInternalPlans();
  /// Every rank's seconds, exchanged so that each process reports the same per-rank times (nccl-tests -a).
  std::vector<double> gatherSeconds(double mine);
  RunResult finish(const std::string& algorithm, double mySeconds);
  RunResult runSchedule(const Schedule& s, const RankBuffers& b, const RunOptions& opt);

  // ---- Gloo's own algorithms (gloo_native.cc) ----

  RunResult runNative(const Schedule& s, const RankBuffers& b, const RunOptions& opt);

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

}  // namespace collbench::host::gloo_impl
