// `collbench sweep` as a library (sweep.h): the what-if grid, one point's simulation, workers.
#include "sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/tuning.h"
#include "collbench/units.h"

namespace collbench::sim {

struct SweepGrid::Current {
  Current(std::size_t v, int n, const Topology& t, const SimConfig& config)
      : variant(v),
        nranks(n),
        simulator(t, n, config),
        found(findTuningTable("", &t, "sim")),
        selector(SelectorOptions{&t, found.table ? &*found.table : nullptr, "sim", "auto", found.path}) {}
  std::size_t variant;
  int nranks;
  Simulator simulator;
  /// `--algo auto` chooses on the variant's topology as `sim --algo auto` does: its shipped tuning table where one
  /// holds its fingerprint (an override variant's has none), else its cost model.
  FoundTuningTable found;
  Selector selector;
};

namespace {

AlgoParams paramsOf(const SweepRequest& r, const Topology& t, int n) {
  AlgoParams p;
  p.chunkBytes = r.chunkBytes;
  p.channels = r.channels;
  p.rankHost = rankHosts(t, n);
  return p;
}

CollectiveSpec specOf(const SweepRequest& r, int n, std::size_t bytes) {
  return CollectiveSpec{r.collective, n, countForBytes(r.collective, n, bytes, r.dtype), r.dtype, r.op, r.root};
}

}  // namespace

SweepGrid::SweepGrid(SweepRequest request) : r_(std::move(request)) {
  if (r_.collective == Collective::Barrier)
    throw Error(Errc::InvalidArgument, "sweep does not time barrier (no bytes)");
  for (const std::string& algo : r_.algorithms) {
    if (algo != "auto") findAlgorithm(r_.collective, algo);
  }
  if (r_.sets.empty()) r_.sets = {""};
  for (const std::string& name : r_.topologies) {
    for (const std::string& set : r_.sets) {
      SweepVariant v{name, set, loadTopologyWithOverrides(name, set), "", {}};
      v.fingerprint = fingerprint(v.topology);
      const int available = static_cast<int>(v.topology.ranks.size());
      for (int n : r_.ranks) {
        if (n == kAllRanks) n = available;
        if (n < 1 || n > available) {
          throw Error(Errc::InvalidArgument, fmt::format("-g/--ranks {}: topology '{}' has {} ranks (use 1..{} or all)",
                                                         n, name, available, available));
        }
        v.ranks.push_back(n);
      }
      variants_.push_back(std::move(v));
    }
  }
  for (std::size_t vi = 0; vi < variants_.size(); ++vi) {
    for (int n : variants_[vi].ranks) {
      const AlgoParams params = paramsOf(r_, variants_[vi].topology, n);
      for (std::size_t bytes : r_.sizes) {
        checkSpec(specOf(r_, n, bytes), params);
        for (const std::string& algo : r_.algorithms) points_.push_back(SweepPoint{vi, n, bytes, algo});
      }
    }
  }
}

SweepGrid::~SweepGrid() = default;

SweepRow SweepGrid::run(std::size_t index) {
  const SweepPoint& p = points_.at(index);
  const SweepVariant& v = variants_[p.variant];
  if (!current_ || current_->variant != p.variant || current_->nranks != p.nranks) {
    current_.reset();
    current_ = std::make_unique<Current>(p.variant, p.nranks, v.topology, r_.config);
  }
  const CollectiveSpec spec = specOf(r_, p.nranks, p.bytes);
  const Plan plan = planCall(current_->selector, spec, CallConfig{p.algorithm, r_.chunkBytes, r_.channels},
                             rankHosts(v.topology, p.nranks));
  const std::string& chosen = plan.choice.algorithm;
  const SimResult r = current_->simulator.runAlgorithm(spec, chosen, plan.params);
  SweepRow row;
  row.topology = v.name;
  row.fingerprint = v.fingerprint;
  row.overrides = v.overrides;
  row.algorithm = chosen;
  row.ranks = p.nranks;
  row.bytes = std::max(spec.inputBytes(), spec.outputBytes());
  row.count = spec.count;
  row.timeUs = r.seconds * 1e6;
  row.algbw = r.seconds > 0 ? static_cast<double>(row.bytes) / r.seconds / 1e9 : 0;
  row.busbw = row.algbw * busBandwidthFactor(r_.collective, p.nranks);
  row.method = r.method;
  row.exact = r.exact;
  row.note = r.note;
  row.ops = r.ops;
  row.transfers = r.transfers;
  row.activities = r.simulatedActivities;
  row.wall = r.wallSeconds;
  row.cpu = r.cpuSeconds;
  return row;
}

std::vector<SweepRow> runSweep(SweepGrid& grid, const SweepControl& control) {
  const auto [begin, end] = control.shard.range(grid.points().size());
  std::vector<std::size_t> items(end - begin);
  std::iota(items.begin(), items.end(), begin);
  TerminalProgress progress("");
  ParallelOptions po{control.jobs, [&](std::size_t done, std::size_t total, std::size_t i) {
                       const SweepPoint& p = grid.points()[i];
                       progress.show(done, total,
                                     fmt::format("{} {} ranks {} {}", grid.variants()[p.variant].name, p.nranks,
                                                 formatBytes(p.bytes), p.algorithm));
                     }};
  // A worker's row travels as a one-row collbench-sweep document (its writer round-trips every field).
  const std::vector<std::string> answers = runInProcesses(
      items,
      [&](std::size_t i) {
        SweepRecord one;
        one.rows.push_back(grid.run(i));
        return toJson(one).dump();
      },
      po);
  std::vector<SweepRow> rows;
  rows.reserve(answers.size());
  for (const std::string& a : answers) rows.push_back(parseSweepRecord(a, "worker").rows.at(0));
  return rows;
}

}  // namespace collbench::sim
