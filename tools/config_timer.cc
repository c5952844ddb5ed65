// ConfigTimer: the simulator's data-free paths for `tune` and `regret` on a simulated backend, interleaved repetitions
// elsewhere.
#include "config_timer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "collbench/backend_info.h"
#include "collbench/reference.h"
#include "world_options.h"

#ifdef COLLBENCH_HAVE_SIM
#include "sim_backend.h"
#else
namespace collbench::sim {
/// Without SimGrid nothing constructs one; ConfigTimer's destructor only needs the type to be complete.
class Simulator {};
}  // namespace collbench::sim
#endif

namespace collbench::cli {
namespace {

/// A repetition lasts at least this long: a thread wake-up or timer read costs 5-20 us on this VM, which is most of a
/// 3 us collective timed over the default 5 iterations, and at most 2% of a millisecond.
constexpr double kMinRepetitionSeconds = 1e-3;
/// ... without timing more calls than this per repetition (bounds a repetition of a sub-microsecond no-op).
constexpr int kMaxRepetitionIterations = 1000;

/// Iterations per repetition for a configuration whose call took `seconds`: at least `iterations`, and enough for
/// kMinRepetitionSeconds.
int repetitionIterations(double seconds, int iterations) {
  if (!(seconds > 0)) return iterations;
  const double want = std::ceil(kMinRepetitionSeconds / seconds);
  return std::max(iterations, static_cast<int>(std::min(want, double{kMaxRepetitionIterations})));
}

}  // namespace

ConfigTimer::ConfigTimer(const std::string& backend, int nranks, const BackendOptions& options,
                         const MeasureOptions& measure)
    : measure_(measure) {
#ifdef COLLBENCH_HAVE_SIM
  const bool topologyOnly = options.empty() || (options.size() == 1 && options.count("topology"));
  // The simulated backend this build links is SimGrid's: its Simulator times a configuration without a schedule run.
  const BackendCapabilities caps = backendCapabilities(backend);
  if (caps.device == DeviceKind::Simulated && topologyOnly) {
    const auto it = options.find("topology");
    const std::string topology = it == options.end() || it->second.empty() ? caps.defaultTopology : it->second;
    sim_ = std::make_unique<sim::Simulator>(loadTopology(topology), nranks);
    return;
  }
#endif
  owned_ = makeBackend(backend, nranks, options);
  backend_ = owned_.get();
}

ConfigTimer::ConfigTimer(Backend& backend, const MeasureOptions& measure, int localRank)
    : backend_(&backend), measure_(measure), localRank_(localRank) {}

ConfigTimer::~ConfigTimer() = default;

std::vector<double> ConfigTimer::times(const CollectiveSpec& spec, const std::vector<TimedConfig>& configs, int repeats,
                                       double budgetSeconds) {
  std::vector<double> out(configs.size(), 0);
#ifdef COLLBENCH_HAVE_SIM
  if (sim_) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      out[i] = sim_->runAlgorithm(spec, configs[i].algorithm, configs[i].params).seconds * 1e6;
    }
    return out;
  }
#endif
  if (!backend_->movesData()) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      out[i] = measureUs(*backend_, buildSchedule(spec, configs[i].algorithm, configs[i].params), measure_);
    }
    return out;
  }
  // Distinct schedules, and which one each configuration runs.
  std::vector<Schedule> schedules;
  std::vector<std::size_t> scheduleOf;
  std::map<std::tuple<std::string, std::size_t, int>, std::size_t> seen;
  for (const TimedConfig& c : configs) {
    Schedule s = buildSchedule(spec, c.algorithm, c.params);
    const auto key = std::make_tuple(c.algorithm, s.totalOps(), c.params.channels);
    const auto [it, fresh] = seen.emplace(key, schedules.size());
    if (fresh) schedules.push_back(std::move(s));
    scheduleOf.push_back(it->second);
  }
  PerfBuffers bufs(spec, /*inPlace=*/false, localRank_);
  bufs.fill();
  std::vector<double> best(schedules.size(), std::numeric_limits<double>::infinity());
  std::vector<int> iterations(schedules.size(), std::max(measure_.iterations, 1));
  int rounds = std::max(repeats > 0 ? repeats : measure_.repeats, 1);
  for (int k = 0; k < rounds; ++k) {
    double roundSeconds = 0;  // what each later round will take
    for (std::size_t j = 0; j < schedules.size(); ++j) {
      const RunOptions ro{iterations[j], k == 0 ? measure_.warmup : 0, measure_.timeoutSeconds};
      const double seconds = backend_->run(schedules[j], bufs.views(), ro).seconds;
      best[j] = std::min(best[j], seconds * 1e6);
      if (k > 0) continue;
      // Every process must then run as many calls and rounds: both come from the agreed first time.
      const double call = agreed(seconds * 1e6) / 1e6;
      iterations[j] = repetitionIterations(call, iterations[j]);
      roundSeconds += call * iterations[j];
    }
    if (k == 0 && budgetSeconds > 0 && roundSeconds > 0) {
      const double affordable = std::floor(budgetSeconds / roundSeconds);
      rounds = std::min(rounds, std::max(kMinBudgetRounds, static_cast<int>(std::min(affordable, 1e6))));
    }
  }
  for (double& us : best) us = agreed(us);
  for (std::size_t i = 0; i < configs.size(); ++i) out[i] = best[scheduleOf[i]];
  return out;
}

double ConfigTimer::agreed(double us) const {
  if (localRank_ < 0) return us;
  // The mean over processes through the backend: a sum of whole nanoseconds is exact, so every process sees the same
  // number and picks the same configuration.
  const long long ns = sumOverProcesses(*backend_, std::llround(us * 1e3), true, measure_.timeoutSeconds);
  return static_cast<double>(ns) / 1e3 / backend_->nranks();
}

bool ConfigTimer::measuresHardware() const { return backend_ && backend_->movesData(); }

Choice ConfigTimer::trial(const CollectiveSpec& spec, const Choice& choice, const AlgoParams& params) {
  const std::vector<Alternative> tried = trialCandidates(choice);
  if (!measuresHardware() || tried.size() < 2) return choice;
  std::vector<TimedConfig> configs;
  for (const Alternative& a : tried)
    configs.push_back({a.algorithm, AlgoParams{a.chunkBytes, a.channels, params.rankHost}});
  return settleTrial(choice, tried, times(spec, configs, kTrialRounds, kTrialBudgetSeconds));
}

double ConfigTimer::time(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params) {
  return times(spec, {TimedConfig{std::string(algorithm), params}}).front();
}

}  // namespace collbench::cli
