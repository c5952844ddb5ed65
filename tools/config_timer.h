#pragma once
/// Timing the configurations (algorithm, chunk, channels) of one point for `collbench tune` and `collbench regret`,
/// and the `--algo auto` trial.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/selector.h"
#include "collbench/tuning.h"

namespace collbench::sim {
class Simulator;
}

namespace collbench::cli {

struct TimedConfig {
  std::string algorithm;
  AlgoParams params;
};

/// Rounds of an --algo auto trial (`perf`, and `regret`'s chosen): round-robin over up to 5 candidates, each round at
/// least a millisecond of each, the fastest round kept. A trial's rounds are ~4x shorter than a tune sweep's (~20
/// configurations), so one burst of other work covers several in a row: as many rounds as regret's confirmation
/// takes (3 per repetition, 7 repetitions). 105 ms per size of 5 candidates below a 1 ms collective.
inline constexpr int kTrialRounds = 21;
/// ... but fewer where 21 rounds would take longer than this (a 1 GiB host all-reduce takes ~0.3 s a call: 5
/// candidates x 21 rounds would be half a minute per size), down to kMinBudgetRounds.
inline constexpr double kTrialBudgetSeconds = 2.0;
/// Rounds a time budget leaves at least: the fastest of three survives one burst of other work.
inline constexpr int kMinBudgetRounds = 3;

/// On the simulator (a simulated backend, with at most a "topology" option) each configuration is simulated once with
/// Simulator::runAlgorithm, as `collbench sim` does: schedules too large to build (rings in small chunks, long
/// pipelines) go through the data-free ring model and the pipeline extrapolation instead of millions of ops built and
/// simulated one by one (a 2.8 GiB all-reduce over 31 ranks: regret's 22 configurations of that point took 218 s,
/// 10 s this way).
/// Real backends: every distinct schedule is built once (a chunk at or above the data repeats the schedule of the
/// chunk before: same algorithm, ops and channels), and the repetitions go round-robin over the schedules, keeping
/// each one's fastest (MeasureOptions::repeats of `iterations` calls each; warm-up before the first). Other work on
/// the machine only adds time, and in rounds a burst of it slows one repetition of every configuration rather than
/// every repetition of one, so the comparison between configurations survives a loaded machine. After the first
/// repetition, a configuration's later ones time enough calls to last a millisecond (short collectives would
/// otherwise be timed mostly as wake-up jitter).
class ConfigTimer {
 public:
  ConfigTimer(const std::string& backend, int nranks, const BackendOptions& options, const MeasureOptions& measure);
  /// Times on `backend`, which must outlive this. With `localRank` >= 0 the backend runs one rank per process: this
  /// process holds that rank's buffers only, and every process must time the same configurations in the same order,
  /// since the times are agreed through the backend (summed over the processes) so that all of them pick alike.
  ConfigTimer(Backend& backend, const MeasureOptions& measure, int localRank);
  ~ConfigTimer();
  /// Microseconds of one call of each configuration of `spec`, in order; `repeats` > 0 overrides
  /// MeasureOptions::repeats. With `budgetSeconds` > 0, fewer repetitions (kMinBudgetRounds at least) where the
  /// first one shows that all would take longer.
  std::vector<double> times(const CollectiveSpec& spec, const std::vector<TimedConfig>& configs, int repeats = 0,
                            double budgetSeconds = 0);
  double time(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params);
  /// `--algo auto` on hardware: times trialCandidates(choice) together (kTrialRounds rounds, kTrialBudgetSeconds)
  /// and returns settleTrial's choice; the choice unchanged on a simulator or when it has no near-tied runner-up.
  /// `params` gives the configurations their hosts.
  Choice trial(const CollectiveSpec& spec, const Choice& choice, const AlgoParams& params);
  /// Whether times vary from one measurement to the next (a backend that moves data, not a simulation).
  bool measuresHardware() const;

 private:
  /// `us` measured by this process, agreed over the processes of a one-rank-per-process backend (their mean).
  double agreed(double us) const;
  std::unique_ptr<Backend> owned_;
  Backend* backend_ = nullptr;
  std::unique_ptr<sim::Simulator> sim_;
  MeasureOptions measure_;
  int localRank_ = -1;
};

}  // namespace collbench::cli
