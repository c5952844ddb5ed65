#pragma once
// The strategy's collective engine: packing, flat/hierarchical all-reduce and broadcast on Backends, and the
// trace (private to strategy/).
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/topology.h"
#include "collbench/trace.h"

namespace collbench::strategy::detail {

struct EngineConfig {
  int numWorkers = 1;
  int localReplicas = 1;
  int workerRank = 0;
  ExecutionMode mode = ExecutionMode::Threads;
  std::vector<int> hostedWorkers;
  /// As requested (StrategyOptions::hierarchy); the engine decides what runs (see CollectiveEngine).
  HierarchyMode hierarchy = HierarchyMode::Auto;
  bool simulate = false;
  std::string backend;  ///< resolved name
  BackendOptions backendOptions;
  CommunicationOptions defaults;  ///< timeout_seconds resolved (never unset)
  ImplementationChoice choice;
  bool gpuReplicas = false;
  bool ncclAvailable = false;  ///< an nccl backend can run this strategy's collectives
  std::string topologyName;
  /// The topology the collectives run on, when known (simulate): the selector's cost model uses it.
  std::optional<Topology> topology;
};

/// How all-reduce runs:
///   staged (processes mode, or threads mode with HierarchyMode::Hierarchical): each worker reduces its local
///     replicas in process, the workers all-reduce on a backend with one rank per worker, and the result is copied
///     back to the local replicas;
///   flat (threads mode otherwise): one collective over every replica on one backend. With a topology (simulate),
///     HierarchyMode::Hierarchical runs the topology's "hierarchical" algorithm (intra-host, then inter-host, from
///     its host grouping), Flat any other algorithm, and Auto whichever the cost model estimates faster, per size.
class CollectiveEngine {
 public:
  explicit CollectiveEngine(EngineConfig config);

  /// All-reduces every hosted replica's list in place (packed); Mean divides by the replicas in sync.
  void allReduce(const std::vector<std::vector<Tensor>*>& perHosted, ReduceOp op, const CommunicationOptions& perCall,
                 std::int64_t step);
  /// Broadcasts replica 0's tensor into every hosted tensor.
  void broadcast(const std::vector<Tensor*>& perHosted, std::int64_t step);

  /// Sums `counts` element-wise over the workers in processes mode (a collective on the cross-worker backend,
  /// recorded at `step`); nothing to do when this process hosts every worker.
  void sumOverWorkers(std::vector<std::int64_t>& counts, std::int64_t step);

  Trace trace() const;
  /// Whether every all-reduce is hierarchical (staged, or the topology's hierarchical algorithm).
  bool hierarchical() const;
  /// "flat", "hierarchical", or "flat or hierarchical per size (cost model on <topology>)".
  std::string allReduceForm() const;

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
  /// The algorithm (and its chunking) for a collective: NCCL -> nccl (all-reduce); a forced hierarchical simulated
  /// all-reduce -> hierarchical; RING -> ring; AUTO -> the selector (cached per spec; Flat excludes hierarchical).
  Choice choiceFor(const CollectiveSpec& spec, const CommunicationOptions& opts);
  /// The runner over `backend` (flat_ or cross_): its schedules and simulations are cached there.
  Runner& runnerFor(const Backend& backend);
  /// What runs for `choice`: its algorithm with its chunk and channels, and the topology's hosts.
  Plan planOf(const Runner& runner, const Choice& choice) const;
  void record(TraceEvent e, Clock::time_point realStart, Clock::time_point realEnd, double simulatedSeconds);

  EngineConfig config_;
  int replicas_;
  bool staged_;                     ///< staged all-reduce (see the class comment)
  std::vector<int> rankHost_;       ///< host of each replica on the topology (for the hierarchical algorithm)
  std::unique_ptr<Backend> flat_;   ///< one rank per replica (threads mode, flat or simulated)
  std::unique_ptr<Backend> cross_;  ///< one rank per worker (hierarchical)
  using SpecKey = std::tuple<int, int, std::size_t, int, int, int>;
  static SpecKey keyOf(const CollectiveSpec& spec);
  std::unique_ptr<Runner> flatRunner_, crossRunner_;  ///< over flat_ and cross_: choice, schedules, simulations
  std::map<SpecKey, Choice> autoChoices_;
  /// An AUTO choice on a backend that moves data, being tried against its near-tied runner-ups (trialCandidates):
  /// the program's own calls of that spec run the candidates in turn, kEngineTrialRounds each, and the fastest call
  /// of each decides (settleTrial); until then autoChoices_ holds the selector's choice.
  struct Trial {
    std::vector<Alternative> candidates;
    std::vector<double> bestUs;
    int calls = 0;
  };
  std::map<SpecKey, Trial> trials_;
  /// The candidate this call of an AUTO `choice` runs: the choice itself, or the next one of its trial.
  Choice trialTurn(const CollectiveSpec& spec, const Choice& choice, const Backend& backend);
  /// Records the call's time; after the last one settles the trial (agreeing over processes through `backend` when
  /// this process holds fewer of its ranks than the spec has).
  void trialResult(Backend& backend, const CollectiveSpec& spec, const std::vector<std::byte*>& bufs, double seconds,
                   const CommunicationOptions& opts, std::string_view group, std::int64_t step, int pack);
  std::vector<std::vector<std::byte>> staging_;

  mutable std::mutex traceMutex_;
  Trace trace_;
  Clock::time_point origin_;
  Clock::time_point lastRealEnd_;
  double lastEnd_ = 0;
};

}  // namespace collbench::strategy::detail
