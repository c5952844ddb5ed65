#pragma once
/// tf.distribute's strategy vocabulary in C++: Strategy (the base of MultiWorkerMirroredStrategy and of the default
/// no-op strategy), scope(), run(), replica and cross-replica contexts, per-replica values, (mirrored) variables and
/// distributed datasets. Method names are camelCase per collbench style; each gives its TF name.
///
/// Contexts (as in TF):
///   - Outside any scope: getStrategy() is the default strategy (one replica, no communication),
///     getReplicaContext() its replica context, inCrossReplicaContext() false; createVariable() makes a regular
///     Variable.
///   - Inside `auto s = strategy.scope();`: getStrategy() is `strategy`, the thread is in cross-replica context
///     (getReplicaContext() is nullptr), createVariable() makes a MirroredVariable (one copy per replica, initial
///     values broadcast from the chief so that all workers start equal).
///   - Inside a function given to strategy.run(fn, args...): replica context; getReplicaContext() gives
///     replicaIdInSyncGroup(), numReplicasInSync() and allReduce().
///
/// Call-order contract (as for every collective library): every replica must issue the same collectives
/// (ReplicaContext::allReduce, replica-context assigns of aggregated mirrored variables) in the same order with the
/// same structure (number of values, dtypes, shapes, op and options). Correct:
/// ```cpp
///   strategy.run([&](const Element& batch) {
///     auto grads = computeGradients(batch);                       // any per-replica work
///     grads = getReplicaContext()->allReduce(ReduceOp::Sum, grads);  // every replica, same list structure
///   }, batch);
/// ```
/// Wrong (replica 0 skips the collective; the others would wait forever in a real cluster):
/// ```cpp
///   strategy.run([&] {
///     ReplicaContext* ctx = getReplicaContext();
///     if (ctx->replicaIdInSyncGroup() != 0) ctx->allReduce(ReduceOp::Sum, x);
///   });
/// ```
/// collbench detects the wrong cases it can see in one process and throws Error{InvalidArgument} naming the
/// replicas: a replica returning while others wait in a collective, or mismatched structures. Across processes
/// a mismatch is undefined behaviour (hang or garbage), as in TF; CommunicationOptions.timeout_seconds bounds it.
#include <atomic>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "collbench/strategy/communication_options.h"
#include "collbench/strategy/dataset.h"
#include "collbench/strategy/tensor.h"

namespace collbench::strategy {

class Strategy;
class ReplicaContext;
class DistributedIterator;

/// TF: tf.distribute.ReduceOp {SUM, MEAN}. (Distinct from collbench::ReduceOp, the collectives' element op.)
enum class ReduceOp { Sum, Mean };
/// "SUM", "MEAN".
std::string_view toString(ReduceOp op);
/// Case-insensitive "sum" | "mean"; else Error{InvalidArgument}.
ReduceOp parseDistributeReduceOp(std::string_view text);

/// TF: tf.distribute.experimental.ValueContext, the argument of experimentalDistributeValuesFromFunction's fn.
struct ValueContext {
  int replicaIdInSyncGroup = 0;  ///< TF replica_id_in_sync_group
  int numReplicasInSync = 1;     ///< TF num_replicas_in_sync
};

/// TF: PerReplica (a DistributedValues): one value per replica this process hosts. In threads mode a process hosts
/// every replica of every (simulated) worker; in processes mode only its own worker's. Index = hosted index.
template <typename T>
class PerReplicaValues {
 public:
  PerReplicaValues(std::vector<T> values, std::vector<int> replicaIds)
      : values_(std::move(values)), replicaIds_(std::move(replicaIds)) {}
  std::size_t size() const { return values_.size(); }
  const T& operator[](std::size_t hosted) const { return values_.at(hosted); }
  T& operator[](std::size_t hosted) { return values_.at(hosted); }
  /// TF: PerReplica.values (all hosted values; see Strategy::experimentalLocalResults for this worker's).
  const std::vector<T>& values() const { return values_; }
  /// Replica id in sync group of each hosted value.
  const std::vector<int>& replicaIds() const { return replicaIds_; }

 private:
  std::vector<T> values_;
  std::vector<int> replicaIds_;
};
/// TF: PerReplica of tensors.
using PerReplica = PerReplicaValues<Tensor>;

/// TF: tf.VariableAggregation: how replica-context updates of a mirrored variable are combined.
enum class VariableAggregation { None, Sum, Mean, OnlyFirstReplica };

/// TF: the arguments of tf.Variable(...) that matter here.
struct VariableOptions {
  std::string name;
  VariableAggregation aggregation = VariableAggregation::None;
};

namespace detail {
struct VariableState;
}

/// TF: tf.Variable, and MirroredVariable when created inside a MultiWorkerMirroredStrategy scope. A Variable is a
/// handle: copies share the variable (so its methods are const, like a shared_ptr's). A mirrored variable keeps
/// one copy per hosted replica and must not outlive its strategy (using it afterwards throws).
///
/// Updates (assign, assignAdd, assignSub), as TF:
///   - regular variable: applied to its one value (thread-safe);
///   - mirrored, cross-replica context: applied to every copy;
///   - mirrored, replica context: aggregation None is an error (TF: "You must specify an aggregation method to
///     update a MirroredVariable in Replica Context"); Sum and Mean all-reduce the argument across replicas
///     and apply the result to every copy; OnlyFirstReplica broadcasts replica 0's argument and applies it. These
///     are collectives: the call-order contract applies.
class Variable {
 public:
  const std::string& name() const;
  bool isMirrored() const;
  VariableAggregation aggregation() const;
  DType dtype() const;
  const Shape& shape() const;
  /// Copies held: 1 for a regular variable, the hosted replica count for a mirrored one.
  int numCopies() const;
  /// Copy `hosted` (TF: MirroredVariable.values[i]).
  const Tensor& copy(int hosted) const;
  /// TF: read_value(). Replica context: this replica's copy. Cross-replica context: the primary copy (this
  /// worker's first replica), as TF.
  Tensor value() const;
  /// The copy this replica owns, for in-place updates by an optimizer (TF: the per-replica update inside
  /// strategy.extended.update). Updating it bypasses aggregation: every replica must apply the same update, which
  /// holds when it is computed from all-reduced gradients. Regular variables: the value (not synchronised). A
  /// mirrored variable in cross-replica context throws Error{InvalidArgument}.
  Tensor& local() const;
  /// TF: assign / assign_add / assign_sub. `value` must match dtype and shape (error names the variable).
  void assign(const Tensor& value) const;
  void assignAdd(const Tensor& delta) const;
  void assignSub(const Tensor& delta) const;

  explicit Variable(std::shared_ptr<detail::VariableState> state) : state_(std::move(state)) {}

 private:
  enum class Update { Assign, Add, Sub };
  void update(const Tensor& value, Update how) const;
  std::shared_ptr<detail::VariableState> state_;
};

/// TF: tf.Variable(initial_value, ...) under the current strategy: a MirroredVariable inside a
/// MultiWorkerMirroredStrategy scope (cross-replica context), else a regular variable. Creating variables inside
/// run() (replica context) of a multi-replica strategy is Error{InvalidArgument}.
Variable createVariable(const Tensor& initialValue, VariableOptions options = {});
/// As above with an initializer run once per worker hosted here (argument: the worker's rank), like TF's initial
/// value functions run on every worker; mirrored variables then take the chief's (rank 0's) value on every worker.
Variable createVariable(const std::function<Tensor(int workerRank)>& initializer, VariableOptions options = {});

/// TF: the context manager strategy.scope(): while alive, getStrategy() is its strategy and the thread is in
/// cross-replica context. Scopes nest (same strategy); entering a different strategy's scope inside one is
/// Error{InvalidArgument} (TF: "Mixing different tf.distribute.Strategy objects"). Destroy in reverse order of
/// creation, before the strategy.
class StrategyScope {
 public:
  StrategyScope(StrategyScope&& other) noexcept : strategy_(std::exchange(other.strategy_, nullptr)) {}
  StrategyScope& operator=(StrategyScope&&) = delete;
  StrategyScope(const StrategyScope&) = delete;
  ~StrategyScope();

 private:
  friend class Strategy;
  explicit StrategyScope(Strategy* s) : strategy_(s) {}
  Strategy* strategy_;
};

/// TF: tf.distribute.DistributedIterator. Yields one element per hosted replica per step.
class DistributedIterator {
 public:
  /// TF: get_next_as_optional: the next per-replica batch, nullopt at the end of the input.
  std::optional<PerReplicaValues<Element>> next();
  /// TF: get_next: as next() but throws Error{InvalidArgument} "end of input" (TF: OutOfRangeError) at the end.
  PerReplicaValues<Element> getNext();
  /// TF: element_spec (per replica).
  const ElementSpec& elementSpec() const;

  struct Impl;
  explicit DistributedIterator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

/// TF: tf.distribute.DistributedDataset. Iterate with iterator() or a range-for:
/// `for (const PerReplicaValues<Element>& batch : dist) strategy.run(step, batch);`
class DistributedDataset {
 public:
  /// TF: iter(dist_dataset). Each iterator starts from the beginning.
  DistributedIterator iterator() const;
  /// TF: element_spec, per replica (the per-replica batch dimension; unknown where pieces vary).
  const ElementSpec& elementSpec() const;

  class Iterator {
   public:
    const PerReplicaValues<Element>& operator*() const { return *current_; }
    Iterator& operator++() {
      current_ = it_.next();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    friend class DistributedDataset;
    explicit Iterator(DistributedIterator it) : it_(std::move(it)), current_(it_.next()) {}
    DistributedIterator it_;
    std::optional<PerReplicaValues<Element>> current_;
  };
  Iterator begin() const { return Iterator(iterator()); }
  std::default_sentinel_t end() const { return {}; }

  struct Impl;
  explicit DistributedDataset(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

namespace detail {
class Rendezvous;
struct ThreadContext;
/// unwrapArg: run()'s per-replica view of an argument: a PerReplicaValues gives the replica's value, anything
/// else itself.
template <typename T>
const T& unwrapArg(const T& value, int) {
  return value;
}
template <typename T>
const T& unwrapArg(const PerReplicaValues<T>& value, int hosted) {
  return value[static_cast<std::size_t>(hosted)];
}
template <typename T>
void checkArg(const T&, int, int) {}
void throwArgCountMismatch(int argIndex, std::size_t have, int hosted);
template <typename T>
void checkArg(const PerReplicaValues<T>& value, int hosted, int argIndex) {
  if (value.size() != static_cast<std::size_t>(hosted)) throwArgCountMismatch(argIndex, value.size(), hosted);
}
/// Logs `message` as a warning the first time `key` is seen in this process (TF's deprecation warn_once).
void warnOnce(const std::string& key, const std::string& message);
/// Forgets which warnOnce keys were seen (tests).
void resetWarnOnceForTesting();
}  // namespace detail

/// The strategy base class: replica layout, contexts, run(), reduce(), datasets and variables. Collectives are
/// supplied by the subclass (MultiWorkerMirroredStrategy); the default strategy has one replica and none.
/// Not copyable or movable (replica threads, scopes and variables refer to it).
class Strategy {
 public:
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;
  virtual ~Strategy();

  /// "MultiWorkerMirroredStrategy", "DefaultStrategy".
  virtual std::string_view name() const = 0;

  /// TF: num_replicas_in_sync = workers x local replicas.
  int numReplicasInSync() const { return numWorkers_ * localReplicas_; }
  int numWorkers() const { return numWorkers_; }
  /// Replicas per worker (TF: the worker's devices; collbench: GPUs or --local-replicas on CPU).
  int localReplicas() const { return localReplicas_; }
  /// This process's worker (the cluster resolver's rank).
  int workerRank() const { return workerRank_; }
  /// The workers whose replicas this process runs: all in threads mode, {workerRank()} in processes mode.
  const std::vector<int>& hostedWorkers() const { return hostedWorkers_; }
  /// Replica ids this process runs fn for, in hosted order (replica id = worker rank x localReplicas + local).
  const std::vector<int>& hostedReplicaIds() const { return hostedReplicaIds_; }
  int numHostedReplicas() const { return static_cast<int>(hostedReplicaIds_.size()); }
  int workerOfReplica(int replicaId) const { return replicaId / localReplicas_; }

  /// TF: strategy.scope().
  [[nodiscard]] StrategyScope scope();

  /// TF: strategy.run(fn, args). Calls fn once per hosted replica, each on its own thread (the calling thread when
  /// there is one), in replica context; PerReplicaValues arguments are passed as that replica's value, others as
  /// they are. Returns the per-replica results (void fn: nothing). fn must be safe to call concurrently. If a
  /// replica throws, replicas waiting in collectives stop with Error{PeerFailure} and run() rethrows the first
  /// replica's exception. Calling run() inside fn is Error{InvalidArgument}.
  template <typename Fn, typename... Args>
  auto run(Fn&& fn, const Args&... args);

  /// TF: strategy.reduce(reduce_op, value, axis). Cross-replica context. Without axis: all-reduces the replicas'
  /// values (equal shapes; Mean divides by numReplicasInSync). With axis: each replica sums its value along `axis`
  /// first (negative counts from the end), then the sums are all-reduced; Mean divides by the total number of
  /// elements along the axis over all replicas, so partial and empty batches are weighted by their true sizes
  /// (TF's mean_reduce_helper). Integer Mean truncates. The result is the same on every worker.
  Tensor reduce(ReduceOp op, const PerReplica& value, std::optional<int> axis = std::nullopt);
  /// A non-distributed value (TF reduce_non_distributed_value): Mean or a single replica return it, Sum over
  /// several replicas is Error{InvalidArgument}. With an axis it is treated as the same value on every replica.
  Tensor reduce(ReduceOp op, const Tensor& value, std::optional<int> axis = std::nullopt);

  /// TF: experimental_local_results: the values of this worker's replicas only, in local replica order.
  template <typename T>
  std::vector<T> experimentalLocalResults(const PerReplicaValues<T>& value) const;
  /// The local copies of a (mirrored) variable; a regular variable gives its value.
  std::vector<Tensor> experimentalLocalResults(const Variable& variable) const;

  /// TF: experimental_distribute_values_from_function(value_fn): fn(ValueContext) once per hosted replica (on the
  /// calling thread, in hosted order).
  template <typename Fn>
  auto experimentalDistributeValuesFromFunction(Fn&& fn) const;

  /// TF: experimental_distribute_dataset(dataset). Splits a dataset across workers by its AutoShardPolicy (see
  /// AutoShardPolicy and autoShard(); with AUTO falling back to DATA the warning is logged here) and across
  /// replicas by batch:
  ///   - A batched dataset (last batch(B), looking through shard/repeat/take) is a stream of global batches: each
  ///     batch is split into numReplicasInSync pieces (sizes B / R, the first B % R one larger, as TF's
  ///     batch_sizes_for_worker), truncated at a partial batch (later pieces may be empty).
  ///     DATA: replica r of every worker gets piece r of each global batch (worker w keeps pieces
  ///     w*L .. w*L+L-1: its share of the final stream); each step consumes one global batch.
  ///     FILE / OFF: each worker splits its own batches the same way and hands the pieces to its L replicas in
  ///     turn.
  ///   - An unbatched dataset: DATA keeps elements w, w+W, ... on worker w; elements go to local replicas in turn.
  /// At the end, replicas without data get empty batches while others still have some (unbatched: an error);
  /// iteration stops when every replica is out. In processes mode the workers agree on this every step (see
  /// sumOverWorkerProcesses), so every worker stops at the same step or raises the same error.
  DistributedDataset experimentalDistributeDataset(const Dataset& dataset) const;
  /// TF: distribute_datasets_from_function(dataset_fn) (TF 2.4; experimental_ before): dataset_fn(InputContext) is
  /// called once per hosted worker (input_pipeline_id = its rank) and its dataset is not sharded or rebatched:
  /// the function shards with the context and batches per replica; elements go to local replicas in turn.
  DistributedDataset distributeDatasetsFromFunction(const std::function<Dataset(const InputContext&)>& datasetFn) const;
  /// TF: experimental_distribute_datasets_from_function, the pre-2.4 name (deprecated in TF 2.4): an alias that
  /// logs the one-time deprecation warning.
  DistributedDataset experimentalDistributeDatasetsFromFunction(
      const std::function<Dataset(const InputContext&)>& datasetFn) const;
  /// TF: experimental_make_numpy_dataset(numpy_input): a dataset of the arrays' slices (from_tensor_slices).
  Dataset experimentalMakeNumpyDataset(std::vector<Tensor> arrays) const;
  /// The InputContext of hosted worker `workerRank`.
  InputContext inputContext(int workerRank) const;

  /// Variable creation under this strategy (what createVariable() calls for getStrategy()).
  Variable makeVariable(const std::function<Tensor(int workerRank)>& initializer, VariableOptions options);

  /// Index of the current (or last) run() call, -1 before the first: the trace's step.
  std::int64_t currentStep() const { return runsStarted_ - 1; }

 protected:
  Strategy(int numWorkers, int localReplicas, int workerRank, std::vector<int> hostedWorkers);

  /// All-reduces the hosted replicas' lists in place: perHosted[h] is hosted replica h's list, every list of the
  /// same structure (checked by the caller). `perCall` overrides the strategy's CommunicationOptions where not
  /// default. The base implementation is for one replica (nothing to do).
  virtual void allReduceHosted(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op,
                               const CommunicationOptions& perCall);
  /// Broadcasts replica 0's value into every hosted tensor (in place). Base: one replica, nothing to do.
  virtual void broadcastHosted(const std::vector<Tensor*>& perHosted);
  /// Whether variables created in this strategy's scope are mirrored.
  virtual bool mirrorsVariables() const { return false; }
  /// CommunicationOptions.timeout_seconds, for replicas waiting for each other.
  virtual std::optional<double> timeoutSeconds() const { return std::nullopt; }
  /// Sums `counts` element-wise over the workers that other processes host: a collective every worker calls in
  /// the same order (distributed iterators' end-of-input agreement). Base: every worker is hosted here, nothing to
  /// do.
  virtual void sumOverWorkerProcesses(std::vector<std::int64_t>& counts) const;
  /// Logs a warning (the strategy's logger).
  void warn(const std::string& message) const;

 private:
  friend class ReplicaContext;
  friend class Variable;
  friend class StrategyScope;

  void runReplicas(const std::function<void(int hosted)>& body);
  /// sumOverWorkerProcesses for a distributed dataset's iterators; empty when this process hosts every worker.
  std::function<void(std::vector<std::int64_t>&)> workerAgreement() const;
  /// The replica-context collective behind ReplicaContext::allReduce and aggregated variable updates.
  void replicaCollective(int hosted, bool broadcast, ReduceOp op, std::vector<Tensor>& values,
                         const CommunicationOptions& options);
  std::vector<int> localHostedIndices() const;

  int numWorkers_;
  int localReplicas_;
  int workerRank_;
  std::vector<int> hostedWorkers_;
  std::vector<int> hostedReplicaIds_;
  std::unique_ptr<detail::Rendezvous> rendezvous_;
  std::shared_ptr<const bool> alive_;
  std::atomic<std::int64_t> runsStarted_{0};
};

/// TF: tf.distribute.ReplicaContext, valid inside strategy.run()'s fn (and the default one outside any scope).
class ReplicaContext {
 public:
  /// TF: replica_id_in_sync_group.
  int replicaIdInSyncGroup() const { return replicaId_; }
  /// TF: num_replicas_in_sync.
  int numReplicasInSync() const;
  /// TF: strategy.
  Strategy& strategy() const { return *strategy_; }
  /// TF: all_reduce(reduce_op, value, options). A collective: every replica must call it (call-order contract).
  Tensor allReduce(ReduceOp op, const Tensor& value, const CommunicationOptions& options = {});
  /// TF: all_reduce of a list (gradients): reversed, packed by bytes_per_pack (packValues), all-reduced pack by
  /// pack, unpacked into the original order. Returns the reduced values in the caller's order.
  std::vector<Tensor> allReduce(ReduceOp op, const std::vector<Tensor>& values,
                                const CommunicationOptions& options = {});
  /// Index of this replica among the ones this process hosts.
  int hostedIndex() const { return hosted_; }

  ReplicaContext(Strategy* strategy, int hosted, int replicaId)
      : strategy_(strategy), hosted_(hosted), replicaId_(replicaId) {}

 private:
  Strategy* strategy_;
  int hosted_;
  int replicaId_;
};

/// TF: tf.distribute.get_strategy(): the strategy of the innermost scope or running replica, else the default.
Strategy& getStrategy();
/// TF: tf.distribute.has_strategy(): whether getStrategy() is not the default strategy.
bool hasStrategy();
/// TF: tf.distribute.get_replica_context(): the running replica's context inside run(), the default strategy's
/// outside any scope, nullptr in cross-replica context.
ReplicaContext* getReplicaContext();
/// TF: tf.distribute.in_cross_replica_context().
bool inCrossReplicaContext();
/// The default (no-op) strategy: one replica, collectives are identities, variables regular.
Strategy& defaultStrategy();

// ---------------------------------------------------------------------------------------------------------------
// Template definitions

template <typename Fn, typename... Args>
auto Strategy::run(Fn&& fn, const Args&... args) {
  using R = std::invoke_result_t<Fn&, decltype(detail::unwrapArg(args, 0))...>;
  const int n = numHostedReplicas();
  int argIndex = 0;
  (detail::checkArg(args, n, argIndex++), ...);
  if constexpr (std::is_void_v<R>) {
    runReplicas([&]([[maybe_unused]] int h) { std::invoke(fn, detail::unwrapArg(args, h)...); });
  } else {
    using V = std::decay_t<R>;
    std::vector<std::optional<V>> results(static_cast<std::size_t>(n));
    runReplicas(
        [&](int h) { results[static_cast<std::size_t>(h)].emplace(std::invoke(fn, detail::unwrapArg(args, h)...)); });
    std::vector<V> values;
    values.reserve(results.size());
    for (auto& r : results) values.push_back(std::move(*r));
    return PerReplicaValues<V>(std::move(values), hostedReplicaIds_);
  }
}

template <typename T>
std::vector<T> Strategy::experimentalLocalResults(const PerReplicaValues<T>& value) const {
  std::vector<T> out;
  for (int h : localHostedIndices()) out.push_back(value[static_cast<std::size_t>(h)]);
  return out;
}

template <typename Fn>
auto Strategy::experimentalDistributeValuesFromFunction(Fn&& fn) const {
  using V = std::decay_t<std::invoke_result_t<Fn&, const ValueContext&>>;
  std::vector<V> values;
  for (int id : hostedReplicaIds_) values.push_back(std::invoke(fn, ValueContext{id, numReplicasInSync()}));
  return PerReplicaValues<V>(std::move(values), hostedReplicaIds_);
}

}  // namespace collbench::strategy
