// The aggregated method. Steps: the k-th send of every rank on every channel (ring step k, recursive-doubling
// round k, ...). Within a step, flows that share a directed link form a contention group; each distinct group is
// simulated once in SimGrid (GroupCache) and every identical step reuses the whole step's times. The dependency
// graph is then evaluated with those durations (Dag), and the assumptions that make this equal to op-by-op
// simulation are checked on the resulting timeline.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "collbench/error.h"
#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

// Every transfer one unit long and local work free: a transfer then starts at its level, the length of the longest
// chain of transfers before it (through deps, rendezvous and its connection's order).
class LevelTiming : public Dag::Timing {
 public:
  void transfer(Dag& d, int m, double t) override {
    d.later(Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)), t + 1);
  }
  void exec(Dag& d, std::uint64_t tag, int, double t, double) override { d.later(tag, t); }
};

class KnownTiming : public Dag::Timing {
 public:
  KnownTiming(World& w, const std::vector<double>& duration) : w_(w), duration_(duration) {}
  void transfer(Dag& d, int m, double t) override {
    d.later(Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)), t + duration_[static_cast<std::size_t>(m)]);
  }
  void exec(Dag& d, std::uint64_t tag, int rank, double t, double bytes) override {
    const double end = t + bytes / w_.reduceRate(rank);
    execs.push_back({w_.hostIndex(rank), t, end});
    d.later(tag, end);
  }
  struct Interval {
    int host;
    double start, end;
  };
  std::vector<Interval> execs;

 private:
  World& w_;
  const std::vector<double>& duration_;
};

std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

}  // namespace

SimResult simulateAggregated(World& w, const Schedule& s, const Matching& mt, bool timeline) {
  Dag d(s, mt, w);
  const auto& xf = d.transfers();
  const std::size_t nx = xf.size();
  const bool crossTraffic = w.config().crossTraffic;

  // Step of each transfer: its level. Ring step s is level s, a butterfly round is one level, the folding steps of
  // non-powers of two get their own, and all sends of a direct all-to-all share one.
  std::vector<int> step(nx, 0);
  int steps = 0;
  {
    LevelTiming levels;
    d.begin(levels);
    d.checkFinished();
    for (std::size_t m = 0; m < nx; ++m) {
      step[m] = static_cast<int>(xf[m].start);
      steps = std::max(steps, step[m] + 1);
    }
    d.reset();
  }
  std::vector<int> stepStart(static_cast<std::size_t>(steps) + 1, 0), byStep;
  for (std::size_t m = 0; m < nx; ++m) {
    if (!w.sameNode(xf[m].src, xf[m].dst)) ++stepStart[static_cast<std::size_t>(step[m]) + 1];
  }
  for (int k = 0; k < steps; ++k) stepStart[static_cast<std::size_t>(k) + 1] += stepStart[static_cast<std::size_t>(k)];
  byStep.resize(static_cast<std::size_t>(stepStart.back()));
  {
    std::vector<int> fill(stepStart.begin(), stepStart.end() - 1);
    for (std::size_t m = 0; m < nx; ++m) {
      if (!w.sameNode(xf[m].src, xf[m].dst)) {
        byStep[static_cast<std::size_t>(fill[static_cast<std::size_t>(step[m])]++)] = static_cast<int>(m);
      }
    }
  }

  // Durations, step by step; a step identical to an earlier one (same flows in the same order) reuses it.
  GroupCache cache(w, crossTraffic);
  std::vector<double> duration(nx, 0);
  std::vector<int> groupOf(nx, -1);  // global group instance
  std::vector<int> groupSize;
  struct Done {
    int step;
    std::vector<int> group;  // by position in the step
    int groups;
  };
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> seen;  // step hash -> indices into done
  std::vector<Done> done;
  const double t0 = w.now();
  const std::size_t activitiesBefore = w.activities();
  for (int k = 0; k < steps; ++k) {
    const int b = stepStart[static_cast<std::size_t>(k)], e = stepStart[static_cast<std::size_t>(k) + 1];
    if (b == e) continue;
    std::uint64_t h = 1469598103934665603ull;
    for (int i = b; i < e; ++i) {
      const auto& x = xf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(i)])];
      h = mix(mix(mix(h, static_cast<std::uint64_t>(x.src)), static_cast<std::uint64_t>(x.dst)), x.bytes);
    }
    const Done* same = nullptr;
    for (std::size_t j : seen[h]) {
      const Done& c = done[j];
      const int cb = stepStart[static_cast<std::size_t>(c.step)];
      if (stepStart[static_cast<std::size_t>(c.step) + 1] - cb != e - b) continue;
      bool equal = true;
      for (int i = 0; i < e - b && equal; ++i) {
        const auto& x = xf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(b + i)])];
        const auto& y = xf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(cb + i)])];
        equal = x.src == y.src && x.dst == y.dst && x.bytes == y.bytes;
      }
      if (equal) {
        same = &c;
        break;
      }
    }
    const int base = static_cast<int>(groupSize.size());
    if (same != nullptr) {
      const int cb = stepStart[static_cast<std::size_t>(same->step)];
      for (int i = 0; i < e - b; ++i) {
        const auto m = static_cast<std::size_t>(byStep[static_cast<std::size_t>(b + i)]);
        duration[m] = duration[static_cast<std::size_t>(byStep[static_cast<std::size_t>(cb + i)])];
        groupOf[m] = base + same->group[static_cast<std::size_t>(i)];
      }
      groupSize.resize(groupSize.size() + static_cast<std::size_t>(same->groups), 0);
    } else {
      std::vector<int> src, dst, group;
      std::vector<std::uint64_t> bytes;
      for (int i = b; i < e; ++i) {
        const auto& x = xf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(i)])];
        src.push_back(x.src);
        dst.push_back(x.dst);
        bytes.push_back(x.bytes);
      }
      const int groups = contentionGroups(w, src, dst, crossTraffic, group);
      const std::vector<double> dur = cache.durations(src, dst, bytes, group, groups);
      for (int i = 0; i < e - b; ++i) {
        const auto m = static_cast<std::size_t>(byStep[static_cast<std::size_t>(b + i)]);
        duration[m] = dur[static_cast<std::size_t>(i)];
        groupOf[m] = base + group[static_cast<std::size_t>(i)];
      }
      groupSize.resize(groupSize.size() + static_cast<std::size_t>(groups), 0);
      seen[h].push_back(done.size());
      done.push_back(Done{k, std::move(group), groups});
    }
    for (int i = b; i < e; ++i) ++groupSize[static_cast<std::size_t>(groupOf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(i)])])];
  }
  (void)t0;

  KnownTiming timing(w, duration);
  d.begin(timing);
  d.checkFinished();

  SimResult r;
  r.seconds = d.makespan();
  r.method = "aggregated";
  r.ops = d.ops();
  r.transfers = nx;
  r.simulatedActivities = w.activities() - activitiesBefore;
  r.patterns = cache.patterns();
  const double tol = 1e-12 * std::max(r.seconds, 1e-9);

  // (a) Each group was simulated with its flows starting together.
  std::vector<double> groupStart(groupSize.size(), -1);
  for (std::size_t m = 0; m < nx && r.exact; ++m) {
    const int g = groupOf[m];
    if (g < 0 || groupSize[static_cast<std::size_t>(g)] < 2) continue;
    double& gs = groupStart[static_cast<std::size_t>(g)];
    if (gs < 0) {
      gs = xf[m].start;
    } else if (std::abs(gs - xf[m].start) > tol) {
      r.exact = false;
      r.note = fmt::format("flows that share links in step {} start at different times ({:.9g} s and {:.9g} s, "
                           "transfer rank {} -> {})",
                           step[m], gs, xf[m].start, xf[m].src, xf[m].dst);
    }
  }
  // (b) No two groups use a directed link at the same time (bandwidth phase: after the latency under CM02, where a
  // flow in its latency phase takes no bandwidth). Fast path: steps that never overlap in time.
  if (r.exact) {
    bool sequential = true;
    double prevEnd = 0;
    for (int k = 0; k < steps && sequential; ++k) {
      const int b = stepStart[static_cast<std::size_t>(k)], e = stepStart[static_cast<std::size_t>(k) + 1];
      double lo = 0, hi = 0;
      bool any = false;
      for (int i = b; i < e; ++i) {
        const auto& x = xf[static_cast<std::size_t>(byStep[static_cast<std::size_t>(i)])];
        lo = any ? std::min(lo, x.start) : x.start;
        hi = any ? std::max(hi, x.end) : x.end;
        any = true;
      }
      if (!any) continue;
      if (lo < prevEnd - tol) sequential = false;
      prevEnd = std::max(prevEnd, hi);
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
      struct Occupant {
        int group;
        double end;
      };
      std::unordered_map<DirLink, Occupant> link;
      for (const Use& u : uses) {
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
            r.note = fmt::format("flows of different steps share link {} {} {} at {:.9g} s (transfer rank {} -> {}, "
                                 "step {})",
                                 l % 2 == 0 ? tl.a : tl.b, "->", l % 2 == 0 ? tl.b : tl.a, u.start, x.src, x.dst,
                                 step[static_cast<std::size_t>(u.m)]);
          }
          it->second = Occupant{g, u.end};
        };
        for (DirLink l : w.route(x.src, x.dst)) check(l);
        if (crossTraffic) {
          for (DirLink l : w.route(x.dst, x.src)) check(l);
        }
      }
    }
  }
  // (c) Reductions were taken as delays: exact when no two overlap on a node (SimGrid would share its rate).
  if (r.exact && !timing.execs.empty()) {
    auto& ex = timing.execs;
    std::sort(ex.begin(), ex.end(), [](const auto& a, const auto& b) {
      return a.host != b.host ? a.host < b.host : a.start < b.start;
    });
    for (std::size_t i = 1; i < ex.size(); ++i) {
      if (ex[i].host == ex[i - 1].host && ex[i].start < ex[i - 1].end - tol) {
        r.exact = false;
        r.note = fmt::format("reductions overlap on one node at {:.9g} s (they would share its rate)", ex[i].start);
        break;
      }
      if (ex[i].host == ex[i - 1].host) ex[i].end = std::max(ex[i].end, ex[i - 1].end);
    }
  }
  if (timeline) r.spans = d.spans();
  return r;
}

}  // namespace collbench::sim::detail
