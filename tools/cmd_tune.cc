// `collbench tune`: sweeps algorithm x chunk_bytes x channels x sizes x rank counts on a backend and writes a tuning
// table (tuning.h) with provenance; `--export nccl-tuner FILE` also sweeps NCCL's algorithms x protocols x channels
// (on the hardware, or as the simulator / NCCL's own model sees them) and writes NCCL's tuner plugin CSV.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "commands.h"
#include "environment.h"
#include "perf_runner.h"
#include "world_options.h"

namespace collbench::cli {

namespace {

/// Pseudo-backend: the cost model instead of measurements (huge rank counts, machines without the simulator).
constexpr const char* kModelBackend = "model";
/// Default NCCL channel counts swept for the export: H100 NCCL uses up to 32 channels (NCCL_MAX_NCHANNELS).
constexpr const char* kDefaultNcclChannels = "2,8,16,32";

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// "\r[k/n] what" on stderr when it is a terminal (DESIGN.md: progress never mixes with results).
class Progress {
 public:
  explicit Progress(std::size_t total, std::string prefix = "")
      : total_(total), prefix_(std::move(prefix)), tty_(isatty(STDERR_FILENO) != 0) {}
  void step(const std::string& what) {
    ++done_;
    if (tty_) std::fprintf(stderr, "\r\033[Ktune: %s[%zu/%zu] %s", prefix_.c_str(), done_, total_, what.c_str());
  }
  ~Progress() {
    if (tty_ && done_ > 0) std::fprintf(stderr, "\r\033[K");
  }

 private:
  std::size_t total_, done_ = 0;
  std::string prefix_;
  bool tty_;
};

/// Host counts whose first and last rank counts `tune` adds by default: the first few, then powers of two (a
/// 1024-host cluster keeps a short list).
constexpr int kBoundaryHostCountsAll = 4;

/// Default rank counts on a topology: powers of two up to its rank count, the full count, and where hosts hold
/// several ranks, the first two and the last rank count of host counts 1..kBoundaryHostCountsAll and powers of two,
/// e.g. 2,4,8,9,10,16,17,18,24,25,26,32 on 4 hosts of 8. Times jump where a rank count first needs another host, and
/// the selector never interpolates across that boundary; the first two rank counts of a host count put one or two
/// ranks on the new host, whose NICs then carry several channels' ring hops, where the cost model (which takes every
/// flow on a link as concurrent) is up to 20% pessimistic (h100-4x8-rail, 1 MiB): they are measured, not modelled.
std::vector<int> defaultRanks(const Topology& t) {
  const int total = static_cast<int>(t.ranks.size());
  std::vector<int> out;
  for (int n = 2; n < total; n *= 2) out.push_back(n);
  out.push_back(total);
  const std::vector<int> hosts = rankHosts(t, total);  // a prefix of it is rankHosts(t, n)
  std::vector<int> first, last;                        // per host count k (index k-1): first and last rank count
  int seen = 0;
  for (int n = 1; n <= total; ++n) {
    const int h = hosts[static_cast<std::size_t>(n - 1)];
    if (h + 1 > seen) {
      seen = h + 1;
      first.push_back(n);
      last.push_back(n);
    } else {
      last.back() = n;
    }
  }
  if (static_cast<int>(first.size()) < total) {  // some host holds several ranks
    for (int k = 1; k <= static_cast<int>(first.size()); ++k) {
      if (k > kBoundaryHostCountsAll && !std::has_single_bit(static_cast<unsigned>(k))) continue;
      const int lo = first[static_cast<std::size_t>(k - 1)], hi = last[static_cast<std::size_t>(k - 1)];
      for (int n : {lo, std::min(lo + 1, hi), hi}) {
        if (n >= 2) out.push_back(n);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct TuneArgs {
  std::string backend = "sim", topology, output, exportKind, exportFile, from, library;
  std::vector<std::string> exportArgs;
  std::string collectives = "all_reduce", algos, ranks, chunks = "0,128K,2M", channels = "1,2,4";
  std::string ncclChannels = kDefaultNcclChannels;
  std::string minBytes = "1K", maxBytes = "1G", dtype = "float";
  double factor = 4;
  int iters = 5, warmup = 1, repeats = 7, passes = 1;
  double timeoutSeconds = kDefaultTimeoutSeconds;
  double prune = 0;
  bool force = false;
};

struct Point {
  Collective collective;
  int nranks;
  std::size_t bytes;  // table key (nccl-tests size)
  CollectiveSpec spec;
};

/// The sweep's points for one rank count: sizes as nccl-tests walks them, keyed by the row size perf prints.
std::vector<Point> pointsFor(const std::vector<Collective>& colls, int n, const std::vector<std::size_t>& sizes,
                             DType dtype) {
  std::vector<Point> out;
  for (Collective c : colls) {
    for (std::size_t b : sizes) {
      CollectiveSpec spec{c, n, countForBytes(c, n, b, dtype), dtype};
      const std::size_t key = std::max(spec.inputBytes(), spec.outputBytes());
      if (spec.count == 0) continue;
      out.push_back({c, n, key, spec});
    }
  }
  return out;
}

/// Keeps every configuration measured (the selector interpolates each one between table points: the best chunk and
/// channel count move with size and rank count).
void addCandidate(TuningEntry& e, const TuningCandidate& k) { e.candidates.push_back(k); }

void sortEntry(TuningEntry& e) {
  std::stable_sort(e.candidates.begin(), e.candidates.end(),
                   [](const auto& a, const auto& b) { return a.timeUs < b.timeUs; });
}

// NOLINTBEGIN(concurrency-mt-unsafe): setenv races with any thread reading the environment, so a scope begins
// before and ends after the backend that uses the variables (hence NCCL's threads) exists.
/// Sets environment variables for one scope and restores them (NCCL reads NCCL_ALGO and friends at comm init).
class ScopedEnv {
 public:
  void set(const std::string& k, const std::string& v) {
    if (!saved_.count(k)) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};
// NOLINTEND(concurrency-mt-unsafe)

class Tuner {
 public:
  Tuner(const TuneArgs& a) : a_(a) {
    if (!a.topology.empty()) topo_ = loadTopology(a.topology);
    dtype_ = parseDType(a.dtype);
    for (const std::string& c : splitList(a.collectives)) {
      const Collective k = parseCollective(c);
      if (k == Collective::Barrier) throw Error(Errc::InvalidArgument, "tune does not time barrier (no bytes)");
      colls_.push_back(k);
    }
    if (colls_.empty()) throw Error(Errc::InvalidArgument, "--collectives: empty list");
    PerfConfig pc;
    pc.minBytes = parseBytes(a.minBytes, "-b/--minbytes");
    pc.maxBytes = parseBytes(a.maxBytes, "-e/--maxbytes");
    if (!(a.factor > 1))
      throw Error(Errc::InvalidArgument, fmt::format("-f/--stepfactor must be > 1, got {}", a.factor));
    if (pc.minBytes > pc.maxBytes || pc.minBytes == 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("sizes must satisfy 0 < -b ({}) <= -e ({})", pc.minBytes, pc.maxBytes));
    }
    if (a.passes < 1) throw Error(Errc::InvalidArgument, fmt::format("--passes must be >= 1, got {}", a.passes));
    pc.stepFactor = a.factor;
    sizes_ = sizeSequence(pc);
    chunks_ = parseBytesList("--chunks", a.chunks);
    channels_ = parseIntList("--channels", a.channels, 1);
    ncclChannels_ = parseIntList("--nccl-channels", a.ncclChannels, 1);
    const int topoRanks = topo_ ? static_cast<int>(topo_->ranks.size()) : 0;
    if (!a.ranks.empty()) {
      ranks_ = parseIntList("-g/--ranks", a.ranks, 1);
    } else if (topo_) {
      ranks_ = defaultRanks(*topo_);
    } else {
      ranks_ = {2, 4};
    }
    for (int n : ranks_) {
      if (topo_ && n > topoRanks) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("--ranks {}: topology '{}' has {} ranks", n, printable(topo_->name), topoRanks));
      }
    }
    if (!a.algos.empty()) algoFilter_ = splitList(a.algos);
    for (const std::string& f : algoFilter_) {  // typos fail loudly
      bool found = false;
      for (const auto& alg : algorithms()) {
        found = found || (alg.name == f && !alg.native &&
                          std::find(colls_.begin(), colls_.end(), alg.collective) != colls_.end());
      }
      if (!found) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("--algos: '{}' is not a schedule algorithm of the collectives swept", printable(f)));
      }
    }
    if (oneRankPerProcess(a.backend)) {
      // One rank per process: the world is fixed by the launcher, so is the rank count.
      world_ = processWorldOptions();
      const int world = std::stoi(world_.at("world"));
      if (a.ranks.empty()) ranks_ = {world};
      if (ranks_.size() != 1 || ranks_[0] != world) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("--ranks must be the world size {} for the process backend {}", world, a.backend));
      }
      localRank_ = std::stoi(world_.at("rank"));
    }
    mo_ = MeasureOptions{a.iters, a.warmup, a.repeats, a.timeoutSeconds};
  }

  bool writer() const { return localRank_ <= 0; }
  /// Whether a sweep so far measured a backend that moves data (its times vary between passes).
  bool measuresHardware() const { return measuresHardware_; }

  TuningProvenance provenance() const {
    TuningProvenance p;
    p.tool = std::string("collbench ") + COLLBENCH_VERSION;
    p.commandLine = commandLine();
    p.backend = a_.backend;
    p.host = hostName();
    p.date = utcNow();
    p.topology = topo_ ? topo_->name : "";
    p.topologyFingerprint = topo_ ? fingerprint(*topo_) : "";
    return p;
  }

  TuningSection newSection(std::string_view library) const {
    TuningSection s;
    s.topology = topo_ ? topo_->name : "";
    s.fingerprint = topo_ ? fingerprint(*topo_) : "";
    s.backend = a_.backend;
    s.library = std::string(library);
    return s;
  }

  int hostsOf(int n) const {
    if (!topo_) return 1;
    const std::vector<int> h = rankHosts(*topo_, n);
    return *std::max_element(h.begin(), h.end()) + 1;
  }

  std::vector<std::string> algorithmsFor(Collective c, int n) const {
    std::vector<std::string> out;
    for (const auto& a : algorithms()) {
      if (a.collective != c || a.native) continue;
      if (!algoFilter_.empty() && std::find(algoFilter_.begin(), algoFilter_.end(), a.name) == algoFilter_.end())
        continue;
      if (a.traits.needsHosts || a.traits.needsSwitchReduction) {
        if (!topo_) continue;  // needs the hosts of the ranks, or a switch that reduces
        const CostModel m(*topo_, n);
        if (!m.estimate(CollectiveSpec{c, n, 1024, dtype_}, a.name).supported) continue;  // unequal hosts
      }
      out.push_back(a.name);
    }
    return out;
  }

  std::unique_ptr<OwnedRunner> timerFor(int n, const std::string& topologyPath = "") const {
    BackendOptions o = world_;
    const std::string t = topologyPath.empty() ? a_.topology : topologyPath;
    if (!t.empty()) o["topology"] = t;
    RunnerOptions ro;
    ro.localRank = localRank_;
    ro.timeoutSeconds = mo_.timeoutSeconds;
    return std::make_unique<OwnedRunner>(a_.backend, n, o, ro);
  }

  /// collbench's algorithms on the backend (or the model); `pass` (1-based, of --passes) labels the progress.
  TuningSection sweepCollbench(int pass) {
    TuningSection sec = newSection(kLibraryCollbench);
    std::size_t total = 0;
    for (int n : ranks_) {
      for (const Point& p : pointsFor(colls_, n, sizes_, dtype_)) {
        for (const auto& a : algorithmsFor(p.collective, n))
          total += sweepConfigs(p.collective, a, chunks_, channels_).size();
      }
    }
    Progress progress(total, a_.passes > 1 ? fmt::format("pass {}/{}: ", pass, a_.passes) : "");
    for (int n : ranks_) {
      const std::vector<int> hosts = topo_ ? rankHosts(*topo_, n) : std::vector<int>{};
      std::unique_ptr<OwnedRunner> timer;
      std::optional<CostModel> model;
      if (a_.backend == kModelBackend) {
        model.emplace(topo_ ? CostModel(*topo_, n) : CostModel::defaultFlat(n));
      } else {
        timer = timerFor(n);
        measuresHardware_ = measuresHardware_ || timer->backend->movesData();
      }
      std::optional<CostModel> pruner;
      if (a_.prune > 0) pruner.emplace(topo_ ? CostModel(*topo_, n) : CostModel::defaultFlat(n));
      for (const Point& p : pointsFor(colls_, n, sizes_, dtype_)) {
        TuningEntry e{p.collective, n, hostsOf(n), p.bytes, {}};
        // --prune F: skip configurations the cost model puts more than F times above its best at this point.
        double bestModel = 0;
        if (pruner) {
          for (const std::string& a : algorithmsFor(p.collective, n)) {
            for (const AlgoParams& params : sweepConfigs(p.collective, a, chunks_, channels_, hosts)) {
              const Estimate est = pruner->estimate(p.spec, a, params);
              if (est.supported && (bestModel == 0 || est.terms.us < bestModel)) bestModel = est.terms.us;
            }
          }
        }
        std::vector<Plan> configs;
        for (const std::string& a : algorithmsFor(p.collective, n)) {
          for (const AlgoParams& params : sweepConfigs(p.collective, a, chunks_, channels_, hosts)) {
            progress.step(fmt::format("{} n={} {} {} chunk {} x{}", toString(p.collective), n, formatBytes(p.bytes), a,
                                      formatBytes(params.chunkBytes), params.channels));
            if (pruner && bestModel > 0) {
              const Estimate est = pruner->estimate(p.spec, a, params);
              if (est.supported && est.terms.us > a_.prune * bestModel) continue;
            }
            if (model) {
              const Estimate est = model->estimate(p.spec, a, params);
              if (est.supported)
                addCandidate(e, TuningCandidate{a, "", params.chunkBytes, params.channels, est.terms.us});
            } else {
              configs.push_back(Plan{Choice{a, ""}, params});
            }
          }
        }
        if (timer) {  // every configuration of the point together (interleaved repetitions on real backends)
          const std::vector<double> us = timer->runner->times(p.spec, configs, mo_);
          for (std::size_t i = 0; i < configs.size(); ++i) {
            addCandidate(e, TuningCandidate{configs[i].choice.algorithm, "", configs[i].params.chunkBytes,
                                            configs[i].params.channels, us[i]});
          }
        }
        if (e.candidates.empty()) continue;
        sortEntry(e);
        sec.entries.push_back(std::move(e));
      }
    }
    return sec;
  }

  /// NCCL's algorithms x protocols x channels where NCCL offers them on the system: on the nccl backend (NCCL_ALGO /
  /// NCCL_PROTO / NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS), on the simulator (its emulated NCCL under the same
  /// variables, backend option nccl_env), or with NCCL's model alone (backend "model": ncclPredictUs).
  TuningSection sweepNccl() {
    TuningSection sec = newSection(kLibraryNccl);
    // Hardware: a backend that runs NCCL's own collective; the model is not a registered backend.
    const std::optional<BackendCapabilities> caps = findBackendCapabilities(a_.backend);
    const auto& natives = caps ? caps->nativeAlgorithms : std::vector<std::string>{};
    const bool sim = caps && caps->device == DeviceKind::Simulated, mdl = a_.backend == kModelBackend;
    const bool hw = !sim && std::find(natives.begin(), natives.end(), kNcclNativeAlgorithm) != natives.end();
    if (!sim && !hw && !mdl) {
      throw Error(Errc::InvalidArgument, fmt::format("--export nccl-tuner sweeps NCCL's algorithms: use --backend nccl "
                                                     "(hardware), sim or model, not '{}'",
                                                     printable(a_.backend)));
    }
    if ((sim || mdl) && !topo_) {
      throw Error(Errc::InvalidArgument, "--export nccl-tuner with the simulator or the model needs --topology");
    }
    std::size_t total = 0;
    for (int n : ranks_) {
      total += pointsFor(colls_, n, sizes_, dtype_).size() * std::size(kNcclAlgorithms) * std::size(kNcclProtocols) *
               ncclChannels_.size();
    }
    Progress progress(total);
    for (int n : ranks_) {
      const int nnodes = hostsOf(n);
      std::map<std::pair<Collective, std::size_t>, TuningEntry> entries;
      const std::vector<Point> points = pointsFor(colls_, n, sizes_, dtype_);
      NcclSystem system;  // without a topology (hardware), NCCL's model only prunes: nodes and GPUs per node
      if (topo_) {
        system = ncclSystemOf(*topo_, n);
      } else {
        system.nodes = nnodes;
        system.gpusPerNode = (n + nnodes - 1) / nnodes;
      }
      // NCCL's model of every configuration (< 0: NCCL does not offer it here), and its best per point for --prune.
      const auto modelUs = [&](const Point& p, NcclAlgorithm algo, NcclProtocol proto, int ch) {
        return ncclPredictUs(system, p.collective, ncclTestsBytes(p.spec), n, algo, proto, ch);
      };
      std::map<std::pair<Collective, std::size_t>, double> bestNccl;
      for (const Point& p : points) {
        double best = std::numeric_limits<double>::infinity();
        for (NcclAlgorithm algo : kNcclAlgorithms) {
          for (NcclProtocol proto : kNcclProtocols) {
            for (int ch : ncclChannels_) {
              const double t = modelUs(p, algo, proto, ch);
              if (t >= 0) best = std::min(best, t);
            }
          }
        }
        bestNccl[{p.collective, p.bytes}] = best;
      }
      for (NcclAlgorithm algo : kNcclAlgorithms) {
        for (NcclProtocol proto : kNcclProtocols) {
          for (int ch : ncclChannels_) {
            const std::string vars =
                fmt::format("NCCL_ALGO={} NCCL_PROTO={} NCCL_MIN_NCHANNELS={} NCCL_MAX_NCHANNELS={}", toString(algo),
                            toString(proto), ch, ch);
            std::unique_ptr<OwnedRunner> timer;
            std::optional<ScopedEnv> env;
            if (sim) {
              BackendOptions o = world_;
              o["topology"] = a_.topology;
              o["nccl_env"] = vars;
              RunnerOptions ro;
              ro.timeoutSeconds = mo_.timeoutSeconds;
              timer = std::make_unique<OwnedRunner>(a_.backend, n, o, ro);
            } else if (hw) {
              env.emplace();
              env->set("NCCL_ALGO", std::string(toString(algo)));
              env->set("NCCL_PROTO", std::string(toString(proto)));
              env->set("NCCL_MIN_NCHANNELS", std::to_string(ch));
              env->set("NCCL_MAX_NCHANNELS", std::to_string(ch));
              timer = timerFor(n);
            }
            for (const Point& p : points) {
              progress.step(fmt::format("nccl {} n={} {} {}/{} x{}", toString(p.collective), n, formatBytes(p.bytes),
                                        toString(algo), toString(proto), ch));
              const double model = modelUs(p, algo, proto, ch);
              if (topo_ && model < 0) continue;  // NCCL does not offer it on this system (tree all-gather, NVLS ...)
              if (a_.prune > 0 && !mdl && model > a_.prune * bestNccl.at({p.collective, p.bytes})) continue;
              double us = model;
              if (!mdl) {
                try {
                  us = timer->runner->timeUs(p.spec, std::string(kNcclNativeAlgorithm), {}, mo_);
                } catch (const Error& e) {
                  if (e.code() != Errc::Unsupported) throw;
                  continue;  // the variables leave NCCL nothing for this call
                }
              }
              auto [it, fresh] =
                  entries.try_emplace({p.collective, p.bytes}, TuningEntry{p.collective, n, nnodes, p.bytes, {}});
              (void)fresh;
              it->second.candidates.push_back(TuningCandidate{std::string(ncclTunerAlgorithmName(algo)),
                                                              std::string(ncclTunerProtocolName(proto)), 0, ch, us});
            }
          }
        }
      }
      for (auto& [key, e] : entries) {
        sortEntry(e);
        sec.entries.push_back(std::move(e));
      }
    }
    return sec;
  }

 private:
  const TuneArgs& a_;
  std::optional<Topology> topo_;
  DType dtype_ = DType::F32;
  std::vector<Collective> colls_;
  std::vector<std::size_t> sizes_, chunks_;
  std::vector<int> channels_, ncclChannels_, ranks_;
  std::vector<std::string> algoFilter_;
  BackendOptions world_;
  int localRank_ = -1;
  MeasureOptions mo_;
  bool measuresHardware_ = false;
};

/// A compact summary on stdout: the winner and the runner-up per point.
void printSummary(const TuningTable& t) {
  for (const TuningSection& s : t.sections) {
    fmt::print("# section: library {}, backend {}, topology {} (fingerprint {}), {} points\n", s.library, s.backend,
               s.topology.empty() ? "(none)" : s.topology, s.fingerprint.empty() ? "-" : s.fingerprint,
               s.entries.size());
    fmt::print("# {:>14}  {:>6}  {:>6}  {:>12}  {:<28} {:>12}  {:<28} {:>12}\n", "collective", "nranks", "nnodes",
               "bytes", "best", "time_us", "runner-up", "time_us");
    for (const TuningEntry& e : s.entries) {
      auto name = [&](const TuningCandidate& k) {
        std::string n = k.algorithm;
        if (!k.protocol.empty()) n += "/" + k.protocol;
        if (k.chunkBytes) n += " c" + formatBytes(k.chunkBytes);
        if (k.channels != 1) n += fmt::format(" x{}", k.channels);
        return n;
      };
      const TuningCandidate& b = e.candidates.front();
      // The runner-up is the fastest other algorithm (other configurations of the winner are not alternatives).
      const TuningCandidate* next = nullptr;
      for (const TuningCandidate& k : e.candidates) {
        if (k.algorithm != b.algorithm && !next) next = &k;
      }
      const std::string second = next ? name(*next) : "-";
      const double secondUs = next ? next->timeUs : 0;
      fmt::print("  {:>14}  {:>6}  {:>6}  {:>12}  {:<28} {:>12.3f}  {:<28} {:>12.3f}\n", toString(e.collective),
                 e.nranks, e.nnodes, e.bytes, name(b), b.timeUs, second, secondUs);
    }
  }
}

}  // namespace

void addTuneCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd =
      app.add_subcommand("tune", "sweep algorithms x chunk x channels x sizes x ranks; write a tuning table");
  cmd->add_option("--backend", a->backend, "sim, host, gloo, nccl, or model (the cost model)")->default_val("sim");
  cmd->add_option("--topology", a->topology, "topology file or shipped name (fingerprint keys the table)");
  cmd->add_option("-o,--output", a->output, "tuning table to write (JSON)");
  cmd->add_flag("--force", a->force, "overwrite existing output files");
  cmd->add_option("--collectives", a->collectives, "comma-separated collectives")->default_val("all_reduce");
  cmd->add_option("--algos", a->algos, "only these algorithms (comma-separated; default all)");
  cmd->add_option("-g,--ranks", a->ranks,
                  "rank counts (comma-separated; default powers of two up to the topology's, and the first and last "
                  "rank count of each host count)");
  cmd->add_option("-b,--minbytes", a->minBytes, "smallest size (nccl-tests size)")->default_val("1K");
  cmd->add_option("-e,--maxbytes", a->maxBytes, "largest size")->default_val("1G");
  cmd->add_option("-f,--stepfactor", a->factor, "size factor between points (> 1)")->default_val(4);
  cmd->add_option("--chunks", a->chunks, "chunk_bytes values for algorithms that pipeline")->default_val("0,128K,2M");
  cmd->add_option("--channels", a->channels, "channel counts for algorithms that use them")->default_val("1,2,4");
  cmd->add_option("-d,--datatype", a->dtype, "element type")->default_val("float");
  cmd->add_option("-n,--iters", a->iters, "timed iterations per repetition (real backends)")->default_val(5);
  cmd->add_option("-w,--warmup_iters", a->warmup, "untimed iterations first")->default_val(1);
  cmd->add_option("--repeats", a->repeats,
                  "repetitions, round-robin over a point's configurations; each one's fastest is kept (real backends)")
      ->default_val(7);
  cmd->add_option("--passes", a->passes,
                  "sweep collbench's algorithms this many times; a configuration's time is its mean over the passes "
                  "(measured backends: machine modes that outlast one point's repetitions; the NCCL sweep runs once)")
      ->default_val(1);
  cmd->add_option("-T,--timeout", a->timeoutSeconds, "seconds a rank waits for a peer")
      ->default_val(kDefaultTimeoutSeconds);
  cmd->add_option("--prune", a->prune,
                  "skip configurations the cost model (NCCL's model for the NCCL sweep) puts more than this many times "
                  "above its best at a point (0 = measure all)")
      ->default_val(0);
  cmd->add_option("--library", a->library, "collbench (our schedules), nccl (NCCL algo x proto x channels) or both");
  cmd->add_option("--nccl-channels", a->ncclChannels, "NCCL channel counts swept for the NCCL export")
      ->default_val(kDefaultNcclChannels);
  cmd->add_option("--export", a->exportArgs, "also write a file for another tool: --export nccl-tuner FILE")
      ->expected(1, 2);
  cmd->add_option("--export-file", a->exportFile, "where --export writes (NCCL_TUNER_CONFIG_FILE)");
  cmd->add_option("--from", a->from, "export from this existing tuning table instead of sweeping");
  cmd->callback([a, &exitCode] {
    // --export KIND FILE, or --export KIND --export-file FILE.
    if (!a->exportArgs.empty()) a->exportKind = a->exportArgs[0];
    if (a->exportArgs.size() > 1) {
      if (!a->exportFile.empty() && a->exportFile != a->exportArgs[1]) {
        throw Error(Errc::InvalidArgument, "--export FILE and --export-file name different files: give one");
      }
      a->exportFile = a->exportArgs[1];
    }
    if (!a->exportKind.empty() && a->exportKind != "nccl-tuner") {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--export: unknown format '{}' (available: nccl-tuner)", printable(a->exportKind)));
    }
    if (!a->exportKind.empty() && a->exportFile.empty()) {
      throw Error(Errc::InvalidArgument, "--export nccl-tuner needs a file: --export nccl-tuner FILE");
    }
    if (a->output.empty() && a->exportFile.empty()) {
      throw Error(Errc::InvalidArgument, "nothing to write: give -o TABLE and/or --export nccl-tuner FILE");
    }
    if (!a->from.empty() && !a->output.empty()) {
      throw Error(Errc::InvalidArgument, "--from exports an existing table: it writes no new table (drop -o)");
    }
    checkOutputFile(a->output, a->force, "-o/--output");
    checkOutputFile(a->exportFile, a->force, "--export-file");
    TuningTable table;
    if (!a->from.empty()) {
      table = loadTuningTable(a->from);
    } else {
      std::string library = a->library.empty() ? (a->exportKind.empty() ? "collbench" : "nccl") : a->library;
      if (library != "collbench" && library != "nccl" && library != "both") {
        throw Error(Errc::InvalidArgument,
                    fmt::format("--library: '{}' is not collbench, nccl or both", printable(library)));
      }
      Tuner tuner(*a);
      const auto start = std::chrono::steady_clock::now();
      table.provenance = tuner.provenance();
      if (library != "nccl") {
        // Each pass sweeps the grid again later, meeting more of a machine's modes (meanOfPasses); the simulator and
        // the model give the same times every pass.
        std::vector<TuningSection> passes{tuner.sweepCollbench(1)};
        while (tuner.measuresHardware() && static_cast<int>(passes.size()) < a->passes) {
          passes.push_back(tuner.sweepCollbench(static_cast<int>(passes.size()) + 1));
        }
        table.sections.push_back(meanOfPasses(passes));
      }
      if (library != "collbench") table.sections.push_back(tuner.sweepNccl());
      if (!tuner.writer()) return;  // process backends: rank 0 writes
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("# collbench tune: backend {}, topology {}, {:.1f} s\n", a->backend,
                 a->topology.empty() ? "(none)" : a->topology, secs);
    }
    printSummary(table);
    if (!a->output.empty()) writeTextFile(a->output, toJson(table), "-o/--output");
    if (!a->exportFile.empty()) {
      const std::vector<NcclTunerRule> rules = ncclTunerRules(table);
      writeTextFile(a->exportFile, ncclTunerCsv(rules, table.provenance), "--export-file");
      fmt::print("# wrote {} NCCL tuner rules to {}\n", rules.size(), a->exportFile);
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
