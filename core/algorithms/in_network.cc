#include "in_network.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>

#include "collbench/error.h"

namespace collbench::algo {

std::vector<std::vector<int>> ranksByHost(const CollectiveSpec& spec, const AlgoParams& p, std::string_view algorithm) {
  const int n = spec.nranks;
  if (static_cast<int>(p.rankHost.size()) != n) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{} all-reduce needs the host of each of the {} ranks (give --topology); got {}", algorithm,
                            n, p.rankHost.size()));
  }
  std::map<int, std::vector<int>> byHost;
  for (int r = 0; r < n; ++r) byHost[p.rankHost[static_cast<std::size_t>(r)]].push_back(r);
  std::vector<std::vector<int>> hosts;
  for (auto& [h, ranks] : byHost) hosts.push_back(std::move(ranks));
  for (const auto& h : hosts) {
    if (h.size() != hosts.front().size()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{} all-reduce needs the same number of ranks on every host; host of rank {} has {}, "
                              "host of rank {} has {}",
                              algorithm, hosts.front().front(), hosts.front().size(), h.front(), h.size()));
    }
  }
  return hosts;
}

std::vector<int> railOf(const std::vector<std::vector<int>>& hosts, std::size_t local) {
  std::vector<int> rail;
  for (const auto& h : hosts) rail.push_back(h[local]);
  return rail;
}

std::vector<OpId> switchLoads(ScheduleBuilder& b, SwitchSlots& slots, std::size_t lane, std::size_t loop, int group,
                              const std::vector<int>& members, int root, BufRef partial, std::size_t at,
                              std::size_t len, const std::vector<OpId>& ready, int channel) {
  std::vector<OpId> loads;
  for (std::size_t m = 0; m < members.size(); ++m) {
    const int r = members[m];
    const bool isRoot = r == root;
    loads.push_back(b.switchOp(
        OpKind::SwitchReduce, r, group, root, partial, out(at), len,
        {ready[m], isRoot ? slots.slotFree(lane, loop) : kNoOp, isRoot ? slots.previousLoad(lane) : kNoOp}, channel));
    if (isRoot) slots.loaded(lane, loads.back());
  }
  return loads;
}

std::vector<OpId> switchStores(ScheduleBuilder& b, SwitchSlots& slots, std::size_t lane, std::size_t loop, int group,
                               const std::vector<int>& members, int root, std::size_t at, std::size_t len,
                               const std::vector<OpId>& after, int channel) {
  std::vector<OpId> stores;
  for (std::size_t m = 0; m < members.size(); ++m) {
    const int r = members[m];
    const OpId previous = r == root ? slots.previousStore(lane, loop) : kNoOp;
    stores.push_back(
        b.switchOp(OpKind::Multicast, r, group, root, out(at), out(at), len, {after[m], previous}, channel));
    if (r == root) slots.stored(lane, loop, stores.back());
  }
  return stores;
}

std::size_t cascadeChunkElems(std::size_t chunkBytes, std::size_t bytes, std::size_t concurrent, std::size_t elemSize,
                              std::initializer_list<std::pair<double, std::size_t>> steps) {
  for (const auto& [factor, floor] : steps) {
    while (chunkBytes > floor &&
           static_cast<double>(bytes) < factor * static_cast<double>(concurrent) * static_cast<double>(chunkBytes)) {
      chunkBytes /= 2;
    }
  }
  return std::max<std::size_t>(1, chunkBytes / elemSize);
}

std::pair<double, double> routeOf(const CostContext& ctx, int a, int b) {
  double lat = 0, link = std::numeric_limits<double>::infinity();
  for (const Hop& h : ctx.router->route(a, b)) {
    lat += ctx.topo.links[static_cast<std::size_t>(h.link)].latencyUs;
    link = std::min(link, ctx.capBytesPerUs[static_cast<std::size_t>(h.link)]);
  }
  return {lat, link};
}

std::optional<SwitchPath> reducingSwitch(const CostContext& ctx, const std::vector<int>& ranks, std::string_view what,
                                         std::string& why) {
  const int sw = ctx.switchOf(ranks);
  if (sw < 0) {
    why = fmt::format("no {} switch connects ranks {}", what, fmt::join(ranks, ", "));
    return std::nullopt;
  }
  const TopoNode& node = ctx.topo.nodes[static_cast<std::size_t>(sw)];
  if (!node.reducesInNetwork()) {
    why = fmt::format("the {} switch {} of ranks {} does not reduce (reduce_GBps 0)", what, node.id,
                      fmt::join(ranks, ", "));
    return std::nullopt;
  }
  return switchPath(ctx, ranks, sw);
}

SwitchPath switchPath(const CostContext& ctx, const std::vector<int>& ranks, int sw) {
  SwitchPath path;
  path.sw = sw;
  path.linkBytesPerUs = std::numeric_limits<double>::infinity();
  std::vector<Hop> hops;
  for (int r : ranks) {
    ctx.router->nodeRoute(ctx.node[static_cast<std::size_t>(r)], sw, hops);
    double lat = 0;
    for (const Hop& h : hops) {
      lat += ctx.topo.links[static_cast<std::size_t>(h.link)].latencyUs;
      path.linkBytesPerUs = std::min(path.linkBytesPerUs, ctx.capBytesPerUs[static_cast<std::size_t>(h.link)]);
    }
    path.latencyUs = std::max(path.latencyUs, lat);
  }
  const double share = ctx.switchShare(sw);
  path.linkBytesPerUs *= share;
  path.reduceBytesPerUs = ctx.topo.nodes[static_cast<std::size_t>(sw)].reduceGBps * kBytesPerUsPerGBps * share;
  return path;
}

Estimate unsupportedEstimate(std::string why) {
  Estimate e;
  e.supported = false;
  e.note = std::move(why);
  return e;
}

}  // namespace collbench::algo
