// The fluid network (fluid.h) and the fluid method: the dependency graph (Dag) timed by it instead of SimGrid.
#include "fluid.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "collbench/error.h"
#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

/// A route with no latency shares with this penalty (SimGrid's CM02 creates its variable with penalty 1 then).
constexpr double kZeroLatencyPenalty = 1.0;
/// The least part of a resource's capacity a reshare hands out (held flows may sum a rounding error above it).
constexpr double kResidualFloor = 1e-9;
/// Rounds of a reshare over up to this many resources solve max-min by progressive filling, O(resources x flows);
/// larger ones (an all-to-all's burst of joins over shared core links: thousands) take one pass. NCCL's host tree
/// at 16384 GPUs meets 2.4 resources a round on average.
constexpr std::size_t kFilledShares = 64;

/// The Dag's work on a FluidNetwork.
class FluidTiming : public Dag::Timing {
 public:
  explicit FluidTiming(World& w) : w_(w), net_(w) {}
  void transfer(Dag& d, int m, double t) override {
    const Dag::Xfer& x = d.transfer(m);
    net_.transfer(x.src, x.dst, x.wireBytes, t, Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)));
  }
  void exec(Dag&, std::uint64_t tag, int rank, double t, double bytes) override { net_.exec(rank, bytes, t, tag); }
  // A switch op's leg crosses the links between the rank's node and the switch, and a reduced one the switch's
  // reduction port too (as World::startSwitchComm routes it on SimGrid).
  void switchFlow(Dag& d, int f, double t) override {
    const Dag::SwitchFlow& x = d.switchFlow(f);
    const std::uint64_t key = (static_cast<std::uint64_t>(x.lower) << 34) | (static_cast<std::uint64_t>(x.sw) << 2) |
                              static_cast<std::uint64_t>(x.leg);
    auto [it, fresh] = switchRoutes_.try_emplace(key);
    SwitchRoute& r = it->second;
    if (fresh) {
      r.resources = w_.switchRoute(x.lower, x.sw, x.leg);
      r.latency = net_.latency(r.resources);
      if (x.leg == World::SwitchLeg::ReducedDown)
        r.resources.insert(r.resources.begin(), net_.reducePort(r.resources.front()));
    }
    net_.transfer(r.resources, r.latency, x.bytes, t, Dag::tag(Dag::kSwitch, static_cast<std::uint64_t>(f)));
  }
  void run(Dag& d) {
    while (const auto done = net_.next()) d.complete(done->tag, done->t);
  }

 private:
  struct SwitchRoute {
    std::vector<int> resources;
    double latency = 0;
  };
  World& w_;
  FluidNetwork net_;
  // By (lower node, switch, leg); the network's flows point into these lists, which a node-based map keeps in place.
  std::unordered_map<std::uint64_t, SwitchRoute> switchRoutes_;
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
  std::vector<std::pair<DirLink, double>> ports(w.reducePortRates().begin(), w.reducePortRates().end());
  std::sort(ports.begin(), ports.end());
  for (const auto& [l, rate] : ports) {
    reducePortResource_[l] = static_cast<int>(load_.size());
    load_.emplace_back().capacity = rate;
  }
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

std::optional<FluidNetwork::Done> FluidNetwork::next() {
  while (!events_.empty()) {
    const Event e = events_.pop();
    const auto id = static_cast<int>(e.flow);
    Flow& f = flows_[e.flow];
    if (e.version() != (f.version & 0x7fffffffU)) continue;
    if (e.kind() == Event::kJoin) {
      join(id, e.t);
      continue;
    }
    if (e.t != f.queuedEnd) continue;             // superseded by an earlier end
    if (const double end = f.end(); end > e.t) {  // slowed down since: one event at the new end
      f.queuedEnd = end;
      schedule(end, Event::kEnd, id);
      continue;
    }
    leave(id, e.t);
    return Done{tags_[e.flow], e.t};
  }
  return std::nullopt;
}

int FluidNetwork::add(std::uint64_t tag, std::span<const int> resources, double weight, double bytes) {
  int id = static_cast<int>(flows_.size());
  if (free_.empty()) {
    flows_.emplace_back();
    tags_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  Flow& f = flows_[static_cast<std::size_t>(id)];
  tags_[static_cast<std::size_t>(id)] = tag;
  f.resources = resources.data();
  f.resourceCount = static_cast<std::uint32_t>(resources.size());
  f.weight = weight;
  f.remaining = bytes;
  f.rate = 0;
  f.queuedEnd = -1;  // no end queued
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
    f.queuedEnd = t;
    schedule(t, Event::kEnd, id);
    return;
  }
  for (std::uint32_t k = 0; k < f.resourceCount; ++k) {
    const auto r = static_cast<std::size_t>(f.resources[k]);
    load_[r].flows.push_back(id);
  }
  reshare(f.resources, f.resourceCount, t);
}

void FluidNetwork::leave(int id, double t) {
  Flow& f = flows_[static_cast<std::size_t>(id)];
  f.remaining = 0;
  ++f.version;
  bool joined = false;  // a flow with nothing to move never joined its resources
  for (std::uint32_t k = 0; k < f.resourceCount; ++k) {
    const auto r = static_cast<std::size_t>(f.resources[k]);
    std::vector<int>& on = load_[r].flows;
    const auto it = std::find(on.begin(), on.end(), id);
    if (it == on.end()) continue;
    joined = true;
    *it = on.back();
    on.pop_back();
    // Zero when idle, not the rounding residue of what its flows added and took.
    load_[r].allocated = on.empty() ? 0 : load_[r].allocated - f.rate;
  }
  if (joined) reshare(f.resources, f.resourceCount, t);
  free_.push_back(id);
}

void FluidNetwork::reshare(const int* changed, std::uint32_t count, double t) {
  solve(changed, count, t);
  // Where the re-solved flows gave up bandwidth, held flows may take it: one more round on those resources.
  released_.clear();
  for (const Share& s : shares_) {
    if (s.released > s.floor && load_[static_cast<std::size_t>(s.resource)].flows.size() > s.members) {
      released_.push_back(s.resource);
    }
  }
  if (!released_.empty() && released_.size() <= kFilledShares) {
    solve(released_.data(), static_cast<std::uint32_t>(released_.size()), t);
  }
}

void FluidNetwork::solve(const int* changed, std::uint32_t count, double t) {
  gather(changed, count);
  if (reshared_.empty()) return;
  fill();
  for (std::size_t i = 0; i < reshared_.size(); ++i) {
    const Flow& f = flows_[static_cast<std::size_t>(reshared_[i])];
    if (const double released = f.rate - newRate_[i]; released > 0) {
      for (std::uint32_t k = flowFirst_[i]; k < flowFirst_[i + 1]; ++k) shares_[flowShares_[k]].released += released;
    }
    setRate(reshared_[i], newRate_[i], t);
  }
}

void FluidNetwork::gather(const int* changed, std::uint32_t count) {
  if (++reshares_ == 0) {
    for (Flow& f : flows_) f.reshared = 0;
    for (Load& l : load_) l.reshared = 0;
    reshares_ = 1;
  }
  reshared_.clear();
  for (std::uint32_t k = 0; k < count; ++k) {
    for (const int id : load_[static_cast<std::size_t>(changed[k])].flows) {
      Flow& f = flows_[static_cast<std::size_t>(id)];
      if (f.reshared == reshares_) continue;  // on several changed resources: once
      f.reshared = reshares_;
      reshared_.push_back(id);
    }
  }
  // Each resource of the flows: its capacity less what the held flows use (its allocation less the reshared flows'
  // present rates), the reshared flows' weights and count; each flow's resources as indices into shares_.
  shares_.clear();
  flowShares_.clear();
  flowFirst_.assign(1, 0);
  for (int id : reshared_) {
    const Flow& f = flows_[static_cast<std::size_t>(id)];
    for (std::uint32_t j = 0; j < f.resourceCount; ++j) {
      Load& l = load_[static_cast<std::size_t>(f.resources[j])];
      if (l.reshared != reshares_) {
        l.reshared = reshares_;
        l.share = static_cast<std::uint32_t>(shares_.size());
        shares_.push_back({.resource = f.resources[j],
                           .unfixed = 1,
                           .residual = l.capacity - l.allocated + f.rate,
                           .weights = f.weight,
                           .floor = l.capacity * kResidualFloor,
                           .members = 1});
      } else {
        Share& s = shares_[l.share];
        s.residual += f.rate;
        s.weights += f.weight;
        ++s.unfixed;
        ++s.members;
      }
      flowShares_.push_back(l.share);
    }
    flowFirst_.push_back(static_cast<std::uint32_t>(flowShares_.size()));
  }
}

void FluidNetwork::fill() {
  // The residual is floored so that no flow is left at rate 0 by rounding (its held neighbours' rates summed a hair
  // above capacity).
  const auto shareOf = [](const Share& s) { return std::max(s.residual, s.floor) / s.weights; };
  constexpr double kUnfixed = -1;
  newRate_.assign(reshared_.size(), kUnfixed);
  // One pass, each flow at its least share, is max-min itself for one flow (the least of its residuals) or one
  // resource (its residual by weight). Over many resources (an all-to-all's core links) it is what progressive
  // filling starts from: feasible (no resource hands out more than its residual), but what a flow bottlenecked
  // elsewhere leaves on a resource stays with it until its next round.
  if (reshared_.size() == 1 || shares_.size() == 1 || shares_.size() > kFilledShares) {
    for (std::size_t i = 0; i < reshared_.size(); ++i) {
      double share = INFINITY;
      for (std::uint32_t k = flowFirst_[i]; k < flowFirst_[i + 1]; ++k) {
        share = std::min(share, shareOf(shares_[flowShares_[k]]));
      }
      newRate_[i] = share * flows_[static_cast<std::size_t>(reshared_[i])].weight;
    }
    return;
  }
  // Fixes flow i at `share` per unit weight: what it takes leaves its resources.
  const auto fix = [&](std::size_t i, double share) {
    const double weight = flows_[static_cast<std::size_t>(reshared_[i])].weight;
    const double rate = share * weight;
    newRate_[i] = rate;
    for (std::uint32_t k = flowFirst_[i]; k < flowFirst_[i + 1]; ++k) {
      Share& o = shares_[flowShares_[k]];
      o.residual -= rate;
      o.weights = --o.unfixed == 0 ? 0 : o.weights - weight;
    }
  };
  // Progressive filling: the resource of least share (by a scan: a round meets a few resources) fixes its flows.
  for (std::size_t left = reshared_.size(); left > 0;) {
    std::uint32_t least = 0;
    double share = INFINITY;
    for (std::uint32_t k = 0; k < shares_.size(); ++k) {
      if (shares_[k].unfixed == 0) continue;
      if (const double v = shareOf(shares_[k]); v < share) {
        share = v;
        least = k;
      }
    }
    for (std::size_t i = 0; i < reshared_.size(); ++i) {
      if (newRate_[i] != kUnfixed) continue;
      const auto* on = flowShares_.data();
      if (std::find(on + flowFirst_[i], on + flowFirst_[i + 1], least) == on + flowFirst_[i + 1]) continue;
      fix(i, share);
      --left;
    }
  }
}

void FluidNetwork::setRate(int id, double rate, double t) {
  Flow& f = flows_[static_cast<std::size_t>(id)];
  if (rate == f.rate) return;
  for (std::uint32_t j = 0; j < f.resourceCount; ++j) {
    load_[static_cast<std::size_t>(f.resources[j])].allocated += rate - f.rate;
  }
  f.remaining = std::max(0.0, f.remaining - f.rate * (t - f.since));
  f.since = t;
  f.rate = rate;
  // A later end keeps the queued event (it finds the flow unfinished and moves on to the end); an earlier one is
  // queued now.
  if (const double end = f.end(); f.queuedEnd < 0 || end < f.queuedEnd) {
    f.queuedEnd = end;
    schedule(end, Event::kEnd, id);
  }
}

SimResult simulateFluid(World& w, const Schedule& s, const Matching& m, bool timeline,
                        const std::vector<int>& groupSwitch) {
  Dag d(s, m, w, groupSwitch);
  FluidTiming timing(w);
  d.begin(timing);
  timing.run(d);
  d.checkFinished();
  SimResult r;
  r.seconds = d.makespan();
  r.method = "fluid";
  r.exact = false;
  r.note = "fluid model: max-min shares re-solved near each change, not globally (simulator/README.md, fluid)";
  r.ops = d.ops();
  r.transfers = d.transfers().size();
  if (timeline) r.spans = d.spans();
  return r;
}

}  // namespace collbench::sim::detail
