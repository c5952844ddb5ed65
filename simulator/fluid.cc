// The fluid method: the dependency graph (Dag) timed by an event-driven fluid model of the network instead of
// SimGrid, for schedules too large to simulate op by op (a pipelined tree's extrapolation window at thousands of
// GPUs). It keeps SimGrid's CM02 semantics where they are local and drops the one that is global:
//  - a transfer waits its route's latency (no bandwidth used), then moves its wire bytes;
//  - each flow's sharing penalty is its route's latency (1 when that is 0), as CM02's (network/weight-S 0);
//  - a reduction is a flow of `bytes` on its node's reduction resource (the node's rate shared by its reductions,
//    penalty 1, as SimGrid's executions on one host);
//  - a flow's rate is its smallest weighted share over its resources: capacity x (1 / penalty) / (sum of 1 / penalty
//    of the flows on the resource). Max-min (SimGrid's solver) would hand what a flow bottlenecked elsewhere leaves
//    on a resource to the others; this rule does not, so a flow is never faster than under max-min and a transfer
//    never ends earlier. Where every flow of a resource is bottlenecked on it (saturated links: a pipeline's steady
//    state) the two agree.
// Each event touches only the flows on the resources it changes, so its cost does not grow with the machine.
#include <algorithm>
#include <cmath>
#include <queue>
#include <vector>

#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

/// A route with no latency shares with this penalty (SimGrid's CM02 creates its variable with penalty 1 then).
constexpr double kZeroLatencyPenalty = 1.0;

class FluidTiming : public Dag::Timing {
 public:
  explicit FluidTiming(World& w) : w_(w), firstHost_(static_cast<int>(2 * w.topology().links.size())) {
    for (int r = 0; r < w.nranks(); ++r) {
      const auto h = static_cast<std::size_t>(w.hostIndex(r));
      if (h >= hostRate_.size()) hostRate_.resize(h + 1, 0);
      hostRate_[h] = w.reduceRate(r);
    }
    resources_.resize(static_cast<std::size_t>(firstHost_) + hostRate_.size());
    hostResource_.resize(hostRate_.size());
    for (std::size_t h = 0; h < hostRate_.size(); ++h) hostResource_[h] = {firstHost_ + static_cast<int>(h)};
  }

  void transfer(Dag& d, int m, double t) override {
    const Dag::Xfer& x = d.transfer(m);
    const std::vector<DirLink>& route = w_.route(x.src, x.dst);
    double latency = 0;
    for (DirLink l : route) latency += w_.latency(l);
    const double weight = 1.0 / (latency > 0 ? latency : kZeroLatencyPenalty);
    const int id =
        add(Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)), &route, weight, static_cast<double>(x.wireBytes));
    schedule(t + latency, Event::kJoin, id);
  }

  void exec(Dag&, std::uint64_t tag, int rank, double t, double bytes) override {
    const int id = add(tag, &hostResource_[static_cast<std::size_t>(w_.hostIndex(rank))], 1.0, bytes);
    schedule(t, Event::kJoin, id);
  }

  /// Runs the events in time order, reporting each finished transfer or reduction to the graph (which starts what
  /// follows through transfer() and exec()).
  void run(Dag& d) {
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      Flow& f = flows_[static_cast<std::size_t>(e.flow)];
      if (e.version != f.version) continue;
      if (e.kind == Event::kJoin) {
        join(e.flow, e.t);
        continue;
      }
      if (e.t != f.queuedEnd) continue;  // superseded by an earlier end
      if (f.end > e.t) {                 // slowed down since: one event at the new end
        f.queuedEnd = f.end;
        schedule(f.end, Event::kEnd, e.flow);
        continue;
      }
      const std::uint64_t tag = f.tag;
      leave(e.flow, e.t);
      d.complete(tag, e.t);
    }
  }

 private:
  struct Flow {
    std::uint64_t tag = 0;
    const std::vector<int>* resources = nullptr;  // a route's directed links, or one host's reduction
    double weight = 1;                            // 1 / sharing penalty
    double remaining = 0;                         // bytes left at `since`
    double rate = 0;                              // bytes/s since `since`
    double since = 0;
    double end = 0;        // when it ends at the present rate
    double queuedEnd = 0;  // the end event in the queue (never later than `end`: a slower rate waits for it)
    int version = 0;       // events of older versions are stale (a slot's version grows across reuse)
  };
  struct Event {
    enum Kind { kJoin, kEnd };
    double t;
    std::uint64_t order;  // ties in time: first scheduled first, so runs are deterministic
    Kind kind;
    int flow, version;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
  };
  struct Resource {
    std::vector<int> flows;
    double weights = 0;  // sum of the flows' weights
  };

  double capacity(int r) const {
    return r < firstHost_ ? w_.bandwidth(r) : hostRate_[static_cast<std::size_t>(r - firstHost_)];
  }

  int add(std::uint64_t tag, const std::vector<int>* resources, double weight, double bytes) {
    int id = static_cast<int>(flows_.size());
    if (free_.empty()) {
      flows_.emplace_back();
    } else {
      id = free_.back();
      free_.pop_back();
    }
    Flow& f = flows_[static_cast<std::size_t>(id)];
    f.tag = tag;
    f.resources = resources;
    f.weight = weight;
    f.remaining = bytes;
    f.rate = 0;
    f.end = f.queuedEnd = -1;  // no end queued
    ++f.version;
    return id;
  }
  void schedule(double t, Event::Kind kind, int flow) {
    events_.push({t, order_++, kind, flow, flows_[static_cast<std::size_t>(flow)].version});
  }

  void join(int id, double t) {
    Flow& f = flows_[static_cast<std::size_t>(id)];
    f.since = t;
    if (f.remaining <= 0 || f.resources->empty()) {
      f.end = f.queuedEnd = t;
      schedule(t, Event::kEnd, id);
      return;
    }
    for (int r : *f.resources) {
      Resource& res = resources_[static_cast<std::size_t>(r)];
      res.flows.push_back(id);
      res.weights += f.weight;
    }
    reshare(*f.resources, t);
  }

  void leave(int id, double t) {
    Flow& f = flows_[static_cast<std::size_t>(id)];
    f.remaining = 0;
    ++f.version;
    for (int r : *f.resources) {
      Resource& res = resources_[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < res.flows.size(); ++i) {
        if (res.flows[i] != id) continue;
        res.flows[i] = res.flows.back();
        res.flows.pop_back();
        break;
      }
      // Summed afresh: subtracting would leave rounding residue on an idle resource.
      res.weights = 0;
      for (int g : res.flows) res.weights += flows_[static_cast<std::size_t>(g)].weight;
    }
    reshare(*f.resources, t);
    free_.push_back(id);
  }

  /// New rates for the flows on these resources (the only ones whose shares changed).
  void reshare(const std::vector<int>& changed, double t) {
    for (int r : changed) {
      for (int g : resources_[static_cast<std::size_t>(r)].flows) {
        Flow& f = flows_[static_cast<std::size_t>(g)];
        double rate = INFINITY;
        for (int q : *f.resources) {
          rate = std::min(rate, capacity(q) * f.weight / resources_[static_cast<std::size_t>(q)].weights);
        }
        if (rate == f.rate) continue;
        f.remaining = std::max(0.0, f.remaining - f.rate * (t - f.since));
        f.since = t;
        f.rate = rate;
        f.end = t + f.remaining / rate;
        // A later end keeps the queued event (it finds the flow unfinished and moves on to `end`); an earlier one is
        // queued now.
        if (f.queuedEnd < 0 || f.end < f.queuedEnd) {
          f.queuedEnd = f.end;
          schedule(f.end, Event::kEnd, g);
        }
      }
    }
  }

  World& w_;
  int firstHost_;  // resources: directed links, then each host's reduction
  std::vector<double> hostRate_;
  std::vector<std::vector<int>> hostResource_;
  std::vector<Resource> resources_;
  std::vector<Flow> flows_;
  std::vector<int> free_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t order_ = 0;
};

}  // namespace

SimResult simulateFluid(World& w, const Schedule& s, const Matching& m, bool timeline) {
  Dag d(s, m, w);
  FluidTiming timing(w);
  d.begin(timing);
  timing.run(d);
  d.checkFinished();
  SimResult r;
  r.seconds = d.makespan();
  r.method = "fluid";
  r.exact = false;
  r.note = "fluid model: shares without max-min's redistribution (simulator/README.md, fluid)";
  r.ops = d.ops();
  r.transfers = d.transfers().size();
  if (timeline) r.spans = d.spans();
  return r;
}

}  // namespace collbench::sim::detail
