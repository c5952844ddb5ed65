// `collbench regret` as a library (include/collbench/regret.h): the held-out grid, one point's oracle, the summary.
#include "collbench/regret.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/units.h"

namespace collbench {

RegretGrid heldOutGrid(const TuningSection& section, Collective collective, int topologyRanks, std::vector<int> ranks,
                       std::vector<std::size_t> sizes, const std::string& tableName) {
  std::set<int> tableRanks;
  std::map<int, std::set<std::size_t>> tableSizes;
  for (const TuningEntry& e : section.entries) {
    if (e.collective != collective) continue;
    tableRanks.insert(e.nranks);
    tableSizes[e.nranks].insert(e.bytes);
  }
  if (tableRanks.empty()) {
    throw Error(Errc::InvalidArgument, fmt::format("{} has no {} entries", printable(tableName), toString(collective)));
  }
  RegretGrid g;
  // Held-out rank counts: those inside the table's range that it lacks (else its own, with a note).
  g.ranks = std::move(ranks);
  if (g.ranks.empty()) {
    const int maxRanks = topologyRanks > 0 ? topologyRanks : *tableRanks.rbegin();
    for (int n = *tableRanks.begin(); n <= std::min(*tableRanks.rbegin(), maxRanks); ++n) {
      if (!tableRanks.count(n)) g.ranks.push_back(n);
    }
    if (g.ranks.empty()) {
      g.ranks.assign(tableRanks.begin(), tableRanks.end());
      g.note = "the table holds every rank count in its range: held-out sizes only";
    }
  }
  // Held-out sizes: geometric midpoints of the table's sizes.
  g.sizes = std::move(sizes);
  if (g.sizes.empty()) {
    const std::set<std::size_t>& ts = tableSizes.begin()->second;
    for (auto it = ts.begin(); std::next(it) != ts.end(); ++it) {
      const double mid = std::sqrt(static_cast<double>(*it) * static_cast<double>(*std::next(it)));
      const std::size_t b = static_cast<std::size_t>(mid) / kRegretSizeAlignBytes * kRegretSizeAlignBytes;
      if (b > *it && b < *std::next(it)) g.sizes.push_back(b);
    }
  }
  if (g.sizes.empty()) throw Error(Errc::InvalidArgument, "no held-out sizes (the table needs two sizes at least)");
  return g;
}

RegretSummary summarizeRegret(const std::vector<RegretRow>& rows) {
  RegretSummary s;
  double logSum = 0, tableLogSum = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const RegretRow& r = rows[i];
    logSum += std::log(r.regret());
    tableLogSum += std::log(r.tableRegret());
    s.tableWorst = std::max(s.tableWorst, r.tableRegret());
    s.trialled = s.trialled || r.tableChoice.algorithm != r.chosen.algorithm ||
                 r.tableChoice.chunkBytes != r.chosen.chunkBytes || r.tableChoice.channels != r.chosen.channels;
    if (!s.worstRow || r.regret() > s.worst) {
      s.worst = r.regret();
      s.worstRow = i;
    }
  }
  const auto points = static_cast<double>(std::max<std::size_t>(rows.size(), 1));
  s.geomean = std::exp(logSum / points);
  s.tableGeomean = std::exp(tableLogSum / points);
  return s;
}

/// The runner and cost model of one rank count, kept while consecutive points have it.
struct RegretSweep::RankState {
  int nranks = 0;
  std::vector<int> hosts;
  std::unique_ptr<OwnedRunner> timer;
  std::optional<CostModel> model;
};

RegretSweep::RegretSweep(RegretRequest request) : r_(std::move(request)) {
  const std::string fp = r_.topology ? fingerprint(*r_.topology) : "";
  section_ = r_.table.find(fp, kLibraryCollbench, r_.backend);
  if (!section_) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{} has no collbench section for {} (fingerprint '{}')", printable(r_.tablePath),
                            r_.topology ? printable(r_.topology->name) : "runs without a topology", fp));
  }
  grid_ = heldOutGrid(*section_, r_.collective, r_.topology ? static_cast<int>(r_.topology->ranks.size()) : 0, r_.ranks,
                      r_.sizes, r_.tablePath);
}

RegretSweep::~RegretSweep() = default;

bool RegretSweep::measured() const { return backendMovesData(r_.backend); }

int RegretSweep::tablePoints(const std::vector<RegretRow>& rows) const {
  int n = 0;
  for (const RegretRow& r : rows) n += section_->find(r_.collective, r.nranks, r.bytes) ? 1 : 0;
  return n;
}

std::optional<RegretRow> RegretSweep::measurePoint(std::size_t index) {
  const int n = grid_.ranks.at(index / grid_.sizes.size());
  const std::size_t b = grid_.sizes[index % grid_.sizes.size()];
  const Collective coll = r_.collective;
  if (!state_ || state_->nranks != n) {
    state_.reset();
    auto s = std::make_unique<RankState>();
    s->nranks = n;
    BackendOptions bo;
    if (!r_.topologyPath.empty()) bo["topology"] = r_.topologyPath;
    // The runner chooses as `perf --algo auto` does: this table (or the model), then the trial on hardware.
    s->timer = std::make_unique<OwnedRunner>(
        r_.backend, n, bo, RunnerOptions{r_.topology ? &*r_.topology : nullptr, &r_.table, r_.tablePath});
    s->hosts = r_.topology ? rankHosts(*r_.topology, n) : std::vector<int>{};
    if (r_.topology) s->model.emplace(*r_.topology, n);
    state_ = std::move(s);
  }
  Runner& runner = *state_->timer->runner;
  const bool measuredHere = state_->timer->backend->movesData();
  CollectiveSpec spec{coll, n, countForBytes(coll, n, b, r_.dtype), r_.dtype};
  if (spec.count == 0) return std::nullopt;
  const std::size_t key = std::max(spec.inputBytes(), spec.outputBytes());
  const Plan tablePlan = runner.plan(spec, CallConfig{});
  const Choice& tableChoice = tablePlan.choice;
  // What --algo auto runs here: the choice after perf's trial.
  const Choice choice = runner.trial(spec, tablePlan).choice;
  // Every algorithm at the configuration the selector would use for it, and at its defaults.
  std::map<std::string, std::vector<std::pair<std::size_t, int>>> configs;
  for (const auto& alg : algorithms()) {
    if (alg.collective != coll || alg.native) continue;
    const bool needsTopology = alg.traits.needsHosts || alg.traits.needsSwitchReduction;
    if (needsTopology && (!state_->model || !state_->model->estimate(spec, alg.name).supported)) continue;
    for (const AlgoParams& p : sweepConfigs(coll, alg.name, r_.chunks, r_.channels)) {
      configs[alg.name].push_back({p.chunkBytes, p.channels});
    }
  }
  for (const Alternative& alt : tableChoice.ranking) configs[alt.algorithm].push_back({alt.chunkBytes, alt.channels});
  configs[choice.algorithm].push_back({choice.chunkBytes, choice.channels});
  configs[tableChoice.algorithm].push_back({tableChoice.chunkBytes, tableChoice.channels});
  RegretRow row;
  row.nranks = n;
  row.bytes = key;
  row.chosen = RegretChoice{choice.algorithm, choice.chunkBytes, choice.channels};
  row.chosenSource = choice.source;
  row.predictedUs = tableChoice.predictedUs;
  row.tableChoice = RegretChoice{tableChoice.algorithm, tableChoice.chunkBytes, tableChoice.channels};
  std::vector<Plan> timed;
  for (auto& [alg, cfgs] : configs) {
    std::sort(cfgs.begin(), cfgs.end());
    cfgs.erase(std::unique(cfgs.begin(), cfgs.end()), cfgs.end());
    for (const auto& [chunk, ch] : cfgs) {
      const AlgoParams params{chunk, ch, state_->hosts};
      // What the backend cannot build is no candidate of the selector's either.
      if (backendCanRun(r_.backend, spec, findAlgorithm(coll, alg), params))
        timed.push_back(Plan{Choice{alg, ""}, params});
    }
  }
  const std::vector<double> us = runner.times(spec, timed, r_.measure);
  std::size_t chosenAt = 0, oracleAt = 0, tableAt = 0;
  auto same = [](const Plan& p, const RegretChoice& c) {
    return p.choice.algorithm == c.algorithm && p.params.chunkBytes == c.chunkBytes && p.params.channels == c.channels;
  };
  for (std::size_t i = 0; i < timed.size(); ++i) {
    if (same(timed[i], row.chosen)) {
      row.chosen.timeUs = us[i];
      chosenAt = i;
    }
    if (same(timed[i], row.tableChoice)) {
      row.tableChoice.timeUs = us[i];
      tableAt = i;
    }
    if (row.best.timeUs < 0 || us[i] < row.best.timeUs) {
      row.best = RegretChoice{timed[i].choice.algorithm, timed[i].params.chunkBytes, timed[i].params.channels, us[i]};
      oracleAt = i;
    }
  }
  row.sweepChosenUs = row.chosen.timeUs;
  row.sweepBestUs = row.best.timeUs;
  row.sweepTableUs = row.tableChoice.timeUs;
  if (measuredHere && (row.chosen.timeUs > row.best.timeUs || row.tableChoice.timeUs > row.best.timeUs)) {
    // The sweep's best is the minimum of many noisy times, so it is biased low (the winner's curse): the chosen, the
    // table's choice and the best are timed again, together, and the regrets are ratios there. A chosen configuration
    // that is then the fastest one is the best measured. Few configurations make short rounds, which one burst of
    // other work can cover for several in a row: more of them.
    const std::vector<double> again = runner.times(spec, {timed[chosenAt], timed[oracleAt], timed[tableAt]}, r_.measure,
                                                   kConfirmationRoundsPerRepeat * r_.measure.repeats);
    row.chosen.timeUs = again[0];
    row.tableChoice.timeUs = again[2];
    row.best.timeUs = again[1];
    for (const std::size_t k : {chosenAt, tableAt}) {  // a faster one of those is the best measured
      const double t = k == chosenAt ? again[0] : again[2];
      if (t < row.best.timeUs) {
        row.best = RegretChoice{timed[k].choice.algorithm, timed[k].params.chunkBytes, timed[k].params.channels, t};
      }
    }
  }
  return row;
}

std::vector<RegretRow> sweepRegret(RegretSweep& sweep, const RegretControl& control) {
  const auto [begin, end] = control.shard.range(sweep.points());
  std::vector<std::size_t> items(end - begin);
  std::iota(items.begin(), items.end(), begin);
  TerminalProgress progress("regret: ");
  const RegretGrid& g = sweep.grid();
  ParallelOptions po{
      control.jobs, [&](std::size_t done, std::size_t total, std::size_t i) {
        progress.show(done, total,
                      fmt::format("n={} {}", g.ranks[i / g.sizes.size()], formatBytes(g.sizes[i % g.sizes.size()])));
      }};
  // A worker's row travels as a one-row collbench-regret document (its writer round-trips every field).
  const std::vector<std::string> answers = runInProcesses(
      items,
      [&](std::size_t i) {
        const std::optional<RegretRow> row = sweep.measurePoint(i);
        if (!row) return std::string();
        RegretRecord one;
        one.rows.push_back(*row);
        return toJson(one).dump();
      },
      po);
  std::vector<RegretRow> rows;
  for (const std::string& a : answers) {
    if (!a.empty()) rows.push_back(parseRegretRecord(a, "worker").rows.at(0));
  }
  return rows;
}

}  // namespace collbench
