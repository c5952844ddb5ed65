#include "world.h"

#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <simgrid/kernel/Timer.hpp>

#include "collbench/error.h"

namespace collbench::sim::detail {
namespace sg4 = simgrid::s4u;
namespace {

constexpr double kBytesPerGB = 1e9;  // topology bandwidths are GB/s = 1e9 bytes/s
constexpr double kSecondsPerUs = 1e-6;
// Host speed when a node has no reduction rate (reductions there are free and never reach SimGrid).
constexpr double kUnusedHostSpeed = 1e9;
constexpr double kTimePrecisionSeconds = 1e-13;
// The sleeper host of simulateTogether: any speed; the margin makes it outlive the last timer.
constexpr double kSleeperSpeed = 1e9;
constexpr double kSleeperMargin = 1e-6;
// A protocol's step latency delays a transfer's start: an execution of delay x kDelayRate flops bounded to
// kDelayRate flop/s on a host fast enough that no number of concurrent delays (< kDelayHostSpeed / kDelayRate) ever
// shares it, so each lasts exactly its delay.
constexpr double kDelayRate = 1e9;
constexpr double kDelayHostSpeed = 1e18;

World* gCurrent = nullptr;  // the process's World (one engine per process)

std::uint64_t pairKey(int a, int b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

World::World(const Topology& topology, int nranks, const SimConfig& config, WireRule wire)
    : topo_(topology), config_(config), router_(topo_), nranks_(nranks), wire_(wire) {
  COLLBENCH_CHECK(gCurrent == nullptr, "one SimGrid engine per process");
  gCurrent = this;
  // Quiet before anything logs: SimGrid reports configuration changes at INFO level.
  xbt_log_control_set("root.thres:critical");
  static int argc = 1;
  static char name[] = "collbench-sim";
  static char* argv[] = {name, nullptr};
  new sg4::Engine(&argc, argv);  // lives until the process exits (SimGrid allows one per process)
  sg4::Engine::set_config(std::string("network/model:") + std::string(toString(config.model)));
  sg4::Engine::set_config("network/crosstraffic", config.crossTraffic);
  // SimGrid ends every flow due within surf/precision seconds of an event together with it; the default (1 ns) is
  // 4 bytes at 50 GB/s and makes a 252-byte and a 248-byte transfer end together. The closed forms need 1e-6
  // relative on microsecond collectives.
  sg4::Engine::set_config("surf/precision", kTimePrecisionSeconds);
  if (config.model == NetworkModel::CM02) {
    // CM02's TCP window bound (rate <= gamma / 2 latency) is a TCP artefact; off, a flow gets exactly its max-min
    // share, which is what the alpha-beta closed forms assume. LV08 keeps SimGrid's default window.
    sg4::Engine::set_config("network/TCP-gamma", 0.0);
  }
  zone_ = sg4::create_empty_zone("collbench");

  const int nodes = static_cast<int>(topo_.nodes.size());
  nodeHost_.assign(static_cast<std::size_t>(nodes), -1);
  rankHost_.resize(static_cast<std::size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    const int node = router_.rankNode(r);
    int& h = nodeHost_[static_cast<std::size_t>(node)];
    if (h < 0) {
      const TopoNode& tn = topo_.nodes[static_cast<std::size_t>(node)];
      const double rate = tn.reduceGBps > 0 ? tn.reduceGBps * kBytesPerGB : 0;
      h = static_cast<int>(hosts_.size());
      hosts_.push_back(zone_->create_host("h" + std::to_string(node), rate > 0 ? rate : kUnusedHostSpeed));
      hostReduceRate_.push_back(rate);
    }
    rankHost_[static_cast<std::size_t>(r)] = h;
  }
  sleeper_ = zone_->create_host("sleeper", kSleeperSpeed);
  delayHost_ = zone_->create_host("delay", kDelayHostSpeed);
  // Switches that perform switch ops are transfer ends; a reducing one also gets a host for its reduction output.
  for (int v = 0; v < nodes; ++v) {
    const TopoNode& tn = topo_.nodes[static_cast<std::size_t>(v)];
    if (!tn.reducesInNetwork() && !tn.multicasts()) continue;
    switchHost_[v] = static_cast<int>(hosts_.size());
    hosts_.push_back(zone_->create_host("s" + std::to_string(v), kUnusedHostSpeed));
    hostReduceRate_.push_back(0);
    if (!tn.reducesInNetwork()) continue;
    switchReduceHost_[v] = static_cast<int>(hosts_.size());
    hosts_.push_back(zone_->create_host("sr" + std::to_string(v), kUnusedHostSpeed));
    hostReduceRate_.push_back(0);
  }
  // Per-port switch limits cap the links on that port (the same reading as summarize()'s bisection).
  std::unordered_map<std::string, double> switchCap;
  std::unordered_map<std::string, double> reduceRate;  // reducing switches
  for (const TopoNode& tn : topo_.nodes) {
    if (tn.kind == NodeKind::Switch && tn.switchGBps > 0) switchCap[tn.id] = tn.switchGBps;
    if (tn.reducesInNetwork()) reduceRate[tn.id] = tn.reduceGBps;
  }
  links_.reserve(topo_.links.size());
  for (std::size_t i = 0; i < topo_.links.size(); ++i) {
    const TopoLink& l = topo_.links[i];
    double gbps = l.bandwidthGBps;
    for (const std::string* end : {&l.a, &l.b}) {
      auto it = switchCap.find(*end);
      if (it != switchCap.end()) gbps = std::min(gbps, it->second);
    }
    linkBandwidth_.push_back(gbps * kBytesPerGB);
    linkLatency_.push_back(l.latencyUs * kSecondsPerUs);
    linkPath_.push_back(wirePathOf(l.linkClass));
    sg4::SplitDuplexLink* link = zone_->create_split_duplex_link("l" + std::to_string(i), gbps * kBytesPerGB);
    link->set_latency(l.latencyUs * kSecondsPerUs);
    link->seal();
    links_.push_back(link);
    // A reducing switch delivers reduced bytes on each port at its reduce_GBps: one more resource per port, crossed
    // only by reduced data.
    for (int e = 0; e < 2; ++e) {
      auto it = reduceRate.find(e == 0 ? l.a : l.b);
      if (it == reduceRate.end()) continue;
      sg4::Link* port = zone_->create_link(fmt::format("r{}.{}", i, e), it->second * kBytesPerGB);
      port->seal();
      reducePort_[static_cast<int>(i) * 2 + e] = port;  // the DirLink leaving that end
      reducePortRate_[static_cast<int>(i) * 2 + e] = it->second * kBytesPerGB;
    }
  }
  zone_->seal();
  sg4::Activity::on_completion_cb([](const sg4::Activity& a) {
    if (gCurrent != nullptr) gCurrent->completed(a);
  });
}

Wire World::wire(int src, int dst, std::uint64_t bytes) {
  if (!wire_.active) return {bytes, 0};
  const auto data = static_cast<double>(bytes);
  usedSimple_ = usedSimple_ || wire_.protocolOf(data) == Protocol::Simple;
  NcclPath path = NcclPath::Nvl;  // the worst class of the route's links (NcclPath orders best first)
  double routeUs = 0;
  for (DirLink l : route(src, dst)) {
    path = std::max(path, linkPath_[static_cast<std::size_t>(l / 2)]);
    routeUs += topo_.links[static_cast<std::size_t>(l / 2)].latencyUs;
  }
  return {static_cast<std::uint64_t>(wire_.wireBytes(data)),
          std::max(0.0, wire_.latencyUs(data, path, routeUs) - routeUs) * kSecondsPerUs};
}

std::uint64_t World::switchBytes(int sw, std::uint64_t bytes) const {
  const double share = wire_.switchShare(topo_.nodes[static_cast<std::size_t>(sw)]);
  return share == 1.0 ? bytes : static_cast<std::uint64_t>(std::ceil(static_cast<double>(bytes) / share));
}

double World::launchFloor() const { return wire_.launchFloorUs(usedSimple_, switchOps_) * kSecondsPerUs; }

double World::reduceRate(int rank) const { return hostReduceRate_[static_cast<std::size_t>(hostIndex(rank))]; }

const std::vector<DirLink>& World::route(int a, int b) {
  auto [it, inserted] = routes_.try_emplace(pairKey(a, b));
  if (inserted) {
    for (const Hop& h : router_.route(a, b)) it->second.push_back(dirLink(h));
  }
  return it->second;
}

void World::prefetchRoutes(std::vector<std::pair<int, int>> pairs) {
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  for (auto [a, b] : pairs) {
    route(a, b);
    if (config_.crossTraffic) route(b, a);
  }
}

void World::installRoute(int src, int dst) {
  const int sn = router_.rankNode(src), dn = router_.rankNode(dst);
  auto [it, inserted] = installed_.try_emplace(pairKey(sn, dn), true);
  if (!inserted) return;
  const std::vector<DirLink>& hops = route(src, dst);
  COLLBENCH_CHECK(!hops.empty(), "route between ranks {} and {} on distinct nodes", src, dst);
  std::vector<sg4::LinkInRoute> links;
  links.reserve(hops.size());
  for (DirLink l : hops) {
    links.emplace_back(links_[static_cast<std::size_t>(l / 2)],
                       l % 2 == 0 ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
  }
  // Bypass routes may be added after the platform is sealed, so only the pairs that talk get one (a full routing
  // table would be nodes^2 entries: 0.5 GB at 8192 ranks).
  zone_->add_bypass_route(hosts_[static_cast<std::size_t>(hostOfNode(sn))]->get_netpoint(),
                          hosts_[static_cast<std::size_t>(hostOfNode(dn))]->get_netpoint(), nullptr, nullptr, links);
}

std::size_t World::takeSlot(std::uint64_t tag) {
  std::size_t slot;
  if (!freeSlots_.empty()) {
    slot = freeSlots_.back();
    freeSlots_.pop_back();
  } else {
    slot = live_.size();
    live_.emplace_back();
    liveTag_.push_back(0);
  }
  liveTag_[slot] = tag;
  return slot;
}

std::vector<DirLink> World::switchRoute(int lower, int sw, SwitchLeg leg) const {
  const bool up = leg == SwitchLeg::Up;
  std::vector<Hop> hops;
  COLLBENCH_CHECK(router_.nodeRoute(up ? lower : sw, up ? sw : lower, hops) > 0, "no route between nodes {} and {}",
                  lower, sw);
  std::vector<DirLink> route;
  route.reserve(hops.size());
  for (const Hop& h : hops) route.push_back(dirLink(h));
  return route;
}

std::vector<int> World::pathNodes(int from, int to) const {
  std::vector<Hop> hops;
  COLLBENCH_CHECK(router_.nodeRoute(from, to, hops) >= 0, "no route between nodes {} and {}", from, to);
  std::vector<int> nodes{from};
  for (const Hop& h : hops) nodes.push_back(router_.hopEnd(h));
  return nodes;
}

void World::startSwitchComm(int lower, int sw, SwitchLeg leg, std::uint64_t bytes, std::uint64_t tag) {
  const auto hostIt = (leg == SwitchLeg::ReducedDown ? switchReduceHost_ : switchHost_).find(sw);
  COLLBENCH_CHECK(hostIt != (leg == SwitchLeg::ReducedDown ? switchReduceHost_ : switchHost_).end(),
                  "switch node {} cannot perform this switch op", sw);
  // The lower end: a rank's node, or an aggregating switch (one that reduces or multicasts).
  const int lowerHost = nodeHost_[static_cast<std::size_t>(lower)] >= 0 ? nodeHost_[static_cast<std::size_t>(lower)]
                                                                        : switchHost_.at(lower);
  sg4::Host* lowerEnd = hosts_[static_cast<std::size_t>(lowerHost)];
  sg4::Host* swHost = hosts_[static_cast<std::size_t>(hostIt->second)];
  const bool up = leg == SwitchLeg::Up;
  const std::uint64_t key = (pairKey(lower, sw) << 2) | static_cast<std::uint64_t>(leg);
  if (switchRoutes_.try_emplace(key, true).second) {
    const std::vector<DirLink> route = switchRoute(lower, sw, leg);
    std::vector<sg4::LinkInRoute> links;
    if (leg == SwitchLeg::ReducedDown) links.emplace_back(reducePort_.at(route.front()));
    for (const DirLink l : route) {
      links.emplace_back(links_[static_cast<std::size_t>(l / 2)],
                         l % 2 == 0 ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
    }
    zone_->add_bypass_route(up ? lowerEnd->get_netpoint() : swHost->get_netpoint(),
                            up ? swHost->get_netpoint() : lowerEnd->get_netpoint(), nullptr, nullptr, links);
  }
  const std::size_t slot = takeSlot(tag);
  sg4::CommPtr c = sg4::Comm::sendto_init(up ? lowerEnd : swHost, up ? swHost : lowerEnd);
  c->set_payload_size(bytes);
  c->set_data(reinterpret_cast<void*>(slot + 1));  // NOLINT(performance-no-int-to-ptr): a slot number, as below
  live_[slot] = c;
  ++activities_;
  c->start();
}

void World::startComm(int src, int dst, std::uint64_t bytes, std::uint64_t tag, double delay) {
  if (delay <= 0) {
    startNow(src, dst, bytes, tag);
    return;
  }
  const std::size_t slot = takeSlot(tag);
  sg4::ExecPtr e = sg4::Exec::init();
  e->set_flops_amount(delay * kDelayRate);
  e->set_bound(kDelayRate);
  e->set_host(delayHost_);
  e->set_data(reinterpret_cast<void*>(slot + 1));  // NOLINT(performance-no-int-to-ptr): a slot number, as below
  live_[slot] = e;
  delayed_[slot] = Delayed{src, dst, bytes, tag};
  e->start();
}

void World::startNow(int src, int dst, std::uint64_t bytes, std::uint64_t tag) {
  const int sn = router_.rankNode(src), dn = router_.rankNode(dst);
  COLLBENCH_CHECK(sn != dn, "transfer between ranks {} and {} of one node", src, dst);
  installRoute(src, dst);
  if (config_.crossTraffic) installRoute(dst, src);  // SimGrid sends the acknowledgements along the reverse route
  const std::size_t slot = takeSlot(tag);
  sg4::CommPtr c = sg4::Comm::sendto_init(hosts_[static_cast<std::size_t>(hostIndex(src))],
                                          hosts_[static_cast<std::size_t>(hostIndex(dst))]);
  c->set_payload_size(bytes);
  // SimGrid's user data is a void*: it carries the slot number + 1 (0: none), never dereferenced.
  c->set_data(reinterpret_cast<void*>(slot + 1));  // NOLINT(performance-no-int-to-ptr)
  live_[slot] = c;
  ++activities_;
  c->start();
}

void World::startExec(int rank, double bytes, std::uint64_t tag) {
  const std::size_t slot = takeSlot(tag);
  sg4::ExecPtr e = sg4::Exec::init();
  e->set_flops_amount(bytes);
  e->set_host(hosts_[static_cast<std::size_t>(hostIndex(rank))]);
  e->set_data(reinterpret_cast<void*>(slot + 1));  // NOLINT(performance-no-int-to-ptr): a slot number, as above
  live_[slot] = e;
  ++activities_;
  e->start();
}

void World::completed(const sg4::Activity& a) {
  const auto slot1 = reinterpret_cast<std::size_t>(a.get_data<void>());
  if (slot1 == 0 || slot1 > live_.size()) return;  // not one of ours
  // Activities finished in earlier callbacks are no longer used by SimGrid; this one still is.
  finished_.clear();
  const std::size_t slot = slot1 - 1;
  finished_.push_back(std::move(live_[slot]));
  freeSlots_.push_back(slot);
  if (const auto it = delayed_.find(slot); it != delayed_.end()) {  // a transfer's protocol latency has passed
    const Delayed d = it->second;
    delayed_.erase(it);
    startNow(d.src, d.dst, d.bytes, d.tag);
    return;
  }
  if (onDone_ != nullptr) (*onDone_)(liveTag_[slot]);
}

void World::run(const std::function<void(std::uint64_t)>& onDone) {
  onDone_ = &onDone;
  sg4::Engine::get_instance()->run();
  onDone_ = nullptr;
  finished_.clear();
  COLLBENCH_CHECK(freeSlots_.size() == live_.size(), "{} activities never completed", live_.size() - freeSlots_.size());
}

std::vector<double> World::simulateTogether(const std::vector<std::pair<int, int>>& pairs,
                                            const std::vector<std::uint64_t>& bytes,
                                            const std::vector<double>& offset) {
  std::vector<double> duration(pairs.size(), 0);
  const double t0 = now();
  std::vector<double> started(pairs.size(), t0);
  if (offset.empty()) {
    for (std::size_t i = 0; i < pairs.size(); ++i) startComm(pairs[i].first, pairs[i].second, bytes[i], i);
  } else {
    // Flows that start later are started by kernel timers at their dates (no actor is involved). SimGrid's timer
    // task keeps small callables inline: the callback carries one pointer to this frame and a range.
    struct Launch {
      World* world;
      const std::vector<std::pair<int, int>>* pairs;
      const std::vector<std::uint64_t>* bytes;
      std::vector<std::size_t> order;
      std::vector<double>* started;
      void run(std::size_t k, std::size_t e) {
        for (std::size_t j = k; j < e; ++j) {
          const std::size_t i = order[j];
          (*started)[i] = world->now();
          world->startComm((*pairs)[i].first, (*pairs)[i].second, (*bytes)[i], i);
        }
      }
    };
    Launch launch{this, &pairs, &bytes, std::vector<std::size_t>(pairs.size()), &started};
    std::iota(launch.order.begin(), launch.order.end(), 0);
    std::stable_sort(launch.order.begin(), launch.order.end(),
                     [&](std::size_t x, std::size_t y) { return offset[x] < offset[y]; });
    const auto& order = launch.order;
    // The engine stops when no activity is left, even with timers pending: a sleeper execution on a host of its own
    // keeps it running until just after the last start.
    const double last = offset[order.back()];
    if (last > 0) {
      sg4::ExecPtr e = sg4::Exec::init();
      e->set_flops_amount(last * (1 + kSleeperMargin) * kSleeperSpeed);
      e->set_host(sleeper_);
      e->start();
      sleeping_ = e;
    }
    for (std::size_t k = 0; k < order.size();) {
      std::size_t e = k;
      while (e < order.size() && offset[order[e]] == offset[order[k]]) ++e;
      if (offset[order[k]] <= 0) {
        launch.run(k, e);
      } else {
        Launch* l = &launch;
        simgrid::kernel::timer::Timer::set(t0 + offset[order[k]], [l, k, e] { l->run(k, e); });
      }
      k = e;
    }
    // Here, while `launch` lives.
    const std::function<void(std::uint64_t)> done = [&](std::uint64_t i) { duration[i] = now() - started[i]; };
    run(done);
    sleeping_ = nullptr;
    return duration;
  }
  const std::function<void(std::uint64_t)> done = [&](std::uint64_t i) { duration[i] = now() - started[i]; };
  run(done);
  return duration;
}

}  // namespace collbench::sim::detail
