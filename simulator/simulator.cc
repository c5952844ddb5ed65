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
#include <map>
#include <system_error>

#include "collbench/error.h"
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

// Sub-runs of an extrapolation go op by op up to this many transfers x ranks (a 1024-rank tree with 26 chunks is
// 1e8: about a minute here); a pipelined tree's contention system spans the machine, so op by op is costly.
constexpr double kPipelineExactBudget = 5e7;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::size_t ceilLog2(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(n - 1)); }

std::size_t chunksOf(std::size_t elems, std::size_t elemSize, std::size_t chunkBytes, std::size_t def) {
  const std::size_t chunk = chunkBytes ? chunkBytes : def;
  if (elems == 0 || chunk == 0) return 1;
  const std::size_t chunkElems = std::max<std::size_t>(1, chunk / elemSize);
  return (elems + chunkElems - 1) / chunkElems;
}

std::size_t part(std::size_t total, std::size_t parts, std::size_t i) {
  return total / parts + (i < total % parts ? 1 : 0);
}

bool pipelined(const CollectiveSpec& spec, std::string_view algo) {
  return (spec.kind == Collective::AllReduce && algo == "tree") ||
         ((spec.kind == Collective::Broadcast || spec.kind == Collective::Reduce) && algo == "ring");
}

/// Slices a pipelined algorithm splits its data into before chunking (tree: 2 trees x channels).
std::size_t pipelineSlices(const CollectiveSpec& spec, const AlgoParams& p) {
  return static_cast<std::size_t>(p.channels) * (spec.kind == Collective::AllReduce ? 2 : 1);
}

/// Upper bound of the transfers the generator would emit (empty blocks are elided there, not here).
std::size_t estimateTransfers(const CollectiveSpec& spec, std::string_view algo, const AlgoParams& p) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t es = spec.elementSize(), ch = static_cast<std::size_t>(p.channels);
  if (n <= 1) return 0;
  if (pipelined(spec, algo)) {
    std::size_t chunks = 0;
    const std::size_t slices = pipelineSlices(spec, p);
    for (std::size_t i = 0; i < slices; ++i) {
      chunks += chunksOf(part(spec.count, slices, i), es, p.chunkBytes, kDefaultPipelineChunkBytes);
    }
    return chunks * (spec.kind == Collective::AllReduce ? 2 * (n - 1) : n - 1);
  }
  if (algo == "ring") {
    const std::size_t perRoundBlocks = spec.kind == Collective::AllReduce ? n : 1;
    std::size_t pieces = 0;
    for (std::size_t c = 0; c < ch; ++c) {
      const std::size_t len = part(spec.count, ch, c);
      std::size_t rounds = 1;
      if (p.chunkBytes != 0 && len != 0) {
        const std::size_t per = std::max<std::size_t>(1, p.chunkBytes / es) * perRoundBlocks;
        rounds = (len + per - 1) / per;
      }
      pieces += rounds;
    }
    return pieces * n * (spec.kind == Collective::AllReduce ? 2 * (n - 1) : n - 1);
  }
  if (algo == "recursive_doubling") return n * (ceilLog2(n) + 2);
  if (algo == "rabenseifner") return n * (2 * ceilLog2(n) + 2);
  if (algo == "direct") return 2 * n * (n - 1);
  if (algo == "hierarchical" && p.rankHost.size() == n) {
    const std::size_t hosts = static_cast<std::size_t>(*std::max_element(p.rankHost.begin(), p.rankHost.end())) + 1;
    return 2 * n * (n / hosts - 1 + hosts - 1);
  }
  if (algo == "dissemination") return n * ceilLog2(n);
  return n * n;  // unknown generator: assume all pairs
}

/// The Auto policy (sim_backend.h, kAlwaysExactTransfers); Exact and Aggregated do what they say.
SimResult simulateWithPolicy(detail::World& w, const Schedule& s, const Matching& m, const SimConfig& cfg,
                             bool timeline) {
  std::vector<std::pair<int, int>> pairs;
  pairs.reserve(m.matches.size());
  for (const Match& x : m.matches) pairs.emplace_back(x.srcRank, x.dstRank);
  w.prefetchRoutes(pairs);
  if (cfg.mode == SimMode::Exact) return detail::simulateExact(w, s, m, timeline);
  if (cfg.mode == SimMode::Aggregated) return detail::simulateAggregated(w, s, m, timeline);
  if (m.matches.size() <= kAlwaysExactTransfers) return detail::simulateExact(w, s, m, timeline);
  SimResult r = detail::simulateAggregated(w, s, m, timeline);
  const double cost = static_cast<double>(m.matches.size()) * static_cast<double>(s.ranks.size());
  if (!r.exact && m.matches.size() <= cfg.exactTransferLimit && cost <= kExactFallbackBudget) {
    return detail::simulateExact(w, s, m, timeline);
  }
  return r;
}

}  // namespace

Simulator::Simulator(Topology topology, int nranks, SimConfig config)
    : topo_(std::move(topology)), nranks_(nranks), config_(config) {
  const int available = static_cast<int>(topo_.ranks.size());
  if (nranks_ <= 0) nranks_ = available;
  if (nranks_ > available) {
    throw Error(Errc::InvalidArgument, fmt::format("topology '{}' has {} ranks, {} requested (use at most {})",
                                                   topo_.name, available, nranks_, available));
  }
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
    detail::World w(topo_, nranks_, config_);
    return simulateWithPolicy(w, s, m, config_, config_.timeline);
  });
  r.wallSeconds = secondsSince(t0);
  return r;
}

namespace {

/// Pipelined algorithms with many chunks: simulated with ma, ma+1, mb-1 and mb chunks of the real chunk size, then
/// extended to the real count along the slope between ma and mb. A chain's pipeline is linear (every increment
/// equal); a tree's is not quite (its two children fold in turn and chunks of both trees share links, so the
/// increments wander around their mean), hence the window rather than the last increment.
SimResult extrapolate(detail::World& w, const CollectiveSpec& spec, std::string_view algo, const AlgoParams& p,
                      const SimConfig& cfg) {
  const std::size_t es = spec.elementSize(), slices = pipelineSlices(spec, p);
  std::size_t chunks = 0, chunkElems = 0;
  bool uniform = true;
  for (std::size_t i = 0; i < slices; ++i) {
    const std::size_t len = part(spec.count, slices, i);
    const std::size_t c = chunksOf(len, es, p.chunkBytes, kDefaultPipelineChunkBytes);
    if (i == 0) chunks = c;
    uniform = uniform && c == chunks && len % c == 0 && len / c == part(spec.count, slices, 0) / chunks;
    chunkElems = std::max(chunkElems, (len + c - 1) / c);
  }
  auto runSchedule = [&](const Schedule& s) { return simulateWithPolicy(w, s, matchSchedule(s), cfg, false); };
  // Past the fill (about log2 n tree levels, or a few chunks of a chain) and a window as long again.
  const auto n = static_cast<std::size_t>(spec.nranks);
  const std::size_t ma = spec.kind == Collective::AllReduce ? ceilLog2(n) + 2 : 4, mb = 2 * ma + 2;
  if (chunks <= mb + 1) return runSchedule(buildSchedule(spec, algo, p));
  // One method for all four sub-runs (mixing would bend the slope): op by op when the largest is affordable
  // (kPipelineExactBudget), else aggregated, which is an estimate here anyway.
  AlgoParams subParams = p;
  subParams.chunkBytes = chunkElems * es;
  CollectiveSpec largestSpec = spec;
  largestSpec.count = slices * mb * chunkElems;
  const double largest = static_cast<double>(estimateTransfers(largestSpec, algo, subParams));
  SimConfig subCfg = cfg;
  if (cfg.mode == SimMode::Auto) {
    subCfg.mode = largest * static_cast<double>(n) <= kPipelineExactBudget ? SimMode::Exact : SimMode::Aggregated;
  }
  auto runSub = [&](const Schedule& s) { return simulateWithPolicy(w, s, matchSchedule(s), subCfg, false); };
  SimResult out;
  out.method = "extrapolated";
  std::map<std::size_t, double> t;
  bool subExact = true;
  for (std::size_t m : {ma, ma + 1, mb - 1, mb}) {
    CollectiveSpec sub = spec;
    sub.count = slices * m * chunkElems;
    const SimResult r = runSub(buildSchedule(sub, algo, subParams));
    t[m] = r.seconds;
    subExact = subExact && r.exact;
    out.simulatedActivities += r.simulatedActivities;
    out.patterns += r.patterns;
  }
  const double slope = (t[mb] - t[ma]) / static_cast<double>(mb - ma);
  const double dA = t[ma + 1] - t[ma], dB = t[mb] - t[mb - 1];
  const double kAgree = 1e-9 * t[mb];
  const bool linear = std::abs(dA - slope) <= kAgree && std::abs(dB - slope) <= kAgree;
  out.seconds = t[mb] + static_cast<double>(chunks - mb) * slope;
  out.exact = false;
  out.note =
      fmt::format("{} chunks of {} elements extrapolated from {}..{} chunks at {:.6g} us per chunk ({}{}{})", chunks,
                  chunkElems, ma, mb, slope * 1e6, linear ? "linear pipeline" : "increments vary around the mean",
                  uniform ? "" : "; the real chunks differ by one element", subExact ? "" : "; sub-runs approximate");
  out.transfers = estimateTransfers(spec, algo, p);
  out.ops = 2 * out.transfers;
  return out;
}

}  // namespace

SimResult Simulator::runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm,
                                  const AlgoParams& params) const {
  if (spec.nranks != nranks_) {
    throw Error(Errc::InvalidArgument, fmt::format("{} needs {} ranks but the simulator runs {} (topology '{}')",
                                                   describe(spec), spec.nranks, nranks_, topo_.name));
  }
  checkSpec(spec, params);
  if (findAlgorithm(spec.kind, algorithm).native) {
    throw Error(Errc::Unsupported, fmt::format("algorithm '{}' is a library's own collective; the simulator runs "
                                               "collbench's schedules",
                                               algorithm));
  }
  const std::size_t est = estimateTransfers(spec, algorithm, params);
  const bool small = est <= config_.exactTransferLimit || config_.mode == SimMode::Exact;
  const bool ringModel = !small && spec.kind == Collective::AllReduce && algorithm == "ring" && !config_.timeline &&
                         detail::ringModelApplies(spec, params);
  const bool extra = !small && !ringModel && pipelined(spec, algorithm) && !config_.timeline;
  if (!ringModel && !extra) {
    if (est > kMaterializeTransferLimit) {
      throw Error(Errc::Unsupported,
                  fmt::format("{} with '{}' would need about {} transfers: too large to build{}", describe(spec),
                              algorithm, est, config_.timeline ? " (a timeline needs the whole schedule)" : ""));
    }
    return run(buildSchedule(spec, algorithm, params));
  }
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r = inChild([&] {
    detail::World w(topo_, nranks_, config_);
    if (ringModel) return detail::simulateRingModel(w, spec, params);
    return extrapolate(w, spec, algorithm, params, config_);
  });
  r.wallSeconds = secondsSince(t0);
  return r;
}

}  // namespace collbench::sim
