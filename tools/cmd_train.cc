// `collbench train`: the MultiWorkerMirroredStrategy example (strategy/train_example.h) on N replicas, with a
// trace of every collective it issued (--trace) and its final weights (--weights-out).
//
// Threads mode (default): --workers simulated workers x --local-replicas replicas, all in this process.
// Processes mode: one process per worker, started by `collbench launch -n N -- collbench train --mode processes`
// (or Slurm, mpirun, or TF_CONFIG by hand); the cluster comes from the environment and the cross-worker collectives
// run on a process backend (gloo). Each process prints its own log; the chief writes --weights-out, and --trace is
// written by the chief, or by every worker when the path holds "{rank}".
#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/strategy/train_example.h"
#include "collbench/units.h"
#include "commands.h"
#include "world_options.h"
#ifdef COLLBENCH_HAVE_NCCL
#include "collbench/backends/nccl.h"
#endif

namespace collbench::cli {

namespace {

using namespace collbench::strategy;

/// Synthetic cluster addresses of threads-mode workers (never contacted: every worker is a thread group here).
constexpr int kThreadsModeBasePort = 23456;
/// The most replicas one process runs: each is a thread of this process every step (Strategy::runReplicas; -n 100000
/// failed to start its threads with EAGAIN), and 4096 is the host backend's bound on ranks (kMaxThreadRanks in
/// backend/host/threads_backend.cc). It also keeps threads mode's synthetic ports below 65536.
constexpr std::int64_t kMaxReplicasPerProcess = 4096;

struct TrainArgs {
  TrainConfig config;
  std::string mode = "threads";
  int workers = 1;
  std::optional<int> localReplicas;  ///< default 1
  int gpus = 0;
  std::string backend;
  std::string implementation = "auto";
  std::int64_t bytesPerPack = 0;
  std::optional<double> timeoutSeconds;  ///< unset: COLLBENCH_TIMEOUT_SECONDS, else 60 s
  std::string shardPolicy = "data";
  std::string hierarchy = "auto";
  bool simulate = false;
  std::string topology;
  std::string trace;
  std::string weightsOut;
  int logEvery = 10;
  bool force = false;
  int faultRank = -1;                ///< fault injection: this worker sends itself ...
  std::string faultSignal = "kill";  ///< ... SIGKILL (dies) or SIGSTOP (hangs) ...
  int faultStep = 0;                 ///< ... after logging this step
};

/// The enumerator's name as written in code ("PeerFailure"), next to toString()'s words ("peer failure").
const char* errcName(Errc code) {
  switch (code) {
    case Errc::InvalidArgument:
      return "InvalidArgument";
    case Errc::InvalidTopology:
      return "InvalidTopology";
    case Errc::InvalidSchedule:
      return "InvalidSchedule";
    case Errc::Timeout:
      return "Timeout";
    case Errc::PeerFailure:
      return "PeerFailure";
    case Errc::Unsupported:
      return "Unsupported";
    case Errc::BackendError:
      return "BackendError";
  }
  return "?";
}

std::shared_ptr<const ClusterResolver> threadsCluster(int workers) {
  if (workers == 1) return std::make_shared<SimpleClusterResolver>(SimpleClusterResolver::singleWorker());
  ClusterSpec spec;
  for (int w = 0; w < workers; ++w)
    spec.jobs["worker"].push_back(fmt::format("localhost:{}", kThreadsModeBasePort + w));
  return std::make_shared<SimpleClusterResolver>(spec, "worker", 0);
}

void writeWeights(const TrainResult& r, const TrainArgs& a, const MultiWorkerMirroredStrategy& s) {
  WeightsFile w;
  w.tool = std::string("collbench ") + COLLBENCH_VERSION;
  w.command = commandLine();
  w.replicasInSync = s.numReplicasInSync();
  w.steps = a.config.steps;
  w.finalLoss = r.log.empty() ? 0.0 : r.log.back().loss;
  w.names = r.names;
  w.weights = r.weights;
  std::ofstream out(a.weightsOut);
  if (!out) throw Error(Errc::InvalidArgument, fmt::format("cannot write --weights-out file '{}'", a.weightsOut));
  out << toJson(w);
}

/// --gpus: the GPUs of each worker become its replicas. Without a CUDA build or enough devices: Error{Unsupported}
/// (one line, exit 2).
void checkGpus(const TrainArgs& a, ExecutionMode mode) {
  if (a.gpus < 0) throw Error(Errc::InvalidArgument, fmt::format("--gpus must be >= 0, got {}", a.gpus));
  if (a.gpus == 0) return;
  if (a.localReplicas) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--gpus {} and --local-replicas {}: the GPUs are the local replicas; give one of them",
                            a.gpus, *a.localReplicas));
  }
  // Threads mode runs every worker's GPUs in this process.
  const int needed = mode == ExecutionMode::Threads ? a.gpus * a.workers : a.gpus;
#ifdef COLLBENCH_HAVE_NCCL
  const nccl::DeviceProbe& probe = nccl::probeDevices();
  if (probe.count == 0) throw Error(Errc::Unsupported, fmt::format("--gpus {}: {}", a.gpus, probe.reason));
  if (probe.count < needed) {
    throw Error(Errc::Unsupported, fmt::format("--gpus {}: {} GPU(s) needed in this process, {} CUDA device(s) visible",
                                               a.gpus, needed, probe.count));
  }
#else
  throw Error(Errc::Unsupported,
              fmt::format("--gpus {}: this collbench was built without CUDA (COLLBENCH_WITH_CUDA=OFF); {} GPU(s) "
                          "needed",
                          a.gpus, needed));
#endif
}

/// "12 GiB"; sizes beyond size_t (a refused request can ask for more) in scientific notation.
std::string bytesText(double bytes) {
  return bytes >= 1.8e19 ? fmt::format("{:.3g} B", bytes) : formatBytes(static_cast<std::size_t>(bytes));
}

/// The replicas this process hosts (threads mode: every worker's), refused above kMaxReplicasPerProcess before any
/// thread starts. Returns their number.
std::int64_t admitReplicas(const TrainArgs& a, ExecutionMode mode) {
  const std::int64_t local = a.gpus > 0 ? a.gpus : a.localReplicas.value_or(1);
  const bool threads = mode == ExecutionMode::Threads;
  const std::int64_t replicas = threads ? a.workers * local : local;
  if (replicas <= kMaxReplicasPerProcess) return replicas;
  const std::string localFlag =
      a.gpus > 0 ? fmt::format("--gpus {}", a.gpus) : fmt::format("-n/--local-replicas {}", local);
  const std::string request = !threads || a.workers == 1 ? localFlag
                              : local == 1               ? fmt::format("--workers {}", a.workers)
                                                         : fmt::format("--workers {} x {}", a.workers, localFlag);
  throw Error(Errc::InvalidArgument,
              fmt::format("{}: {} replicas in this process, more than the {} it runs (a thread each; the host "
                          "backend's bound on ranks)",
                          request, replicas, kMaxReplicasPerProcess));
}

/// Refuses a model and data larger than the memory available now (trainMemory's estimate), before allocating.
void admitMemory(const TrainConfig& c, std::int64_t replicas) {
  const TrainMemory need = trainMemory(c, static_cast<int>(replicas));
  const double available = availableMemoryBytes();
  if (need.total() <= available) return;
  throw Error(
      Errc::InvalidArgument,
      fmt::format("--features {} --hidden {} --classes {}{} -b/--global-batch {} on {} replica{}: training "
                  "needs about {} of memory ({} of examples, {} of weights and gradients, {} of "
                  "activations), more than the {} available",
                  c.features, c.hidden, c.classes, c.dataFiles.empty() ? fmt::format(" --examples {}", c.examples) : "",
                  c.globalBatch, replicas, replicas == 1 ? "" : "s", bytesText(need.total()), bytesText(need.data),
                  bytesText(need.model), bytesText(need.activations), bytesText(available)));
}

/// Simulated (or measured) seconds with enough digits for microsecond collectives: "0.000123 s".
std::string formatSeconds(double seconds) { return fmt::format("{:.6g} s", seconds); }

void runTrain(const TrainArgs& a) {
  a.config.validate();
  if (a.workers < 1) throw Error(Errc::InvalidArgument, fmt::format("--workers must be >= 1, got {}", a.workers));
  if (a.localReplicas && *a.localReplicas < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("--local-replicas must be >= 1, got {}", *a.localReplicas));
  }
  if (a.faultSignal != "kill" && a.faultSignal != "stop") {
    throw Error(Errc::InvalidArgument, fmt::format("--fault-signal \"{}\" is not one of kill, stop", a.faultSignal));
  }
  if (a.logEvery < 1) throw Error(Errc::InvalidArgument, fmt::format("--log-every must be >= 1, got {}", a.logEvery));
  TrainConfig config = a.config;
  config.shardPolicy = parseAutoShardPolicy(a.shardPolicy);

  CommunicationOptions comm;
  comm.implementation = parseCommunicationImplementation(a.implementation);
  comm.bytesPerPack = a.bytesPerPack;
  comm.timeoutSeconds = a.timeoutSeconds;
  comm.validate();

  StrategyOptions opts;
  opts.mode = parseExecutionMode(a.mode);
  checkGpus(a, opts.mode);
  // Requests larger than the machine, and bad data files, before any thread starts or anything is allocated.
  const std::int64_t replicasHere = admitReplicas(a, opts.mode);
  admitMemory(config, replicasHere);
  try {
    checkDataFiles(config);
  } catch (const Error& e) {
    throw Error(Errc::InvalidArgument, fmt::format("--data-files: {}", e.what()));
  }
  opts.localReplicas = a.gpus > 0 ? a.gpus : a.localReplicas.value_or(1);
  opts.gpuReplicas = a.gpus > 0;
  opts.backend = a.backend;
  opts.simulate = a.simulate;
  opts.topology = a.topology;
  if (a.hierarchy == "auto") {
    opts.hierarchy = HierarchyMode::Auto;
  } else if (a.hierarchy == "flat") {
    opts.hierarchy = HierarchyMode::Flat;
  } else if (a.hierarchy == "hierarchical") {
    opts.hierarchy = HierarchyMode::Hierarchical;
  } else {
    throw Error(Errc::InvalidArgument,
                fmt::format("--hierarchy \"{}\" is not one of auto, flat, hierarchical", a.hierarchy));
  }
  std::shared_ptr<const ClusterResolver> resolver;
  if (opts.mode == ExecutionMode::Processes) {
    if (a.workers != 1) {
      throw Error(Errc::InvalidArgument,
                  "--workers is for threads mode; in processes mode the cluster comes from the environment (collbench "
                  "launch, TF_CONFIG, Slurm or MPI)");
    }
    resolver = makeClusterResolverFromEnvironment();
    if (opts.backend.empty()) opts.backend = "gloo";
    if (oneRankPerProcess(opts.backend) && resolver->numWorkers() > 1) {
      opts.backendOptions = processWorldOptions();
      // An explicit --timeout bounds the collectives rather than COLLBENCH_TIMEOUT_SECONDS (which the backend's
      // "timeout" option would apply to them).
      if (a.timeoutSeconds) opts.backendOptions.erase("timeout");
    }
  } else {
    resolver = threadsCluster(a.workers);
  }

  const bool chief = resolver->isChief();
  const int rank = resolver->rank();
  const bool traceAll = a.trace.find("{rank}") != std::string::npos;
  std::string tracePath = a.trace;
  if (traceAll) tracePath.replace(tracePath.find("{rank}"), 6, std::to_string(rank));
  if (chief || traceAll) checkOutputFile(tracePath, a.force, "--trace");
  if (chief) checkOutputFile(a.weightsOut, a.force, "--weights-out");

  MultiWorkerMirroredStrategy strategy(comm, resolver, opts);
  const std::int64_t perReplica = config.globalBatch / strategy.numReplicasInSync();
  std::printf(
      "# collbench train: %s, %lld features, %lld classes, %lld examples, global batch %lld (%s%lld per "
      "replica)\n",
      config.hidden ? fmt::format("MLP with {} hidden units", config.hidden).c_str() : "softmax regression",
      static_cast<long long>(config.features), static_cast<long long>(config.classes),
      static_cast<long long>(config.examples), static_cast<long long>(config.globalBatch),
      config.globalBatch % strategy.numReplicasInSync() ? "about " : "", static_cast<long long>(perReplica));
  std::printf("# %d worker(s) x %d local replica(s) = %d replicas in sync; %s mode, %s all-reduce%s; worker %d%s\n",
              strategy.numWorkers(), strategy.localReplicas(), strategy.numReplicasInSync(), a.mode.c_str(),
              strategy.allReduceForm().c_str(), a.simulate ? " (simulated timing)" : "", rank, chief ? " (chief)" : "");
  std::printf("# %s; %s\n", strategy.communicationOptions().describe().c_str(),
              strategy.implementationChoice().reason.c_str());
  std::printf("#%7s %12s %10s\n", "step", "loss", "accuracy");
  std::fflush(stdout);
  int lastStep = -1;
  // A failure mid-training (a dead peer, a timeout) is reported with its error class first, so that launchers and
  // tests can tell "PeerFailure" from "Timeout" without parsing the backend's message; then main prints the message.
  const auto reportStop = [&](const Error& e) {
    std::fprintf(stderr, "collbench train: worker %d stopped after step %d with %s (Errc::%s)\n", rank, lastStep,
                 std::string(toString(e.code())).c_str(), errcName(e.code()));
    // The collectives recorded so far are the user's data too: write them before giving up.
    if (!tracePath.empty() && (chief || traceAll)) {
      try {
        strategy.writeTrace(tracePath, commandLine());
        std::fprintf(stderr,
                     "collbench train: worker %d wrote the trace of its %zu collectives before the failure to "
                     "%s\n",
                     rank, strategy.trace().events.size(), tracePath.c_str());
      } catch (const Error& w) {
        std::fprintf(stderr, "collbench train: worker %d could not write its trace: %s\n", rank, w.what());
      }
    }
    std::fflush(stderr);
  };
  TrainResult result;
  try {
    result = trainExample(strategy, config, [&](const TrainStepLog& l) {
      lastStep = l.step;
      if (l.step % a.logEvery == 0 || l.step + 1 == config.steps) {
        std::printf("%8d %12.6f %10.4f\n", l.step, l.loss, l.accuracy);
        std::fflush(stdout);
      }
      if (rank == a.faultRank && l.step == a.faultStep) {
        // kill: dies as `kill -9` would (no destructors, no goodbye; the kernel closes its sockets). stop: hangs as
        // `kill -STOP` would (its sockets stay open and silent), until the launcher kills it.
        const bool stop = a.faultSignal == "stop";
        std::fprintf(stderr, "collbench train: fault injection: worker %d %s itself after step %d\n", rank,
                     stop ? "stops" : "kills", l.step);
        std::fflush(stderr);
        std::fflush(stdout);
        std::raise(stop ? SIGSTOP : SIGKILL);
      }
    });
  } catch (const Error& e) {
    reportStop(e);
    throw;
  }
  const Trace trace = strategy.trace();
  if (!tracePath.empty() && (chief || traceAll)) strategy.writeTrace(tracePath, commandLine());
  if (!a.weightsOut.empty() && chief) writeWeights(result, a, strategy);
  double commSeconds = 0;
  for (const TraceEvent& e : trace.events) commSeconds += e.endSeconds - e.startSeconds;
  std::printf("# %d steps, final loss %.6f; %zu collectives, %s in collectives%s%s%s\n", config.steps,
              result.log.empty() ? 0.0 : result.log.back().loss, trace.events.size(),
              formatSeconds(commSeconds).c_str(), a.simulate ? " (simulated time)" : "",
              tracePath.empty() || !(chief || traceAll) ? "" : fmt::format("; trace {}", tracePath).c_str(),
              a.weightsOut.empty() || !chief ? "" : fmt::format("; weights {}", a.weightsOut).c_str());
  // What AUTO (or RING, NCCL) ran, per size.
  for (const std::string& line : summarizeAlgorithms(trace)) std::printf("# %s\n", line.c_str());
}

}  // namespace

void addTrainCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "train a small model with MultiWorkerMirroredStrategy on N replicas and trace its collectives");
  cmd->add_option("--mode", a->mode, "threads (every replica in this process) | processes (one per worker)")
      ->default_val("threads");
  cmd->add_option("--workers", a->workers, "threads mode: simulated workers")->default_val(1);
  cmd->add_option("-n,--local-replicas", a->localReplicas, "replicas per worker (CPU; default 1)");
  cmd->add_option("--gpus", a->gpus, "GPUs per worker as its replicas (AUTO then uses NCCL; needs CUDA devices)")
      ->default_val(0);
  cmd->add_option("--backend", a->backend, "backend (default host in threads mode, gloo in processes mode)");
  cmd->add_option("--steps", a->config.steps, "training steps")->default_val(a->config.steps);
  cmd->add_option("-b,--global-batch", a->config.globalBatch, "global batch size")->default_val(a->config.globalBatch);
  cmd->add_option("--examples", a->config.examples, "synthetic examples")->default_val(a->config.examples);
  cmd->add_option("--features", a->config.features, "input features")->default_val(a->config.features);
  cmd->add_option("--classes", a->config.classes, "classes")->default_val(a->config.classes);
  cmd->add_option("--hidden", a->config.hidden, "hidden units (0: softmax regression)")->default_val(a->config.hidden);
  cmd->add_option("--lr", a->config.learningRate, "SGD learning rate")->default_val(a->config.learningRate);
  cmd->add_option("--seed", a->config.seed, "data and initialisation seed")->default_val(a->config.seed);
  cmd->add_option("--implementation", a->implementation, "CommunicationOptions.implementation: auto | ring | nccl")
      ->default_val("auto");
  cmd->add_option("--bytes-per-pack", a->bytesPerPack, "CommunicationOptions.bytes_per_pack (0: one pack)")
      ->default_val(0);
  cmd->add_option("--timeout", a->timeoutSeconds,
                  "CommunicationOptions.timeout_seconds (default: COLLBENCH_TIMEOUT_SECONDS, else 60)");
  cmd->add_option("--shard-policy", a->shardPolicy, "AutoShardPolicy of the dataset: auto | file | data | off")
      ->default_val("data");
  cmd->add_option("--data-files", a->config.dataFiles,
                  "text files of examples instead of synthetic data: a line per example, --features numbers then "
                  "the class (FILE sharding splits the files across workers)");
  cmd->add_option("--hierarchy", a->hierarchy, "all-reduce: auto | flat | hierarchical")->default_val("auto");
  cmd->add_flag("--simulate", a->simulate, "time the collectives on the simulator (threads mode; needs --topology)");
  cmd->add_option("--topology", a->topology, "topology file or shipped name for --simulate");
  cmd->add_option("--trace", a->trace, "write the collective trace here (\"{rank}\" in the path: one per worker)");
  cmd->add_option("--weights-out", a->weightsOut, "write the final weights as JSON (chief)");
  cmd->add_option("--log-every", a->logEvery, "print the loss every N steps")->default_val(10);
  cmd->add_flag("--force", a->force, "overwrite existing --trace / --weights-out files");
  cmd->add_option("--fault-rank", a->faultRank, "worker that signals itself (failure-handling tests)")
      ->group("Fault injection");
  cmd->add_option("--fault-step", a->faultStep, "... after this step")->group("Fault injection");
  cmd->add_option("--fault-signal", a->faultSignal, "... with kill (SIGKILL: dies) or stop (SIGSTOP: hangs)")
      ->default_val("kill")
      ->group("Fault injection");
  cmd->callback([a, &exitCode] {
    runTrain(*a);
    exitCode = 0;
  });
}

}  // namespace collbench::cli
