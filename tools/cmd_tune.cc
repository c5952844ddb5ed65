// `collbench tune`: flags, the summary table and the files. The sweep of collbench's algorithms is the tune library
// (include/collbench/tune.h); `--export nccl-tuner FILE` also sweeps NCCL's algorithms x protocols x channels (on the
// hardware, or as the simulator / NCCL's own model sees them) and writes NCCL's tuner plugin CSV.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "collbench/backend_info.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/parallel.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/topology.h"
#include "collbench/tune.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"
#include "world_options.h"

namespace collbench::cli {

namespace {

/// Default NCCL channel counts swept for the export: H100 NCCL uses up to 32 channels (NCCL_MAX_NCHANNELS).
constexpr const char* kDefaultNcclChannels = "2,8,16,32";

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

struct TuneArgs {
  std::string backend = "sim", topology, output, exportKind, exportFile, from, library, shard;
  std::vector<std::string> exportArgs;
  std::string collectives = "all_reduce", algos, ranks, chunks = "0,128K,2M", channels = "1,2,4";
  std::string ncclChannels = kDefaultNcclChannels;
  std::string minBytes = "1K", maxBytes = "1G", dtype = "float";
  double factor = 4;
  int iters = 5, warmup = 1, repeats = 7, passes = 1, jobs = 0;
  double timeoutSeconds = kDefaultTimeoutSeconds;
  double prune = 0;
  bool force = false;
};

using Point = TunePoint;
std::vector<Point> pointsFor(const std::vector<Collective>& colls, int n, const std::vector<std::size_t>& sizes,
                             DType dtype) {
  return tunePointsFor(colls, n, sizes, dtype);
}

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

/// A configuration file of NCCL's example tuner with one rule per collective of the sweep, each giving the candidate's
/// pair and channel count at every size, for the scope of one candidate.
class OneRuleTunerFile {
 public:
  OneRuleTunerFile(const std::vector<Collective>& colls, NcclAlgorithm algo, NcclProtocol proto, int channels)
      : path_((std::filesystem::temp_directory_path() / fmt::format("collbench_tune_{}_{}_{}_{}.conf", ::getpid(),
                                                                    ncclTunerAlgorithmName(algo),
                                                                    ncclTunerProtocolName(proto), channels))
                  .string()) {
    std::vector<NcclTunerRule> rules;
    for (Collective c : colls) {
      if (c == Collective::Barrier) continue;  // NCCL's tuner has no barrier
      NcclTunerRule r;
      r.collective = c;
      r.maxBytes = SIZE_MAX;
      r.algorithm = std::string(ncclTunerAlgorithmName(algo));
      r.protocol = std::string(ncclTunerProtocolName(proto));
      r.channels = channels;
      rules.push_back(std::move(r));
    }
    writeTextFile(path_, ncclTunerCsv(rules, TuningProvenance{}), "the tune sweep's tuner rule");
  }
  OneRuleTunerFile(const OneRuleTunerFile&) = delete;
  OneRuleTunerFile& operator=(const OneRuleTunerFile&) = delete;
  ~OneRuleTunerFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The NCCL sweep over a Tuner's grid (its members carry the names the sweep reads).
class NcclSweeper {
 public:
  NcclSweeper(const Tuner& tuner, std::vector<int> ncclChannels)
      : tuner_(tuner),
        a_(tuner.request()),
        topo_(a_.topology),
        dtype_(a_.dtype),
        colls_(a_.collectives),
        sizes_(a_.sizes),
        ncclChannels_(std::move(ncclChannels)),
        ranks_(tuner.ranks()),
        mo_(a_.measure) {}

  /// NCCL's algorithms x protocols x channels where NCCL offers them on the system: on the nccl backend (NCCL_ALGO /
  /// NCCL_PROTO / NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS / NCCL_MIN_CTAS / NCCL_MAX_CTAS), on the simulator (its
  /// emulated NCCL, backend option nccl_env: the pair forced, the channels set by a one-rule configuration of NCCL's
  /// example tuner, as the export runs), or with NCCL's model alone (backend "model": ncclPredictUs).
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
            std::unique_ptr<OwnedRunner> timer;
            std::optional<ScopedEnv> env;
            std::optional<OneRuleTunerFile> rule;
            if (sim) {
              // The simulator runs the candidate as its exported rule will run: the pair forced, and the channel count
              // set by NCCL's example tuner, which replaces NCCL's per-size count (enqueue.cc).
              rule.emplace(colls_, algo, proto, ch);
              BackendOptions o = a_.world;
              o["topology"] = a_.topologyPath;
              o["nccl_env"] = fmt::format(
                  "NCCL_ALGO={} NCCL_PROTO={} NCCL_TUNER_PLUGIN=libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE={}",
                  toString(algo), toString(proto), rule->path());
              RunnerOptions ro;
              ro.timeoutSeconds = mo_.timeoutSeconds;
              timer = std::make_unique<OwnedRunner>(a_.backend, n, o, ro);
            } else if (hw) {
              // On hardware the channel and CTA bounds (NCCL sizes NVLS channels by the latter alone,
              // transport/nvls.cc); NCCL still cuts the count at small sizes, where a tuner rule would not.
              env.emplace();
              env->set("NCCL_ALGO", std::string(toString(algo)));
              env->set("NCCL_PROTO", std::string(toString(proto)));
              for (const char* bound : {"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS"}) {
                env->set(bound, std::to_string(ch));
              }
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
  TuningSection newSection(std::string_view library) const { return tuner_.newSection(library); }
  int hostsOf(int n) const { return tuner_.hostsOf(n); }
  std::unique_ptr<OwnedRunner> timerFor(int n, const std::string& topologyPath = "") const {
    return tuner_.timerFor(n, topologyPath);
  }

  const Tuner& tuner_;
  const TuneRequest& a_;
  const std::optional<Topology>& topo_;
  DType dtype_;
  const std::vector<Collective>& colls_;
  const std::vector<std::size_t>& sizes_;
  std::vector<int> ncclChannels_;
  const std::vector<int>& ranks_;
  MeasureOptions mo_;
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

/// The request `tune`'s flags describe (each list parsed and named in its errors).
TuneRequest requestFrom(const TuneArgs& a) {
  TuneRequest r;
  r.backend = a.backend;
  r.topologyPath = a.topology;
  if (!a.topology.empty()) r.topology = loadTopology(a.topology);
  r.dtype = parseDType(a.dtype);
  r.collectives.clear();
  for (const std::string& c : splitList(a.collectives)) r.collectives.push_back(parseCollective(c));
  r.sizes = factorSizes(parseBytes(a.minBytes, "-b/--minbytes"), parseBytes(a.maxBytes, "-e/--maxbytes"), a.factor);
  if (a.passes < 1) throw Error(Errc::InvalidArgument, fmt::format("--passes must be >= 1, got {}", a.passes));
  r.chunks = parseBytesList("--chunks", a.chunks);
  r.channels = parseChannelList("--channels", a.channels);
  if (!a.ranks.empty()) r.ranks = parseIntList("-g/--ranks", a.ranks, 1);
  if (!a.algos.empty()) r.algorithms = splitList(a.algos);
  if (oneRankPerProcess(a.backend)) {
    // One rank per process: the world is fixed by the launcher, so is the rank count.
    r.world = processWorldOptions();
    const int world = std::stoi(r.world.at("world"));
    if (a.ranks.empty()) r.ranks = {world};
    if (r.ranks.size() != 1 || r.ranks[0] != world) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--ranks must be the world size {} for the process backend {}", world, a.backend));
    }
    r.localRank = std::stoi(r.world.at("rank"));
  }
  r.measure = measureOptions(a.iters, a.warmup, a.repeats, a.timeoutSeconds);
  // 0 measures every configuration; a bound below 1 would skip the best one too.
  if (!(a.prune == 0 || a.prune >= 1) || !std::isfinite(a.prune)) {
    throw Error(Errc::InvalidArgument, fmt::format("--prune must be 0 (off) or a finite ratio >= 1, got {}", a.prune));
  }
  r.prune = a.prune;
  r.commandLine = commandLine();
  r.host = hostName();
  return r;
}

}  // namespace

void addTuneCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd =
      app.add_subcommand("tune", "sweep algorithms x chunk x channels x sizes x ranks; write a tuning table");
  cmd->add_option("--backend", a->backend, "sim, host, gloo, nccl, or model (the cost model)")->default_val("sim");
  cmd->add_option("--topology", a->topology, "topology file or shipped name (fingerprint keys the table)");
  cmd->add_option("-o,--output", a->output, "tuning table to write (JSON; {shard} is replaced by --shard's K)");
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
  CLI::Option* jobs = cmd->add_option(
      "-j,--jobs", a->jobs,
      "worker processes for collbench's sweep on backends that move no data (sim, model); default: the cores");
  cmd->add_option("--shard", a->shard,
                  "K/N: sweep part K of N of the grid (docs/sweeps.md), or auto (the launcher's rank); join the parts "
                  "with collbench merge");
  cmd->callback([a, jobs, &exitCode] {
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
    const std::string library = a->library.empty() ? (a->exportKind.empty() ? "collbench" : "nccl") : a->library;
    if (a->from.empty() && library != "collbench" && library != "nccl" && library != "both") {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--library: '{}' is not collbench, nccl or both", printable(library)));
    }
    TuneControl control;
    if (!a->shard.empty()) {
      control.shard = parseShard(a->shard);
      if (library != "collbench" || !a->exportFile.empty() || !a->from.empty()) {
        throw Error(
            Errc::InvalidArgument,
            "--shard splits collbench's sweep into tables for collbench merge: it takes no --library nccl/both, "
            "--export or --from (export the merged table with --from)");
      }
      a->output = shardPath(a->output, control.shard);
    }
    control.jobs = resolveJobs(jobs->count() > 0 ? std::optional<int>(a->jobs) : std::nullopt, a->backend);
    checkDistinctOutputs({{"-o/--output", a->output}, {"--export-file", a->exportFile}});
    checkOutputFile(a->output, a->force, "-o/--output");
    checkOutputFile(a->exportFile, a->force, "--export-file");
    TuningTable table;
    if (!a->from.empty()) {
      table = loadTuningTable(a->from);
    } else {
      Tuner tuner(requestFrom(*a));
      const std::vector<int> ncclChannels = parseChannelList("--nccl-channels", a->ncclChannels);
      const auto start = std::chrono::steady_clock::now();
      table.provenance = tuner.provenance();
      if (!control.shard.whole()) table.provenance.shard = control.shard.toString();
      if (library != "nccl") table.sections.push_back(sweepCollbenchPasses(tuner, control, a->passes));
      if (library != "collbench") table.sections.push_back(NcclSweeper(tuner, ncclChannels).sweepNccl());
      if (tuner.request().localRank > 0) return;  // process backends: rank 0 writes
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
