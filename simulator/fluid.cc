// The fluid network (fluid.h) and the fluid method: the dependency graph (Dag) timed by it instead of SimGrid.
#include "fluid.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

/// A route with no latency shares with this penalty (SimGrid's CM02 creates its variable with penalty 1 then).
constexpr double kZeroLatencyPenalty = 1.0;

/// The Dag's work on a FluidNetwork.
class FluidTiming : public Dag::Timing {
 public:
  explicit FluidTiming(World& w) : net_(w) {}
  void transfer(Dag& d, int m, double t) override {
    const Dag::Xfer& x = d.transfer(m);
    net_.transfer(x.src, x.dst, x.wireBytes, t, Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)));
  }
  void exec(Dag&, std::uint64_t tag, int rank, double t, double bytes) override { net_.exec(rank, bytes, t, tag); }
  void run(Dag& d) {
    net_.run([&](std::uint64_t tag, double t) { d.complete(tag, t); });
  }

 private:
  FluidNetwork net_;
};

}  // namespace

FluidNetwork::FluidNetwork(World& w) : w_(w), firstHost_(static_cast<int>(2 * w.topology().links.size())) {
  for (int r = 0; r < w.nranks(); ++r) {
    const auto h = static_cast<std::size_t>(w.hostIndex(r));
    if (h >= hostRate_.size()) hostRate_.resize(h + 1, 0);
    hostRate_[h] = w.reduceRate(r);
  }
  resources_.resize(static_cast<std::size_t>(firstHost_) + hostRate_.size());
  hostResource_.resize(hostRate_.size());
  for (std::size_t h = 0; h < hostRate_.size(); ++h) hostResource_[h] = {firstHost_ + static_cast<int>(h)};
}

void FluidNetwork::transfer(int src, int dst, std::uint64_t wireBytes, double t, std::uint64_t tag) {
  const std::vector<DirLink>& route = w_.route(src, dst);
  transfer(route, latency(route), wireBytes, t, tag);
}

void FluidNetwork::transfer(const std::vector<DirLink>& route, double latency, std::uint64_t wireBytes, double t,
                            std::uint64_t tag) {
  const double weight = 1.0 / (latency > 0 ? latency : kZeroLatencyPenalty);
  schedule(t + latency, Event::kJoin, add(tag, &route, weight, static_cast<double>(wireBytes)));
}

double FluidNetwork::latency(const std::vector<DirLink>& route) const {
  double sum = 0;
  for (DirLink l : route) sum += w_.latency(l);
  return sum;
}

void FluidNetwork::exec(int rank, double bytes, double t, std::uint64_t tag) {
  schedule(t, Event::kJoin, add(tag, &hostResource_[static_cast<std::size_t>(w_.hostIndex(rank))], 1.0, bytes));
}

void FluidNetwork::run(const OnDone& onDone) {
  while (!events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    const auto id = static_cast<int>(e.flow);
    Flow& f = flows_[e.flow];
    if (e.version() != (f.version & 0x7fffffffU)) continue;
    if (e.kind() == Event::kJoin) {
      join(id, e.t);
      continue;
    }
    if (e.t != f.queuedEnd) continue;  // superseded by an earlier end
    if (f.end > e.t) {                 // slowed down since: one event at the new end
      f.queuedEnd = f.end;
      schedule(f.end, Event::kEnd, id);
      continue;
    }
    const std::uint64_t tag = f.tag;
    leave(id, e.t);
    onDone(tag, e.t);
  }
}

double FluidNetwork::capacity(int r) const {
  return r < firstHost_ ? w_.bandwidth(r) : hostRate_[static_cast<std::size_t>(r - firstHost_)];
}

int FluidNetwork::add(std::uint64_t tag, const std::vector<int>* resources, double weight, double bytes) {
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

void FluidNetwork::schedule(double t, Event::Kind kind, int flow) {
  events_.push(
      {t, static_cast<std::uint32_t>(flow),
       (flows_[static_cast<std::size_t>(flow)].version & 0x7fffffffU) << 1 | static_cast<std::uint32_t>(kind)});
}

void FluidNetwork::join(int id, double t) {
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

void FluidNetwork::leave(int id, double t) {
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

void FluidNetwork::reshare(const std::vector<int>& changed, double t) {
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
