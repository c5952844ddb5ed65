#pragma once
/// Algorithm choice for `--algo auto`: (algorithm, chunk_bytes, channels) per (topology, collective, nranks, bytes).
///
/// Order of precedence, like NCCL's NCCL_ALGO over its tuner:
///   1. a forced algorithm: SelectorOptions::algo (the --algo flag) when not "auto", else the environment variable
///      COLLBENCH_ALGO: "ring" (every collective that has it) or "all_reduce:tree;broadcast:ring" (per collective,
///      ';'-separated). A name no collective has is Error{InvalidArgument}; a name valid for other collectives only
///      leaves this one to the steps below. The configuration comes from the table or the model.
///   2. the tuning table's section for the topology's fingerprint ("" without a topology): at a table point its
///      fastest candidate; between points predictFromTable() (model-shaped interpolation in log bytes and nranks).
///   3. the cost model on the topology (or, without one, CostModel::defaultFlat over the algorithms
///      whose AlgorithmTraits::defaultModel is set),
///      minimised over each algorithm's kModelChunkCandidates x kModelChannelCandidates, among the configurations the
///      backend can run: one whose schedule holds more than kMaterializeTransferLimit transfers only on the simulator,
///      for algorithms it times without the schedule (AlgorithmTraits::timedWithoutSchedule).
///   On a GPU system (the topology's GPUs have an `arch`) and a backend that runs "nccl" (the simulator emulates it),
///   NCCL's own collective competes in 2 and 3 with the time NCCL 2.28's model predicts for its choice (nccl_model.h;
///   NCCL_* variables of the process apply), and is chosen where it is faster.
///   4. on a backend that moves data, `collbench perf` (tools/config_timer.h) times the choice of 2 or 3 against its
///      near-tied runner-ups (trialCandidates) and runs the fastest (settleTrial).
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/types.h"

namespace collbench {

struct AlgoParams;
struct AlgorithmInfo;
struct Topology;
struct TuningTable;
class CostModel;

struct Alternative {
  std::string algorithm;
  std::size_t chunkBytes = 0;
  int channels = 1;
  double predictedUs = -1;  ///< < 0: unknown
};

struct Choice {
  Choice() = default;
  Choice(std::string algorithm_, std::string reason_) : algorithm(std::move(algorithm_)), reason(std::move(reason_)) {}

  std::string algorithm;
  std::string reason;  ///< what the choice rests on, for `collbench plan` and run headers (one line)
  std::size_t chunkBytes = 0;
  int channels = 1;
  /// "forced", "table", "interpolated", "extrapolated", "model", "trial" (settleTrial), or "" for choices made
  /// without the selector.
  std::string source;
  double predictedUs = -1;  ///< < 0: unknown
  /// Every candidate considered, fastest first (the choice first when chosen by time): plan prints the runner-up.
  std::vector<Alternative> ranking;
};

struct SelectorOptions {
  const Topology* topology = nullptr;  ///< must outlive the Selector
  const TuningTable* table = nullptr;  ///< must outlive the Selector
  std::string backend;                 ///< prefers the table section measured on this backend
  std::string algo = "auto";           ///< --algo
  std::string tableSource;             ///< file name, for reasons
  /// Threads pricing the cost model's candidates on a topology, each with its own cost model of it; 0: one per core
  /// from kParallelPricingRanks ranks on, one below.
  int pricingThreads = 0;
};

/// Ranks from which the cost model's candidates are priced on every core by default. Selecting for 1 GiB on multi_node
/// fabrics with 2 cores saves 0.04 of 0.80 s at 4096 GPUs, 0.34 of 1.0 s at 16384 and 10 of 22 s at 131072 (where the
/// tree's and recursive doubling's routes take 8.5 and 8.3 s); below, a second cost model costs about what it saves.
inline constexpr int kParallelPricingRanks = 4096;

/// Chooses for many specs, caching one cost model per rank count. Not thread-safe.
class Selector {
 public:
  explicit Selector(SelectorOptions options);
  ~Selector();
  Choice choose(const CollectiveSpec& spec) const;
  /// An algorithm's best configuration under the cost model, or why the model cannot price it.
  struct Priced {
    Alternative best;
    std::string unsupported;
  };

 private:
  /// Prices `algorithms` (SelectorOptions::pricingThreads), in their order.
  std::vector<Priced> price(const CollectiveSpec& spec, const std::vector<std::string>& algorithms) const;
  const CostModel& model(int nranks) const;
  /// "nccl" with its predicted time on a GPU system whose backend runs it; nullopt elsewhere.
  std::optional<Alternative> ncclCandidate(const CollectiveSpec& spec) const;
  /// The choice of "nccl" (after ncclCandidate) with a reason naming NCCL's emulated choice, then `note`.
  Choice ncclChoice(const CollectiveSpec& spec, const Alternative& nccl, const std::string& note,
                    std::vector<Alternative> ranking = {}) const;
  SelectorOptions opt_;
  mutable std::map<int, std::unique_ptr<CostModel>> models_;
  struct NcclState;  ///< NCCL's systems by rank count and its environment, made on first use
  mutable std::unique_ptr<NcclState> nccl_;
};

/// Trial (`--algo auto` on a backend that moves data): a table predicts from other sizes, rank counts and another
/// hour of the same machine, and on a shared 2-vCPU host the fastest algorithm of a point can change between runs by
/// 1.3-1.9x (a cache cliff between two table sizes; which handoff mode the scheduler is in). Collectives of training
/// repeat one size every step (gradient buckets), so, like STAR-MPI's delayed finalisation and cuDNN's benchmark
/// mode, the harness times the choice and its near-tied runner-ups on the machine before the run and keeps the
/// fastest. Only algorithms predicted within this factor of the choice are tried: the worst regret the table alone
/// showed here was 1.9x, so a runner-up further off than 2x is not worth the trial's time.
inline constexpr double kTrialSpread = 2.0;
/// ... and at most this many (the choice included): every schedule algorithm of all-reduce but hierarchical.
inline constexpr std::size_t kTrialMaxCandidates = 5;

/// The configurations a trial times: the choice first, then the fastest-predicted configuration of each other
/// algorithm in the choice's ranking predicted within kTrialSpread of it, at most kTrialMaxCandidates. Just the choice
/// when it was forced or nothing was predicted (a lone candidate needs no trial).
std::vector<Alternative> trialCandidates(const Choice& choice);

/// The choice after a trial: the fastest of `tried` by `measuredUs` (same order; the earlier one on a tie), its
/// source "trial", and a reason naming the table's choice, the times and the runner-up.
Choice settleTrial(const Choice& tableChoice, const std::vector<Alternative>& tried,
                   const std::vector<double>& measuredUs);

/// Whether backend `backend` can run `algorithm` for `spec` at `params`: its schedule holds at most
/// kMaterializeTransferLimit transfers, or the simulator times it without the schedule
/// (AlgorithmTraits::timedWithoutSchedule). "" is the simulator (plan without --backend); a name that is no backend
/// (tune's "model") runs nothing, so nothing is refused. The selector chooses, and tune and regret time, only these.
bool backendCanRun(std::string_view backend, const CollectiveSpec& spec, const AlgorithmInfo& algorithm,
                   const AlgoParams& params);

/// Without a topology or table: the default flat cost model over the algorithms AlgorithmTraits::defaultModel
/// offers (COLLBENCH_ALGO applies).
Choice chooseAlgorithm(const CollectiveSpec& spec);
Choice chooseAlgorithm(const CollectiveSpec& spec, const SelectorOptions& options);

/// The forced algorithm for `c` from an --algo / COLLBENCH_ALGO value ("" when it names none for c). Throws
/// Error{InvalidArgument} for names no collective has or malformed entries.
std::string forcedAlgorithm(std::string_view value, Collective c);

/// Configurations the model tries for algorithms that read them (paramSpace): 0 = the generator's default.
inline constexpr std::size_t kModelChunkCandidates[] = {0, 128 * 1024, 2 * 1024 * 1024};
inline constexpr int kModelChannelCandidates[] = {1, 2, 4};

}  // namespace collbench
