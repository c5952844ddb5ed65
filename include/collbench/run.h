#pragma once
/// The run layer: one object takes a collective spec and a backend and does choose -> schedule (cached) -> buffers
/// -> run -> measure -> check, as nccl-tests' one harness (src/common.cu) serves every collective and
/// google/benchmark's runner serves every reporter. `collbench perf`, the --algo auto trial, `replay`, the strategy's
/// collective engine, `tune` and `regret` all run collectives through a Runner and keep only what is their own
/// (flags, tables, traces).
///
/// Typical use:
///   auto backend = makeBackend("host", 4);
///   Runner runner(*backend, RunnerOptions{});              // a topology and a tuning table inform the choice
///   const CollectiveSpec spec{Collective::AllReduce, 4, countForBytes(Collective::AllReduce, 4, 1 << 20, DType::F32)};
///   admitBuffers(spec, runner.localRank(), "-b/--minbytes 1 MiB");  // refuse what cannot fit, before allocating
///   const Plan plan = runner.choose(spec, CallConfig{});    // "auto": table/model, then a trial on hardware
///   const Timing t = runner.measure(spec, plan, MeasureSpec{});
///
/// Processes: with RunnerOptions::localRank >= 0 the backend runs one rank per process. Every process must then make
/// the same calls in the same order (choose, measure, times, sumOverProcesses), since trials and checks agree
/// through collectives on the backend itself.
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/reference.h"
#include "collbench/selector.h"
#include "collbench/tuning.h"

namespace collbench {

struct Topology;

/// How a call is configured by its user: an algorithm name or "auto" (the selector), and the chunk and channel
/// parameters (0 and 1: the algorithm's defaults, or under "auto" the selector's).
struct CallConfig {
  std::string algorithm = "auto";
  std::size_t chunkBytes = 0;
  int channels = 1;
  std::optional<Protocol> protocol = std::nullopt;  ///< AlgoParams::protocol of whatever runs
};

/// What runs: the choice (with the reason the header and -J report) and the generator's parameters, or a schedule
/// given whole (a user-written file, `--schedule`), which then runs instead of the generator's.
struct Plan {
  Choice choice;
  AlgoParams params;
  std::shared_ptr<const Schedule> schedule = {};
};

struct RunnerOptions {
  const Topology* topology = nullptr;  ///< informs the selector and gives hierarchical algorithms their hosts
  const TuningTable* table = nullptr;  ///< the selector's table (nullptr: the cost model alone)
  std::string tableSource = {};        ///< the table's file, for reasons
  int localRank = -1;                  ///< >= 0: one rank per process, this process holds that rank's buffers
  double timeoutSeconds = kDefaultTimeoutSeconds;
  int trialWarmup = 1;  ///< warm-up calls before a trial's first round (perf's -w, at least 1)
};

/// How `Runner::measure` times one configuration, as nccl-tests' flags say.
struct MeasureSpec {
  bool inPlace = false;
  int iterations = 20;    ///< -n
  int warmup = 1;         ///< -w
  bool blocking = false;  ///< -z: time every call alone (one backend run per iteration)
  bool check = true;      ///< -c: run once more on reference inputs and count wrong elements
  int average = 1;        ///< -a: 0 rank 0's time, 1 the mean over ranks, 2 the minimum, 3 the maximum
};

struct Timing {
  double seconds = 0;    ///< per call
  long long wrong = -1;  ///< wrong elements over every process; -1: not checked (simulators, -c 0)
};

/// Rounds of an --algo auto trial: round-robin over up to kTrialMaxCandidates, each round at least a millisecond of
/// each, the fastest round kept. A trial's rounds are ~4x shorter than a tune sweep's (~20 configurations), so one
/// burst of other work covers several in a row: as many rounds as regret's confirmation takes (3 per repetition, 7
/// repetitions). 105 ms per size of 5 candidates below a 1 ms collective.
inline constexpr int kTrialRounds = 21;
/// ... but fewer where 21 rounds would take longer than this (a 1 GiB host all-reduce takes ~0.3 s a call: 5
/// candidates x 21 rounds would be half a minute per size), down to kMinBudgetRounds.
inline constexpr double kTrialBudgetSeconds = 2.0;
/// Rounds a time budget leaves at least: the fastest of three survives one burst of other work.
inline constexpr int kMinBudgetRounds = 3;

/// The choice for `spec` without timing anything (Runner::plan, and the simulator's own commands): the algorithm
/// `config` forces, or `selector`'s (table, cost model; COLLBENCH_ALGO applies), with its chunk and channels unless
/// `config` sets them; `rankHost` gives hierarchical algorithms their hosts.
Plan planCall(const Selector& selector, const CollectiveSpec& spec, const CallConfig& config,
              std::vector<int> rankHost);

/// What a backend that decides more than the algorithm name said a forced call runs (Runner::plan puts the
/// backend's description, e.g. "NCCL 2.28: Tree/LL128, 16 channels (runner-up ...)", in the reason): its head,
/// "Tree/LL128, 16 channels"; "" for any other choice.
std::string describedConfiguration(const Choice& choice);

/// Admission, before anything is allocated or started: throws Error{InvalidArgument} naming `request` (the flag and
/// value that asked for it), what the call needs and the limit, when the buffers this process would hold for `spec`
/// (every rank's, or only `localRank`'s), with `scratchBytes` of the ranks' scratch (a schedule file's), do not fit in
/// the memory available now.
void admitBuffers(const CollectiveSpec& spec, int localRank, std::string_view request, double scratchBytes = 0);
/// Bytes of memory available to this process now (MemAvailable).
double availableMemoryBytes();
/// Peak memory of a built schedule per transfer (its ops, their dependencies and the validator's state), measured
/// with `collbench plan`: ring on 2048 ranks, 8.4 M transfers, 3.15 GB; tree on 1024 ranks, 2.1 M transfers, 0.81 GB;
/// direct on 1000 ranks, 2.0 M transfers, 1.06 GB (the most per transfer).
inline constexpr double kScheduleBytesPerTransfer = 530;
/// Admission of a schedule before it is built: throws Error{InvalidArgument} naming the call, its transfers
/// (estimateTransfers), the memory they need at `bytesPerTransfer` and the memory available, when they do not fit.
/// `hint` ends the line (what to do instead).
void admitSchedule(const CollectiveSpec& spec, const AlgorithmInfo& algo, const AlgoParams& params,
                   double bytesPerTransfer, std::string_view hint);

/// One rank's (or every rank's) reference buffers for a call, laid out as nccl-tests does: every rank's when this
/// process holds all of them (threads, simulators, one process driving all GPUs), `localRank`'s alone otherwise.
class ProcessBuffers {
 public:
  ProcessBuffers(const CollectiveSpec& spec, bool inPlace, int localRank);
  const Buffers& views() const { return local_ ? localViews_ : all_->views(); }
  void fill();
  /// Wrong elements among the ranks this process holds.
  std::size_t countWrong() const;

 private:
  CollectiveSpec spec_;
  int rank_;
  std::optional<RankBufferSet> all_;
  bool local_ = false;
  PageAlignedBytes in_, out_;
  std::size_t inBytes_ = 0, outBytes_ = 0, allocBytes_ = 0;
  Buffers localViews_;
};

/// `value` summed over every process of a one-rank-per-process backend (a one-element all-reduce through it);
/// `value` itself when `localRank` < 0 (this process holds every rank).
long long sumOverProcesses(Backend& backend, long long value, int localRank, double timeoutSeconds);

class Runner {
 public:
  /// `backend` and the options' topology and table must outlive the runner.
  Runner(Backend& backend, RunnerOptions options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  Backend& backend() const { return *backend_; }
  int localRank() const { return opt_.localRank; }
  /// The hosts of the first n ranks (AlgoParams::rankHost): the topology's, or empty.
  const std::vector<int>& rankHost() const { return rankHost_; }

  /// The choice for `spec` without timing anything: the algorithm `config` forces, or the selector's (table, cost
  /// model; COLLBENCH_ALGO applies), with the selector's chunk and channels unless `config` sets them.
  Plan plan(const CollectiveSpec& spec, const CallConfig& config) const;
  /// plan(), then, under "auto" on a backend that moves data, the trial: the choice and its near-tied runner-ups
  /// (trialCandidates) timed together here (kTrialRounds, kTrialBudgetSeconds), the fastest kept (settleTrial),
  /// agreed over the processes.
  Plan choose(const CollectiveSpec& spec, const CallConfig& config);
  /// The trial alone, for a plan made elsewhere (regret times what perf would run): `plan` unchanged on a simulator,
  /// when forced or when nothing else is predicted near it.
  Plan trial(const CollectiveSpec& spec, Plan plan);

  /// The schedule of (spec, algorithm, params), built once and kept for the runner's lifetime.
  const Schedule& schedule(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params);

  /// One configuration timed as nccl-tests times it: warm-up, then the iterations (one backend run of all of them,
  /// or one run per call when blocking), combined over ranks per `average`; then, with `check`, one more call on
  /// reference inputs and the wrong elements counted over every process. A backend that moves no data simulates
  /// each distinct (spec, algorithm, params) once (the in-place and out-of-place halves of a perf row are one
  /// simulation): Backend::runAlgorithm, the same method every simulating command uses.
  Timing measure(const CollectiveSpec& spec, const Plan& plan, const MeasureSpec& how);

  /// Microseconds of one call of each plan of `spec`, in order (tune, regret, the trial): on a simulator each one's
  /// time (cached as in measure); on hardware, repetitions round-robin over the distinct schedules keeping each
  /// one's fastest (`measure.repeats` of `measure.iterations` calls, warm-up before the first; `repeats` > 0
  /// overrides), so a burst of other work slows one repetition of every configuration rather than every repetition
  /// of one. After the first repetition a configuration times enough calls to last a millisecond. With
  /// `budgetSeconds` > 0, fewer repetitions (kMinBudgetRounds at least) where the first shows all would take longer.
  /// Times are agreed (their mean) over the processes, so that every process picks alike.
  std::vector<double> times(const CollectiveSpec& spec, const std::vector<Plan>& plans, const MeasureOptions& measure,
                            int repeats = 0, double budgetSeconds = 0);
  /// Forgets the cached schedules when there are more than `cap` (a long program whose shapes keep changing); a
  /// reference schedule() returned before is invalid after.
  void dropSchedulesOver(std::size_t cap);
  /// The simulated seconds of one call on a backend that moves no data (Backend::runAlgorithm), each distinct
  /// (spec, algorithm, params) simulated once.
  double simulate(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params);
  /// Out-of-place reference buffers for `spec` in this process, allocated on first use and kept for the runner's
  /// lifetime (replay prepares them before its timed loop). Call admitBuffers first.
  ProcessBuffers& buffers(const CollectiveSpec& spec);

  /// times() of one configuration.
  double timeUs(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params,
                const MeasureOptions& measure);

  /// sumOverProcesses through this runner's backend.
  long long sumOverProcesses(long long value) const;

 private:
  using Key = std::tuple<int, int, std::size_t, int, int, int, std::string, std::size_t, int, int>;
  static Key keyOf(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params);
  double agreedUs(double us) const;

  Backend* backend_;
  RunnerOptions opt_;
  std::vector<int> rankHost_;
  std::unique_ptr<Selector> selector_;
  std::map<Key, Schedule> schedules_;
  std::map<Key, double> simulated_;
  std::map<Key, std::unique_ptr<ProcessBuffers>> buffers_;
  std::map<const Schedule*, double> simulatedGiven_;  ///< simulated times of given schedules (Plan::schedule)
};

/// A backend made by name (makeBackend) and a runner over it: tune and regret make one per rank count.
struct OwnedRunner {
  OwnedRunner(std::string_view backendName, int nranks, const BackendOptions& options, RunnerOptions runnerOptions);
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Runner> runner;
};

}  // namespace collbench
