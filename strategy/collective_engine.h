#pragma once
// The strategy's collective engine: packing, flat/hierarchical all-reduce and broadcast on Backends, and the
// trace (private to strategy/).
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/selector.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/trace.h"

namespace collbench::strategy::detail {

/// What backends get for "no timeout" (CommunicationOptions.timeout_seconds unset): about 31.7 years, finite so
/// that backends converting to integer milliseconds do not overflow.
inline constexpr double kNoTimeoutSeconds = 1e9;

struct EngineConfig {
  int numWorkers = 1;
  int localReplicas = 1;
  int workerRank = 0;
  ExecutionMode mode = ExecutionMode::Threads;
  std::vector<int> hostedWorkers;
  bool hierarchical = false;
  bool simulate = false;
  std::string backend;  ///< resolved name
  BackendOptions backendOptions;
  CommunicationOptions defaults;
  ImplementationChoice choice;
  bool gpuReplicas = false;
  std::string topologyName;
};

class CollectiveEngine {
 public:
  explicit CollectiveEngine(EngineConfig config);

  /// All-reduces every hosted replica's list in place (packed); Mean divides by the replicas in sync.
  void allReduce(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op, const CommunicationOptions& perCall,
                 std::int64_t step);
  /// Broadcasts replica 0's tensor into every hosted tensor.
  void broadcast(const std::vector<Tensor*>& perHosted, std::int64_t step);

  Trace trace() const;
  bool hierarchical() const { return config_.hierarchical; }

 private:
  using Clock = std::chrono::steady_clock;

  void allReducePack(const std::vector<std::byte*>& bufs, DType dtype, std::size_t count,
                     const CommunicationOptions& opts, std::int64_t step, int pack);
  /// Runs one collective on `backend` with the given per-rank buffers (in place) and records it.
  void runCollective(Backend& backend, const CollectiveSpec& spec, const std::vector<std::byte*>& bufs,
                     const CommunicationOptions& opts, std::string_view group, std::int64_t step, int pack);
  /// Records an in-process (local) stage.
  void recordLocal(Collective kind, DType dtype, std::size_t count, Clock::time_point start, Clock::time_point end,
                   std::int64_t step, int pack);
  /// The algorithm (and its chunking) for a collective: RING -> ring; AUTO -> the selector (cached per spec).
  Choice choiceFor(const CollectiveSpec& spec, const CommunicationOptions& opts);
  const Schedule& schedule(const CollectiveSpec& spec, const Choice& choice);
  void record(TraceEvent e, Clock::time_point realStart, Clock::time_point realEnd, double simulatedSeconds);

  EngineConfig config_;
  int replicas_;
  std::unique_ptr<Backend> flat_;   ///< one rank per replica (threads mode, flat or simulated)
  std::unique_ptr<Backend> cross_;  ///< one rank per worker (hierarchical)
  using SpecKey = std::tuple<int, int, std::size_t, int, int, int>;
  static SpecKey keyOf(const CollectiveSpec& spec);
  Selector selector_{SelectorOptions{}};
  std::map<SpecKey, Choice> autoChoices_;
  std::map<std::tuple<SpecKey, std::string, std::size_t, int>, Schedule> schedules_;
  std::vector<std::vector<std::byte>> staging_;

  mutable std::mutex traceMutex_;
  Trace trace_;
  Clock::time_point origin_;
  Clock::time_point lastRealEnd_;
  double lastEnd_ = 0;
};

}  // namespace collbench::strategy::detail
