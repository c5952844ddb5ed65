#include "collbench/strategy/strategy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "collbench/error.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "distributed_input.h"

namespace collbench::strategy {

namespace {
[[noreturn]] void fail(const std::string& message) { throw Error(Errc::InvalidArgument, message); }

std::string whatOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::string joinIds(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return out;
}

/// t / d element-wise through double (integers truncate).
void divideByScalar(Tensor& t, double d) {
  for (std::size_t i = 0; i < t.numElements(); ++i) t.set(i, t.at(i) / d);
}
}  // namespace

std::string_view toString(ReduceOp op) { return op == ReduceOp::Sum ? "SUM" : "MEAN"; }

ReduceOp parseDistributeReduceOp(std::string_view text) {
  std::string key(text);
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  if (key == "sum") return ReduceOp::Sum;
  if (key == "mean") return ReduceOp::Mean;
  fail(fmt::format("ReduceOp \"{}\" is not one of SUM, MEAN", text));
}

// ---------------------------------------------------------------------------------------------------------------
// Thread contexts

namespace detail {

struct ThreadContext {
  std::vector<Strategy*> scopes;
  ReplicaContext* replica = nullptr;
};

ThreadContext& threadContext() {
  thread_local ThreadContext tc;
  return tc;
}

void throwArgCountMismatch(int argIndex, std::size_t have, int hosted) {
  fail(fmt::format("strategy.run(): argument {} holds values for {} replicas but this process runs {}", argIndex, have,
                   hosted));
}

namespace {
std::mutex& warnMutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& warnedKeys() {
  static std::set<std::string> keys;
  return keys;
}
}  // namespace

void warnOnce(const std::string& key, const std::string& message) {
  {
    std::lock_guard lock(warnMutex());
    if (!warnedKeys().insert(key).second) return;
  }
  spdlog::warn("{}", message);
}

void resetWarnOnceForTesting() {
  std::lock_guard lock(warnMutex());
  warnedKeys().clear();
}

// ---------------------------------------------------------------------------------------------------------------
// Rendezvous: replicas of one run() meet at each collective; the last to arrive runs it for all.

struct CollectiveRequest {
  bool broadcast = false;
  ReduceOp op = ReduceOp::Sum;
  CommunicationOptions options;
  std::vector<Tensor>* values = nullptr;

  std::string describe() const {
    std::string shapes;
    for (const Tensor& t : *values) shapes += (shapes.empty() ? "" : ", ") + t.describe();
    return fmt::format("{} of {} value{} [{}] with {}",
                       broadcast ? "broadcast" : fmt::format("all_reduce({})", toString(op)), values->size(),
                       values->size() == 1 ? "" : "s", shapes, options.describe());
  }
};

class Rendezvous {
 public:
  using Work = std::function<void(const std::vector<CollectiveRequest*>&, int call)>;

  explicit Rendezvous(std::vector<int> replicaIds) : ids_(std::move(replicaIds)), n_(static_cast<int>(ids_.size())) {}

  void begin() {
    std::lock_guard lock(m_);
    arrived_ = finished_ = call_ = 0;
    inWork_ = aborted_ = false;
    root_ = abortError_ = workError_ = nullptr;
    workFailedAt_ = kNoGeneration;
    slots_.assign(static_cast<std::size_t>(n_), nullptr);
    waiting_.assign(static_cast<std::size_t>(n_), false);
    done_.assign(static_cast<std::size_t>(n_), false);
  }

  void arrive(int h, CollectiveRequest& req, const Work& work, std::optional<double> timeoutSeconds) {
    std::unique_lock lock(m_);
    if (aborted_) std::rethrow_exception(abortError_);
    slots_[static_cast<std::size_t>(h)] = &req;
    waiting_[static_cast<std::size_t>(h)] = true;
    ++arrived_;
    const std::uint64_t gen = generation_;
    if (arrived_ == n_) {
      const int call = call_;
      inWork_ = true;
      lock.unlock();
      std::exception_ptr err;
      try {
        work(slots_, call);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      inWork_ = false;
      arrived_ = 0;
      std::fill(waiting_.begin(), waiting_.end(), false);
      ++generation_;
      ++call_;
      if (err) {
        workFailedAt_ = gen;
        workError_ = err;
        abortWith(err, err);
      }
      cv_.notify_all();
      if (err) std::rethrow_exception(err);
      return;
    }
    if (finished_ > 0 && arrived_ + finished_ == n_) {
      abortWith(mismatchError(), nullptr);
      cv_.notify_all();
      std::rethrow_exception(abortError_);
    }
    const auto ready = [&] { return generation_ != gen || aborted_; };
    if (timeoutSeconds) {
      const auto limit = std::chrono::duration<double>(*timeoutSeconds);
      while (!cv_.wait_for(lock, limit, ready)) {
        if (inWork_) continue;  // everyone arrived: the backend's own timeout bounds the collective
        std::vector<int> missing;
        for (int k = 0; k < n_; ++k) {
          if (!waiting_[static_cast<std::size_t>(k)]) missing.push_back(ids_[static_cast<std::size_t>(k)]);
        }
        abortWith(std::make_exception_ptr(Error(
                      Errc::Timeout,
                      fmt::format("replica {} waited {} s (CommunicationOptions.timeout_seconds) in collective #{} "
                                  "for replica(s) {} to reach it",
                                  ids_[static_cast<std::size_t>(h)], *timeoutSeconds, call_ + 1, joinIds(missing)),
                      ids_[static_cast<std::size_t>(h)], missing.empty() ? Error::kNoRank : missing.front())),
                  nullptr);
        cv_.notify_all();
        break;
      }
    } else {
      cv_.wait(lock, ready);
    }
    if (generation_ != gen) {
      if (workFailedAt_ == gen) std::rethrow_exception(workError_);
      return;
    }
    std::rethrow_exception(abortError_);
  }

  /// Replica h's function returned.
  void finished(int h) {
    std::lock_guard lock(m_);
    done_[static_cast<std::size_t>(h)] = true;
    ++finished_;
    if (!aborted_ && arrived_ > 0 && arrived_ + finished_ == n_) {
      abortWith(mismatchError(), nullptr);
      cv_.notify_all();
    }
  }

  /// Replica h's function threw `e` (its own error, or one this rendezvous raised).
  void failed(int h, const std::exception_ptr& e) {
    std::lock_guard lock(m_);
    done_[static_cast<std::size_t>(h)] = true;
    if (aborted_) return;
    const int id = ids_[static_cast<std::size_t>(h)];
    abortWith(std::make_exception_ptr(Error(Errc::PeerFailure,
                                            fmt::format("replica {} failed, so the others stop: {}", id, whatOf(e)),
                                            Error::kNoRank, id)),
              e);
    cv_.notify_all();
  }

  /// The error that stopped this run (nullptr if none).
  std::exception_ptr rootError() {
    std::lock_guard lock(m_);
    return root_;
  }

 private:
  static constexpr std::uint64_t kNoGeneration = ~std::uint64_t{0};

  /// Everyone else sees `error`; run() rethrows `root` (default: `error`).
  void abortWith(const std::exception_ptr& error, const std::exception_ptr& root) {
    aborted_ = true;
    abortError_ = error;
    root_ = root ? root : error;
  }

  std::exception_ptr mismatchError() const {
    std::vector<int> returned, waiting;
    for (int k = 0; k < n_; ++k) {
      if (waiting_[static_cast<std::size_t>(k)])
        waiting.push_back(ids_[static_cast<std::size_t>(k)]);
      else if (done_[static_cast<std::size_t>(k)])
        returned.push_back(ids_[static_cast<std::size_t>(k)]);
    }
    const CollectiveRequest* sample = nullptr;
    for (int k = 0; k < n_ && !sample; ++k) {
      if (waiting_[static_cast<std::size_t>(k)]) sample = slots_[static_cast<std::size_t>(k)];
    }
    return std::make_exception_ptr(Error(
        Errc::InvalidArgument,
        fmt::format("replica(s) {} returned from the replica function after {} collective(s) while replica(s) {} "
                    "wait in collective #{} ({}): every replica must issue the same collectives in the same order",
                    joinIds(returned), call_, joinIds(waiting), call_ + 1, sample ? sample->describe() : "?"),
        waiting.empty() ? Error::kNoRank : waiting.front(), returned.empty() ? Error::kNoRank : returned.front()));
  }

  std::vector<int> ids_;
  int n_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<CollectiveRequest*> slots_;
  std::vector<bool> waiting_, done_;
  int arrived_ = 0, finished_ = 0, call_ = 0;
  std::uint64_t generation_ = 0;
  bool inWork_ = false, aborted_ = false;
  std::exception_ptr root_, abortError_, workError_;
  std::uint64_t workFailedAt_ = kNoGeneration;
};

/// Shared state of a Variable handle.
struct VariableState {
  std::string name;
  VariableAggregation aggregation = VariableAggregation::None;
  bool mirrored = false;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<Tensor> copies;
  Strategy* strategy = nullptr;
  std::weak_ptr<const bool> alive;
  std::mutex mutex;  ///< regular variables: updates from several threads
};

}  // namespace detail

using detail::threadContext;

namespace {

/// Sets the replica context of the current thread for one replica's fn.
class ReplicaGuard {
 public:
  ReplicaGuard(Strategy* s, ReplicaContext* ctx) : tc_(threadContext()), previous_(tc_.replica) {
    tc_.scopes.push_back(s);
    tc_.replica = ctx;
  }
  ~ReplicaGuard() {
    tc_.replica = previous_;
    tc_.scopes.pop_back();
  }
  ReplicaGuard(const ReplicaGuard&) = delete;
  ReplicaGuard& operator=(const ReplicaGuard&) = delete;

 private:
  detail::ThreadContext& tc_;
  ReplicaContext* previous_;
};

class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy() : Strategy(1, 1, 0, {0}) {}
  std::string_view name() const override { return "DefaultStrategy"; }
};

}  // namespace

Strategy& defaultStrategy() {
  static DefaultStrategy s;
  return s;
}

Strategy& getStrategy() {
  const auto& tc = threadContext();
  if (tc.replica) return tc.replica->strategy();
  return tc.scopes.empty() ? defaultStrategy() : *tc.scopes.back();
}

bool hasStrategy() { return &getStrategy() != &defaultStrategy(); }

ReplicaContext* getReplicaContext() {
  auto& tc = threadContext();
  if (tc.replica) return tc.replica;
  if (tc.scopes.empty()) {
    static ReplicaContext defaultContext(&defaultStrategy(), 0, 0);
    return &defaultContext;
  }
  return nullptr;
}

bool inCrossReplicaContext() {
  const auto& tc = threadContext();
  return tc.replica == nullptr && !tc.scopes.empty();
}

// ---------------------------------------------------------------------------------------------------------------
// Strategy

Strategy::Strategy(int numWorkers, int localReplicas, int workerRank, std::vector<int> hostedWorkers)
    : numWorkers_(numWorkers),
      localReplicas_(localReplicas),
      workerRank_(workerRank),
      hostedWorkers_(std::move(hostedWorkers)),
      alive_(std::make_shared<const bool>(true)) {
  if (numWorkers < 1) fail(fmt::format("a strategy needs at least 1 worker, got {}", numWorkers));
  if (localReplicas < 1) fail(fmt::format("local replicas must be at least 1, got {}", localReplicas));
  for (int w : hostedWorkers_) {
    for (int l = 0; l < localReplicas; ++l) hostedReplicaIds_.push_back(w * localReplicas + l);
  }
  rendezvous_ = std::make_unique<detail::Rendezvous>(hostedReplicaIds_);
}

Strategy::~Strategy() {
  auto& scopes = threadContext().scopes;
  scopes.erase(std::remove(scopes.begin(), scopes.end(), this), scopes.end());
}

void Strategy::warn(const std::string& message) const { spdlog::warn("{}", message); }

StrategyScope Strategy::scope() {
  if (this == &defaultStrategy()) return StrategyScope(nullptr);
  auto& tc = threadContext();
  if (!tc.scopes.empty() && tc.scopes.back() != this) {
    fail(fmt::format(
        "Mixing different strategies: this thread is in the scope of {} ({}), which is not the {} "
        "({}) whose scope() was called",
        tc.scopes.back()->name(), static_cast<const void*>(tc.scopes.back()), name(), static_cast<const void*>(this)));
  }
  tc.scopes.push_back(this);
  return StrategyScope(this);
}

StrategyScope::~StrategyScope() {
  if (!strategy_) return;
  auto& scopes = threadContext().scopes;
  auto it = std::find(scopes.rbegin(), scopes.rend(), strategy_);
  if (it == scopes.rend()) return;  // the strategy was destroyed first
  if (it != scopes.rbegin()) spdlog::error("strategy scopes destroyed out of order (destroy them in reverse order)");
  scopes.erase(std::next(it).base());
}

std::vector<int> Strategy::localHostedIndices() const {
  std::vector<int> out;
  for (std::size_t h = 0; h < hostedReplicaIds_.size(); ++h) {
    if (workerOfReplica(hostedReplicaIds_[h]) == workerRank_) out.push_back(static_cast<int>(h));
  }
  return out;
}

void Strategy::allReduceHosted(const std::vector<std::vector<Tensor>*>&, ReduceOp, const CommunicationOptions&) {
  COLLBENCH_CHECK(numReplicasInSync() == 1, "{} has no collectives for {} replicas", name(), numReplicasInSync());
}

void Strategy::sumOverWorkerProcesses(std::vector<std::int64_t>&) const {}

void Strategy::broadcastHosted(const std::vector<Tensor*>&) {
  COLLBENCH_CHECK(numReplicasInSync() == 1, "{} has no collectives for {} replicas", name(), numReplicasInSync());
}

void Strategy::runReplicas(const std::function<void(int hosted)>& body) {
  auto& tc = threadContext();
  if (tc.replica) {
    fail(
        "strategy.run() was called inside a replica function (replica context); call it from cross-replica "
        "context");
  }
  const int n = numHostedReplicas();
  ++runsStarted_;
  rendezvous_->begin();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  auto one = [&](int h) {
    ReplicaContext ctx(this, h, hostedReplicaIds_[static_cast<std::size_t>(h)]);
    ReplicaGuard guard(this, &ctx);
    try {
      body(h);
      rendezvous_->finished(h);
    } catch (...) {
      errors[static_cast<std::size_t>(h)] = std::current_exception();
      rendezvous_->failed(h, errors[static_cast<std::size_t>(h)]);
    }
  };
  if (n == 1) {
    one(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(n));
    for (int h = 0; h < n; ++h) {
      try {
        threads.emplace_back(one, h);
      } catch (...) {
        // Could not start replica h: the started ones must not wait for it.
        errors[static_cast<std::size_t>(h)] = std::current_exception();
        rendezvous_->failed(h, errors[static_cast<std::size_t>(h)]);
        for (int k = h + 1; k < n; ++k) rendezvous_->finished(k);
        break;
      }
    }
    for (auto& t : threads) t.join();
  }
  if (std::exception_ptr root = rendezvous_->rootError()) std::rethrow_exception(root);
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void Strategy::replicaCollective(int hosted, bool broadcast, ReduceOp op, std::vector<Tensor>& values,
                                 const CommunicationOptions& options) {
  options.validate();
  detail::CollectiveRequest req{broadcast, op, options, &values};
  auto work = [this](const std::vector<detail::CollectiveRequest*>& slots, int call) {
    const detail::CollectiveRequest& first = *slots.front();
    for (std::size_t h = 1; h < slots.size(); ++h) {
      const detail::CollectiveRequest& r = *slots[h];
      bool same = r.broadcast == first.broadcast && r.op == first.op && r.options == first.options &&
                  r.values->size() == first.values->size();
      for (std::size_t i = 0; same && i < r.values->size(); ++i) {
        same = (*r.values)[i].dtype() == (*first.values)[i].dtype() &&
               (*r.values)[i].shape() == (*first.values)[i].shape();
      }
      if (!same) {
        throw Error(
            Errc::InvalidArgument,
            fmt::format("collective #{}: replica {} called {} but replica {} called {}: every replica must "
                        "issue the same collectives, with the same structure, in the same order",
                        call + 1, hostedReplicaIds_[h], r.describe(), hostedReplicaIds_.front(), first.describe()),
            hostedReplicaIds_[h], hostedReplicaIds_.front());
      }
    }
    if (first.broadcast) {
      for (std::size_t i = 0; i < first.values->size(); ++i) {
        std::vector<Tensor*> ptrs;
        for (auto* s : slots) ptrs.push_back(&(*s->values)[i]);
        broadcastHosted(ptrs);
      }
    } else {
      std::vector<std::vector<Tensor>*> lists;
      for (auto* s : slots) lists.push_back(s->values);
      allReduceHosted(lists, first.op, first.options);
    }
  };
  if (numHostedReplicas() == 1) {
    work({&req}, 0);
    return;
  }
  rendezvous_->arrive(hosted, req, work, options.timeoutSeconds ? options.timeoutSeconds : timeoutSeconds());
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica& value, std::optional<int> axis) {
  const auto& tc = threadContext();
  if (tc.replica && numReplicasInSync() > 1) {
    fail("strategy.reduce() is for cross-replica context; inside run() use getReplicaContext()->allReduce()");
  }
  const int n = numHostedReplicas();
  if (value.size() != static_cast<std::size_t>(n)) {
    fail(fmt::format("reduce: the value holds {} replicas' values but this process runs {}", value.size(), n));
  }
  std::vector<std::vector<Tensor>> lists(static_cast<std::size_t>(n));
  const Tensor& first = value[0];
  for (int h = 0; h < n; ++h) {
    const Tensor& v = value[static_cast<std::size_t>(h)];
    if (v.dtype() != first.dtype()) {
      fail(fmt::format("reduce: replica {} has {} but replica {} has {}",
                       hostedReplicaIds_[static_cast<std::size_t>(h)], v.describe(), hostedReplicaIds_.front(),
                       first.describe()));
    }
    if (!axis) {
      if (v.shape() != first.shape()) {
        fail(fmt::format("reduce: replica {} has {} but replica {} has {}; without an axis the shapes must be equal",
                         hostedReplicaIds_[static_cast<std::size_t>(h)], v.describe(), hostedReplicaIds_.front(),
                         first.describe()));
      }
      lists[static_cast<std::size_t>(h)] = {v};
    } else {
      Tensor numer = v.sumAlongAxis(*axis);
      if (h > 0 && numer.shape() != lists.front().front().shape()) {
        fail(fmt::format("reduce along axis {}: replica {} has {} but replica {} has {}; only the axis may differ",
                         *axis, hostedReplicaIds_[static_cast<std::size_t>(h)], v.describe(), hostedReplicaIds_.front(),
                         first.describe()));
      }
      lists[static_cast<std::size_t>(h)] = {std::move(numer)};
      if (op == ReduceOp::Mean) {
        // The element count travels as I64, exact at any size (in F16 or BF16 counts above 2048 or 256 round).
        lists[static_cast<std::size_t>(h)].push_back(
            Tensor::fromDoubles(DType::I64, {static_cast<double>(v.dim(*axis))}, Shape{}));
      }
    }
  }
  std::vector<std::vector<Tensor>*> ptrs;
  for (auto& l : lists) ptrs.push_back(&l);
  const auto local = localHostedIndices();
  COLLBENCH_CHECK(!local.empty(), "no local replicas hosted");
  if (!axis || op == ReduceOp::Sum) {
    allReduceHosted(ptrs, op, {});
    return lists[static_cast<std::size_t>(local.front())].front();
  }
  allReduceHosted(ptrs, ReduceOp::Sum, {});
  auto& result = lists[static_cast<std::size_t>(local.front())];
  Tensor mean = result[0];
  divideByScalar(mean, result[1].at(0));
  return mean;
}

Tensor Strategy::reduce(ReduceOp op, const Tensor& value, std::optional<int> axis) {
  if (!axis) {
    if (op == ReduceOp::Mean || numReplicasInSync() == 1) return value;
    fail(
        fmt::format("A non-distributed value {} cannot be reduced with ReduceOp SUM over {} replicas; pass the "
                    "per-replica values (a PerReplica from run()), or use MEAN",
                    value.describe(), numReplicasInSync()));
  }
  PerReplica mirrored(std::vector<Tensor>(static_cast<std::size_t>(numHostedReplicas()), value), hostedReplicaIds_);
  return reduce(op, mirrored, axis);
}

std::vector<Tensor> Strategy::experimentalLocalResults(const Variable& variable) const {
  if (!variable.isMirrored()) return {variable.value()};
  std::vector<Tensor> out;
  for (int h : localHostedIndices()) out.push_back(variable.copy(h));
  return out;
}

InputContext Strategy::inputContext(int workerRank) const {
  return InputContext(numWorkers_, workerRank, numReplicasInSync());
}

Dataset Strategy::experimentalMakeNumpyDataset(std::vector<Tensor> arrays) const {
  return Dataset::fromTensorSlices(std::move(arrays));
}

DistributedDataset Strategy::experimentalDistributeDataset(const Dataset& dataset) const {
  auto impl = std::make_shared<DistributedDataset::Impl>();
  impl->numWorkers = numWorkers_;
  impl->localReplicas = localReplicas_;
  impl->hostedWorkers = hostedWorkers_;
  impl->replicaIds = hostedReplicaIds_;
  impl->batch = findBatch(dataset);
  impl->batched = impl->batch.has_value();
  ShardDecision decision;
  for (int w : hostedWorkers_) impl->workerDatasets.push_back(autoShard(dataset, numWorkers_, w, &decision));
  impl->applied = decision.applied;
  impl->agree = workerAgreement();
  if (!decision.warning.empty()) warn(decision.warning);
  impl->spec = dataset.elementSpec();
  if (impl->batch) {
    const std::int64_t r = numReplicasInSync();
    const bool even = impl->batch->dropRemainder && impl->batch->batchSize % r == 0;
    for (TensorSpec& s : impl->spec) {
      if (!s.shape.empty()) s.shape[0] = even ? impl->batch->batchSize / r : kUnknownDim;
    }
  }
  return DistributedDataset(std::move(impl));
}

DistributedDataset Strategy::experimentalDistributeDatasetsFromFunction(
    const std::function<Dataset(const InputContext&)>& datasetFn) const {
  warnDeprecated("experimental_distribute_datasets_from_function", "distribute_datasets_from_function");
  return distributeDatasetsFromFunction(datasetFn);
}

std::function<void(std::vector<std::int64_t>&)> Strategy::workerAgreement() const {
  if (hostedWorkers_.size() == static_cast<std::size_t>(numWorkers_)) return {};
  return [this, alive = std::weak_ptr<const bool>(alive_)](std::vector<std::int64_t>& counts) {
    if (alive.expired()) fail("a distributed dataset's iterator was used after its strategy was destroyed");
    sumOverWorkerProcesses(counts);
  };
}

DistributedDataset Strategy::distributeDatasetsFromFunction(
    const std::function<Dataset(const InputContext&)>& datasetFn) const {
  if (!datasetFn) fail("distribute_datasets_from_function: no dataset function");
  auto impl = std::make_shared<DistributedDataset::Impl>();
  impl->fromFunction = true;
  impl->numWorkers = numWorkers_;
  impl->localReplicas = localReplicas_;
  impl->hostedWorkers = hostedWorkers_;
  impl->replicaIds = hostedReplicaIds_;
  impl->applied = AutoShardPolicy::Off;
  impl->agree = workerAgreement();
  for (int w : hostedWorkers_) impl->workerDatasets.push_back(datasetFn(inputContext(w)));
  impl->spec = impl->workerDatasets.front().elementSpec();
  impl->batched = findBatch(impl->workerDatasets.front()).has_value();
  return DistributedDataset(std::move(impl));
}

Variable Strategy::makeVariable(const std::function<Tensor(int workerRank)>& initializer, VariableOptions options) {
  if (!initializer) fail("createVariable: no initializer");
  const auto& tc = threadContext();
  if (tc.replica && mirrorsVariables()) {
    fail(
        fmt::format("createVariable(\"{}\") inside strategy.run() (replica context): create {} variables in its "
                    "scope, outside run()",
                    options.name, name()));
  }
  auto st = std::make_shared<detail::VariableState>();
  st->name = options.name.empty() ? std::string("Variable") : options.name;
  st->aggregation = options.aggregation;
  if (!mirrorsVariables()) {
    st->copies.push_back(initializer(workerRank_));
  } else {
    st->mirrored = true;
    st->strategy = this;
    st->alive = alive_;
    std::map<int, Tensor> perWorker;
    for (int w : hostedWorkers_) {
      Tensor t = initializer(w);
      if (!perWorker.empty()) {
        const Tensor& ref = perWorker.begin()->second;
        if (t.dtype() != ref.dtype() || t.shape() != ref.shape()) {
          fail(fmt::format("createVariable(\"{}\"): worker {}'s initial value is {} but worker {}'s is {}", st->name, w,
                           t.describe(), perWorker.begin()->first, ref.describe()));
        }
      }
      perWorker.emplace(w, std::move(t));
    }
    for (int id : hostedReplicaIds_) st->copies.push_back(perWorker.at(workerOfReplica(id)));
    if (numWorkers_ > 1) {
      std::vector<Tensor*> ptrs;
      for (Tensor& c : st->copies) ptrs.push_back(&c);
      broadcastHosted(ptrs);
    }
  }
  st->dtype = st->copies.front().dtype();
  st->shape = st->copies.front().shape();
  return Variable(std::move(st));
}

// ---------------------------------------------------------------------------------------------------------------
// ReplicaContext

int ReplicaContext::numReplicasInSync() const { return strategy_->numReplicasInSync(); }

Tensor ReplicaContext::allReduce(ReduceOp op, const Tensor& value, const CommunicationOptions& options) {
  std::vector<Tensor> values{value};
  strategy_->replicaCollective(hosted_, false, op, values, options);
  return std::move(values.front());
}

std::vector<Tensor> ReplicaContext::allReduce(ReduceOp op, const std::vector<Tensor>& values,
                                              const CommunicationOptions& options) {
  std::vector<Tensor> out = values;
  strategy_->replicaCollective(hosted_, false, op, out, options);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Variables

Variable createVariable(const Tensor& initialValue, VariableOptions options) {
  return getStrategy().makeVariable([initialValue](int) { return initialValue; }, std::move(options));
}

Variable createVariable(const std::function<Tensor(int workerRank)>& initializer, VariableOptions options) {
  return getStrategy().makeVariable(initializer, std::move(options));
}

const std::string& Variable::name() const { return state_->name; }
bool Variable::isMirrored() const { return state_->mirrored; }
VariableAggregation Variable::aggregation() const { return state_->aggregation; }
DType Variable::dtype() const { return state_->dtype; }
const Shape& Variable::shape() const { return state_->shape; }
int Variable::numCopies() const { return static_cast<int>(state_->copies.size()); }

namespace {
void checkAlive(const detail::VariableState& st) {
  if (st.mirrored && st.alive.expired()) {
    fail(fmt::format("MirroredVariable '{}' was used after its strategy was destroyed", st.name));
  }
}

/// The hosted index of the running replica if it belongs to the variable's strategy, -1 in cross-replica context.
int ownReplica(const detail::VariableState& st) {
  const ReplicaContext* ctx = threadContext().replica;
  if (!ctx) return -1;
  if (&ctx->strategy() != st.strategy) {
    fail(fmt::format("MirroredVariable '{}' belongs to another strategy than the running replica's", st.name));
  }
  return ctx->hostedIndex();
}
}  // namespace

const Tensor& Variable::copy(int hosted) const {
  checkAlive(*state_);
  if (hosted < 0 || hosted >= numCopies()) {
    fail(fmt::format("Variable '{}' has {} copies; there is no copy {}", state_->name, numCopies(), hosted));
  }
  return state_->copies[static_cast<std::size_t>(hosted)];
}

Tensor Variable::value() const {
  auto& st = *state_;
  if (!st.mirrored) {
    std::lock_guard lock(st.mutex);
    return st.copies.front();
  }
  checkAlive(st);
  const int own = ownReplica(st);
  if (own >= 0) return st.copies[static_cast<std::size_t>(own)];
  return st.copies[static_cast<std::size_t>(st.strategy->localHostedIndices().front())];
}

Tensor& Variable::local() const {
  auto& st = *state_;
  if (!st.mirrored) return st.copies.front();
  checkAlive(st);
  const int own = ownReplica(st);
  if (own < 0) {
    fail(
        fmt::format("MirroredVariable '{}': local() needs a replica context (inside strategy.run()); in "
                    "cross-replica context use copy(i) or value()",
                    st.name));
  }
  return st.copies[static_cast<std::size_t>(own)];
}

void Variable::assign(const Tensor& value) const { update(value, Update::Assign); }
void Variable::assignAdd(const Tensor& delta) const { update(delta, Update::Add); }
void Variable::assignSub(const Tensor& delta) const { update(delta, Update::Sub); }

void Variable::update(const Tensor& value, Update how) const {
  auto& st = *state_;
  static constexpr const char* kVerb[] = {"assign", "assign_add", "assign_sub"};
  const char* verb = kVerb[static_cast<int>(how)];
  if (value.dtype() != st.dtype || value.shape() != st.shape) {
    fail(fmt::format("Variable '{}': {} of {} to a variable of {}", st.name, verb, value.describe(),
                     Tensor(st.dtype, st.shape).describe()));
  }
  auto apply = [how](Tensor& target, const Tensor& v) {
    if (how == Update::Assign) {
      target = v;
      return;
    }
    const double sign = how == Update::Add ? 1.0 : -1.0;
    for (std::size_t i = 0; i < target.numElements(); ++i) target.set(i, target.at(i) + sign * v.at(i));
  };
  if (!st.mirrored) {
    std::lock_guard lock(st.mutex);
    apply(st.copies.front(), value);
    return;
  }
  checkAlive(st);
  const int own = ownReplica(st);
  if (own < 0) {
    for (Tensor& c : st.copies) apply(c, value);
    return;
  }
  std::vector<Tensor> values{value};
  switch (st.aggregation) {
    case VariableAggregation::None:
      fail(
          fmt::format("You must specify an aggregation method to update MirroredVariable '{}' in replica context "
                      "({} inside strategy.run()): create it with VariableOptions.aggregation SUM, MEAN or "
                      "ONLY_FIRST_REPLICA, or update it in cross-replica context",
                      st.name, verb));
    case VariableAggregation::Sum:
      st.strategy->replicaCollective(own, false, ReduceOp::Sum, values, {});
      break;
    case VariableAggregation::Mean:
      st.strategy->replicaCollective(own, false, ReduceOp::Mean, values, {});
      break;
    case VariableAggregation::OnlyFirstReplica:
      st.strategy->replicaCollective(own, true, ReduceOp::Sum, values, {});
      break;
  }
  apply(st.copies[static_cast<std::size_t>(own)], values.front());
}

// ---------------------------------------------------------------------------------------------------------------
// Distributed datasets (iteration lives in distributed_input.cc)

const ElementSpec& DistributedDataset::elementSpec() const { return impl_->spec; }
const ElementSpec& DistributedIterator::elementSpec() const { return impl_->dataset->spec; }

PerReplicaValues<Element> DistributedIterator::getNext() {
  std::optional<PerReplicaValues<Element>> v = next();
  if (!v) fail("DistributedIterator.get_next: end of input (TF: OutOfRangeError)");
  return std::move(*v);
}

}  // namespace collbench::strategy
