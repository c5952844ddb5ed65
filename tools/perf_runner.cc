#include "perf_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/records.h"
#include "collbench/reference.h"
#include "collbench/run.h"
#include "collbench/schedule_file.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "collbench/validator.h"
#include "process_world.h"
#include "world_options.h"

namespace collbench::cli {
namespace {

std::string timeString(double us) {
  // nccl-tests: fewer decimals as times grow, so the column keeps its width.
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

bool hasRoot(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

/// One size of the sweep, planned before the header is printed.
struct PlannedRow {
  std::size_t bytes;  ///< the size column: max(input, output) bytes
  CollectiveSpec spec;
  Plan plan;
};

/// The header's algorithm: the forced name, or what auto chose: "ring (auto)" when every size got the same one,
/// else "auto (tree 8 B..64 KiB, ring 128 KiB..256 MiB)" (per-row choices and reasons are in the -J rows).
/// A forced algorithm the backend describes per call (Backend::describeCall, the sim backend's emulated NCCL choice:
/// "NCCL 2.28: NVLS/Simple, 16 channels (runner-up ...)") is followed by its configurations by size: "nccl (Ring/LL,
/// 1 channel 8 B..4 KiB; NVLS/Simple, 16 channels 8 KiB..16 GiB)".
std::string describeAlgorithms(const std::string& algo, const std::vector<PlannedRow>& plan) {
  const bool forced = algo != "auto";
  // What a row ran: auto's algorithm, or the head of the backend's description of the forced one.
  const auto label = [&](const Plan& p) { return forced ? describedConfiguration(p.choice) : p.choice.algorithm; };
  struct Run {
    std::string algorithm;
    std::size_t first, last;
  };
  std::vector<Run> runs;
  for (const PlannedRow& r : plan) {
    const std::string l = label(r.plan);
    if (runs.empty() || runs.back().algorithm != l) {
      runs.push_back({l, r.bytes, r.bytes});
    } else {
      runs.back().last = r.bytes;
    }
  }
  if (forced) {
    if (runs.empty() || (runs.size() == 1 && runs[0].algorithm.empty())) return algo;
    if (runs.size() == 1) return fmt::format("{} ({})", algo, runs[0].algorithm);
  }
  if (runs.empty()) return "auto";
  if (runs.size() == 1) return runs[0].algorithm + " (auto)";
  std::string s = forced ? algo + " (" : "auto (";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    s += fmt::format("{}{} {}..{}", i ? (forced ? "; " : ", ") : "", runs[i].algorithm, formatBytes(runs[i].first),
                     formatBytes(runs[i].last));
  }
  return s + ")";
}

/// A native algorithm (a peer library's own call) runs only on the backends registered with it; everything else is a
/// collbench schedule, which every backend runs. Also rejects an unknown backend or algorithm name.
void checkBackendRuns(const std::string& backend, Collective collective, const std::string& algo) {
  const std::vector<std::string> natives = backendNativeAlgorithms(backend);
  if (algo == "auto") return;
  const AlgorithmInfo& info = findAlgorithm(collective, algo);
  if (info.traits.needsSwitchReduction && backendCapabilities(backend).device == DeviceKind::Cpu) {
    throw Error(Errc::Unsupported, fmt::format("--algo {} needs a switch that reduces (NVLS/SHARP), which backend '{}' "
                                               "does not have; run it on --backend sim or nccl",
                                               algo, backend));
  }
  if (!info.native || std::find(natives.begin(), natives.end(), algo) != natives.end()) return;
  std::string how;
  for (const auto& [name, summary] : backendNames()) {
    const auto theirs = backendNativeAlgorithms(name);
    if (std::find(theirs.begin(), theirs.end(), algo) == theirs.end()) continue;
    how += fmt::format("{}{}", how.empty() ? "" : " or ",
                       oneRankPerProcess(name)
                           ? fmt::format("collbench launch -n N -- collbench perf --backend {} --algo {}", name, algo)
                           : fmt::format("collbench perf --backend {} --algo {}", name, algo));
  }
  throw Error(
      Errc::Unsupported,
      fmt::format("--algo {} is a peer library's own call ({}), which backend '{}' cannot run; {}", algo, info.summary,
                  backend, how.empty() ? "no backend built into this collbench runs it" : "run it as: " + how));
}

/// One "#  Rank r ... Pid p on host device d [backend] what" line.
struct RankLine {
  long long pid;
  std::string host;
  int device;
  std::string what;
};

/// Thread and GPU backends run every rank in this process; a process backend's ranks each have their own pid (gathered
/// with one all-reduce, which every process makes at the same point) and the host of their address.
std::vector<RankLine> describeRanks(Backend& backend, const BackendOptions& bopts, int localRank,
                                    double timeoutSeconds) {
  const int n = backend.nranks();
  const BackendCapabilities caps = backendCapabilities(backend.name());
  std::vector<RankLine> lines(static_cast<std::size_t>(n), RankLine{::getpid(), hostName(), 0, ""});
  if (localRank >= 0) {
    const std::vector<long long> pids = pidsOfRanks(backend, localRank, timeoutSeconds);
    const host::ProcessWorld world = host::ProcessWorld::fromOptions(bopts);
    for (int r = 0; r < n; ++r) {
      lines[static_cast<std::size_t>(r)] = {pids[static_cast<std::size_t>(r)], world.hostOf(r), r, "cpu process"};
    }
    return lines;
  }
  std::string what = "cpu thread";
  if (!backend.movesData()) {
    what = "simulated";
  } else if (caps.device == DeviceKind::Gpu) {
    // A GPU backend: the device model when a backend library could read it.
    const auto env = probeEnvironment();
    what = env.count("gpu") ? env.at("gpu") : "gpu";
  }
  for (int r = 0; r < n; ++r) {
    auto& l = lines[static_cast<std::size_t>(r)];
    l.what = what;
    l.device = caps.sharedDevice ? 0 : r;
  }
  return lines;
}

}  // namespace

std::vector<std::size_t> sizeSequence(const PerfConfig& c) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = c.minBytes; s <= c.maxBytes;) {
    sizes.push_back(s);
    if (c.stepFactor > 1) {
      const double grown = static_cast<double>(s) * c.stepFactor;
      if (!(grown < static_cast<double>(c.maxBytes) + 1) || static_cast<std::size_t>(grown) <= s) break;
      s = static_cast<std::size_t>(grown);
    } else {
      if (c.stepBytes == 0 || c.stepBytes > c.maxBytes - s) break;
      s += c.stepBytes;
    }
  }
  return sizes;
}

void checkFactorGrows(std::size_t minBytes, std::size_t maxBytes, double factor) {
  if (factor > 1 && minBytes < maxBytes && static_cast<double>(minBytes) * factor < static_cast<double>(minBytes) + 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("-f/--stepfactor {} does not grow -b/--minbytes {} (it rounds back to {} B); use a larger "
                            "factor or -b",
                            factor, minBytes, minBytes));
  }
}

std::vector<std::size_t> factorSizes(std::size_t minBytes, std::size_t maxBytes, double factor) {
  if (minBytes == 0 || minBytes > maxBytes) {
    throw Error(Errc::InvalidArgument, fmt::format("sizes must satisfy 0 < -b ({}) <= -e ({})", minBytes, maxBytes));
  }
  if (!(factor > 1) || !std::isfinite(factor)) {
    throw Error(Errc::InvalidArgument, fmt::format("-f/--stepfactor must be a finite number > 1, got {}", factor));
  }
  checkFactorGrows(minBytes, maxBytes, factor);
  PerfConfig c;
  c.minBytes = minBytes;
  c.maxBytes = maxBytes;
  c.stepFactor = factor;
  return sizeSequence(c);
}

MeasureOptions measureOptions(int iters, int warmup, int repeats, double timeoutSeconds) {
  if (iters < 1) throw Error(Errc::InvalidArgument, fmt::format("-n/--iters must be at least 1, got {}", iters));
  if (warmup < 0) throw Error(Errc::InvalidArgument, fmt::format("-w/--warmup_iters must be >= 0, got {}", warmup));
  if (repeats < 1) throw Error(Errc::InvalidArgument, fmt::format("--repeats must be at least 1, got {}", repeats));
  if (!(timeoutSeconds > 0) || !std::isfinite(timeoutSeconds)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("-T/--timeout must be a finite number of seconds > 0, got {}", timeoutSeconds));
  }
  return MeasureOptions{iters, warmup, repeats, timeoutSeconds};
}

void writePerfJson(const PerfConfig& c, PerfRun r) {
  r.collective = toString(c.collective);
  r.algorithm = c.algo;
  r.minBytes = c.minBytes;
  r.maxBytes = c.maxBytes;
  r.stepBytes = c.stepBytes;
  r.stepFactor = c.stepFactor;
  r.iters = c.iters;
  r.warmup = c.warmup;
  r.check = c.check;
  r.op = toString(parseReduceOp(c.op));
  r.datatype = toString(parseDType(c.datatype));
  r.root = c.root;
  r.average = c.average;
  r.blocking = c.blocking;
  r.channels = c.channels;
  r.chunkBytes = c.chunkBytes;
  r.commandLine = c.commandLine;
  r.environment = describeEnvironment();
  writeTextFile(c.outputFile, toJson(r).dump(2), "-J/--output_file");
}

namespace {

/// Where perf runs: the backend and its options, the world (from -g, or the launcher for process backends), and the
/// rank this process holds (-1: all of them).
struct PerfWorld {
  std::string backend;
  std::string topology;  ///< named in the header; the simulator's default when none is given
  BackendOptions options;
  int nranks = 1;
  int localRank = -1;
};

PerfWorld resolveWorld(const PerfConfig& c) {
  PerfWorld w;
  w.backend = c.backend.empty() ? "host" : c.backend;
  // Name what is simulated (header, JSON, selector) rather than leave the simulator's default implicit.
  w.topology = c.topology.empty() ? backendCapabilities(w.backend).defaultTopology : c.topology;
  if (!w.topology.empty()) w.options["topology"] = w.topology;
  if (!c.ncclCalibration.empty()) {
    if (backendCapabilities(w.backend).device != DeviceKind::Simulated) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--nccl-calibration {}: the NCCL model's calibration is for --backend sim, not '{}'",
                              printable(c.ncclCalibration), w.backend));
    }
    w.options["nccl_calibration"] = c.ncclCalibration;
  }
  if (!c.ncclVersion.empty()) {
    if (backendCapabilities(w.backend).device != DeviceKind::Simulated) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--nccl-version {}: the emulated NCCL release is for --backend sim, not '{}'",
                              printable(c.ncclVersion), w.backend));
    }
    if (ncclVersionCode(c.ncclVersion) == 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--nccl-version: expected MAJOR.MINOR.PATCH, got '{}'", printable(c.ncclVersion)));
    }
    w.options["nccl_version"] = c.ncclVersion;
  }
  w.nranks = c.ranks;
  // Process backends (gloo) run one rank per process: the world comes from the cluster resolver, each process
  // holds only its rank's buffers, and only rank 0 prints the table and writes -J.
  if (oneRankPerProcess(w.backend)) {
    if (!clusterEnvironmentPresent()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--backend {} runs one rank per process and found no cluster (no TF_CONFIG, Slurm or "
                              "mpirun environment); start the ranks with: collbench launch -n N -- collbench perf "
                              "--backend {} ...",
                              w.backend, w.backend));
    }
    w.options.merge(processWorldOptions(strategy::systemEnvironment(), c.timeoutSeconds));
    w.nranks = std::stoi(w.options.at("world"));
    if (c.ranksGiven && c.ranks != w.nranks) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("-g/--ngpus {} differs from the {} processes launched (--backend {} runs one rank per "
                              "process: drop -g, or launch {} processes)",
                              c.ranks, w.nranks, w.backend, c.ranks));
    }
    w.localRank = std::stoi(w.options.at("rank"));
  }
  admitRanks(w.backend, w.nranks, "-g/--ngpus");
  if (c.root < 0 || c.root >= w.nranks) {
    throw Error(Errc::InvalidArgument,
                fmt::format("-r/--root {} is not a rank of {} (0..{})", c.root, w.nranks, w.nranks - 1));
  }
  return w;
}

/// nccl-tests' header: the run, the devices (one line per rank), the column titles.
void printHeader(std::FILE* out, const PerfConfig& c, const PerfWorld& w, std::string_view backend,
                 const std::vector<PlannedRow>& plan, const std::vector<RankLine>& rankLines) {
  std::fprintf(out, "# collbench %s perf %s: backend %s, %d ranks%s%s, algorithm %s\n", COLLBENCH_VERSION,
               std::string(toString(c.collective)).c_str(), std::string(backend).c_str(), w.nranks,
               w.topology.empty() ? "" : ", topology ", w.topology.c_str(), describeAlgorithms(c.algo, plan).c_str());
  std::fprintf(out,
               "# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: 1 "
               "validation: %d graph: 0\n#\n# Using devices\n",
               w.nranks, c.minBytes, c.maxBytes,
               c.stepFactor > 1 ? fmt::format("{}(factor)", c.stepFactor).c_str()
                                : fmt::format("{}(bytes)", c.stepBytes).c_str(),
               c.warmup, c.iters, c.check);
  for (int r = 0; r < w.nranks; ++r) {
    const RankLine& l = rankLines[static_cast<std::size_t>(r)];
    std::fprintf(out, "#  Rank %2d Group  0 Pid %6lld on %10s device %2d [%s] %s\n", r, l.pid, l.host.c_str(), l.device,
                 std::string(backend).c_str(), l.what.c_str());
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "#%80s%40s\n", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/// Every row's choice, made before the header, which names them: the file's schedule (a size it cannot run is
/// refused here), or the runner's choice (on a backend that moves data, near-tied candidates are timed now, every
/// process alike: selector.h, kTrialSpread).
std::vector<PlannedRow> planRows(const PerfConfig& c, Runner& runner, const std::vector<CollectiveSpec>& specs,
                                 bool showProgress) {
  std::vector<PlannedRow> plan;
  for (const CollectiveSpec& spec : specs) {
    const std::size_t rowBytes = std::max(spec.inputBytes(), spec.outputBytes());
    if (showProgress) {
      std::fprintf(stderr, "\r\033[Kperf: trying near-tied algorithms at %s", formatBytes(rowBytes).c_str());
    }
    if (c.scheduleFile) {
      Plan fromFile{Choice{c.algo, "from --schedule " + c.scheduleFile->source}, AlgoParams{}};
      Schedule fileSchedule = instantiate(*c.scheduleFile, spec);
      if (c.protocol) fileSchedule.protocol = c.protocol;  // --proto overrides the file's
      fromFile.schedule = std::make_shared<const Schedule>(std::move(fileSchedule));
      plan.push_back(PlannedRow{rowBytes, spec, std::move(fromFile)});
      continue;
    }
    plan.push_back(
        PlannedRow{rowBytes, spec, runner.choose(spec, CallConfig{c.algo, c.chunkBytes, c.channels, c.protocol})});
  }
  if (showProgress) std::fprintf(stderr, "\r\033[K");
  return plan;
}

/// One row of the table: both halves measured, printed, and returned for -J.
PerfRow runRow(std::FILE* out, const PerfConfig& c, Runner& runner, const PlannedRow& row) {
  const CollectiveSpec& spec = row.spec;
  const double factor = busBandwidthFactor(c.collective, spec.nranks);
  PerfSample halves[2];
  for (int inPlace = 0; inPlace < 2; ++inPlace) {
    const Timing t = runner.measure(
        spec, row.plan, MeasureSpec{inPlace == 1, c.iters, c.warmup, c.blocking != 0, c.check != 0, c.average});
    PerfSample& h = halves[inPlace];
    h.timeUs = t.seconds * 1e6;
    h.algbwGBps = t.seconds > 0 ? static_cast<double>(row.bytes) / t.seconds / 1e9 : 0;
    h.busbwGBps = h.algbwGBps * factor;
    if (t.wrong >= 0) h.wrong = t.wrong;
  }
  const std::size_t es = spec.elementSize();
  const std::string type(toString(spec.dtype));
  const std::string redop = spec.reduces() ? std::string(toString(spec.op)) : "none";
  const int rootCol = hasRoot(c.collective) ? c.root : -1;
  std::fprintf(out, "  %10zu  %12zu  %8s  %6s  %6d", row.bytes, row.bytes / es, type.c_str(), redop.c_str(), rootCol);
  for (const PerfSample& h : halves) {
    const std::string wrong = h.wrong ? std::to_string(*h.wrong) : "N/A";
    std::fprintf(out, "  %s  %6.2f  %6.2f  %6s", timeString(h.timeUs).c_str(), h.algbwGBps, h.busbwGBps, wrong.c_str());
  }
  std::fprintf(out, "\n");
  std::fflush(out);
  return PerfRow{row.bytes,
                 row.bytes / es,
                 type,
                 redop,
                 rootCol,
                 row.plan.choice.algorithm,
                 row.plan.choice.reason,
                 row.plan.params.chunkBytes,
                 row.plan.params.channels,
                 halves[0],
                 halves[1]};
}

}  // namespace

int runPerf(const PerfConfig& c, std::FILE* out) {
  const DType dtype = parseDType(c.datatype);
  const ReduceOp op = parseReduceOp(c.op);
  // -J is checked before the sweep runs, so that a sweep never runs only to lose its results.
  checkOutputFile(c.outputFile, c.force, "-J/--output_file");
  if (c.algo == "mpi") return runMpiPerf(c, out);  // peer baseline: Open MPI's own driver under mpirun
  if (!c.scheduleFile) checkBackendRuns(c.backend.empty() ? "host" : c.backend, c.collective, c.algo);
  if (c.iters < 1) throw Error(Errc::InvalidArgument, fmt::format("-n/--iters must be >= 1, got {}", c.iters));
  const PerfWorld world = resolveWorld(c);
  const int n = world.nranks;
  std::optional<Topology> topo;
  if (!world.topology.empty()) topo = loadTopology(world.topology);
  if (topo && n > static_cast<int>(topo->ranks.size())) {
    throw Error(Errc::InvalidArgument,
                fmt::format("-g/--ngpus {}: topology '{}' has {} ranks", n, world.topology, topo->ranks.size()));
  }
  if (topo && c.algo != "auto" && findAlgorithm(c.collective, c.algo).traits.needsSwitchReduction) {
    // Refused before the table starts: a one-element-per-rank schedule names the op and the switch that cannot.
    validateOnTopology(buildSchedule({c.collective, n, static_cast<std::size_t>(n), dtype, op, c.root}, c.algo,
                                     AlgoParams{0, 1, rankHosts(*topo, n)}),
                       *topo);
  }
  checkSpec(CollectiveSpec{c.collective, n, 0, dtype, op, c.root}, AlgoParams{c.chunkBytes, c.channels, {}});
  std::vector<CollectiveSpec> specs;
  for (std::size_t bytes : sizeSequence(c)) {
    specs.push_back(CollectiveSpec{c.collective, n, countForBytes(c.collective, n, bytes, dtype), dtype, op, c.root});
  }
  // Admission: the buffers this process would hold at the largest size, before any backend starts.
  if (!specs.empty()) checkSpec(specs.back(), AlgoParams{c.chunkBytes, c.channels, {}});
  if (!specs.empty() && backendCapabilities(world.backend).movesData) {
    // A schedule file's scratch (in chunks: of the largest size's chunks) is held as well.
    double scratch = 0;
    if (c.scheduleFile) {
      const ScheduleFile& f = *c.scheduleFile;
      const double unit =
          f.chunks == 0 ? 1 : static_cast<double>(specs.back().inputBytes()) / static_cast<double>(f.chunks);
      for (std::size_t r = 0; r < f.schedule.ranks.size(); ++r) {
        if (world.localRank < 0 || static_cast<int>(r) == world.localRank)
          scratch += static_cast<double>(f.schedule.ranks[r].scratchBytes) * unit;
      }
    }
    admitBuffers(specs.back(), world.localRank, fmt::format("-e/--maxbytes {}", formatBytes(c.maxBytes)), scratch);
  }
  // --algo auto: the selector, with the table of --tuning, COLLBENCH_TUNING_FILE or the topology's shipped one.
  const FoundTuningTable found =
      c.algo == "auto" ? findTuningTable(c.tuningFile, topo ? &*topo : nullptr, world.backend) : FoundTuningTable{};

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(world.localRank > 0 ? std::fopen("/dev/null", "w") : nullptr,
                                                        [](std::FILE* f) { return f ? std::fclose(f) : 0; });
  if (quiet) out = quiet.get();
  auto backend = makeBackend(world.backend, n, world.options);
  Runner runner(*backend, RunnerOptions{topo ? &*topo : nullptr, found.table ? &*found.table : nullptr, found.path,
                                        world.localRank, c.timeoutSeconds, std::max(c.warmup, 1)});
  const std::vector<RankLine> rankLines = describeRanks(*backend, world.options, world.localRank, c.timeoutSeconds);
  const bool tty = world.localRank <= 0 && isatty(STDERR_FILENO) != 0 && c.algo == "auto" && backend->movesData();
  const std::vector<PlannedRow> plan = planRows(c, runner, specs, tty);
  printHeader(out, c, world, backend->name(), plan, rankLines);

  PerfRun record;
  record.backend = backend->name();
  record.ranks = n;
  record.topology = world.topology;
  double busSum = 0;
  for (const PlannedRow& row : plan) {
    record.rows.push_back(runRow(out, c, runner, row));
    for (const PerfSample* h : {&record.rows.back().outOfPlace, &record.rows.back().inPlace}) {
      busSum += h->busbwGBps;
      if (h->wrong && *h->wrong > 0) record.wrongTotal += *h->wrong;
    }
  }
  record.avgBusbwGBps = plan.empty() ? 0 : busSum / static_cast<double>(2 * plan.size());
  std::fprintf(out, "# Out of bounds values : %lld %s\n", record.wrongTotal, record.wrongTotal == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n#\n", record.avgBusbwGBps);

  if (!c.outputFile.empty() && world.localRank <= 0) writePerfJson(c, record);
  if (const char* minBw = std::getenv("NCCL_TESTS_MIN_BW")) {
    const double want = std::atof(minBw);
    if (record.avgBusbwGBps < want) {
      std::fprintf(stderr, "collbench: average bus bandwidth %g GB/s is below NCCL_TESTS_MIN_BW=%s\n",
                   record.avgBusbwGBps, minBw);
      return 1;
    }
  }
  return record.wrongTotal > 0 ? 1 : 0;
}

}  // namespace collbench::cli
