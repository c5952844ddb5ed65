// Simulator: picks the method, and runs each simulation in a forked child (SimGrid allows one engine per process
// and seals its platform at the first run, so a long-lived process that simulates several topologies, or the same
// one several times, needs a fresh process each time; fork shares the schedule copy-on-write, only results travel
// back through a pipe).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/validator.h"
#include "engine.h"
#include "sim_backend.h"
#include "world.h"

namespace collbench::sim {
namespace detail {
bool ringModelApplies(const CollectiveSpec& spec, const AlgoParams& params);
}  // namespace detail

namespace {

// ---- Result transport from the child ----
class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(s.size());
    buf_.append(s);
  }
  std::string& buffer() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  template <class T>
  T pod() {
    T v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = pod<std::size_t>();
    need(n);
    std::string s = b_.substr(at_, n);
    at_ += n;
    return s;
  }

 private:
  void need(std::size_t n) const {
    if (at_ + n > b_.size()) throw Error(Errc::BackendError, "simulator: truncated result from the child process");
  }
  const std::string& b_;
  std::size_t at_ = 0;
};

void put(Writer& w, const SimResult& r) {
  w.pod(r.seconds);
  w.str(r.method);
  w.pod(r.exact);
  w.str(r.note);
  w.pod(r.ops);
  w.pod(r.transfers);
  w.pod(r.simulatedActivities);
  w.pod(r.patterns);
  w.pod(r.peakRssBytes);
  w.pod(r.cpuSeconds);
  w.pod(r.spans.size());
  w.buffer().append(reinterpret_cast<const char*>(r.spans.data()), r.spans.size() * sizeof(Span));
}

SimResult get(Reader& rd) {
  SimResult r;
  r.seconds = rd.pod<double>();
  r.method = rd.str();
  r.exact = rd.pod<bool>();
  r.note = rd.str();
  r.ops = rd.pod<std::size_t>();
  r.transfers = rd.pod<std::size_t>();
  r.simulatedActivities = rd.pod<std::size_t>();
  r.patterns = rd.pod<std::size_t>();
  r.peakRssBytes = rd.pod<std::size_t>();
  r.cpuSeconds = rd.pod<double>();
  r.spans.resize(rd.pod<std::size_t>());
  for (Span& s : r.spans) s = rd.pod<Span>();
  return r;
}

enum class Outcome : char { Result = 'R', Error = 'E', Failure = 'X' };

void writeAll(int fd, const std::string& data) {
  std::size_t at = 0;
  while (at < data.size()) {
    const ssize_t k = ::write(fd, data.data() + at, data.size() - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    at += static_cast<std::size_t>(k);
  }
}

void measureSelf(SimResult& r) {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  r.peakRssBytes = static_cast<std::size_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
  r.cpuSeconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

SimResult inChild(const std::function<SimResult()>& body) {
  if (const char* inProcess = std::getenv("COLLBENCH_SIM_INPROCESS"); inProcess && std::string(inProcess) == "1") {
    SimResult r = body();
    measureSelf(r);
    return r;
  }
  int fds[2];
  if (::pipe(fds) != 0)
    throw Error(Errc::BackendError, fmt::format("simulator: pipe failed: {}", std::system_category().message(errno)));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(Errc::BackendError, fmt::format("simulator: fork failed: {}", std::system_category().message(errno)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // Results go back through the pipe; nothing the child (or SimGrid) prints may reach the parent's stdout.
    if (const int devnull = ::open("/dev/null", O_WRONLY); devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    Writer w;
    try {
      SimResult r = body();
      measureSelf(r);
      w.pod(Outcome::Result);
      put(w, r);
    } catch (const Error& e) {
      w = Writer{};
      w.pod(Outcome::Error);
      w.pod(e.code());
      w.pod(e.rank());
      w.pod(e.peer());
      w.str(e.what());
    } catch (const std::exception& e) {
      w = Writer{};
      w.pod(Outcome::Failure);
      w.str(e.what());
    }
    writeAll(fds[1], w.buffer());
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t k = ::read(fds[0], buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    data.append(buf, static_cast<std::size_t>(k));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (data.empty()) {
    if (WIFSIGNALED(status)) {
      // strsignal is in glibc's MT-Unsafe list for unknown signals only, which glibc >= 2.32 (Debian 12: 2.36)
      // formats in a per-thread buffer.
      const char* signalName = strsignal(WTERMSIG(status));  // NOLINT(concurrency-mt-unsafe)
      throw Error(Errc::BackendError, fmt::format("simulator process died with signal {} ({}){}", WTERMSIG(status),
                                                  signalName, WTERMSIG(status) == SIGKILL ? ": out of memory?" : ""));
    }
    throw Error(Errc::BackendError, fmt::format("simulator process exited with status {} and no result",
                                                WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
  Reader rd(data);
  switch (rd.pod<Outcome>()) {
    case Outcome::Result:
      return get(rd);
    case Outcome::Error: {
      const auto code = rd.pod<Errc>();
      const int rank = rd.pod<int>(), peer = rd.pod<int>();
      throw Error(code, rd.str(), rank, peer);
    }
    case Outcome::Failure:
      throw Error(Errc::BackendError, "simulator: " + rd.str());
  }
  throw Error(Errc::BackendError, "simulator: malformed result from the child process");
}

// Extrapolation windows go op by op up to this many transfers x ranks, aggregated above: a pipelined tree's
// contention system spans the machine, so op by op is costly (the 124-round window of flat(64), 2e6, takes 5 s op by
// op and 0.3 s aggregated; the 160 rounds of h100-4x8-rail, 6e5, 0.3 s op by op).
constexpr double kPipelineExactBudget = 1e6;
// Extrapolation window, in chunks per slice: past the pipeline's fill (about 2 log2 n rounds for a tree: up and
// down its depth) and long enough to read the period. Periodic pipelines (chains; trees on h100-4x8-rail, flat(2..4))
// settle within 10-20 rounds. Trees whose increments wander drift slowly towards the lockstep period for hundreds of
// rounds (flat(8) locks in after 300-400), so a longer window is a better estimate: on flat(5) and flat(17) at 1 GiB
// the extrapolation is 2 % / 5 % low with 40 rounds, 0.6 % / 1.2 % with 160 and 0.1 % / 0.4 % with 320. The window is
// the longest up to kMaxPipelineWindow rounds within kPipelineWindowWork transfers x ranks (op by op costs grow with
// both: about 1 s here for the 160 rounds of flat(17)).
constexpr std::size_t kMaxPipelineWindow = 160;
constexpr std::size_t kPipelineWindowWork = 2000000;
// A pipeline is taken as periodic when this many round increments before the drain are equal to this fraction of
// the period (its increments converge geometrically to the period; where they do not, the mean over the window's
// second half is the estimate).
constexpr std::size_t kPeriodicRounds = 8;
constexpr double kLinearIncrementTolerance = 1e-9;
// Memory of a built schedule and its simulation per transfer: a tree window at 16384 GPUs, 4.2 M transfers, peaked at
// 3.26 GB.
constexpr double kSimulatedScheduleBytesPerTransfer = 800;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::size_t ceilLog2(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(n - 1)); }

/// What a tree-model result says of the channels it simulated ("" where it simulated them all).
std::string representedNote(const detail::TreeChannels& c, const AlgoParams& p) {
  if (c.every == 1) return "";
  return fmt::format("; {} of the {} channels of each tree simulated, each for up to {} (the rails alike)",
                     c.simulatedPerTree(p.channels), p.channels, c.every);
}

/// The window for `transfersPerRound` transfers per round: kMaxPipelineWindow where it fits kPipelineWindowWork,
/// never less than the fill and drain need (4 (log2 n + 2)).
std::size_t pipelineWindow(std::size_t n, std::size_t transfersPerRound) {
  const std::size_t fits = kPipelineWindowWork / std::max<std::size_t>(1, transfersPerRound * n);
  return std::max(4 * (ceilLog2(n) + 2), std::min(kMaxPipelineWindow, fits));
}
/// Hops of a chunk's trip through the pipeline (AlgorithmTraits::pipelineTrip; log2 n where the algorithm gives none).
std::size_t pipelineTrip(const AlgorithmInfo& algo, const CollectiveSpec& spec, const AlgoParams& p) {
  return algo.traits.pipelineTrip != nullptr ? algo.traits.pipelineTrip(spec, p)
                                             : ceilLog2(static_cast<std::size_t>(spec.nranks));
}
/// Rounds at the end of a window that finish early because no later chunk follows them: a chunk shares links with
/// the chunks within one trip of it, and two. NCCL's host tree with 4 channels on 1024 GPUs (a 28-hop trip), 1 GiB,
/// against the whole 256-round pipeline (10500.2 us): the 48- and 91-round windows read -8.2 / -4.2 % leaving 12
/// rounds out, -0.9 / -0.5 % leaving 28.
std::size_t pipelineDrain(const AlgorithmInfo& algo, const CollectiveSpec& spec, const AlgoParams& p) {
  return pipelineTrip(algo, spec, p) + 2;
}

std::size_t chunksOf(std::size_t elems, std::size_t elemSize, std::size_t chunkBytes, std::size_t def) {
  const std::size_t chunk = chunkBytes ? chunkBytes : def;
  if (elems == 0 || chunk == 0) return 1;
  const std::size_t chunkElems = std::max<std::size_t>(1, chunk / elemSize);
  return (elems + chunkElems - 1) / chunkElems;
}

std::size_t part(std::size_t total, std::size_t parts, std::size_t i) {
  return total / parts + (i < total % parts ? 1 : 0);
}

/// Slices a pipelined algorithm splits its data into before chunking (tree: 2 trees x channels); 0 when it is not a
/// pipeline (AlgorithmTraits::pipelineSlices).
std::size_t pipelineSlices(const AlgorithmInfo& info, const AlgoParams& p) {
  return static_cast<std::size_t>(p.channels) * static_cast<std::size_t>(info.traits.pipelineSlices);
}

/// The Auto policy (sim_backend.h, kAlwaysExactTransfers); Exact and Aggregated do what they say. Schedules with
/// switch ops are simulated op by op whatever the mode (only the exact method times them).
/// The fluid network's assumptions (fluid.h): CM02's sharing, without cross-traffic.
bool fluidApplies(const SimConfig& cfg) { return cfg.model == NetworkModel::CM02 && !cfg.crossTraffic; }

SimResult simulateWithPolicy(detail::World& w, const Schedule& s, const Matching& m, const SimConfig& cfg,
                             bool timeline) {
  std::vector<std::pair<int, int>> pairs;
  pairs.reserve(m.matches.size());
  for (const Match& x : m.matches) pairs.emplace_back(x.srcRank, x.dstRank);
  w.prefetchRoutes(pairs);
  if (s.usesSwitch()) {
    // Op by op, or on the fluid network where asked or where SimGrid's cost (which grows with the transfers in flight,
    // about transfers x ranks) is over kExactFallbackBudget: NVLS, SHARP at hundreds of GPUs. The aggregated method has
    // no switch ops: asked for, it is decided as in auto mode.
    w.noteSwitchOps();
    const std::vector<int> groupSwitch = validateOnTopology(s, w.topology());
    const double cost =
        static_cast<double>(m.matches.size() + m.switchMatches.size()) * static_cast<double>(s.ranks.size());
    const bool likeAuto = cfg.mode == SimMode::Auto || cfg.mode == SimMode::Aggregated;
    if (fluidApplies(cfg) && (cfg.mode == SimMode::Fluid || (likeAuto && cost > kExactFallbackBudget))) {
      SimResult r = detail::simulateFluid(w, s, m, timeline, groupSwitch);
      if (likeAuto) r.note += "; chosen over op by op for a schedule with switch ops this large";
      return r;
    }
    SimResult r = detail::simulateExact(w, s, m, timeline, groupSwitch);
    if (cfg.mode == SimMode::Aggregated || cfg.mode == SimMode::Fluid) {
      r.note = fmt::format("switch ops are simulated op by op ({})", cfg.mode == SimMode::Aggregated
                                                                         ? "the aggregated method has none"
                                                                         : "the fluid one needs CM02 without "
                                                                           "cross-traffic");
    }
    return r;
  }
  if (cfg.mode == SimMode::Exact) return detail::simulateExact(w, s, m, timeline);
  if (cfg.mode == SimMode::Aggregated) return detail::simulateAggregated(w, s, m, timeline);
  if (cfg.mode == SimMode::Fluid) return detail::simulateFluid(w, s, m, timeline);
  // Op by op costs grow with the flows in flight at once (SimGrid scans them at each completion), which the counts
  // below do not see: where the connections with a transfer ready at the start (both ops without dependencies; a
  // connection carries one transfer at a time) times all transfers are over kExactFallbackBudget, the fluid network
  // times it (direct all-reduce on fat-tree-k8, 16 MiB: 16256 flows at once, 228 s op by op, 99.6 s aggregated, 1.4 s
  // fluid and 0.05 % from op by op).
  if (fluidApplies(cfg)) {
    std::vector<std::tuple<int, int, int>> ready;
    for (const Match& x : m.matches) {
      const Op& send = s.ranks[static_cast<std::size_t>(x.srcRank)].ops[static_cast<std::size_t>(x.srcOp)];
      const Op& recv = s.ranks[static_cast<std::size_t>(x.dstRank)].ops[static_cast<std::size_t>(x.dstOp)];
      if (send.deps.empty() && recv.deps.empty()) ready.emplace_back(x.srcRank, x.dstRank, send.channel);
    }
    const auto overBudget = [&](std::size_t n) {
      return static_cast<double>(n) * static_cast<double>(m.matches.size()) > kExactFallbackBudget;
    };
    // Ready transfers bound the distinct connections among them: counted only where the bound is over budget.
    std::size_t burst = ready.size();
    if (overBudget(burst)) {
      std::sort(ready.begin(), ready.end());
      burst = static_cast<std::size_t>(std::unique(ready.begin(), ready.end()) - ready.begin());
    }
    if (overBudget(burst)) {
      SimResult r = detail::simulateFluid(w, s, m, timeline);
      r.note += fmt::format("; chosen over op by op for {} of {} transfers in flight at once", burst, m.matches.size());
      return r;
    }
  }
  if (m.matches.size() <= kAlwaysExactTransfers) return detail::simulateExact(w, s, m, timeline);
  SimResult r = detail::simulateAggregated(w, s, m, timeline);
  const double cost = static_cast<double>(m.matches.size()) * static_cast<double>(s.ranks.size());
  if (!r.exact && m.matches.size() <= cfg.exactTransferLimit && cost <= kExactFallbackBudget) {
    return detail::simulateExact(w, s, m, timeline);
  }
  return r;
}

/// The call's launch floor, paid once: every op starts that much later.
SimResult withLaunchFloor(SimResult r, const detail::World& w) {
  const double floor = w.launchFloor();
  if (floor <= 0) return r;
  r.seconds += floor;
  for (Span& sp : r.spans) {
    sp.start += floor;
    sp.end += floor;
  }
  return r;
}

/// The topology a call runs on: `topo` itself without memory tiers (no copy of an 8192-rank network per run), else
/// its tier's copy, kept in `tiered`.
const Topology& callTopology(const Topology& topo, const CollectiveSpec& spec, Topology& tiered) {
  if (topo.memoryTiers.empty()) return topo;
  tiered = topologyForCall(topo, spec);
  return tiered;
}

}  // namespace

Simulator::Simulator(Topology topology, int nranks, SimConfig config)
    : topo_(std::move(topology)), nranks_(nranks), config_(std::move(config)) {
  const int available = static_cast<int>(topo_.ranks.size());
  if (config_.mode == SimMode::Fluid && !fluidApplies(config_)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("mode fluid: needs the CM02 network model without cross-traffic (got model {}{})",
                            toString(config_.model), config_.crossTraffic ? " with cross-traffic" : ""));
  }
  if (nranks_ <= 0) nranks_ = available;
  if (nranks_ > available) {
    throw Error(Errc::InvalidArgument, fmt::format("topology '{}' has {} ranks, {} requested (use at most {})",
                                                   topo_.name, available, nranks_, available));
  }
  gpuRanks_ = gpuRanks(topo_, nranks_);
  if (gpuRanks_) netLatency_ = networkLatency(topo_, nranks_);
}

SimResult Simulator::run(const Schedule& s) const {
  if (static_cast<int>(s.ranks.size()) != nranks_) {
    throw Error(Errc::InvalidArgument, fmt::format("schedule has {} ranks but the simulator runs {} (topology '{}')",
                                                   s.ranks.size(), nranks_, topo_.name));
  }
  if (s.native) {
    throw Error(Errc::Unsupported, fmt::format("algorithm '{}' is a library's own collective; the simulator runs "
                                               "collbench's schedules (ring, tree, ...)",
                                               s.algorithm));
  }
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r = inChild([&] {
    const Matching m = matchSchedule(s);
    Topology tiered;
    const Topology& t = callTopology(topo_, s.spec, tiered);
    // The call's wire rule (sim_backend.h "Protocols"): its protocol; without one, NCCL's point-to-point rule on GPU
    // ranks (how the nccl backend runs a schedule: grouped ncclSend/ncclRecv), no protocol cost elsewhere.
    detail::World w(t, nranks_, config_, WireRule::of(gpuRanks_, s.protocol, netLatency_));
    return withLaunchFloor(simulateWithPolicy(w, s, m, config_, config_.timeline), w);
  });
  r.wallSeconds = secondsSince(t0);
  return r;
}

namespace {

/// Throws Error{InvalidArgument} when the schedule of `spec` would not fit in the memory available now (a pipeline's
/// schedule is built for its window, or whole when it has few chunks).
void checkScheduleFits(const CollectiveSpec& spec, const AlgorithmInfo& algo, const AlgoParams& p) {
  admitSchedule(spec, algo, p, kSimulatedScheduleBytesPerTransfer, "use fewer channels or ranks");
}

/// The window's schedule simulated under `cfg`, timed round by round: every slice holds `window` chunks of one size,
/// slice after slice, so an op's chunk follows from its offset. Local ops are skipped (a broadcast root's copy spans
/// every chunk); a RecvReduce's reduction is a span of the same op.
detail::PipelineWindow windowOfSchedule(detail::World& w, const CollectiveSpec& sub, const AlgorithmInfo& algo,
                                        const AlgoParams& p, const SimConfig& cfg, std::size_t window) {
  checkScheduleFits(sub, algo, p);
  const Schedule s = buildSchedule(sub, algo.name, p);
  const Matching m = matchSchedule(s);
  const SimResult r = simulateWithPolicy(w, s, m, cfg, /*timeline=*/true);
  const std::size_t es = sub.elementSize(), chunkElems = p.chunkBytes / es;
  detail::PipelineWindow out;
  out.seconds = r.seconds;
  out.method = r.method;
  out.simulatedActivities = r.simulatedActivities;
  out.patterns = r.patterns;
  out.roundEnd.assign(window, 0);
  for (const Span& sp : r.spans) {
    const Op& o = s.ranks[static_cast<std::size_t>(sp.rank)].ops[static_cast<std::size_t>(sp.op)];
    if (!o.isComm()) continue;
    const std::size_t elem = (o.kind == OpKind::Send ? o.src.offset : o.dst.offset) / es;
    const std::size_t k = (elem % (window * chunkElems)) / chunkElems;
    out.roundEnd[k] = std::max(out.roundEnd[k], sp.end);
  }
  std::unordered_map<detail::DirLink, double> linkBytes;
  for (const Match& x : m.matches) {
    if (w.sameNode(x.srcRank, x.dstRank)) continue;
    const Op& o = s.ranks[static_cast<std::size_t>(x.srcRank)].ops[static_cast<std::size_t>(x.srcOp)];
    const auto wireBytes = static_cast<double>(w.wire(x.srcRank, x.dstRank, o.bytes).bytes);
    for (detail::DirLink l : w.route(x.srcRank, x.dstRank)) linkBytes[l] += wireBytes;
  }
  for (const auto& [l, bytes] : linkBytes) {
    out.busiestRoundSeconds = std::max(out.busiestRoundSeconds, bytes / static_cast<double>(window) / w.bandwidth(l));
  }
  return out;
}

/// Pipelined algorithms with many chunks (tree, chain broadcast/reduce): one sub-run of the same schedule with
/// `window` chunks of the real chunk size, timed chunk by chunk: round k ends when the last op touching chunk k of
/// any slice (both trees, every channel) ends. Once the pipeline is full, each further round adds the steady-state
/// period, so the real time is the sub-run's time plus (chunks - window) times the mean increment over the second
/// half of the window. Where the pipeline is periodic (every increment of that half equal: chains, and trees whose
/// busiest links carry their round's flows in lockstep) this equals the full simulation; where the shares of the
/// flows on the busiest links keep shifting (a tree's two children fold in turn and the trees share links in both
/// directions, so the increments wander around their mean), it is an estimate from a long window.
/// (Four separate runs of a few chunks each, the earlier method, measured their slope inside the pipeline's fill
/// and were 3 % off at 1 GiB on h100-4x8-rail; the round times of one longer run cost the same and see the steady
/// state.)
SimResult extrapolate(detail::World& w, const CollectiveSpec& spec, const AlgorithmInfo& algo, const AlgoParams& p,
                      const SimConfig& cfg) {
  const std::size_t es = spec.elementSize(), slices = pipelineSlices(algo, p);
  std::size_t chunks = 0, chunkElems = 0;
  bool uniform = true;
  for (std::size_t i = 0; i < slices; ++i) {
    const std::size_t len = part(spec.count, slices, i);
    const std::size_t c = chunksOf(len, es, p.chunkBytes, kDefaultPipelineChunkBytes);
    if (i == 0) chunks = c;
    uniform = uniform && c == chunks && len % c == 0 && len / c == part(spec.count, slices, 0) / chunks;
    chunkElems = std::max(chunkElems, (len + c - 1) / c);
  }
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t perRound = estimateTransfers(algo, spec, p) / std::max<std::size_t>(1, chunks);
  // At least the drain and, before it, rounds for the fill and for the period read after it.
  const std::size_t drain = pipelineDrain(algo, spec, p);
  std::size_t window = std::max(pipelineWindow(n, perRound), drain + 2 * (kPeriodicRounds + 2));
  AlgoParams subParams = p;
  subParams.chunkBytes = chunkElems * es;
  // The tree on the fluid network (its assumptions: CM02 without cross-traffic), where asked for or where the window
  // is over op by op's budget (an op-by-op window of a periodic pipeline extrapolates exactly): as many rounds as
  // SimConfig::treeModelTransfers allows.
  const double windowCost = static_cast<double>(std::min(chunks, window) * perRound) * static_cast<double>(n);
  const bool treeModel =
      algo.traits.simTreeModel && fluidApplies(cfg) &&
      (cfg.mode == SimMode::Fluid || (cfg.mode == SimMode::Auto && windowCost > kPipelineExactBudget));
  // Past the budget for the whole pipeline of every channel, and in pipelines long enough, one channel stands for
  // several (representTreeChannels) and the window of the simulated ones takes the budget.
  detail::TreeChannels treeChannels;
  if (treeModel) {
    if (chunks * perRound > cfg.treeModelTransfers &&
        chunks >= detail::kRepresentedTrips * pipelineTrip(algo, spec, p)) {
      treeChannels = detail::representTreeChannels(w, spec, p);
    }
    const std::size_t simulatedPerRound = perRound *
                                          static_cast<std::size_t>(treeChannels.simulatedPerTree(p.channels)) /
                                          static_cast<std::size_t>(p.channels);
    window =
        std::max(window, static_cast<std::size_t>(static_cast<double>(cfg.treeModelTransfers) /
                                                  static_cast<double>(std::max<std::size_t>(1, simulatedPerRound))));
  }
  if (chunks <= window) {
    if (treeModel) {
      // The whole run is one window of the tree model: the fluid method's result without the schedule. Its chunks
      // are of one size; where the real ones differ by an element, of their mean size (the schedule's alternative,
      // aggregated past op by op's budget, read 26 ranks of h100-4x8-rail at 3 GB 40 % fast).
      SimResult out;
      out.seconds = detail::simulateTreeWindow(w, spec, subParams, chunks, treeChannels).seconds;
      out.method = "tree-model";
      out.exact = false;
      out.note = fmt::format("the fluid method without the schedule (tree_model.cc){}{}",
                             uniform ? "" : ", in chunks of the real ones' mean size (they differ by one element)",
                             representedNote(treeChannels, p));
      out.transfers = estimateTransfers(algo, spec, p);
      out.ops = 2 * out.transfers;
      return out;
    }
    checkScheduleFits(spec, algo, p);
    const Schedule s = buildSchedule(spec, algo.name, p);
    return simulateWithPolicy(w, s, matchSchedule(s), cfg, false);
  }
  CollectiveSpec sub = spec;
  sub.count = slices * window * chunkElems;
  SimConfig subCfg = cfg;
  if (cfg.mode == SimMode::Auto) {
    // Op by op when affordable (kPipelineExactBudget), else the fluid model where its assumptions hold (CM02 without
    // cross-traffic), else aggregated; both are approximate for pipelines.
    const double transfers = static_cast<double>(estimateTransfers(algo, sub, subParams));
    subCfg.mode = transfers * static_cast<double>(n) <= kPipelineExactBudget ? SimMode::Exact
                  : fluidApplies(cfg)                                        ? SimMode::Fluid
                                                                             : SimMode::Aggregated;
  }
  // On the fluid network the tree's window needs no schedule (tree_model.cc: the same graph); others build theirs.
  const detail::PipelineWindow win = treeModel ? detail::simulateTreeWindow(w, sub, subParams, window, treeChannels)
                                               : windowOfSchedule(w, sub, algo, subParams, subCfg, window);
  const std::vector<double>& roundEnd = win.roundEnd;
  // The last rounds drain (nothing follows them up the tree), so they are left out; the period read before.
  const std::size_t last = window - 1 - drain, from = last / 2;
  bool linear = true;
  const double lastIncrement = roundEnd[last] - roundEnd[last - 1];
  for (std::size_t k = last - kPeriodicRounds; k < last; ++k) {
    linear =
        linear && std::abs(roundEnd[k] - roundEnd[k - 1] - lastIncrement) <= kLinearIncrementTolerance * lastIncrement;
  }
  double slope = linear ? lastIncrement : (roundEnd[last] - roundEnd[from]) / static_cast<double>(last - from);
  // No round can take less than its bytes on the busiest directed link; a window still in the fill may measure less.
  const double busiest = win.busiestRoundSeconds;
  const bool capped = slope < busiest;
  slope = std::max(slope, busiest);
  SimResult out;
  out.method = "extrapolated";
  // Nor can the whole run (an aggregated window, which takes overlapping batches as apart, may).
  out.seconds =
      std::max(win.seconds + static_cast<double>(chunks - window) * slope, static_cast<double>(chunks) * busiest);
  out.exact = false;
  out.simulatedActivities = win.simulatedActivities;
  out.patterns = win.patterns;
  out.note = fmt::format("{} chunks of {} elements extrapolated from a {}-chunk {} run at {:.6g} us per chunk ({}{}){}",
                         chunks, chunkElems, window, win.method, slope * 1e6,
                         linear   ? "periodic: equal increments before the drain"
                         : capped ? "the busiest link's bytes per round: the window measured less, an estimate"
                                  : "increments vary around the mean: an estimate",
                         uniform ? "" : "; the real chunks differ by one element", representedNote(treeChannels, p));
  out.transfers = estimateTransfers(algo, spec, p);
  out.ops = 2 * out.transfers;
  return out;
}

}  // namespace

namespace {

/// The registered algorithm that runs NCCL's `a` (the IR's generator of the same pattern).
std::string_view irAlgorithmOf(NcclAlgorithm a) {
  switch (a) {
    case NcclAlgorithm::Ring:
      return "ring";
    case NcclAlgorithm::Tree:
      return "tree";
    case NcclAlgorithm::Nvls:
      return "nvls";
    case NcclAlgorithm::NvlsTree:
      return "nvls_tree";
    case NcclAlgorithm::CollNetDirect:
      return "collnet_direct";
    case NcclAlgorithm::CollNetChain:
      return "collnet_chain";
    case NcclAlgorithm::Pat:
      return "pat";
  }
  return "?";
}

}  // namespace

SimResult Simulator::runNcclChoice(const CollectiveSpec& spec, const NcclChoice& choice,
                                   const AlgoParams& params) const {
  const std::string name(irAlgorithmOf(choice.algorithm));
  const std::vector<std::string> names = algorithmNames(spec.kind);
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw Error(Errc::Unsupported,
                fmt::format("{} chose {}/{} for {}; collbench has no algorithm '{}' for {} to simulate it with "
                            "(--mode exact runs NCCL's choice as a schedule; the default mode times it by the model)",
                            "NCCL 2.28", toString(choice.algorithm), toString(choice.protocol), describe(spec), name,
                            toString(spec.kind)));
  }
  const AlgorithmInfo& info = findAlgorithm(spec.kind, name);
  AlgoParams p;
  p.channels = std::max(1, choice.channels);
  p.protocol = irProtocol(choice.protocol);
  if (info.traits.usesChunkBytes) p.chunkBytes = choice.chunkBytes;
  p.rankHost = params.rankHost.empty() ? rankHosts(topo_, nranks_) : params.rankHost;
  // NCCL's choice as a schedule, timed by whichever method the auto policy picks for it.
  SimConfig cfg = config_;
  cfg.mode = SimMode::Auto;
  SimResult r = Simulator(topo_, nranks_, cfg).runAlgorithm(spec, name, p);
  r.note =
      fmt::format("{}, simulated as {} ({} channels, {}{}) by the {} method{}", ncclChoiceSummary(choice), name,
                  p.channels, toString(*p.protocol), p.chunkBytes > 0 ? fmt::format(", chunk {} B", p.chunkBytes) : "",
                  r.method, r.note.empty() ? "" : "; " + r.note);
  return r;
}

NcclChoice Simulator::ncclChoice(const CollectiveSpec& spec) const {
  NcclSystem system = ncclSystemOf(topo_, spec.nranks);
  if (config_.ncclModel) system.model = *config_.ncclModel;
  system.gpusPerThread = config_.gpusPerThread;
  NcclEnv env = config_.ncclEnv ? *config_.ncclEnv : ncclEnvFromProcess();
  env.version = config_.ncclVersion;
  return ncclChoose(system, spec, env);
}

SimResult Simulator::runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm,
                                  const AlgoParams& params) const {
  if (spec.nranks != nranks_) {
    throw Error(Errc::InvalidArgument, fmt::format("{} needs {} ranks but the simulator runs {} (topology '{}')",
                                                   describe(spec), spec.nranks, nranks_, topo_.name));
  }
  checkSpec(spec, params);
  const AlgorithmInfo& info = findAlgorithm(spec.kind, algorithm);
  if (algorithm == kNcclNativeAlgorithm) {  // NCCL's own collective, emulated by its model
    const auto t0 = std::chrono::steady_clock::now();
    const NcclChoice choice = ncclChoice(spec);
    if (config_.mode == SimMode::Exact) return runNcclChoice(spec, choice, params);
    SimResult out;
    out.seconds = choice.predictedUs * 1e-6;
    out.method = "nccl-model";
    out.exact = false;
    out.note = ncclChoiceSummary(choice);
    out.wallSeconds = secondsSince(t0);
    return out;
  }
  if (info.native) {
    throw Error(Errc::Unsupported, fmt::format("algorithm '{}' is a library's own collective; the simulator runs "
                                               "collbench's schedules",
                                               algorithm));
  }
  const std::size_t est = estimateTransfers(info, spec, params);
  const bool small = est <= config_.exactTransferLimit || config_.mode == SimMode::Exact;
  // The method does not depend on whether a timeline is wanted: the answer must not change with --timeline.
  const bool ringModel = !small && info.traits.simRingModel && detail::ringModelApplies(spec, params);
  const bool extra = !small && !ringModel && info.traits.pipelineSlices > 0;
  const bool hierarchicalModel = !small && !ringModel && !extra && info.traits.simHierarchicalModel;
  if (!ringModel && !extra && !hierarchicalModel) {
    if (est > kMaterializeTransferLimit) {
      throw Error(Errc::Unsupported, fmt::format("{} with '{}' would need about {} transfers: too large to build",
                                                 describe(spec), algorithm, est));
    }
    return run(buildSchedule(spec, algorithm, params));
  }
  if (config_.timeline && est > kMaterializeTransferLimit) {
    throw Error(Errc::Unsupported,
                fmt::format("{} with '{}' is simulated without its schedule ({} transfers); a timeline needs every op",
                            describe(spec), algorithm, est));
  }
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r = inChild([&] {
    Topology tiered;
    const Topology& t = callTopology(topo_, spec, tiered);
    detail::World w(t, nranks_, config_, WireRule::of(gpuRanks_, params.protocol, netLatency_));
    if (ringModel) return withLaunchFloor(detail::simulateRingModel(w, spec, params), w);
    if (!hierarchicalModel) return withLaunchFloor(extrapolate(w, spec, info, params, config_), w);
    if (auto modelled = detail::simulateHierarchicalModel(w, spec, params)) return withLaunchFloor(*modelled, w);
    // The model's conditions do not hold: the schedule, as for any other algorithm (its spans come below).
    if (est > kMaterializeTransferLimit) {
      throw Error(Errc::Unsupported,
                  fmt::format("{} with '{}' would need about {} transfers: too large to build (the hierarchical "
                              "model needs every link on one connection, one rank per node and no empty block)",
                              describe(spec), algorithm, est));
    }
    const Schedule s = buildSchedule(spec, algorithm, params);
    return withLaunchFloor(simulateWithPolicy(w, s, matchSchedule(s), config_, /*timeline=*/false), w);
  });
  r.wallSeconds = secondsSince(t0);
  if (config_.timeline) {
    // Data-free methods have no per-op times: the spans come from simulating the schedule, whose own total is kept
    // next to them (the timeline file records both; the result stays this method's).
    SimResult spans = run(buildSchedule(spec, algorithm, params));
    r.spans = std::move(spans.spans);
    r.spansMethod = spans.method + (spans.exact ? "" : " (approximate)");
    r.spansSeconds = spans.seconds;
    r.wallSeconds = secondsSince(t0);
  }
  return r;
}

}  // namespace collbench::sim
