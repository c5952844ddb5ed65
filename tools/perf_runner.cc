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
#include "collbench/reference.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "config_timer.h"
#include "environment.h"
#include "process_world.h"
#include "world_options.h"
#ifdef COLLBENCH_HAVE_SIM
#include "sim_backend.h"
#endif

namespace collbench::cli {
namespace {

/// nccl-tests rounds per-rank counts of reduce-scatter and all-gather down to multiples of 16 bytes.
constexpr std::size_t kBlockAlignBytes = 16;

struct Half {
  double seconds = 0;
  double algbw = 0, busbw = 0;
  long long wrong = -1;  // -1: not checked
};

std::string timeString(double us) {
  // nccl-tests: fewer decimals as times grow, so the column keeps its width.
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

/// nccl-tests -a: which rank's time a row reports.
double combineRanks(const RunResult& r, int average) {
  if (r.rankSeconds.empty()) return r.seconds;
  const auto& t = r.rankSeconds;
  switch (average) {
    case 0:
      return t.front();
    case 2:
      return *std::min_element(t.begin(), t.end());
    case 3:
      return *std::max_element(t.begin(), t.end());
    default:
      return r.seconds;
  }
}

bool hasRoot(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

/// One size of the sweep, planned before the header is printed.
struct PlannedRow {
  std::size_t bytes;  ///< the size column: max(input, output) bytes
  CollectiveSpec spec;
  Choice choice;
  AlgoParams params;
};

/// The header's algorithm: the forced name, or what auto chose: "ring (auto)" when every size got the same one,
/// else "auto (tree 8 B..64 KiB, ring 128 KiB..256 MiB)" (per-row choices and reasons are in the -J rows).
std::string describeAlgorithms(const std::string& algo, const std::vector<PlannedRow>& plan) {
  if (algo != "auto") return algo;
  struct Run {
    std::string algorithm;
    std::size_t first, last;
  };
  std::vector<Run> runs;
  for (const PlannedRow& r : plan) {
    if (runs.empty() || runs.back().algorithm != r.choice.algorithm) {
      runs.push_back({r.choice.algorithm, r.bytes, r.bytes});
    } else {
      runs.back().last = r.bytes;
    }
  }
  if (runs.empty()) return "auto";
  if (runs.size() == 1) return runs[0].algorithm + " (auto)";
  std::string s = "auto (";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    s += fmt::format("{}{} {}..{}", i ? ", " : "", runs[i].algorithm, formatBytes(runs[i].first),
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
  if (!info.native || std::find(natives.begin(), natives.end(), algo) != natives.end()) return;
  std::string how;
  for (const auto& [name, summary] : backendNames()) {
    const auto theirs = backendNativeAlgorithms(name);
    if (std::find(theirs.begin(), theirs.end(), algo) == theirs.end()) continue;
    how += fmt::format("{}{}", how.empty() ? "" : " or ",
                       isProcessBackend(name)
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
  const std::string name(backend.name());
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
  } else if (name != "host") {
    // A GPU backend: the device model when a backend library could read it.
    const auto env = probeEnvironment();
    what = env.count("gpu") ? env.at("gpu") : "gpu";
  }
  for (int r = 0; r < n; ++r) {
    auto& l = lines[static_cast<std::size_t>(r)];
    l.what = what;
    l.device = name == "cuda-1gpu" ? 0 : r;  // cuda-1gpu: every rank on one device
  }
  return lines;
}

}  // namespace

std::vector<std::size_t> sizeSequence(const PerfConfig& c) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = c.minBytes; s <= c.maxBytes;) {
    sizes.push_back(s);
    const std::size_t next =
        c.stepFactor > 1 ? static_cast<std::size_t>(static_cast<double>(s) * c.stepFactor) : s + c.stepBytes;
    if (next <= s) break;  // a 0-byte start with a factor, or overflow
    s = next;
  }
  return sizes;
}

std::size_t countForSize(Collective c, std::size_t bytes, std::size_t elemSize, int n) {
  const std::size_t count = bytes / elemSize;
  if (c == Collective::ReduceScatter || c == Collective::AllGather) {
    const std::size_t align = std::max<std::size_t>(1, kBlockAlignBytes / elemSize);
    return (count / (static_cast<std::size_t>(n) * align)) * align;
  }
  return count;
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

int runPerf(const PerfConfig& c, std::FILE* out) {
  const DType dtype = parseDType(c.datatype);
  const ReduceOp op = parseReduceOp(c.op);
  // -J is checked before the sweep runs, so that a sweep never runs only to lose its results.
  checkOutputFile(c.outputFile, c.force, "-J/--output_file");
  if (c.algo == "mpi") return runMpiPerf(c, out);  // peer baseline: Open MPI's own driver under mpirun
  const std::string backendName = c.backend.empty() ? "host" : c.backend;
  checkBackendRuns(backendName, c.collective, c.algo);
  std::string topology = c.topology;
#ifdef COLLBENCH_HAVE_SIM
  // Name what is simulated (header, JSON, selector) rather than leave the simulator's default implicit.
  if (topology.empty() && backendName == "sim") topology = sim::kDefaultTopology;
#endif
  BackendOptions bopts;
  if (!topology.empty()) bopts["topology"] = topology;
  // Process backends (gloo) run one rank per process: the world comes from the cluster resolver, each process
  // holds only its rank's buffers, and only rank 0 prints the table and writes -J.
  const bool processMode = isProcessBackend(backendName);
  int n = c.ranks;
  if (processMode) {
    if (!clusterEnvironmentPresent()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--backend {} runs one rank per process and found no cluster (no TF_CONFIG, Slurm or "
                              "mpirun environment); start the ranks with: collbench launch -n N -- collbench perf "
                              "--backend {} ...",
                              backendName, backendName));
    }
    bopts.merge(processWorldOptions(strategy::systemEnvironment(), c.timeoutSeconds));
    n = std::stoi(bopts.at("world"));
    if (c.ranksGiven && c.ranks != n) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("-g/--ngpus {} differs from the {} processes launched (--backend {} runs one rank per "
                              "process: drop -g, or launch {} processes)",
                              c.ranks, n, backendName, c.ranks));
    }
  }
  const int localRank = processMode ? std::stoi(bopts.at("rank")) : -1;
  if (c.root < 0 || c.root >= n) {
    throw Error(Errc::InvalidArgument, fmt::format("-r/--root {} is not a rank of {} (0..{})", c.root, n, n - 1));
  }
  AlgoParams params{c.chunkBytes, c.channels, {}};
  std::optional<Topology> topo;
  if (!topology.empty()) topo = loadTopology(topology);
  if (topo) params.rankHost = rankHosts(*topo, n);
  CollectiveSpec probe{c.collective, n, 0, dtype, op, c.root};
  checkSpec(probe, params);
  // --algo auto: the selector, with the table of --tuning, COLLBENCH_TUNING_FILE or the topology's shipped one.
  // Every row's choice is made before the header, which names them.
  const FoundTuningTable found =
      c.algo == "auto" ? findTuningTable(c.tuningFile, topo ? &*topo : nullptr, backendName) : FoundTuningTable{};
  const Selector selector(
      SelectorOptions{topo ? &*topo : nullptr, found.table ? &*found.table : nullptr, backendName, "auto", found.path});
  const std::size_t es = dtypeSize(dtype);
  std::vector<PlannedRow> plan;
  for (std::size_t bytes : sizeSequence(c)) {
    const CollectiveSpec spec{c.collective, n, countForSize(c.collective, bytes, es, n), dtype, op, c.root};
    PlannedRow row{std::max(spec.inputBytes(), spec.outputBytes()), spec, {}, params};
    row.choice = c.algo == "auto" ? selector.choose(row.spec) : Choice{c.algo, "forced by --algo"};
    plan.push_back(std::move(row));
  }
  // The selector's chunk and channels unless given on the command line (then every candidate runs with those).
  const bool autoConfig = c.algo == "auto" && c.chunkBytes == 0 && c.channels == 1;
  auto useChoice = [&](PlannedRow& row) {
    if (!autoConfig) return;
    row.params.chunkBytes = row.choice.chunkBytes;
    row.params.channels = row.choice.channels;
  };
  for (PlannedRow& row : plan) useChoice(row);

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(localRank > 0 ? std::fopen("/dev/null", "w") : nullptr,
                                                        [](std::FILE* f) { return f ? std::fclose(f) : 0; });
  if (quiet) out = quiet.get();
  auto backend = makeBackend(backendName, n, bopts);
  n = backend->nranks();
  const std::vector<RankLine> rankLines = describeRanks(*backend, bopts, localRank, c.timeoutSeconds);
  if (c.algo == "auto" && backend->movesData()) {
    // Near-tied candidates are timed here before the table (selector.h, kTrialSpread), every process alike.
    ConfigTimer timer(*backend, MeasureOptions{1, std::max(c.warmup, 1), kTrialRounds, c.timeoutSeconds},
                      processMode ? localRank : -1);
    const bool tty = localRank <= 0 && isatty(STDERR_FILENO) != 0;
    for (PlannedRow& row : plan) {
      if (tty) std::fprintf(stderr, "\r\033[Kperf: trying near-tied algorithms at %s", formatBytes(row.bytes).c_str());
      Choice asked = row.choice;
      if (!autoConfig) {
        asked.chunkBytes = c.chunkBytes;
        asked.channels = c.channels;
        for (Alternative& alt : asked.ranking) {
          alt.chunkBytes = c.chunkBytes;
          alt.channels = c.channels;
        }
      }
      row.choice = timer.trial(row.spec, asked, row.params);
      useChoice(row);
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
  }

  const bool reduces = probe.reduces();
  std::fprintf(out, "# collbench %s perf %s: backend %s, %d ranks%s%s, algorithm %s\n", COLLBENCH_VERSION,
               std::string(toString(c.collective)).c_str(), std::string(backend->name()).c_str(), n,
               topology.empty() ? "" : ", topology ", topology.c_str(), describeAlgorithms(c.algo, plan).c_str());
  std::fprintf(out,
               "# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: 1 "
               "validation: %d graph: 0\n#\n# Using devices\n",
               n, c.minBytes, c.maxBytes,
               c.stepFactor > 1 ? fmt::format("{}(factor)", c.stepFactor).c_str()
                                : fmt::format("{}(bytes)", c.stepBytes).c_str(),
               c.warmup, c.iters, c.check);
  for (int r = 0; r < n; ++r) {
    const RankLine& l = rankLines[static_cast<std::size_t>(r)];
    std::fprintf(out, "#  Rank %2d Group  0 Pid %6lld on %10s device %2d [%s] %s\n", r, l.pid, l.host.c_str(), l.device,
                 std::string(backend->name()).c_str(), l.what.c_str());
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "#%80s%40s\n", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");

  PerfRun record;
  record.backend = backend->name();
  record.ranks = n;
  record.topology = topology;
  double busSum = 0;
  int busRows = 0;
  const double factor = busBandwidthFactor(c.collective, n);
  for (const PlannedRow& planned : plan) {
    const CollectiveSpec& spec = planned.spec;
    const Choice& choice = planned.choice;
    const Schedule schedule = buildSchedule(spec, choice.algorithm, planned.params);
    const std::size_t rowBytes = planned.bytes;
    Half halves[2];
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      Half& h = halves[inPlace];
      RunOptions ro;
      ro.timeoutSeconds = c.timeoutSeconds;
      if (backend->movesData()) {
        PerfBuffers bufs(spec, inPlace == 1, localRank);
        bufs.fill();
        if (c.blocking) {
          backend->run(schedule, bufs.views(), RunOptions{0, c.warmup, c.timeoutSeconds});
          double total = 0;
          for (int i = 0; i < c.iters; ++i) {
            total += combineRanks(backend->run(schedule, bufs.views(), RunOptions{1, 0, c.timeoutSeconds}), c.average);
          }
          h.seconds = c.iters ? total / c.iters : 0;
        } else {
          ro.iterations = c.iters;
          ro.warmup = c.warmup;
          h.seconds = combineRanks(backend->run(schedule, bufs.views(), ro), c.average);
        }
        if (c.check) {
          bufs.fill();
          backend->run(schedule, bufs.views(), RunOptions{1, 0, c.timeoutSeconds});
          h.wrong =
              sumOverProcesses(*backend, static_cast<long long>(bufs.countWrong()), processMode, c.timeoutSeconds);
          record.wrongTotal += h.wrong;
        }
      } else {
        Buffers none(static_cast<std::size_t>(n));
        ro.iterations = c.iters;
        ro.warmup = c.warmup;
        h.seconds = combineRanks(backend->run(schedule, none, ro), c.average);
      }
      h.algbw = h.seconds > 0 ? static_cast<double>(rowBytes) / h.seconds / 1e9 : 0;
      h.busbw = h.algbw * factor;
    }
    const std::string type(toString(dtype));
    const std::string redop = reduces ? std::string(toString(op)) : "none";
    const int rootCol = hasRoot(c.collective) ? c.root : -1;
    std::fprintf(out, "  %10zu  %12zu  %8s  %6s  %6d", rowBytes, rowBytes / es, type.c_str(), redop.c_str(), rootCol);
    for (const Half& h : halves) {
      const std::string wrong = h.wrong < 0 ? "N/A" : std::to_string(h.wrong);
      std::fprintf(out, "  %s  %6.2f  %6.2f  %6s", timeString(h.seconds * 1e6).c_str(), h.algbw, h.busbw,
                   wrong.c_str());
    }
    std::fprintf(out, "\n");
    std::fflush(out);
    for (const Half& h : halves) busSum += h.busbw;
    busRows += 2;
    const auto sample = [](const Half& h) {
      return PerfSample{h.seconds * 1e6, h.algbw, h.busbw,
                        h.wrong < 0 ? std::nullopt : std::optional<long long>(h.wrong)};
    };
    record.rows.push_back({rowBytes, rowBytes / es, type, redop, rootCol, choice.algorithm, choice.reason,
                           planned.params.chunkBytes, planned.params.channels, sample(halves[0]), sample(halves[1])});
  }
  record.avgBusbwGBps = busRows ? busSum / busRows : 0;
  std::fprintf(out, "# Out of bounds values : %lld %s\n", record.wrongTotal, record.wrongTotal == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n#\n", record.avgBusbwGBps);

  if (!c.outputFile.empty() && localRank <= 0) writePerfJson(c, record);
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
