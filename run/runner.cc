// The Runner: choice, schedule cache, buffers, timing, checking and agreement over processes (run.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/topology.h"

namespace collbench {
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

/// nccl-tests -a: which rank's time a call reports.
double combineRanks(const RunResult& r, int average) {
  if (r.rankSeconds.empty()) return r.seconds;
  const auto& t = r.rankSeconds;
  switch (average) {
    case 0:
      return t.front();
    case 2:
      return *std::min_element(t.begin(), t.end());
    case 3:
      return *std::max_element(t.begin(), t.end());
    default:
      return r.seconds;
  }
}

}  // namespace

Runner::Runner(Backend& backend, RunnerOptions options) : backend_(&backend), opt_(std::move(options)) {
  if (opt_.topology) rankHost_ = rankHosts(*opt_.topology, backend.nranks());
  selector_ = std::make_unique<Selector>(
      SelectorOptions{opt_.topology, opt_.table, std::string(backend.name()), "auto", opt_.tableSource});
}

Runner::~Runner() = default;

Plan planCall(const Selector& selector, const CollectiveSpec& spec, const CallConfig& config,
              std::vector<int> rankHost) {
  Plan p;
  p.params = AlgoParams{config.chunkBytes, config.channels, std::move(rankHost), config.protocol};
  if (config.algorithm != "auto") {
    p.choice = Choice{config.algorithm, "forced by --algo"};
    p.choice.source = "forced";
    return p;
  }
  p.choice = selector.choose(spec);
  // The selector's configuration unless the user set one (then every candidate runs with it).
  if (config.chunkBytes == 0 && config.channels == 1) {
    p.params.chunkBytes = p.choice.chunkBytes;
    p.params.channels = p.choice.channels;
  } else {
    p.choice.chunkBytes = config.chunkBytes;
    p.choice.channels = config.channels;
    for (Alternative& alt : p.choice.ranking) {
      alt.chunkBytes = config.chunkBytes;
      alt.channels = config.channels;
    }
  }
  return p;
}

Plan Runner::plan(const CollectiveSpec& spec, const CallConfig& config) const {
  Plan p = planCall(*selector_, spec, config, rankHost_);
  // A backend that decides more than the algorithm name (the simulator's emulated NCCL) says what it will run.
  if (p.choice.source == "forced") {
    if (std::string described = backend_->describeCall(spec, config.algorithm); !described.empty()) {
      p.choice.reason = std::move(described);
    }
  }
  return p;
}

std::string describedConfiguration(const Choice& choice) {
  const std::string& why = choice.reason;
  const std::size_t colon = why.find(": "), open = why.find(" (");
  if (choice.source != "forced" || why.rfind("forced by", 0) == 0 || colon == std::string::npos) return "";
  return why.substr(colon + 2, open == std::string::npos ? std::string::npos : open - colon - 2);
}

Plan Runner::choose(const CollectiveSpec& spec, const CallConfig& config) {
  Plan p = plan(spec, config);
  return config.algorithm == "auto" ? trial(spec, std::move(p)) : p;
}

Plan Runner::trial(const CollectiveSpec& spec, Plan p) {
  const std::vector<Alternative> tried = trialCandidates(p.choice);
  if (!backend_->movesData() || tried.size() < 2) return p;
  std::vector<Plan> candidates;
  for (const Alternative& a : tried) {
    candidates.push_back(Plan{Choice{a.algorithm, ""}, AlgoParams{a.chunkBytes, a.channels, rankHost_}});
  }
  const MeasureOptions rounds{1, std::max(opt_.trialWarmup, 1), kTrialRounds, opt_.timeoutSeconds};
  p.choice = settleTrial(p.choice, tried, times(spec, candidates, rounds, kTrialRounds, kTrialBudgetSeconds));
  p.params.chunkBytes = p.choice.chunkBytes;
  p.params.channels = p.choice.channels;
  return p;
}

Runner::Key Runner::keyOf(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params) {
  return Key(static_cast<int>(spec.kind), spec.nranks, spec.count, static_cast<int>(spec.dtype),
             static_cast<int>(spec.op), spec.root, algorithm, params.chunkBytes, params.channels,
             params.protocol ? static_cast<int>(*params.protocol) : -1);
}

const Schedule& Runner::schedule(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params) {
  const Key key = keyOf(spec, algorithm, params);
  auto it = schedules_.find(key);
  if (it == schedules_.end()) it = schedules_.emplace(key, buildSchedule(spec, algorithm, params)).first;
  return it->second;
}

void Runner::dropSchedulesOver(std::size_t cap) {
  if (schedules_.size() > cap) schedules_.clear();
}

double Runner::simulate(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params) {
  const Key key = keyOf(spec, algorithm, params);
  auto it = simulated_.find(key);
  if (it == simulated_.end()) {
    const RunResult r = backend_->runAlgorithm(spec, algorithm, params, RunOptions{1, 0, opt_.timeoutSeconds});
    it = simulated_.emplace(key, r.seconds).first;
  }
  return it->second;
}

ProcessBuffers& Runner::buffers(const CollectiveSpec& spec) {
  const Key key = keyOf(spec, "", AlgoParams{});
  auto it = buffers_.find(key);
  if (it == buffers_.end()) {
    it = buffers_.emplace(key, std::make_unique<ProcessBuffers>(spec, /*inPlace=*/false, opt_.localRank)).first;
  }
  return *it->second;
}

Timing Runner::measure(const CollectiveSpec& spec, const Plan& plan, const MeasureSpec& how) {
  Timing t;
  if (!backend_->movesData()) {
    if (!plan.schedule) {
      t.seconds = simulate(spec, plan.choice.algorithm, plan.params);
    } else {
      auto it = simulatedGiven_.find(plan.schedule.get());
      if (it == simulatedGiven_.end()) {
        const RunResult r = backend_->run(*plan.schedule, Buffers(static_cast<std::size_t>(spec.nranks)),
                                          RunOptions{1, 0, opt_.timeoutSeconds});
        it = simulatedGiven_.emplace(plan.schedule.get(), r.seconds).first;
      }
      t.seconds = it->second;
    }
    return t;
  }
  const Schedule& s = plan.schedule ? *plan.schedule : schedule(spec, plan.choice.algorithm, plan.params);
  ProcessBuffers bufs(spec, how.inPlace, opt_.localRank);
  bufs.fill();
  if (how.blocking) {
    backend_->run(s, bufs.views(), RunOptions{0, how.warmup, opt_.timeoutSeconds});
    double total = 0;
    for (int i = 0; i < how.iterations; ++i) {
      total += combineRanks(backend_->run(s, bufs.views(), RunOptions{1, 0, opt_.timeoutSeconds}), how.average);
    }
    t.seconds = how.iterations > 0 ? total / how.iterations : 0;
  } else {
    t.seconds = combineRanks(
        backend_->run(s, bufs.views(), RunOptions{how.iterations, how.warmup, opt_.timeoutSeconds}), how.average);
  }
  if (how.check) {
    bufs.fill();
    backend_->run(s, bufs.views(), RunOptions{1, 0, opt_.timeoutSeconds});
    t.wrong = sumOverProcesses(static_cast<long long>(bufs.countWrong()));
  }
  return t;
}

std::vector<double> Runner::times(const CollectiveSpec& spec, const std::vector<Plan>& plans,
                                  const MeasureOptions& measure, int repeats, double budgetSeconds) {
  std::vector<double> out(plans.size(), 0);
  if (!backend_->movesData()) {
    for (std::size_t i = 0; i < plans.size(); ++i) {
      out[i] = simulate(spec, plans[i].choice.algorithm, plans[i].params) * 1e6;
    }
    return out;
  }
  // Distinct schedules, and which one each plan runs (a chunk at or above the data repeats the schedule of the chunk
  // before: same algorithm, ops and channels).
  std::vector<const Schedule*> schedules;
  std::vector<std::size_t> scheduleOf;
  std::map<std::tuple<std::string, std::size_t, int>, std::size_t> seen;
  for (const Plan& p : plans) {
    const Schedule& s = schedule(spec, p.choice.algorithm, p.params);
    const auto key = std::make_tuple(p.choice.algorithm, s.totalOps(), p.params.channels);
    const auto [it, fresh] = seen.emplace(key, schedules.size());
    if (fresh) schedules.push_back(&s);
    scheduleOf.push_back(it->second);
  }
  ProcessBuffers bufs(spec, /*inPlace=*/false, opt_.localRank);
  bufs.fill();
  std::vector<double> best(schedules.size(), std::numeric_limits<double>::infinity());
  std::vector<int> iterations(schedules.size(), std::max(measure.iterations, 1));
  int rounds = std::max(repeats > 0 ? repeats : measure.repeats, 1);
  for (int k = 0; k < rounds; ++k) {
    double roundSeconds = 0;  // what each later round will take
    for (std::size_t j = 0; j < schedules.size(); ++j) {
      const RunOptions ro{iterations[j], k == 0 ? measure.warmup : 0, measure.timeoutSeconds};
      const double seconds = backend_->run(*schedules[j], bufs.views(), ro).seconds;
      best[j] = std::min(best[j], seconds * 1e6);
      if (k > 0) continue;
      // Every process must then run as many calls and rounds: both come from the agreed first time.
      const double call = agreedUs(seconds * 1e6) / 1e6;
      iterations[j] = repetitionIterations(call, iterations[j]);
      roundSeconds += call * iterations[j];
    }
    if (k == 0 && budgetSeconds > 0 && roundSeconds > 0) {
      const double affordable = std::floor(budgetSeconds / roundSeconds);
      rounds = std::min(rounds, std::max(kMinBudgetRounds, static_cast<int>(std::min(affordable, 1e6))));
    }
  }
  for (double& us : best) us = agreedUs(us);
  for (std::size_t i = 0; i < plans.size(); ++i) out[i] = best[scheduleOf[i]];
  return out;
}

double Runner::timeUs(const CollectiveSpec& spec, const std::string& algorithm, const AlgoParams& params,
                      const MeasureOptions& measure) {
  return times(spec, {Plan{Choice{algorithm, ""}, params}}, measure).front();
}

long long Runner::sumOverProcesses(long long value) const {
  return collbench::sumOverProcesses(*backend_, value, opt_.localRank, opt_.timeoutSeconds);
}

double Runner::agreedUs(double us) const {
  if (opt_.localRank < 0) return us;
  // The mean over processes through the backend: a sum of whole nanoseconds is exact, so every process sees the same
  // number and picks the same configuration.
  const long long ns = sumOverProcesses(std::llround(us * 1e3));
  return static_cast<double>(ns) / 1e3 / backend_->nranks();
}

OwnedRunner::OwnedRunner(std::string_view backendName, int nranks, const BackendOptions& options,
                         RunnerOptions runnerOptions)
    : backend(makeBackend(backendName, nranks, options)),
      runner(std::make_unique<Runner>(*backend, std::move(runnerOptions))) {}

}  // namespace collbench
