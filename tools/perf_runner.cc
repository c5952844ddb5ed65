#include "perf_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "collbench/error.h"
#include "collbench/reference.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "environment.h"
#include "world_options.h"

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
    case 0: return t.front();
    case 2: return *std::min_element(t.begin(), t.end());
    case 3: return *std::max_element(t.begin(), t.end());
    default: return r.seconds;
  }
}

bool hasRoot(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

}  // namespace

std::vector<std::size_t> sizeSequence(const PerfConfig& c) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = c.minBytes; s <= c.maxBytes;) {
    sizes.push_back(s);
    const std::size_t next = c.stepFactor > 1 ? static_cast<std::size_t>(static_cast<double>(s) * c.stepFactor)
                                              : s + c.stepBytes;
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

int runPerf(const PerfConfig& c, std::FILE* out) {
  const DType dtype = parseDType(c.datatype);
  const ReduceOp op = parseReduceOp(c.op);
  if (!c.outputFile.empty() && std::filesystem::exists(c.outputFile) && !c.force) {
    throw Error(Errc::InvalidArgument,
                fmt::format("output file '{}' exists; pass --force to overwrite it", c.outputFile));
  }
  if (c.algo == "mpi") return runMpiPerf(c, out);  // peer baseline: Open MPI's own driver under mpirun
  BackendOptions bopts;
  if (!c.topology.empty()) bopts["topology"] = c.topology;
  // Process backends (gloo) run one rank per process: the world comes from the cluster resolver, each process
  // holds only its rank's buffers, and only rank 0 prints the table and writes -J.
  const bool processMode = isProcessBackend(c.backend);
  if (processMode) bopts.merge(processWorldOptions());
  const int localRank = processMode ? std::stoi(bopts.at("rank")) : -1;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(localRank > 0 ? std::fopen("/dev/null", "w") : nullptr,
                                                        [](std::FILE* f) { return f ? std::fclose(f) : 0; });
  if (quiet) out = quiet.get();
  auto backend = makeBackend(c.backend, c.ranks, bopts);
  const int n = backend->nranks();
  AlgoParams params{c.chunkBytes, c.channels, {}};
  std::optional<Topology> topo;
  if (!c.topology.empty()) topo = loadTopology(c.topology);
  if (topo) params.rankHost = rankHosts(*topo, n);
  // --algo auto: the selector, with the table of --tuning, COLLBENCH_TUNING_FILE or the topology's shipped one.
  const FoundTuningTable found = c.algo == "auto" ? findTuningTable(c.tuningFile, topo ? &*topo : nullptr, c.backend)
                                                  : FoundTuningTable{};
  const Selector selector(SelectorOptions{topo ? &*topo : nullptr, found.table ? &*found.table : nullptr, c.backend,
                                          "auto", found.path});
  CollectiveSpec probe{c.collective, n, 0, dtype, op, c.root};
  checkSpec(probe, params);
  if (c.algo != "auto") findAlgorithm(c.collective, c.algo);  // reject unknown names before running anything

  const bool reduces = probe.reduces();
  std::fprintf(out, "# collbench %s perf %s: backend %s, %d ranks%s%s, algorithm %s\n", COLLBENCH_VERSION,
               std::string(toString(c.collective)).c_str(), std::string(backend->name()).c_str(), n,
               c.topology.empty() ? "" : ", topology ", c.topology.c_str(), c.algo.c_str());
  std::fprintf(out,
               "# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: 1 "
               "validation: %d graph: 0\n#\n# Using devices\n",
               n, c.minBytes, c.maxBytes,
               c.stepFactor > 1 ? fmt::format("{}(factor)", c.stepFactor).c_str()
                                : fmt::format("{}(bytes)", c.stepBytes).c_str(),
               c.warmup, c.iters, c.check);
  const std::string host = hostName();
  for (int r = 0; r < n; ++r) {
    std::fprintf(out, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s\n", r, static_cast<int>(getpid()),
                 host.c_str(), r, std::string(backend->name()).c_str(),
                 backend->movesData() ? "cpu thread" : "simulated");
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "#%80s%40s\n", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");

  nlohmann::json rows = nlohmann::json::array();
  double busSum = 0;
  int busRows = 0;
  long long wrongTotal = 0;
  const double factor = busBandwidthFactor(c.collective, n);
  const std::size_t es = dtypeSize(dtype);
  for (std::size_t bytes : sizeSequence(c)) {
    const std::size_t count = countForSize(c.collective, bytes, es, n);
    CollectiveSpec spec{c.collective, n, count, dtype, op, c.root};
    const Choice choice = c.algo == "auto" ? selector.choose(spec) : Choice{c.algo, "forced by --algo"};
    AlgoParams rowParams = params;  // the selector's chunk and channels unless given on the command line
    if (c.algo == "auto" && c.chunkBytes == 0 && c.channels == 1) {
      rowParams.chunkBytes = choice.chunkBytes;
      rowParams.channels = choice.channels;
    }
    const Schedule schedule = buildSchedule(spec, choice.algorithm, rowParams);
    const std::size_t rowBytes = std::max(spec.inputBytes(), spec.outputBytes());
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
          h.wrong = sumOverProcesses(*backend, static_cast<long long>(bufs.countWrong()), processMode,
                                     c.timeoutSeconds);
          wrongTotal += h.wrong;
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
    nlohmann::json row = {{"size", rowBytes},          {"count", rowBytes / es},
                          {"type", type},              {"redop", redop},
                          {"root", rootCol},           {"algorithm", choice.algorithm},
                          {"algorithm_reason", choice.reason}, {"chunk_bytes", rowParams.chunkBytes},
                          {"channels", rowParams.channels}};
    const char* names[2] = {"out_of_place", "in_place"};
    for (int k = 0; k < 2; ++k) {
      row[names[k]] = {{"time_us", halves[k].seconds * 1e6},
                       {"algbw_GBps", halves[k].algbw},
                       {"busbw_GBps", halves[k].busbw},
                       {"wrong", halves[k].wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(halves[k].wrong)}};
    }
    rows.push_back(row);
  }
  const double avgBus = busRows ? busSum / busRows : 0;
  std::fprintf(out, "# Out of bounds values : %lld %s\n", wrongTotal, wrongTotal == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n#\n", avgBus);

  if (!c.outputFile.empty() && localRank <= 0) {
    nlohmann::json doc = {
        {"format", "collbench-perf"},
        {"version", 1},
        {"collective", toString(c.collective)},
        {"config",
         {{"backend", backend->name()}, {"ranks", n}, {"topology", c.topology}, {"algorithm", c.algo},
          {"minbytes", c.minBytes}, {"maxbytes", c.maxBytes}, {"stepbytes", c.stepBytes},
          {"stepfactor", c.stepFactor}, {"iters", c.iters}, {"warmup_iters", c.warmup}, {"check", c.check},
          {"op", toString(op)}, {"datatype", toString(dtype)}, {"root", c.root}, {"average", c.average},
          {"blocking", c.blocking}, {"channels", c.channels}, {"chunk_bytes", c.chunkBytes}}},
        {"command_line", c.commandLine},
        {"environment", describeEnvironment()},
        {"results", rows},
        {"avg_busbw_GBps", avgBus},
        {"wrong_total", wrongTotal},
    };
    std::ofstream f(c.outputFile);
    if (!f) throw Error(Errc::InvalidArgument, fmt::format("cannot write output file '{}'", c.outputFile));
    f << doc.dump(2) << '\n';
  }
  if (const char* minBw = std::getenv("NCCL_TESTS_MIN_BW")) {
    const double want = std::atof(minBw);
    if (avgBus < want) {
      std::fprintf(stderr, "collbench: average bus bandwidth %g GB/s is below NCCL_TESTS_MIN_BW=%s\n", avgBus, minBw);
      return 1;
    }
  }
  return wrongTotal > 0 ? 1 : 0;
}

}  // namespace collbench::cli
