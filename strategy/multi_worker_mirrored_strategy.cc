#include "collbench/strategy/multi_worker_mirrored_strategy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/units.h"
#include "collective_engine.h"

namespace collbench::strategy {

namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(Errc::InvalidArgument, message); }

/// TF's default resolver when none is given.
std::shared_ptr<const ClusterResolver> orDefaultResolver(std::shared_ptr<const ClusterResolver> resolver) {
  if (resolver) return resolver;
  return std::make_shared<TFConfigClusterResolver>(TFConfigClusterResolver::fromEnvironment());
}

/// The registered backend that runs NCCL's collectives with one rank per GPU ("" when none is linked in): a GPU
/// backend whose ranks each have their own device and that runs the native algorithm "nccl".
std::string ncclBackendName() {
  for (const auto& [name, summary] : backendNames()) {
    const BackendCapabilities caps = backendCapabilities(name);
    const auto& natives = caps.nativeAlgorithms;
    if (caps.device == DeviceKind::Gpu && !caps.sharedDevice &&
        std::find(natives.begin(), natives.end(), kNcclNativeAlgorithm) != natives.end()) {
      return name;
    }
  }
  return "";
}

}  // namespace

std::string_view toString(ExecutionMode m) { return m == ExecutionMode::Threads ? "threads" : "processes"; }

ExecutionMode parseExecutionMode(std::string_view text) {
  std::string key(text);
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  if (key == "threads") return ExecutionMode::Threads;
  if (key == "processes") return ExecutionMode::Processes;
  fail(fmt::format("execution mode \"{}\" is not one of threads, processes", text));
}

std::vector<std::string> summarizeAlgorithms(const Trace& trace) {
  // (collective, group, ranks) -> bytes -> algorithm -> calls
  using Key = std::tuple<int, std::string, int>;
  std::map<Key, std::map<std::size_t, std::map<std::string, int>>> uses;
  for (const TraceEvent& e : trace.events) ++uses[{static_cast<int>(e.kind), e.group, e.nranks}][e.bytes][e.algorithm];
  std::vector<std::string> lines;
  for (const auto& [key, bySize] : uses) {
    const auto& [kind, group, nranks] = key;
    std::string line = fmt::format("{} over {} {}{}:", toString(static_cast<Collective>(kind)), nranks,
                                   group == kTraceGroupLocal ? "local replicas" : group,
                                   group == kTraceGroupLocal ? " of each worker" : "");
    const char* sep = " ";
    for (const auto& [bytes, byAlgorithm] : bySize) {
      std::vector<std::pair<std::string, int>> algorithms(byAlgorithm.begin(), byAlgorithm.end());
      std::stable_sort(algorithms.begin(), algorithms.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
      for (const auto& [algorithm, calls] : algorithms) {
        line += fmt::format("{}{} {} (x{})", sep, formatBytes(bytes), algorithm, calls);
        sep = ", ";
      }
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

void warnDeprecated(const std::string& name, const std::string& replacement) {
  detail::warnOnce("deprecated:" + name,
                   fmt::format("{} (from MultiWorkerMirroredStrategy) is deprecated and will be removed in a future "
                               "version. Instructions for updating: use {}",
                               name, replacement));
}

CommunicationOptions legacyCommunicationOptions(CollectiveCommunication communication) {
  warnDeprecated("MultiWorkerMirroredStrategy(communication=CollectiveCommunication)",
                 "communication_options=CommunicationOptions(implementation=CommunicationImplementation)");
  CommunicationOptions options;
  options.implementation = communication;
  return options;
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CommunicationOptions communicationOptions,
                                                         std::shared_ptr<const ClusterResolver> clusterResolver,
                                                         StrategyOptions options)
    : MultiWorkerMirroredStrategy(communicationOptions, orDefaultResolver(std::move(clusterResolver)),
                                  std::move(options), ResolvedTag{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CommunicationOptions communication,
                                                         std::shared_ptr<const ClusterResolver> resolver,
                                                         StrategyOptions options, ResolvedTag)
    : Strategy(resolver->numWorkers(), std::max(1, options.localReplicas), resolver->rank(),
               [&] {
                 std::vector<int> hosted;
                 if (options.mode == ExecutionMode::Processes) {
                   hosted.push_back(resolver->rank());
                 } else {
                   for (int w = 0; w < resolver->numWorkers(); ++w) hosted.push_back(w);
                 }
                 return hosted;
               }()),
      communication_(communication),
      resolver_(std::move(resolver)),
      options_(std::move(options)) {
  communication_.validate();
  if (!communication_.timeoutSeconds) communication_.timeoutSeconds = defaultTimeoutSeconds();
  if (options_.localReplicas < 1) {
    fail(fmt::format("StrategyOptions.local_replicas must be at least 1, got {}", options_.localReplicas));
  }
  const bool processes = options_.mode == ExecutionMode::Processes;
  if (options_.simulate && processes) {
    fail("StrategyOptions.simulate runs every replica in one process: use ExecutionMode threads");
  }
  if (options_.simulate && options_.topology.empty() && !options_.backendOptions.count("topology")) {
    fail("StrategyOptions.simulate needs a topology (a topology file or shipped name)");
  }
  // NCCL runs GPU replicas of one process (threads mode); processes mode's cross-worker stage is a process backend.
  const std::string ncclBackend = processes ? "" : ncclBackendName();
  const bool ncclAvailable = !ncclBackend.empty();
  choice_ = resolveImplementation(communication_.implementation, options_.gpuReplicas, ncclAvailable);
  spdlog::debug("MultiWorkerMirroredStrategy: {} worker(s) x {} local replica(s) = {} replicas in sync; {}",
                numWorkers(), localReplicas(), numReplicasInSync(), choice_.reason);

  detail::EngineConfig cfg;
  cfg.numWorkers = numWorkers();
  cfg.localReplicas = localReplicas();
  cfg.workerRank = workerRank();
  cfg.mode = options_.mode;
  cfg.hostedWorkers = hostedWorkers();
  cfg.simulate = options_.simulate;
  cfg.hierarchy = options_.hierarchy;
  cfg.defaults = communication_;
  cfg.choice = choice_;
  cfg.gpuReplicas = options_.gpuReplicas;
  cfg.ncclAvailable = ncclAvailable;
  cfg.backendOptions = options_.backendOptions;
  if (!options_.backend.empty()) {
    cfg.backend = options_.backend;
  } else if (options_.simulate) {
    cfg.backend = "sim";
  } else if (options_.gpuReplicas && ncclAvailable) {
    cfg.backend = ncclBackend;  // GPU replicas' collectives run on the GPUs, RING's schedules included
  } else {
    cfg.backend = processes ? "gloo" : "host";
  }
  if (options_.simulate) {
    cfg.backendOptions.emplace("topology", options_.topology);
    cfg.topologyName = cfg.backendOptions.at("topology");
    cfg.topology = loadTopology(cfg.topologyName);
    const int ranks = static_cast<int>(cfg.topology->ranks.size());
    if (ranks < numReplicasInSync()) {
      fail(fmt::format("StrategyOptions.simulate: {} replicas in sync but topology '{}' has only {} ranks",
                       numReplicasInSync(), cfg.topologyName, ranks));
    }
    if (ranks > numReplicasInSync()) {
      warn(
          fmt::format("simulate: {} replicas in sync use ranks 0..{} of topology '{}', which has {} ranks: the "
                      "simulated times are for {} of its GPUs",
                      numReplicasInSync(), numReplicasInSync() - 1, cfg.topologyName, ranks, numReplicasInSync()));
    }
  } else {
    cfg.topologyName = std::string(toString(options_.mode));
  }
  if (processes) {
    if (options_.hierarchy == HierarchyMode::Flat) {
      fail(
          "ExecutionMode processes needs hierarchical all-reduce (one backend rank per worker): hierarchy flat is "
          "for threads mode");
    }
    // A CPU backend with every rank in one process cannot span the workers' processes.
    const std::optional<BackendCapabilities> caps = findBackendCapabilities(cfg.backend);
    if (caps && caps->device == DeviceKind::Cpu && caps->ranksPerProcess == RanksPerProcess::All) {
      fail(
          fmt::format("ExecutionMode processes needs a process backend such as gloo; '{}' runs every rank as a "
                      "thread of one process (use ExecutionMode threads)",
                      cfg.backend));
    }
    // The process backend's world (keys of rendezvous/process_world.h), unless the caller gave them.
    cfg.backendOptions.emplace("rank", std::to_string(workerRank()));
    cfg.backendOptions.emplace("world", std::to_string(numWorkers()));
    if (numWorkers() > 1) {
      const ClusterSpec& spec = resolver_->clusterSpec();
      std::string addresses, tasks;
      for (std::string_view job : {ClusterSpec::kChief, ClusterSpec::kWorker}) {  // TF's rank order
        for (int i = 0; i < spec.numTasks(job); ++i) {
          addresses += (addresses.empty() ? "" : ",") + spec.taskAddress(job, i);
          tasks += fmt::format("{}{}[{}]", tasks.empty() ? "" : ",", job, i);
        }
      }
      cfg.backendOptions.emplace("addresses", addresses);
      cfg.backendOptions.emplace("tasks", tasks);
      cfg.backendOptions.emplace("master", resolver_->leaderAddress());
      if (cfg.backendOptions.at("master").empty()) {
        fail(fmt::format("ExecutionMode processes: the cluster resolver ({}) names no leader address",
                         resolver_->source()));
      }
    }
  }
  engine_ = std::make_unique<detail::CollectiveEngine>(std::move(cfg));
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

bool MultiWorkerMirroredStrategy::hierarchical() const { return engine_->hierarchical(); }

std::string MultiWorkerMirroredStrategy::allReduceForm() const { return engine_->allReduceForm(); }

void MultiWorkerMirroredStrategy::sumOverWorkerProcesses(std::vector<std::int64_t>& counts) const {
  // The step whose input these counts describe: the next run().
  engine_->sumOverWorkers(counts, currentStep() + 1);
}

Trace MultiWorkerMirroredStrategy::trace() const { return engine_->trace(); }

void MultiWorkerMirroredStrategy::writeTrace(const std::string& path, const std::string& command) const {
  Trace t = trace();
  t.command = command;
  collbench::writeTrace(t, path);
}

void MultiWorkerMirroredStrategy::allReduceHosted(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op,
                                                  const CommunicationOptions& perCall) {
  engine_->allReduce(perHosted, op, perCall, currentStep());
}

void MultiWorkerMirroredStrategy::broadcastHosted(const std::vector<Tensor*>& perHosted) {
  engine_->broadcast(perHosted, currentStep());
}

DistributedIterator MultiWorkerMirroredStrategy::makeDatasetIterator(const Dataset& dataset) {
  warnDeprecated("make_dataset_iterator", "iter(experimental_distribute_dataset(dataset))");
  return experimentalDistributeDataset(dataset).iterator();
}

DistributedIterator MultiWorkerMirroredStrategy::makeInputFnIterator(
    const std::function<Dataset(const InputContext&)>& inputFn, InputReplicationMode replicationMode) {
  warnDeprecated("make_input_fn_iterator", "iter(distribute_datasets_from_function(dataset_fn))");
  if (replicationMode != InputReplicationMode::PerWorker) {
    fail("make_input_fn_iterator: Input replication mode not supported: PER_REPLICA (only PER_WORKER)");
  }
  return distributeDatasetsFromFunction(inputFn).iterator();
}

std::string MultiWorkerMirroredStrategy::updateConfigProto(std::string_view configJson) const {
  warnDeprecated("update_config_proto", "the strategy's own settings (TF 2 configures collectives itself)");
  nlohmann::json config = parseJsonDocument(configJson, "update_config_proto: the config");
  if (!config.is_object())
    fail(fmt::format("update_config_proto: the config must be a JSON object, got {}", config.type_name()));
  auto& rewrite = config["graph_options"]["rewrite_options"];
  // TF: the scoped allocator turns many small all-reduces into fewer large ones, for CollectiveReduce only.
  rewrite["scoped_allocator_optimization"] = "ON";
  rewrite["scoped_allocator_opts"]["enable_op"] = nlohmann::json::array({"CollectiveReduce"});
  if (communication_.implementation == CommunicationImplementation::Nccl)
    config["experimental"]["collective_nccl"] = true;
  const ClusterSpec& spec = resolver_->clusterSpec();
  if (spec.empty()) return config.dump(2);
  // TF multi_worker_util.collective_leader.
  std::string leader;
  if (resolver_->taskType() != ClusterSpec::kEvaluator) {
    leader = spec.hasJob(ClusterSpec::kChief) ? "/job:chief/replica:0/task:0" : "/job:worker/replica:0/task:0";
  }
  config["experimental"]["collective_group_leader"] = leader;
  config["device_filters"] = nlohmann::json::array({fmt::format("/job:{}/task:{}", taskType(), taskId())});
  return config.dump(2);
}

}  // namespace collbench::strategy
