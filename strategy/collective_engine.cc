#include "collective_engine.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/selector.h"
#include "collbench/strategy/packing.h"

namespace collbench::strategy::detail {

namespace {
/// Schedules kept per engine; a program with more distinct collective shapes rebuilds them.
constexpr std::size_t kMaxCachedSchedules = 256;
/// Algorithm name recorded for stages done in this process (local reduce and broadcast).
constexpr const char* kLocalAlgorithm = "in_process";
/// The generator of core/algorithms that reduces within each host of the topology, then across hosts.
constexpr std::string_view kHierarchicalAlgorithm = "hierarchical";
/// Calls of each candidate in an AUTO trial: regret's and tune's default repetitions (7); the fastest call counts.
/// A program that all-reduces the same gradient packs every step pays it once, over its first 7-35 steps.
constexpr int kEngineTrialRounds = 7;
}  // namespace

CollectiveEngine::CollectiveEngine(EngineConfig config)
    : config_(std::move(config)),
      replicas_(config_.numWorkers * config_.localReplicas),
      staged_(config_.mode == ExecutionMode::Processes ||
              (!config_.simulate && config_.hierarchy == HierarchyMode::Hierarchical)) {
  origin_ = lastRealEnd_ = Clock::now();
  trace_.worldSize = replicas_;
  trace_.topology = TraceTopology{config_.topologyName, config_.numWorkers, config_.localReplicas};
  trace_.backend = config_.backend;
  trace_.simulated = config_.simulate;
  trace_.tool = std::string("collbench ") + COLLBENCH_VERSION;
  COLLBENCH_CHECK(config_.defaults.timeoutSeconds.has_value(), "the strategy resolves the default timeout");
  if (config_.topology) rankHost_ = rankHosts(*config_.topology, replicas_);
  if (config_.simulate && config_.hierarchy == HierarchyMode::Hierarchical) {
    // Fail now, naming the option, if the topology's hosts cannot run the hierarchical algorithm.
    try {
      AlgoParams params;
      params.rankHost = rankHost_;
      const auto n = static_cast<std::size_t>(replicas_);
      buildSchedule({Collective::AllReduce, replicas_, n, DType::F32, collbench::ReduceOp::Sum, 0},
                    std::string(kHierarchicalAlgorithm), params);
    } catch (const Error& e) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("StrategyOptions.hierarchy hierarchical with simulate on topology '{}': {}",
                              config_.topologyName, e.what()));
    }
  }
  if (!staged_) {
    flat_ = makeBackend(config_.backend, replicas_, config_.backendOptions);
    if (!config_.simulate && !flat_->movesData()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("backend '{}' moves no data (a simulator): set StrategyOptions.simulate for what-if runs",
                              config_.backend));
    }
  } else if (config_.numWorkers > 1) {
    cross_ = makeBackend(config_.backend, config_.numWorkers, config_.backendOptions);
  }
  // The runners choose as `perf --algo auto` does (the topology's model; the engine runs its own trial on the
  // program's calls), keep the schedules and simulate each distinct collective once.
  const RunnerOptions ro{config_.topology ? &*config_.topology : nullptr, nullptr, "", -1,
                         config_.defaults.timeoutSeconds.value_or(kDefaultTimeoutSeconds)};
  if (flat_) flatRunner_ = std::make_unique<Runner>(*flat_, ro);
  if (cross_) crossRunner_ = std::make_unique<Runner>(*cross_, ro);
}

Runner& CollectiveEngine::runnerFor(const Backend& backend) {
  return &backend == flat_.get() ? *flatRunner_ : *crossRunner_;
}

Plan CollectiveEngine::planOf(const Runner& runner, const Choice& choice) const {
  AlgoParams params{choice.chunkBytes, std::max(1, choice.channels), {}};
  if (runner.rankHost().size() == rankHost_.size()) params.rankHost = rankHost_;
  return Plan{choice, std::move(params)};
}

bool CollectiveEngine::hierarchical() const {
  return staged_ || (config_.simulate && config_.hierarchy == HierarchyMode::Hierarchical);
}

std::string CollectiveEngine::allReduceForm() const {
  if (hierarchical()) return "hierarchical";
  if (config_.simulate && config_.hierarchy == HierarchyMode::Auto && config_.topology) {
    return fmt::format("flat or hierarchical per size (cost model on {})", config_.topology->name);
  }
  return "flat";
}

CollectiveEngine::SpecKey CollectiveEngine::keyOf(const CollectiveSpec& spec) {
  return {static_cast<int>(spec.kind), spec.nranks, spec.count, static_cast<int>(spec.dtype),
          static_cast<int>(spec.op),   spec.root};
}

Choice CollectiveEngine::choiceFor(const CollectiveSpec& spec, const CommunicationOptions& opts) {
  using CI = CommunicationImplementation;
  const ImplementationChoice c =
      implementationForCall(config_.choice, opts.implementation, config_.gpuReplicas, config_.ncclAvailable);
  if (c.effective == CI::Nccl && spec.kind == Collective::AllReduce) return Choice("nccl", c.reason);
  // A simulated all-reduce over every replica: the topology decides between flat and hierarchical algorithms.
  const bool overReplicas = config_.simulate && spec.kind == Collective::AllReduce && spec.nranks == replicas_;
  if (overReplicas && config_.hierarchy == HierarchyMode::Hierarchical) {
    return Choice(std::string(kHierarchicalAlgorithm),
                  fmt::format("hierarchy hierarchical: the topology's hierarchical all-reduce (within each host, "
                              "then across hosts of {})",
                              config_.topologyName));
  }
  if (opts.implementation != CI::Auto || c.effective != CI::Ring) return Choice("ring", c.reason);
  const SpecKey key = keyOf(spec);
  auto it = autoChoices_.find(key);
  if (it == autoChoices_.end()) {
    if (autoChoices_.size() >= kMaxCachedSchedules) autoChoices_.clear();
    Choice choice = (flatRunner_ ? *flatRunner_ : *crossRunner_).plan(spec, CallConfig{}).choice;
    if (overReplicas && config_.hierarchy == HierarchyMode::Flat && choice.algorithm == kHierarchicalAlgorithm) {
      // hierarchy flat: the fastest other algorithm the model ranked.
      for (const Alternative& a : choice.ranking) {
        if (a.algorithm == kHierarchicalAlgorithm) continue;
        Choice flat(a.algorithm, fmt::format("hierarchy flat: the fastest flat algorithm ({:.3g} us; hierarchical "
                                             "{:.3g} us)",
                                             a.predictedUs, choice.predictedUs));
        flat.chunkBytes = a.chunkBytes;
        flat.channels = a.channels;
        flat.predictedUs = a.predictedUs;
        flat.source = choice.source;
        choice = flat;
        break;
      }
    }
    it = autoChoices_.emplace(key, std::move(choice)).first;
    spdlog::debug("AUTO: {} -> {} ({})", describe(spec), it->second.algorithm, it->second.reason);
  }
  return it->second;
}

void CollectiveEngine::record(TraceEvent e, Clock::time_point realStart, Clock::time_point realEnd,
                              double simulatedSeconds) {
  std::lock_guard lock(traceMutex_);
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (config_.simulate) {
    // Simulated clock: the real compute time since the last collective, then the simulated collective.
    e.startSeconds = lastEnd_ + std::max(0.0, seconds(realStart - lastRealEnd_));
    e.endSeconds = e.startSeconds + simulatedSeconds;
  } else {
    e.startSeconds = std::max(lastEnd_, seconds(realStart - origin_));
    e.endSeconds = std::max(e.startSeconds, seconds(realEnd - origin_));
  }
  e.computeGapSeconds = std::max(0.0, e.startSeconds - lastEnd_);
  // Collectives here block the program: its compute resumed when the previous one ended, and it issued this one when
  // it started (docs/trace-format.md, "after" and "issue_s").
  e.after = TraceAfter::PreviousEnd;
  e.issueSeconds = e.startSeconds;
  lastEnd_ = e.endSeconds;
  lastRealEnd_ = realEnd;
  trace_.events.push_back(std::move(e));
}

Trace CollectiveEngine::trace() const {
  std::lock_guard lock(traceMutex_);
  return trace_;
}

void CollectiveEngine::runCollective(Backend& backend, const CollectiveSpec& spec, const std::vector<std::byte*>& bufs,
                                     const CommunicationOptions& opts, std::string_view group, std::int64_t step,
                                     int pack) {
  const Choice choice = trialTurn(spec, choiceFor(spec, opts), backend);
  Runner& runner = runnerFor(backend);
  const Plan plan = planOf(runner, choice);
  RunResult result;
  const auto start = Clock::now();
  if (!backend.movesData()) {
    result.seconds = runner.simulate(spec, plan.choice.algorithm, plan.params);
  } else {
    runner.dropSchedulesOver(kMaxCachedSchedules);  // programs whose shapes keep changing
    const Schedule& s = runner.schedule(spec, plan.choice.algorithm, plan.params);
    // This process's ranks: all of them (threads) or its own (a process backend: one rank per process).
    Buffers buffers;
    for (std::byte* b : bufs) buffers.push_back(RankBuffers{b, b});
    RunOptions ro;
    ro.timeoutSeconds = opts.timeoutSeconds.value_or(kDefaultTimeoutSeconds);
    result = backend.run(s, buffers, ro);
  }
  const auto end = Clock::now();
  TraceEvent e;
  e.kind = spec.kind;
  e.bytes = spec.inputBytes();
  e.dtype = spec.dtype;
  e.op = spec.op;
  e.root = spec.root;
  e.group = std::string(group);
  e.nranks = spec.nranks;
  e.algorithm = choice.algorithm;
  e.step = step;
  e.pack = pack;
  record(std::move(e), start, end, result.seconds);
  trialResult(backend, spec, bufs, result.seconds, opts, group, step, pack);
}

Choice CollectiveEngine::trialTurn(const CollectiveSpec& spec, const Choice& choice, const Backend& backend) {
  // Only the selector's choices (forced RING, NCCL and hierarchical ones have no source), on data, not simulated.
  if (choice.source.empty() || config_.simulate || !backend.movesData()) return choice;
  const SpecKey key = keyOf(spec);
  auto it = trials_.find(key);
  if (it == trials_.end()) {
    if (autoChoices_.at(key).source == "trial") return choice;  // settled
    std::vector<Alternative> candidates = trialCandidates(choice);
    if (candidates.size() < 2) return choice;
    if (trials_.size() >= kMaxCachedSchedules) trials_.clear();
    Trial t;
    t.bestUs.assign(candidates.size(), std::numeric_limits<double>::infinity());
    t.candidates = std::move(candidates);
    it = trials_.emplace(key, std::move(t)).first;
  }
  const Trial& t = it->second;
  const Alternative& a = t.candidates[static_cast<std::size_t>(t.calls) % t.candidates.size()];
  Choice turn = choice;
  turn.algorithm = a.algorithm;
  turn.chunkBytes = a.chunkBytes;
  turn.channels = a.channels;
  return turn;
}

void CollectiveEngine::trialResult(Backend& backend, const CollectiveSpec& spec, const std::vector<std::byte*>& bufs,
                                   double seconds, const CommunicationOptions& opts, std::string_view group,
                                   std::int64_t step, int pack) {
  const SpecKey key = keyOf(spec);
  const auto it = trials_.find(key);
  if (it == trials_.end()) return;
  Trial& t = it->second;
  const std::size_t k = t.candidates.size();
  double& best = t.bestUs[static_cast<std::size_t>(t.calls) % k];
  best = std::min(best, seconds * 1e6);
  if (++t.calls < kEngineTrialRounds * static_cast<int>(k)) return;
  Trial done = std::move(t);
  trials_.erase(it);
  if (static_cast<int>(bufs.size()) < spec.nranks) {
    // One rank per process: every process settles on the mean over processes (a sum of whole nanoseconds is exact,
    // so all of them pick alike), with a RING all-reduce recorded like the program's own.
    std::vector<std::int64_t> ns(k);
    for (std::size_t i = 0; i < k; ++i) ns[i] = std::llround(done.bestUs[i] * 1e3);
    CommunicationOptions ring = opts;
    ring.implementation = CommunicationImplementation::Ring;
    const CollectiveSpec sum{Collective::AllReduce, spec.nranks, k, DType::I64, collbench::ReduceOp::Sum, 0};
    runCollective(backend, sum, {reinterpret_cast<std::byte*>(ns.data())}, ring, group, step, pack);
    for (std::size_t i = 0; i < k; ++i) done.bestUs[i] = static_cast<double>(ns[i]) / 1e3 / spec.nranks;
  }
  Choice& chosen = autoChoices_.at(key);
  chosen = settleTrial(chosen, done.candidates, done.bestUs);
  spdlog::debug("AUTO: {} -> {} ({})", describe(spec), chosen.algorithm, chosen.reason);
}

void CollectiveEngine::recordLocal(Collective kind, DType dtype, std::size_t count, Clock::time_point start,
                                   Clock::time_point end, std::int64_t step, int pack) {
  TraceEvent e;
  e.kind = kind;
  e.bytes = count * dtypeSize(dtype);
  e.dtype = dtype;
  e.op = collbench::ReduceOp::Sum;
  e.root = 0;
  e.group = std::string(kTraceGroupLocal);
  e.nranks = config_.localReplicas;
  e.algorithm = kLocalAlgorithm;
  e.step = step;
  e.pack = pack;
  record(std::move(e), start, end, std::chrono::duration<double>(end - start).count());
}

void CollectiveEngine::allReducePack(const std::vector<std::byte*>& bufs, DType dtype, std::size_t count,
                                     const CommunicationOptions& opts, std::int64_t step, int pack) {
  const CollectiveSpec flatSpec{Collective::AllReduce, replicas_, count, dtype, collbench::ReduceOp::Sum, 0};
  if (flat_ && !flat_->movesData()) {
    // Simulated: combine here (hosted order), time on the simulator.
    for (std::size_t h = 1; h < bufs.size(); ++h)
      reduceElements(dtype, collbench::ReduceOp::Sum, bufs[0], bufs[0], bufs[h], count);
    for (std::size_t h = 1; h < bufs.size(); ++h) std::memcpy(bufs[h], bufs[0], count * dtypeSize(dtype));
    runCollective(*flat_, flatSpec, bufs, opts, kTraceGroupReplicas, step, pack);
    return;
  }
  if (flat_) {
    runCollective(*flat_, flatSpec, bufs, opts, kTraceGroupReplicas, step, pack);
    return;
  }
  // Hierarchical: each hosted worker reduces into its first replica, the workers all-reduce, and copy back.
  const auto L = static_cast<std::size_t>(config_.localReplicas);
  const std::size_t workers = bufs.size() / L;
  std::vector<std::byte*> leaders;
  for (std::size_t k = 0; k < workers; ++k) leaders.push_back(bufs[k * L]);
  if (L > 1) {
    const auto t0 = Clock::now();
    for (std::size_t k = 0; k < workers; ++k) {
      for (std::size_t l = 1; l < L; ++l) {
        reduceElements(dtype, collbench::ReduceOp::Sum, leaders[k], leaders[k], bufs[k * L + l], count);
      }
    }
    recordLocal(Collective::Reduce, dtype, count, t0, Clock::now(), step, pack);
  }
  if (cross_) {
    const CollectiveSpec crossSpec{
        Collective::AllReduce, config_.numWorkers, count, dtype, collbench::ReduceOp::Sum, 0};
    runCollective(*cross_, crossSpec, leaders, opts, kTraceGroupWorkers, step, pack);
  }
  if (L > 1) {
    const auto t0 = Clock::now();
    for (std::size_t k = 0; k < workers; ++k) {
      for (std::size_t l = 1; l < L; ++l) std::memcpy(bufs[k * L + l], leaders[k], count * dtypeSize(dtype));
    }
    recordLocal(Collective::Broadcast, dtype, count, t0, Clock::now(), step, pack);
  }
}

void CollectiveEngine::allReduce(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op,
                                 const CommunicationOptions& perCall, std::int64_t step) {
  const CommunicationOptions opts = config_.defaults.merge(perCall);
  opts.validate();
  const std::vector<Tensor>& first = *perHosted.front();
  std::vector<PackInput> inputs;
  inputs.reserve(first.size());
  for (const Tensor& t : first) inputs.push_back({t.dtype(), t.numBytes()});
  const std::vector<Pack> packs = packValues(inputs, opts.bytesPerPack);
  const std::size_t hosted = perHosted.size();
  for (std::size_t p = 0; p < packs.size(); ++p) {
    const Pack& pack = packs[p];
    const std::size_t es = dtypeSize(pack.dtype);
    const std::size_t count = pack.bytes / es;
    std::vector<std::byte*> bufs(hosted);
    const bool single = pack.indices.size() == 1;
    if (single) {
      for (std::size_t h = 0; h < hosted; ++h)
        bufs[h] = static_cast<std::byte*>((*perHosted[h])[pack.indices[0]].raw());
    } else {
      staging_.resize(std::max(staging_.size(), hosted));
      for (std::size_t h = 0; h < hosted; ++h) {
        staging_[h].resize(pack.bytes);
        std::size_t offset = 0;
        for (std::size_t idx : pack.indices) {
          const Tensor& t = (*perHosted[h])[idx];
          if (t.numBytes()) std::memcpy(staging_[h].data() + offset, t.raw(), t.numBytes());
          offset += t.numBytes();
        }
        bufs[h] = staging_[h].data();
      }
    }
    allReducePack(bufs, pack.dtype, count, opts, step, static_cast<int>(p));
    for (std::size_t h = 0; h < hosted; ++h) {
      if (op == ReduceOp::Mean) divideElements(pack.dtype, bufs[h], count, replicas_);
      if (single) continue;
      std::size_t offset = 0;
      for (std::size_t idx : pack.indices) {
        Tensor& t = (*perHosted[h])[idx];
        if (t.numBytes()) std::memcpy(t.raw(), staging_[h].data() + offset, t.numBytes());
        offset += t.numBytes();
      }
    }
  }
}

void CollectiveEngine::sumOverWorkers(std::vector<std::int64_t>& counts, std::int64_t step) {
  if (!cross_ || config_.mode != ExecutionMode::Processes || counts.empty()) return;
  const CollectiveSpec spec{
      Collective::AllReduce, config_.numWorkers, counts.size(), DType::I64, collbench::ReduceOp::Sum, 0};
  runCollective(*cross_, spec, {reinterpret_cast<std::byte*>(counts.data())}, config_.defaults, kTraceGroupWorkers,
                step, 0);
}

void CollectiveEngine::broadcast(const std::vector<Tensor*>& perHosted, std::int64_t step) {
  const Tensor& root = *perHosted.front();
  const std::size_t count = root.numElements();
  const DType dtype = root.dtype();
  const CommunicationOptions& opts = config_.defaults;
  std::vector<std::byte*> bufs;
  for (Tensor* t : perHosted) bufs.push_back(static_cast<std::byte*>(t->raw()));
  if (flat_) {
    const CollectiveSpec spec{Collective::Broadcast, replicas_, count, dtype, collbench::ReduceOp::Sum, 0};
    if (!flat_->movesData()) {
      for (std::size_t h = 1; h < bufs.size(); ++h) std::memcpy(bufs[h], bufs[0], root.numBytes());
    }
    runCollective(*flat_, spec, bufs, opts, kTraceGroupReplicas, step, 0);
    return;
  }
  const auto L = static_cast<std::size_t>(config_.localReplicas);
  const std::size_t workers = bufs.size() / L;
  std::vector<std::byte*> leaders;
  for (std::size_t k = 0; k < workers; ++k) leaders.push_back(bufs[k * L]);
  if (cross_) {
    const CollectiveSpec spec{Collective::Broadcast, config_.numWorkers, count, dtype, collbench::ReduceOp::Sum, 0};
    runCollective(*cross_, spec, leaders, opts, kTraceGroupWorkers, step, 0);
  }
  if (L > 1) {
    const auto t0 = Clock::now();
    for (std::size_t k = 0; k < workers; ++k) {
      for (std::size_t l = 1; l < L; ++l) std::memcpy(bufs[k * L + l], leaders[k], root.numBytes());
    }
    recordLocal(Collective::Broadcast, dtype, count, t0, Clock::now(), step, 0);
  }
}

}  // namespace collbench::strategy::detail
