// The aggregated method. The dependency graph (Dag) is evaluated batch by batch: a batch is every transfer that
// became ready once the previous batch finished (ring step s, a butterfly round, the all-to-all of direct ...).
// Within a batch, flows that share a directed link form a contention group; each group is keyed by everything
// SimGrid's outcome depends on (start offsets, sizes, link parameters, sharing structure), each distinct key is
// simulated once, and identical groups (every step of a uniform ring, every pair of a butterfly round) reuse its
// times. The result equals op-by-op simulation when no two batches use a link at the same time and no two
// reductions overlap on a node (reductions are taken as delays); both are checked on the resulting timeline.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "collbench/error.h"
#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

/// Transfers wait in `started` until their batch is simulated; local work takes bytes / rate.
class BatchTiming : public Dag::Timing {
 public:
  explicit BatchTiming(World& w) : w_(w) {}
  void transfer(Dag&, int m, double) override { started.push_back(m); }
  void exec(Dag& d, std::uint64_t tag, int rank, double t, double bytes) override {
    const double end = t + bytes / w_.reduceRate(rank);
    execs.push_back({w_.hostIndex(rank), t, end});
    d.later(tag, end);
  }
  struct Interval {
    int host;
    double start, end;
  };
  std::vector<int> started;
  std::vector<Interval> execs;

 private:
  World& w_;
};

}  // namespace

SimResult simulateAggregated(World& w, const Schedule& s, const Matching& mt, bool timeline) {
  Dag d(s, mt, w);
  const auto& xf = d.transfers();
  const std::size_t nx = xf.size();
  const bool crossTraffic = w.config().crossTraffic;
  GroupCache cache(w, crossTraffic);
  const std::size_t activitiesBefore = w.activities();

  std::vector<int> batchOf(nx, -1), groupOf(nx, -1);  // group: global instance id
  std::vector<double> batchMin, batchMax;             // start and end extremes per batch
  int groupsSoFar = 0;
  BatchTiming timing(w);
  d.begin(timing);
  std::vector<int> src, dst, group;
  std::vector<std::uint64_t> bytes;
  std::vector<double> start;
  while (!timing.started.empty()) {
    const std::vector<int> batch = std::move(timing.started);
    timing.started.clear();
    const int b = static_cast<int>(batchMin.size());
    src.clear();
    dst.clear();
    bytes.clear();
    start.clear();
    for (int m : batch) {
      const auto& x = xf[static_cast<std::size_t>(m)];
      src.push_back(x.src);
      dst.push_back(x.dst);
      bytes.push_back(x.wireBytes);
      start.push_back(x.start);
    }
    const int groups = contentionGroups(w, src, dst, crossTraffic, group);
    const std::vector<double> dur = cache.durations(src, dst, bytes, start, group, groups);
    double lo = start.front(), hi = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto m = static_cast<std::size_t>(batch[i]);
      batchOf[m] = b;
      groupOf[m] = groupsSoFar + group[i];
      lo = std::min(lo, start[i]);
      hi = std::max(hi, start[i] + dur[i]);
      d.later(Dag::tag(Dag::kTransfer, m), start[i] + dur[i]);
    }
    groupsSoFar += groups;
    batchMin.push_back(lo);
    batchMax.push_back(hi);
    d.drain();
  }
  d.checkFinished();

  SimResult r;
  r.seconds = d.makespan();
  r.method = "aggregated";
  r.ops = d.ops();
  r.transfers = nx;
  r.simulatedActivities = w.activities() - activitiesBefore;
  r.patterns = cache.patterns();
  const double tol = 1e-12 * std::max(r.seconds, 1e-9);

  // (a) No two batches use a directed link at the same time (bandwidth phase: after the latency under CM02, where a
  // flow in its latency phase takes no bandwidth). Fast path: batches that never overlap in time at all.
  bool sequential = true;
  double prevEnd = 0;
  for (std::size_t b = 0; b < batchMin.size() && sequential; ++b) {
    if (batchMin[b] < prevEnd - tol) sequential = false;
    prevEnd = std::max(prevEnd, batchMax[b]);
  }
  if (!sequential) {
    struct Use {
      double start, end;
      int m;
    };
    std::vector<Use> uses;
    for (std::size_t m = 0; m < nx; ++m) {
      if (groupOf[m] < 0 || xf[m].bytes == 0) continue;
      double lat = 0;
      if (w.config().model == NetworkModel::CM02) {
        for (DirLink l : w.route(xf[m].src, xf[m].dst)) lat += w.latency(l);
      }
      uses.push_back({xf[m].start + lat, xf[m].end, static_cast<int>(m)});
    }
    std::sort(uses.begin(), uses.end(), [](const Use& a, const Use& b) { return a.start < b.start; });
    // Per link, the group of the flows that used it last and when the last of them ends: a flow of another group
    // starting before that end overlaps it (an overlap with an older user would already have been one with this).
    struct Occupant {
      int group;
      double end;
    };
    std::unordered_map<DirLink, Occupant> link;
    for (const Use& u : uses) {
      if (!r.exact) break;
      const auto& x = xf[static_cast<std::size_t>(u.m)];
      const int g = groupOf[static_cast<std::size_t>(u.m)];
      auto check = [&](DirLink l) {
        auto [it, inserted] = link.try_emplace(l, Occupant{g, u.end});
        if (inserted) return;
        if (it->second.group == g) {
          it->second.end = std::max(it->second.end, u.end);
          return;
        }
        if (it->second.end > u.start + tol && r.exact) {
          r.exact = false;
          const TopoLink& tl = w.topology().links[static_cast<std::size_t>(l / 2)];
          r.note = fmt::format(
              "flows of different batches share link {} -> {} at {:.9g} s (transfer rank {} -> {}, batch {})",
              l % 2 == 0 ? tl.a : tl.b, l % 2 == 0 ? tl.b : tl.a, u.start, x.src, x.dst,
              batchOf[static_cast<std::size_t>(u.m)]);
        }
        it->second = Occupant{g, u.end};
      };
      for (DirLink l : w.route(x.src, x.dst)) check(l);
      if (crossTraffic) {
        for (DirLink l : w.route(x.dst, x.src)) check(l);
      }
    }
  }
  // (b) Reductions were taken as delays: exact when no two overlap on a node (SimGrid would share its rate).
  if (r.exact && !timing.execs.empty()) {
    auto& ex = timing.execs;
    std::sort(ex.begin(), ex.end(),
              [](const auto& a, const auto& b) { return a.host != b.host ? a.host < b.host : a.start < b.start; });
    for (std::size_t i = 1; i < ex.size(); ++i) {
      if (ex[i].host != ex[i - 1].host) continue;
      if (ex[i].start < ex[i - 1].end - tol) {
        r.exact = false;
        r.note = fmt::format("reductions overlap on one node at {:.9g} s (they would share its rate)", ex[i].start);
        break;
      }
      ex[i].end = std::max(ex[i].end, ex[i - 1].end);
    }
  }
  if (timeline) r.spans = d.spans();
  return r;
}

}  // namespace collbench::sim::detail
