// `collbench tune` as a library (include/collbench/tune.h): the grid, one point's measurement, passes, workers.
#include "collbench/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <ctime>
#include <nlohmann/json.hpp>
#include <numeric>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/selector.h"
#include "collbench/units.h"

namespace collbench {

namespace {

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void sortEntry(TuningEntry& e) {
  std::stable_sort(e.candidates.begin(), e.candidates.end(),
                   [](const auto& a, const auto& b) { return a.timeUs < b.timeUs; });
}

}  // namespace

std::vector<int> defaultTuneRanks(const Topology& t) {
  const int total = static_cast<int>(t.ranks.size());
  std::vector<int> out;
  for (int n = 2; n < total; n *= 2) out.push_back(n);
  out.push_back(total);
  const std::vector<int> hosts = rankHosts(t, total);  // a prefix of it is rankHosts(t, n)
  std::vector<int> first, last;                        // per host count k (index k-1): first and last rank count
  int seen = 0;
  for (int n = 1; n <= total; ++n) {
    const int h = hosts[static_cast<std::size_t>(n - 1)];
    if (h + 1 > seen) {
      seen = h + 1;
      first.push_back(n);
      last.push_back(n);
    } else {
      last.back() = n;
    }
  }
  if (static_cast<int>(first.size()) < total) {  // some host holds several ranks
    for (int k = 1; k <= static_cast<int>(first.size()); ++k) {
      if (k > kBoundaryHostCountsAll && !std::has_single_bit(static_cast<unsigned>(k))) continue;
      const int lo = first[static_cast<std::size_t>(k - 1)], hi = last[static_cast<std::size_t>(k - 1)];
      for (int n : {lo, std::min(lo + 1, hi), hi}) {
        if (n >= 2) out.push_back(n);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<TunePoint> tunePointsFor(const std::vector<Collective>& collectives, int nranks,
                                     const std::vector<std::size_t>& sizes, DType dtype) {
  std::vector<TunePoint> out;
  for (Collective c : collectives) {
    for (std::size_t b : sizes) {
      CollectiveSpec spec{c, nranks, countForBytes(c, nranks, b, dtype), dtype};
      const std::size_t key = std::max(spec.inputBytes(), spec.outputBytes());
      if (spec.count == 0) continue;
      out.push_back({c, nranks, key, spec});
    }
  }
  return out;
}

/// What a rank count's points share: the runner (or the model) and the pruning model, kept while consecutive points
/// have that rank count (one backend world at a time, as a process backend needs).
struct Tuner::RankState {
  int nranks = 0;
  std::vector<int> hosts;
  std::unique_ptr<OwnedRunner> timer;
  std::optional<CostModel> model, pruner;
};

Tuner::Tuner(TuneRequest request) : r_(std::move(request)) {
  if (r_.collectives.empty()) throw Error(Errc::InvalidArgument, "--collectives: empty list");
  for (Collective c : r_.collectives) {
    if (c == Collective::Barrier) throw Error(Errc::InvalidArgument, "tune does not time barrier (no bytes)");
  }
  const int topoRanks = r_.topology ? static_cast<int>(r_.topology->ranks.size()) : 0;
  if (r_.ranks.empty()) r_.ranks = r_.topology ? defaultTuneRanks(*r_.topology) : std::vector<int>{2, 4};
  for (int n : r_.ranks) {
    if (r_.topology && n > topoRanks) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--ranks {}: topology '{}' has {} ranks", n, printable(r_.topology->name), topoRanks));
    }
  }
  for (const std::string& f : r_.algorithms) {  // typos fail loudly
    bool found = false;
    for (const auto& alg : algorithms()) {
      found =
          found || (alg.name == f && !alg.native &&
                    std::find(r_.collectives.begin(), r_.collectives.end(), alg.collective) != r_.collectives.end());
    }
    if (!found) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--algos: '{}' is not a schedule algorithm of the collectives swept", printable(f)));
    }
  }
  for (int n : r_.ranks) {
    for (const TunePoint& p : tunePointsFor(r_.collectives, n, r_.sizes, r_.dtype)) grid_.push_back(p);
  }
}

Tuner::~Tuner() = default;

TuningProvenance Tuner::provenance() const {
  TuningProvenance p;
  p.tool = toolName();
  p.commandLine = r_.commandLine;
  p.backend = r_.backend;
  p.host = r_.host;
  p.date = utcNow();
  p.topology = r_.topology ? r_.topology->name : "";
  p.topologyFingerprint = r_.topology ? fingerprint(*r_.topology) : "";
  return p;
}

TuningSection Tuner::newSection(std::string_view library) const {
  TuningSection s;
  s.topology = r_.topology ? r_.topology->name : "";
  s.fingerprint = r_.topology ? fingerprint(*r_.topology) : "";
  s.backend = r_.backend;
  s.library = std::string(library);
  return s;
}

int Tuner::hostsOf(int n) const {
  if (!r_.topology) return 1;
  const std::vector<int> h = rankHosts(*r_.topology, n);
  return *std::max_element(h.begin(), h.end()) + 1;
}

std::vector<std::string> Tuner::algorithmsFor(Collective c, int n) const {
  std::vector<std::string> out;
  for (const auto& a : algorithms()) {
    if (a.collective != c || a.native) continue;
    if (!r_.algorithms.empty() && std::find(r_.algorithms.begin(), r_.algorithms.end(), a.name) == r_.algorithms.end())
      continue;
    if (a.traits.needsHosts || a.traits.needsSwitchReduction) {
      if (!r_.topology) continue;  // needs the hosts of the ranks, or a switch that reduces
      const CostModel m(*r_.topology, n);
      if (!m.estimate(CollectiveSpec{c, n, 1024, r_.dtype}, a.name).supported) continue;  // unequal hosts
    }
    out.push_back(a.name);
  }
  return out;
}

std::unique_ptr<OwnedRunner> Tuner::timerFor(int n, const std::string& topologyPath) const {
  BackendOptions o = r_.world;
  const std::string t = topologyPath.empty() ? r_.topologyPath : topologyPath;
  if (!t.empty()) o["topology"] = t;
  RunnerOptions ro;
  ro.localRank = r_.localRank;
  ro.timeoutSeconds = r_.measure.timeoutSeconds;
  return std::make_unique<OwnedRunner>(r_.backend, n, o, ro);
}

Tuner::RankState& Tuner::stateFor(int n) {
  if (state_ && state_->nranks == n) return *state_;
  state_.reset();  // the previous rank count's backend goes before the next one exists
  auto s = std::make_unique<RankState>();
  s->nranks = n;
  s->hosts = r_.topology ? rankHosts(*r_.topology, n) : std::vector<int>{};
  auto modelOf = [&] { return r_.topology ? CostModel(*r_.topology, n) : CostModel::defaultFlat(n); };
  if (r_.backend == kModelBackend) {
    s->model.emplace(modelOf());
  } else {
    s->timer = timerFor(n);
    measuresHardware_ = measuresHardware_ || s->timer->backend->movesData();
  }
  if (r_.prune > 0) s->pruner.emplace(modelOf());
  state_ = std::move(s);
  return *state_;
}

std::size_t Tuner::configurationsAt(std::size_t index) const {
  const TunePoint& p = grid_.at(index);
  const std::vector<int> hosts = r_.topology ? rankHosts(*r_.topology, p.nranks) : std::vector<int>{};
  std::size_t total = 0;
  for (const std::string& a : algorithmsFor(p.collective, p.nranks))
    total += sweepConfigs(p.collective, a, r_.chunks, r_.channels, hosts).size();
  return total;
}

std::optional<TuningEntry> Tuner::measurePoint(std::size_t index) {
  const TunePoint& p = grid_.at(index);
  const int n = p.nranks;
  RankState& s = stateFor(n);
  TuningEntry e{p.collective, n, hostsOf(n), p.bytes, {}};
  const std::vector<std::string> algos = algorithmsFor(p.collective, n);
  // --prune F: skip configurations the cost model puts more than F times above its best at this point.
  double bestModel = 0;
  if (s.pruner) {
    for (const std::string& a : algos) {
      for (const AlgoParams& params : sweepConfigs(p.collective, a, r_.chunks, r_.channels, s.hosts)) {
        const Estimate est = s.pruner->estimate(p.spec, a, params);
        if (est.supported && (bestModel == 0 || est.terms.us < bestModel)) bestModel = est.terms.us;
      }
    }
  }
  std::vector<Plan> configs;
  for (const std::string& a : algos) {
    for (const AlgoParams& params : sweepConfigs(p.collective, a, r_.chunks, r_.channels, s.hosts)) {
      if (s.pruner && bestModel > 0) {
        const Estimate est = s.pruner->estimate(p.spec, a, params);
        if (est.supported && est.terms.us > r_.prune * bestModel) continue;
      }
      if (s.model) {
        const Estimate est = s.model->estimate(p.spec, a, params);
        if (est.supported)
          e.candidates.push_back(TuningCandidate{a, "", params.chunkBytes, params.channels, est.terms.us});
      } else if (backendCanRun(r_.backend, p.spec, findAlgorithm(p.collective, a), params)) {
        configs.push_back(Plan{Choice{a, ""}, params});  // not a schedule too large to build, as the selector
      }
    }
  }
  if (s.timer) {  // every configuration of the point together (interleaved repetitions on real backends)
    const std::vector<double> us = s.timer->runner->times(p.spec, configs, r_.measure);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      e.candidates.push_back(TuningCandidate{configs[i].choice.algorithm, "", configs[i].params.chunkBytes,
                                             configs[i].params.channels, us[i]});
    }
  }
  if (e.candidates.empty()) return std::nullopt;
  sortEntry(e);
  return e;
}

std::string encodeTuningEntry(const std::optional<TuningEntry>& e) {
  if (!e) return "";
  nlohmann::json cands = nlohmann::json::array();
  for (const TuningCandidate& k : e->candidates)
    cands.push_back({k.algorithm, k.protocol, k.chunkBytes, k.channels, k.timeUs});
  return nlohmann::json{static_cast<int>(e->collective), e->nranks, e->nnodes, e->bytes, cands}.dump();
}

std::optional<TuningEntry> decodeTuningEntry(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text);
  TuningEntry e{
      static_cast<Collective>(j[0].get<int>()), j[1].get<int>(), j[2].get<int>(), j[3].get<std::size_t>(), {}};
  for (const nlohmann::json& k : j[4]) {
    e.candidates.push_back(TuningCandidate{k[0].get<std::string>(), k[1].get<std::string>(), k[2].get<std::size_t>(),
                                           k[3].get<int>(), k[4].get<double>()});
  }
  return e;
}

TuningSection sweepCollbench(Tuner& tuner, const TuneControl& control) {
  const auto [begin, end] = control.shard.range(tuner.grid().size());
  std::vector<std::size_t> items(end - begin);
  std::iota(items.begin(), items.end(), begin);
  TerminalProgress progress("tune: " + control.progressPrefix);
  ParallelOptions po{control.jobs, [&](std::size_t done, std::size_t total, std::size_t i) {
                       if (!progress.enabled()) return;  // counting configurations builds cost models
                       const TunePoint& p = tuner.grid()[i];
                       progress.show(done, total,
                                     fmt::format("{} n={} {} ({} configurations)", toString(p.collective), p.nranks,
                                                 formatBytes(p.bytes), tuner.configurationsAt(i)));
                     }};
  const std::vector<std::string> answers = runInProcesses(
      items, [&](std::size_t i) { return encodeTuningEntry(tuner.measurePoint(i)); }, po);
  TuningSection sec = tuner.newSection(kLibraryCollbench);
  for (const std::string& a : answers) {
    if (std::optional<TuningEntry> e = decodeTuningEntry(a)) sec.entries.push_back(std::move(*e));
  }
  return sec;
}

TuningSection sweepCollbenchPasses(Tuner& tuner, const TuneControl& control, int passes) {
  // Each pass sweeps the grid again later, meeting more of a machine's modes (meanOfPasses); the simulator and the
  // model give the same times every pass.
  auto label = [&](int pass) { return passes > 1 ? fmt::format("pass {}/{}: ", pass, passes) : std::string(); };
  TuneControl c = control;
  c.progressPrefix = control.progressPrefix + label(1);
  std::vector<TuningSection> done{sweepCollbench(tuner, c)};
  while (tuner.measuresHardware() && static_cast<int>(done.size()) < passes) {
    c.progressPrefix = control.progressPrefix + label(static_cast<int>(done.size()) + 1);
    done.push_back(sweepCollbench(tuner, c));
  }
  return meanOfPasses(done);
}

}  // namespace collbench
