// The fluid network (fluid.h) and the fluid method: the dependency graph (Dag) timed by it instead of SimGrid.
#include "fluid.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "collbench/error.h"
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
  const std::size_t resources = static_cast<std::size_t>(firstHost_) + hostRate_.size();
  load_.resize(resources);
  for (std::size_t r = 0; r < resources; ++r) {
    const auto ri = static_cast<int>(r);
    load_[r].capacity = ri < firstHost_ ? w.bandwidth(ri) : hostRate_[r - static_cast<std::size_t>(firstHost_)];
  }
  hostResource_.resize(hostRate_.size());
  for (std::size_t h = 0; h < hostRate_.size(); ++h) hostResource_[h] = {firstHost_ + static_cast<int>(h)};
}

void FluidNetwork::transfer(int src, int dst, std::uint64_t wireBytes, double t, std::uint64_t tag) {
  const std::vector<DirLink>& route = w_.route(src, dst);
  transfer(route, latency(route), wireBytes, t, tag);
}

void FluidNetwork::transfer(std::span<const DirLink> route, double latency, std::uint64_t wireBytes, double t,
                            std::uint64_t tag) {
  const double weight = 1.0 / (latency > 0 ? latency : kZeroLatencyPenalty);
  schedule(t + latency, Event::kJoin, add(tag, route, weight, static_cast<double>(wireBytes)));
}

double FluidNetwork::latency(std::span<const DirLink> route) const {
  double sum = 0;
  for (DirLink l : route) sum += w_.latency(l);
  return sum;
}

void FluidNetwork::exec(int rank, double bytes, double t, std::uint64_t tag) {
  schedule(t, Event::kJoin, add(tag, hostResource_[static_cast<std::size_t>(w_.hostIndex(rank))], 1.0, bytes));
}

void FluidNetwork::run(const OnDone& onDone) {
  while (!events_.empty()) {
    const Event e = events_.pop();
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

int FluidNetwork::add(std::uint64_t tag, std::span<const int> resources, double weight, double bytes) {
  int id = static_cast<int>(flows_.size());
  if (free_.empty()) {
    flows_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  Flow& f = flows_[static_cast<std::size_t>(id)];
  f.tag = tag;
  f.resources = resources.data();
  f.resourceCount = static_cast<std::uint32_t>(resources.size());
  f.weight = weight;
  f.remaining = bytes;
  f.rate = 0;
  f.end = f.queuedEnd = -1;  // no end queued
  ++f.version;
  return id;
}

std::uint64_t FluidNetwork::EventQueue::key(double t) {
  // Positive doubles order as their bit patterns (-0.0 would not: it is taken as 0).
  return t > 0 ? std::bit_cast<std::uint64_t>(t) : 0;
}

std::size_t FluidNetwork::EventQueue::bucketOf(std::uint64_t k) const {
  return k == last_ ? 0 : static_cast<std::size_t>(64 - std::countl_zero(k ^ last_));
}

void FluidNetwork::EventQueue::push(const Event& e) {
  const std::uint64_t k = key(e.t);
  COLLBENCH_CHECK(k >= last_, "fluid event at {} s before the last one popped", e.t);
  buckets_[bucketOf(k)].push_back(e);
  ++size_;
}

FluidNetwork::Event FluidNetwork::EventQueue::pop() {
  std::vector<Event>& now = buckets_[0];
  if (head_ == now.size()) {
    now.clear();
    head_ = 0;
    std::size_t b = 1;
    while (buckets_[b].empty()) ++b;
    std::vector<Event>& from = buckets_[b];
    std::uint64_t least = key(from[0].t);
    for (const Event& e : from) least = std::min(least, key(e.t));
    last_ = least;
    // In push order: each lower bucket receives them in the order they were pushed.
    for (const Event& e : from) buckets_[bucketOf(key(e.t))].push_back(e);
    from.clear();
  }
  --size_;
  return now[head_++];
}

void FluidNetwork::schedule(double t, Event::Kind kind, int flow) {
  events_.push(
      {t, static_cast<std::uint32_t>(flow),
       (flows_[static_cast<std::size_t>(flow)].version & 0x7fffffffU) << 1 | static_cast<std::uint32_t>(kind)});
}

void FluidNetwork::join(int id, double t) {
  Flow& f = flows_[static_cast<std::size_t>(id)];
  f.since = t;
  if (f.remaining <= 0 || f.resourceCount == 0) {
    f.end = f.queuedEnd = t;
    schedule(t, Event::kEnd, id);
    return;
  }
  for (std::uint32_t k = 0; k < f.resourceCount; ++k) {
    const auto r = static_cast<std::size_t>(f.resources[k]);
    load_[r].flows.push_back({id, f.weight});
    load_[r].weights += f.weight;
  }
  reshare(f.resources, f.resourceCount, t);
}

void FluidNetwork::leave(int id, double t) {
  Flow& f = flows_[static_cast<std::size_t>(id)];
  f.remaining = 0;
  ++f.version;
  for (std::uint32_t k = 0; k < f.resourceCount; ++k) {
    const auto r = static_cast<std::size_t>(f.resources[k]);
    std::vector<Member>& on = load_[r].flows;
    for (std::size_t i = 0; i < on.size(); ++i) {
      if (on[i].flow != id) continue;
      on[i] = on.back();
      on.pop_back();
      break;
    }
    // Summed afresh: subtracting would leave rounding residue on an idle resource.
    double weights = 0;
    for (const Member& m : on) weights += m.weight;
    load_[r].weights = weights;
  }
  reshare(f.resources, f.resourceCount, t);
  free_.push_back(id);
}

void FluidNetwork::reshare(const int* changed, std::uint32_t count, double t) {
  // A flow on several of the changed resources gets its new rate once (the loads do not change meanwhile).
  if (++reshares_ == 0) {
    for (Flow& f : flows_) f.reshared = 0;
    reshares_ = 1;
  }
  for (std::uint32_t k = 0; k < count; ++k) {
    for (const Member& m : load_[static_cast<std::size_t>(changed[k])].flows) {
      const int g = m.flow;
      Flow& f = flows_[static_cast<std::size_t>(g)];
      if (f.reshared == reshares_) continue;
      f.reshared = reshares_;
      double rate = INFINITY;
      for (std::uint32_t j = 0; j < f.resourceCount; ++j) {
        const Load& l = load_[static_cast<std::size_t>(f.resources[j])];
        rate = std::min(rate, l.capacity * f.weight / l.weights);
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
