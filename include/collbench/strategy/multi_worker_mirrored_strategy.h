#pragma once
/// tf.distribute.MultiWorkerMirroredStrategy (TF 2.4+ API, with the deprecated names of older releases) on
/// collbench's collectives. Rules it follows: /work/shared/reference/mwms-semantics.md.
///
/// Layout. The cluster resolver gives the workers (num_workers, this task's rank); each worker has
/// StrategyOptions::localReplicas replicas (its GPUs, or --local-replicas on CPU), so numReplicasInSync() =
/// workers x local replicas and replica id = rank x local replicas + local index.
///
/// Execution modes (StrategyOptions::mode):
///   Threads    every replica of every worker runs in this process (workers beyond one are simulated: their data,
///              variables and collectives are real, their "machines" are threads). run() calls fn once per replica,
///              each on its own thread; the collectives run on a Backend with one rank per replica ("host" by
///              default), or hierarchically (below).
///   Processes  one process = one worker (`collbench launch` starts them with TF_CONFIG): this process runs its own
///              local replicas' fn; the cross-worker stage runs on a process backend ("gloo" by default) with one
///              rank per worker, created with BackendOptions rank, world, addresses, tasks (TF rank order: chief,
///              then workers) and master (the resolver's leader) unless StrategyOptions::backendOptions has them.
/// Backends are found by name through makeBackend(): the composition root (the CLI's main, a test's setup) must
/// register them first (collbench::host::registerHostBackends()).
///
/// Collectives. All-reduce is flat (one collective over all replicas) or hierarchical (local reduce to each
/// worker's first replica, an all-reduce across workers, a local broadcast back), chosen by
/// StrategyOptions::hierarchy. Auto is hierarchical in processes mode (shared memory inside a worker, the network
/// between workers, and a process backend with one rank per worker) and flat in threads mode, where the simulated
/// workers share one process's memory and a single collective over all replicas is faster than three stages
/// (Hierarchical forces the staged form, e.g. to trace it). The schedule of each collective: RING -> "ring"; AUTO ->
/// the selector per size (see ImplementationChoice::reason; summarizeAlgorithms() says what it chose). Lists of
/// values (gradients) are packed by bytes_per_pack (packValues) and unpacked. MEAN is a sum divided by
/// numReplicasInSync(). Initial values of mirrored variables are broadcast from replica 0 (the chief's) when there
/// are several workers.
///
/// Simulation (StrategyOptions::simulate): a what-if run in threads mode whose collectives are timed by the "sim"
/// backend on StrategyOptions::topology (its first numReplicasInSync() ranks; a warning says so when it has more);
/// the values are reduced in this process, so training still computes the right numbers, and the trace carries
/// simulated times. The topology's hosts group the replicas: hierarchy Hierarchical runs the topology's
/// "hierarchical" algorithm (within each host, then across hosts; an error at construction when its hosts hold
/// unequal numbers of the ranks), Flat any other algorithm, and Auto (with implementation AUTO) whichever the cost
/// model on the topology estimates faster, per size: the chosen algorithm is in each trace event.
///
/// Input. In processes mode every worker's distributed iterator agrees on the end of the input: next() sums each
/// replica's has-data flag over the workers (a small all-reduce recorded in the trace with the step it feeds), so
/// that workers out of data get empty batches while others still have some and all stop together, as in threads
/// mode and TF.
///
/// Trace: every collective is recorded (trace(), writeTrace(); format in collbench/trace.h).
///
/// Failures. A replica that throws makes the others stop with Error{PeerFailure}; CommunicationOptions
/// timeout_seconds (default 60 s, or COLLBENCH_TIMEOUT_SECONDS) bounds waits (Error{Timeout}). In processes mode a
/// dead peer surfaces as the backend's Error{PeerFailure}, a stalled one as its Error{Timeout} naming the peer.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collbench/backend.h"
#include "collbench/strategy/cluster_resolver.h"
#include "collbench/strategy/communication_options.h"
#include "collbench/strategy/strategy.h"
#include "collbench/trace.h"

namespace collbench::strategy {

enum class ExecutionMode { Threads, Processes };
/// "threads", "processes"; parse is case-insensitive.
std::string_view toString(ExecutionMode m);
ExecutionMode parseExecutionMode(std::string_view text);

enum class HierarchyMode { Auto, Flat, Hierarchical };

/// collbench's settings for a strategy (TF has no equivalent: devices, backends, simulation).
struct StrategyOptions {
  /// Replicas per worker (TF: the worker's GPUs; CPU: --local-replicas). >= 1.
  int localReplicas = 1;
  ExecutionMode mode = ExecutionMode::Threads;
  /// Backend name for makeBackend(); "" = "host" (threads), "gloo" (processes), "sim" (simulate).
  std::string backend;
  /// Passed to makeBackend() (the strategy adds "topology" when simulating, and rank, world, addresses, tasks and
  /// master in processes mode, unless given here).
  BackendOptions backendOptions;
  /// Time collectives on the simulator (threads mode only); `topology` names the topology (file or shipped name).
  bool simulate = false;
  std::string topology;
  HierarchyMode hierarchy = HierarchyMode::Auto;
  /// Whether the replicas are GPUs (what CommunicationImplementation AUTO/NCCL resolve on; with an nccl backend in
  /// threads mode the collectives run on it). The Tensors of this API live in host memory: the nccl backend copies
  /// them to its devices for each collective.
  bool gpuReplicas = false;
};

/// TF: tf.distribute.InputReplicationMode.
enum class InputReplicationMode { PerWorker, EachReplica };  ///< TF PER_WORKER, PER_REPLICA

namespace detail {
class CollectiveEngine;
}

class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  /// TF: MultiWorkerMirroredStrategy(cluster_resolver=None, communication_options=None). A null resolver is
  /// TFConfigClusterResolver::fromEnvironment() (TF's default). Throws Error{InvalidArgument} for invalid options
  /// (the message names the field), a ps task (no rank), processes mode on a threads-only backend, and
  /// simulate in processes mode; Error{Unsupported} for NCCL on GPU replicas without an nccl backend.
  explicit MultiWorkerMirroredStrategy(CommunicationOptions communicationOptions = {},
                                       std::shared_ptr<const ClusterResolver> clusterResolver = nullptr,
                                       StrategyOptions options = {});
  ~MultiWorkerMirroredStrategy() override;

  std::string_view name() const override { return "MultiWorkerMirroredStrategy"; }

  /// TF: cluster_resolver.
  const ClusterResolver& clusterResolver() const { return *resolver_; }
  /// TF: extended._task_type / task_id / is_chief (the resolver's).
  const std::string& taskType() const { return resolver_->taskType(); }
  int taskId() const { return resolver_->taskId(); }
  bool isChief() const { return resolver_->isChief(); }
  /// TF: extended._communication_options.
  const CommunicationOptions& communicationOptions() const { return communication_; }
  /// What CommunicationImplementation resolved to, and why.
  const ImplementationChoice& implementationChoice() const { return choice_; }
  const StrategyOptions& options() const { return options_; }
  /// Whether every all-reduce runs hierarchically (local, then across workers; or the topology's hierarchical
  /// algorithm when simulating).
  bool hierarchical() const;
  /// "flat", "hierarchical", or "flat or hierarchical per size (cost model on <topology>)".
  std::string allReduceForm() const;

  /// The collectives issued so far.
  Trace trace() const;
  /// Writes trace() with `command` as its provenance (Error{InvalidArgument} if the file cannot be written).
  void writeTrace(const std::string& path, const std::string& command = "") const;

  // -------------------------------------------------------------------------------------------------------------
  // Deprecated TF 1.x / early 2.x names: thin aliases that log a one-time deprecation warning.

  /// TF: experimental_run(fn, input_iterator) -> run(fn, input_iterator.get_next()). Returns the per-replica
  /// results, nullopt at the end of the input (TF: OutOfRangeError); for a void fn, whether a batch was run.
  template <typename Fn>
  auto experimentalRun(Fn&& fn, DistributedIterator& inputIterator);
  /// TF: make_dataset_iterator(dataset) -> iter(experimental_distribute_dataset(dataset)).
  DistributedIterator makeDatasetIterator(const Dataset& dataset);
  /// TF: make_input_fn_iterator(input_fn, replication_mode=PER_WORKER) ->
  /// iter(distribute_datasets_from_function(input_fn)). Other modes: Error{InvalidArgument} (TF: "Input
  /// replication mode not supported").
  DistributedIterator makeInputFnIterator(const std::function<Dataset(const InputContext&)>& inputFn,
                                          InputReplicationMode replicationMode = InputReplicationMode::PerWorker);
  /// TF: update_config_proto(config_proto): the session config (ConfigProto as JSON, proto field names) with the
  /// collective settings filled: graph_options.rewrite_options.scoped_allocator_optimization "ON" with
  /// scoped_allocator_opts.enable_op ["CollectiveReduce"], experimental.collective_nccl true for NCCL, and in
  /// multi-worker mode experimental.collective_group_leader ("/job:chief/replica:0/task:0", else worker 0's;
  /// "" for an evaluator) and device_filters ["/job:<type>/task:<id>"]. Other fields are kept. Not a JSON object:
  /// Error{InvalidArgument}.
  std::string updateConfigProto(std::string_view configJson = "{}") const;

 protected:
  void allReduceHosted(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op,
                       const CommunicationOptions& perCall) override;
  void broadcastHosted(const std::vector<Tensor*>& perHosted) override;
  bool mirrorsVariables() const override { return true; }
  std::optional<double> timeoutSeconds() const override { return communication_.timeoutSeconds; }
  void sumOverWorkerProcesses(std::vector<std::int64_t>& counts) const override;

 private:
  struct ResolvedTag {};
  MultiWorkerMirroredStrategy(CommunicationOptions communication, std::shared_ptr<const ClusterResolver> resolver,
                              StrategyOptions options, ResolvedTag);

  CommunicationOptions communication_;
  std::shared_ptr<const ClusterResolver> resolver_;
  StrategyOptions options_;
  ImplementationChoice choice_;
  std::unique_ptr<detail::CollectiveEngine> engine_;
};

/// TF < 2.4: MultiWorkerMirroredStrategy(communication=CollectiveCommunication.X): the options that the legacy
/// enum maps onto ({implementation = communication}); logs the one-time deprecation warning.
CommunicationOptions legacyCommunicationOptions(CollectiveCommunication communication);

/// What the collectives of a trace ran, one line per (collective, group): "all_reduce over 4 replicas: 272 B
/// recursive_doubling (x50), 40 KiB ring (x50)" (sizes in increasing order; within a size, algorithms by use). How
/// AUTO says what it chose per size (`collbench train` prints it at the end).
std::vector<std::string> summarizeAlgorithms(const Trace& trace);

/// Logs the one-time deprecation warning of a deprecated name: "<name> (from MultiWorkerMirroredStrategy) is
/// deprecated and will be removed in a future version. Instructions for updating: use <replacement>".
void warnDeprecated(const std::string& name, const std::string& replacement);

template <typename Fn>
auto MultiWorkerMirroredStrategy::experimentalRun(Fn&& fn, DistributedIterator& inputIterator) {
  warnDeprecated("experimental_run", "run(fn, args) with an iterator of experimental_distribute_dataset");
  using Result = decltype(run(fn, *inputIterator.next()));
  std::optional<PerReplicaValues<Element>> batch = inputIterator.next();
  if constexpr (std::is_void_v<Result>) {
    if (!batch) return false;
    run(std::forward<Fn>(fn), *batch);
    return true;
  } else {
    if (!batch) return std::optional<Result>();
    return std::optional<Result>(run(std::forward<Fn>(fn), *batch));
  }
}

}  // namespace collbench::strategy
