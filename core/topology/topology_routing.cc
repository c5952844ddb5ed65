// Router (shortest paths with deterministic ECMP, explicit routes) and summarize() (bisection, diameter).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "collbench/error.h"
#include "collbench/topology.h"
#include "topology_internal.h"

namespace collbench {
namespace {

using topo_detail::Adjacency;

// A handful of recent sources covers the access patterns of collectives (a ring asks each source once, a tree a
// few); each tree is 16 bytes per node, so 64 of them stay near 10 MB even for 10^4-node fabrics.
constexpr std::size_t kMaxCachedTrees = 64;
// Nodes and predecessors kept in the shortest paths between gateways (up to 16 bytes each) before the cache starts
// over: 256 MB. A pod-to-pod pair at 131072 GPUs holds about 4200 nodes (every core), and a phase of a butterfly uses
// about one pair per leaf.
constexpr std::size_t kMaxGatewayPathNodes = std::size_t{16} << 20;
// Relative tolerance when comparing summed latencies: equal-cost paths may add the same terms in another order.
constexpr double kLatencyTolerance = 1e-9;
// summarize(): exact diameter up to this many ranks, above it BFS from kDiameterSampleSources spread sources.
constexpr std::size_t kExactDiameterMaxRanks = 512;
constexpr std::size_t kDiameterSampleSources = 64;
// summarize(): exact bisection (minimum over balanced splits) up to 16 ranks (C(15,7) = 6435 max-flows) and while
// splits x graph size stays under this budget (a fraction of a second).
constexpr int kExactBisectionMaxRanks = 16;
constexpr double kExactBisectionWork = 2e7;
// Residual capacity below this (GB/s) counts as saturated in the max-flow.
constexpr double kFlowEpsilon = 1e-9;

// splitmix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): a cheap
// well-mixed hash, so that pairs differing in one bit pick unrelated next hops.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t pairSeed(int src, int dst) {
  return mix((static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32) | static_cast<std::uint32_t>(dst));
}

bool sameLatency(double x, double y) { return std::fabs(x - y) <= kLatencyTolerance * std::max(1.0, std::fabs(y)); }

// The router's graph as the route searches below read it.
struct Graph {
  const std::vector<int>& start;                     // CSR adjacency: node -> [start[n], start[n+1])
  const std::vector<std::pair<int, int>>& adj;       // (neighbor, link)
  const std::vector<char>& transit;                  // per node: may a route pass through it
  const std::vector<std::pair<int, int>>& linkEnds;  // link -> (node of a, node of b)
  const Topology& topo;
};

// The equal-cost predecessors of v on the way from srcNode (node, link), in v's link order: one hop closer, a router
// (or srcNode), and as fast.
template <class HopsOf, class LatencyOf>
void predecessors(const Graph& g, int srcNode, int v, HopsOf hopsOf, LatencyOf latencyOf,
                  std::vector<std::pair<int, int>>& out) {
  const auto vi = static_cast<std::size_t>(v);
  out.clear();
  for (int e = g.start[vi]; e < g.start[vi + 1]; ++e) {
    const auto [u, l] = g.adj[static_cast<std::size_t>(e)];
    const auto ui = static_cast<std::size_t>(u);
    if (hopsOf(ui) != hopsOf(vi) - 1 || (!g.transit[ui] && u != srcNode)) continue;
    if (!sameLatency(latencyOf(ui) + g.topo.links[static_cast<std::size_t>(l)].latencyUs, latencyOf(vi))) continue;
    out.emplace_back(u, l);
  }
}

// Walks back from the destination; at each node chooses among its candidates (a span of (node, link)) by a hash of
// (src, dst, node) (`seed` is the pair's). Choosing near the destination as well as near the source spreads pairs
// over every tier.
template <class CandidatesOf>
void walkChoosing(const Graph& g, int srcNode, int dstNode, CandidatesOf candidatesOf, std::vector<Hop>& out,
                  std::uint64_t seed) {
  int v = dstNode;
  while (v != srcNode) {
    const auto [first, count] = candidatesOf(v);
    COLLBENCH_CHECK(count > 0, "no predecessor of node {} on the way from {} to {}", v, srcNode, dstNode);
    const auto [u, l] = first[mix(seed ^ (static_cast<std::uint64_t>(v) * 0x9e3779b97f4a7c15ull)) % count];
    out.push_back(Hop{l, g.linkEnds[static_cast<std::size_t>(l)].first == u});
    v = u;
  }
  std::reverse(out.begin(), out.end());
}

template <class HopsOf, class LatencyOf>
void walkBack(const Graph& g, int srcNode, int dstNode, HopsOf hopsOf, LatencyOf latencyOf, std::vector<Hop>& out,
              std::uint64_t seed) {
  std::vector<std::pair<int, int>> candidates;
  walkChoosing(
      g, srcNode, dstNode,
      [&](int v) {
        predecessors(g, srcNode, v, hopsOf, latencyOf, candidates);
        return std::pair{candidates.data(), candidates.size()};
      },
      out, seed);
}

// Scratch of pairRoute(), per node; an entry counts only where its stamp is the current search's, so nothing is
// cleared between searches. Per thread: a Router is used by one thread at a time, and stamps are unique per search
// whichever router runs it.
struct DagEdge {
  int from, to, link;
  double latency;
};
struct PairSearch {
  std::vector<std::uint32_t> stampFwd, stampBwd, stampDag;
  std::vector<int> hopsFwd, hopsBwd;
  std::vector<double> latency;
  std::vector<int> fwd, bwd;                    // nodes in order of discovery from src / from dst
  std::vector<std::size_t> fwdLayer, bwdLayer;  // where each hop count starts in fwd / bwd
  std::vector<std::vector<int>> dag;            // nodes of the shortest paths by hop count from src
  std::vector<std::vector<DagEdge>> into;       // their links by the hop count they lead to
  std::uint32_t stamp = 0;
};
thread_local PairSearch pairScratch;

std::size_t at(int v) { return static_cast<std::size_t>(v); }

// One end of meetHops(): the nodes it reached in order, by hop count.
struct Side {
  std::vector<int>& order;
  std::vector<std::size_t>& layer;  // layer[k]: first node of hop count k in order; back(): end of the last
  std::vector<std::uint32_t>& stamp;
  std::vector<int>& hops;
  int origin;
  bool done = false;  // its last layer found nothing new: it holds every node it can reach
  // Links the next expansion reads: the degrees of the last layer's nodes that paths may leave. The search expands
  // the side with less of it, so a switch with thousands of ports is crossed from its few-linked ends' side.
  std::size_t frontierLinks = 0;
  int depth() const { return static_cast<int>(layer.size()) - 2; }
};

std::size_t degree(const Graph& g, int v) {
  return static_cast<std::size_t>(g.start[static_cast<std::size_t>(v) + 1] - g.start[static_cast<std::size_t>(v)]);
}

// Hop count of the shortest src -> dst path (transit rules as tree()), -1 if none, by a breadth-first search from both
// ends that expands the frontier with fewer links: any path no longer than the two depths together meets in a node both
// reached, so the search stops once the best meeting is that short. pairScratch keeps both sides for pairRoute().
int meetHops(const Graph& g, int srcNode, int dstNode) {
  PairSearch& ps = pairScratch;
  const std::size_t nodes = g.start.size() - 1;
  if (ps.stampFwd.size() != nodes || ++ps.stamp == 0) {
    for (auto* stamps : {&ps.stampFwd, &ps.stampBwd, &ps.stampDag}) stamps->assign(nodes, 0);
    ps.hopsFwd.assign(nodes, 0);
    ps.hopsBwd.assign(nodes, 0);
    ps.latency.assign(nodes, 0);
    ps.stamp = 1;
  }
  const std::uint32_t st = ps.stamp;
  // May a path use v: its ends, or a router.
  const auto usable = [&](int v) { return v == srcNode || v == dstNode || g.transit[at(v)]; };
  Side fwd{ps.fwd, ps.fwdLayer, ps.stampFwd, ps.hopsFwd, srcNode};
  Side bwd{ps.bwd, ps.bwdLayer, ps.stampBwd, ps.hopsBwd, dstNode};
  for (Side* side : {&fwd, &bwd}) {
    side->order.assign(1, side->origin);
    side->layer.assign({0, 1});
    side->stamp[at(side->origin)] = st;
    side->hops[at(side->origin)] = 0;
    side->frontierLinks = degree(g, side->origin);
  }
  if (srcNode == dstNode) return 0;
  constexpr int kNone = std::numeric_limits<int>::max();
  int best = kNone;  // shortest src -> dst path met so far
  auto expand = [&](Side& side, const Side& other) {
    const std::size_t from = side.layer[side.layer.size() - 2], to = side.layer.back();
    const int h = side.depth() + 1;
    side.frontierLinks = 0;
    for (std::size_t i = from; i < to; ++i) {
      const int u = side.order[i];
      if (!g.transit[at(u)] && u != side.origin) continue;
      for (int e = g.start[at(u)]; e < g.start[at(u) + 1]; ++e) {
        const int v = g.adj[static_cast<std::size_t>(e)].first;
        if (side.stamp[at(v)] == st) continue;
        side.stamp[at(v)] = st;
        side.hops[at(v)] = h;
        side.order.push_back(v);
        if (g.transit[at(v)]) side.frontierLinks += degree(g, v);
        if (other.stamp[at(v)] == st && usable(v)) best = std::min(best, h + other.hops[at(v)]);
      }
    }
    side.layer.push_back(side.order.size());
    side.done = side.order.size() == to;
  };
  while (best == kNone || (best > fwd.depth() + bwd.depth() && !fwd.done && !bwd.done)) {
    if (fwd.done || bwd.done) return -1;  // one side holds all it reaches and met nothing
    if (fwd.frontierLinks <= bwd.frontierLinks) {
      expand(fwd, bwd);
    } else {
      expand(bwd, fwd);
    }
  }
  return best;
}

// The walk on tree(src, dst) reads hops and latencies of the nodes on shortest src -> dst paths only: a predecessor
// u of such a node v (hops(u) = hops(v) - 1, u a router) is on one too, and latency(v) is the minimum over those u.
// So after meetHops() found the hop count D, the nodes at hop `split` on shortest paths are those both sides reached
// at hops split and D - split (every shortest path crosses that layer), and the rest of the paths are their
// predecessors on the source's side and successors on the destination's. Latencies are the same minima over the
// same predecessors, so the walk picks the same links. In a Clos fabric both searches stop below the middle tier
// instead of sweeping every leaf.
// pairDag() leaves the nodes of the shortest paths in pairScratch: by hop count in dag[0..D], with their latency.
int pairDag(const Graph& g, int srcNode, int dstNode) {
  const int D = meetHops(g, srcNode, dstNode);
  if (D < 0) return -1;
  PairSearch& ps = pairScratch;
  const std::uint32_t st = ps.stamp;
  const Side bwd{ps.bwd, ps.bwdLayer, ps.stampBwd, ps.hopsBwd, dstNode};
  const Side fwd{ps.fwd, ps.fwdLayer, ps.stampFwd, ps.hopsFwd, srcNode};
  const auto usable = [&](int v) { return v == srcNode || v == dstNode || g.transit[at(v)]; };
  const int split = std::max(0, D - bwd.depth());
  auto& dag = ps.dag;
  if (dag.size() < at(D) + 1) dag.resize(at(D) + 1);
  for (int p = 0; p <= D; ++p) dag[at(p)].clear();
  auto& into = ps.into;
  if (into.size() < at(D) + 1) into.resize(at(D) + 1);
  for (int p = 0; p <= D; ++p) into[at(p)].clear();
  auto addDag = [&](int v, int p) {
    ps.stampDag[at(v)] = st;
    ps.stampFwd[at(v)] = st;  // a node at hop p of a shortest path is p hops from the source
    ps.hopsFwd[at(v)] = p;
    ps.latency[at(v)] = std::numeric_limits<double>::infinity();
    dag[at(p)].push_back(v);
  };
  // The links between dag[p] and the layer one hop closer to the source (toSource) or to the destination: the routers
  // (or the pair's end) there that link to dag[p] join the paths, and each such link is recorded with its latency. They
  // are read from whichever side has fewer links: a switch with thousands of ports in dag[p] is reached from the few
  // nodes beside it.
  auto linkLayer = [&](int p, bool toSource) {
    const int q = toSource ? p - 1 : p + 1;        // the joining nodes' hop count
    const Side& near = toSource ? fwd : bwd;       // the side whose search reached them
    const int nearHops = toSource ? q : D - q;     // their hop count in that search
    const int end = toSource ? srcNode : dstNode;  // the one non-router they may be
    auto& links = into[at(std::max(p, q))];
    const auto record = [&](int x, int v, int l) {  // x joins at q, v is in dag[p]
      if (ps.stampDag[at(x)] != st) addDag(x, q);
      const double latency = g.topo.links[static_cast<std::size_t>(l)].latencyUs;
      links.push_back(toSource ? DagEdge{x, v, l, latency} : DagEdge{v, x, l, latency});
    };
    const std::size_t first = near.layer[at(nearHops)], last = near.layer[at(nearHops) + 1];
    std::size_t dagLinks = 0, layerLinks = 0;
    for (int v : dag[at(p)]) dagLinks += degree(g, v);
    for (std::size_t i = first; i < last; ++i) layerLinks += degree(g, near.order[i]);
    if (dagLinks <= layerLinks) {
      for (std::size_t i = 0; i < dag[at(p)].size(); ++i) {
        const int v = dag[at(p)][i];
        for (int e = g.start[at(v)]; e < g.start[at(v) + 1]; ++e) {
          const auto [x, l] = g.adj[static_cast<std::size_t>(e)];
          if (near.stamp[at(x)] == st && near.hops[at(x)] == nearHops && (g.transit[at(x)] || x == end))
            record(x, v, l);
        }
      }
      return;
    }
    for (std::size_t i = first; i < last; ++i) {
      const int x = near.order[i];
      if (!g.transit[at(x)] && x != end) continue;
      for (int e = g.start[at(x)]; e < g.start[at(x) + 1]; ++e) {
        const auto [v, l] = g.adj[static_cast<std::size_t>(e)];
        if (ps.stampDag[at(v)] == st && ps.hopsFwd[at(v)] == p) record(x, v, l);
      }
    }
  };
  for (std::size_t i = fwd.layer[at(split)]; i < fwd.layer[at(split) + 1]; ++i) {
    const int v = fwd.order[i];
    if (ps.stampBwd[at(v)] == st && ps.hopsBwd[at(v)] == D - split && usable(v)) addDag(v, split);
  }
  for (int p = split; p > 0; --p) linkLayer(p, true);
  for (int p = split; p < D; ++p) linkLayer(p, false);
  // Latencies as tree() computes them: the minimum over the predecessors one hop closer.
  ps.latency[at(srcNode)] = 0;
  for (int p = 1; p <= D; ++p) {
    for (const DagEdge& edge : into[at(p)]) {
      ps.latency[at(edge.to)] = std::min(ps.latency[at(edge.to)], ps.latency[at(edge.from)] + edge.latency);
    }
  }
  return D;
}

// What predecessors() gives for node v of the paths pairDag() left in pairScratch (from srcNode): read from the DAG's
// links into v's hop count where those are fewer than v's own links (a many-port switch), in v's link order all the
// same (a node's links are listed in the file's order, so by link index).
void dagPredecessors(const Graph& g, int srcNode, int v, std::vector<std::pair<int, int>>& out) {
  const PairSearch& ps = pairScratch;
  const std::uint32_t st = ps.stamp;
  const auto hopsOf = [&ps, st](std::size_t x) { return ps.stampDag[x] == st ? ps.hopsFwd[x] : -2; };
  const auto latencyOf = [&ps](std::size_t x) { return ps.latency[x]; };
  const int p = hopsOf(at(v));
  if (p <= 0 || ps.into[at(p)].size() >= degree(g, v)) {
    predecessors(g, srcNode, v, hopsOf, latencyOf, out);
    return;
  }
  out.clear();
  for (const DagEdge& edge : ps.into[at(p)]) {
    if (edge.to == v && sameLatency(latencyOf(at(edge.from)) + edge.latency, latencyOf(at(v)))) {
      out.emplace_back(edge.from, edge.link);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
}

bool pairRoute(const Graph& g, int srcNode, int dstNode, std::vector<Hop>& out) {
  if (pairDag(g, srcNode, dstNode) < 0) return false;
  std::vector<std::pair<int, int>> candidates;
  walkChoosing(
      g, srcNode, dstNode,
      [&](int v) {
        dagPredecessors(g, srcNode, v, candidates);
        return std::pair{candidates.data(), candidates.size()};
      },
      out, pairSeed(srcNode, dstNode));
  return true;
}

// The source node of the previous route a router was asked for (per thread, as pairScratch): a source asked again
// in a row gets its BFS tree.
struct LastSource {
  const void* router = nullptr;
  int node = -1;
};
thread_local LastSource lastSource;

}  // namespace

Router::Router(const Topology& t) : topo_(&t) {
  const auto index = topo_detail::indexById(t);
  auto nodeOf = [&](const std::string& id, const std::string& what) {
    const auto it = index.find(id);
    if (it == index.end()) {
      throw Error(Errc::InvalidTopology, fmt::format("{}: {}: unknown node id \"{}\"", t.name, what, id));
    }
    return it->second;
  };
  linkEnds_.reserve(t.links.size());
  for (std::size_t l = 0; l < t.links.size(); ++l) {
    linkEnds_.emplace_back(nodeOf(t.links[l].a, fmt::format("links[{}].a", l)),
                           nodeOf(t.links[l].b, fmt::format("links[{}].b", l)));
  }
  const Adjacency adj = topo_detail::buildAdjacency(t, index);
  adjStart_ = adj.start;
  adj_.reserve(adj.nbr.size());
  for (std::size_t e = 0; e < adj.nbr.size(); ++e) adj_.emplace_back(adj.nbr[e], adj.link[e]);
  rankNode_.reserve(t.ranks.size());
  for (std::size_t r = 0; r < t.ranks.size(); ++r) rankNode_.push_back(nodeOf(t.ranks[r], fmt::format("ranks[{}]", r)));
  // A node that holds a rank is an endpoint, not a router (a GPU does not forward another GPU's traffic to its NIC:
  // without this, shortest paths on a DGX tie with detours through a neighbour GPU's NIC). Where ranks are linked
  // to each other directly (torus, ring, NVLink mesh), ranks are the routers and every node forwards.
  transit_.assign(adjStart_.size() - 1, 1);
  std::vector<char> holdsRank(transit_.size(), 0);
  for (int node : rankNode_) holdsRank[static_cast<std::size_t>(node)] = 1;
  const bool ranksLinked = std::any_of(linkEnds_.begin(), linkEnds_.end(), [&](const auto& ends) {
    return holdsRank[static_cast<std::size_t>(ends.first)] && holdsRank[static_cast<std::size_t>(ends.second)];
  });
  if (!ranksLinked) {
    for (std::size_t v = 0; v < transit_.size(); ++v) transit_[v] = holdsRank[v] ? 0 : 1;
  }
  // Routers whose every neighbour is an endpoint (a server's NVSwitch): a path through one ends at one of them.
  deadEnd_.assign(transit_.size(), 0);
  for (std::size_t v = 0; v < transit_.size(); ++v) {
    if (!transit_[v]) continue;
    bool onlyEndpoints = true;
    for (int e = adjStart_[v]; e < adjStart_[v + 1] && onlyEndpoints; ++e) {
      onlyEndpoints = !transit_[static_cast<std::size_t>(adj_[static_cast<std::size_t>(e)].first)];
    }
    deadEnd_[v] = onlyEndpoints ? 1 : 0;
  }

  // Explicit routes: node path -> hops; parallel links between two path nodes are chosen by the pair hash too.
  auto toHops = [&](const std::vector<std::string>& path, std::uint64_t seed) {
    std::vector<Hop> hops;
    for (std::size_t i = 1; i < path.size(); ++i) {
      const int u = nodeOf(path[i - 1], "routes"), v = nodeOf(path[i], "routes");
      std::vector<int> parallel;
      for (int e = adjStart_[static_cast<std::size_t>(u)]; e < adjStart_[static_cast<std::size_t>(u) + 1]; ++e) {
        if (adj_[static_cast<std::size_t>(e)].first == v) parallel.push_back(adj_[static_cast<std::size_t>(e)].second);
      }
      if (parallel.empty()) {
        throw Error(Errc::InvalidTopology,
                    fmt::format("{}: routes: no link between \"{}\" and \"{}\"", t.name, path[i - 1], path[i]));
      }
      const int l = parallel[mix(seed ^ i) % parallel.size()];
      hops.push_back(Hop{l, linkEnds_[static_cast<std::size_t>(l)].first == u});
    }
    return hops;
  };
  for (const auto& [key, path] : t.routes) {
    const int from = nodeOf(key.first, "routes"), to = nodeOf(key.second, "routes");
    explicit_[{from, to}] = toHops(path, pairSeed(from, to));
  }
  for (const auto& [key, path] : t.routes) {
    const int from = nodeOf(key.first, "routes"), to = nodeOf(key.second, "routes");
    if (explicit_.count({to, from})) continue;  // the reverse direction has its own route
    std::vector<std::string> reversed(path.rbegin(), path.rend());
    explicit_[{to, from}] = toHops(reversed, pairSeed(to, from));
  }
}

const Router::Tree& Router::tree(int srcNode, int dstNode) const {
  ++useClock_;
  auto it = trees_.find(srcNode);
  if (it == trees_.end()) {
    const std::size_t n = adjStart_.size() - 1;
    Tree fresh;
    if (trees_.size() >= kMaxCachedTrees) {
      auto oldest = std::min_element(trees_.begin(), trees_.end(),
                                     [](const auto& x, const auto& y) { return x.second.lastUse < y.second.lastUse; });
      // Its arrays are reused: only the nodes it reached (its queue) need resetting, not the whole fabric.
      fresh = std::move(oldest->second);
      for (int v : fresh.queue) {
        fresh.hops[static_cast<std::size_t>(v)] = -1;
        fresh.latency[static_cast<std::size_t>(v)] = std::numeric_limits<double>::infinity();
      }
      fresh.queue.clear();
      fresh.head = 0;
      trees_.erase(oldest);
    } else {
      fresh.hops.assign(n, -1);
      fresh.latency.assign(n, std::numeric_limits<double>::infinity());
      fresh.queue.reserve(n);
    }
    fresh.hops[static_cast<std::size_t>(srcNode)] = 0;
    fresh.latency[static_cast<std::size_t>(srcNode)] = 0;
    fresh.queue.push_back(srcNode);
    it = trees_.emplace(srcNode, std::move(fresh)).first;
  }
  Tree& tr = it->second;
  tr.lastUse = useClock_;
  // BFS by hop count; within a layer the latency of a node is the minimum over its predecessors in the previous
  // layer. FIFO order finishes a layer before the next, so once dst has been reached and every node two or more
  // layers closer than dst has been dequeued, the layer before dst's is complete with final hops and latencies:
  // that is where the BFS pauses, and dst's latency is the minimum over its neighbours in that layer (expanding the
  // whole layer instead would visit every spine above a leaf to find a server's neighbour on that leaf). Neighbours
  // in a ring or a leaf are found after a few dequeues instead of a sweep of the whole fabric.
  const auto d = static_cast<std::size_t>(dstNode);
  while (tr.head < tr.queue.size() &&
         (tr.hops[d] < 0 || tr.hops[static_cast<std::size_t>(tr.queue[tr.head])] < tr.hops[d] - 1)) {
    const auto u = static_cast<std::size_t>(tr.queue[tr.head++]);
    if (!transit_[u] && static_cast<int>(u) != srcNode) continue;  // reached, but routes do not pass through it
    for (int e = adjStart_[u]; e < adjStart_[u + 1]; ++e) {
      const auto [v, l] = adj_[static_cast<std::size_t>(e)];
      const auto vi = static_cast<std::size_t>(v);
      const double cand = tr.latency[u] + topo_->links[static_cast<std::size_t>(l)].latencyUs;
      if (tr.hops[vi] < 0) {
        tr.hops[vi] = tr.hops[u] + 1;
        tr.latency[vi] = cand;
        tr.queue.push_back(v);
      } else if (tr.hops[vi] == tr.hops[u] + 1 && cand < tr.latency[vi]) {
        tr.latency[vi] = cand;
      }
    }
  }
  if (tr.hops[d] > 0) {
    for (int e = adjStart_[d]; e < adjStart_[d + 1]; ++e) {
      const auto [u, l] = adj_[static_cast<std::size_t>(e)];
      const auto ui = static_cast<std::size_t>(u);
      if (tr.hops[ui] != tr.hops[d] - 1 || (!transit_[ui] && u != srcNode)) continue;
      tr.latency[d] = std::min(tr.latency[d], tr.latency[ui] + topo_->links[static_cast<std::size_t>(l)].latencyUs);
    }
  }
  return tr;
}

void Router::walk(int srcNode, int dstNode, const Tree& tr, std::vector<Hop>& out, std::uint64_t seed) const {
  walkBack(
      Graph{adjStart_, adj_, transit_, linkEnds_, *topo_}, srcNode, dstNode,
      [&tr](std::size_t v) { return tr.hops[v]; }, [&tr](std::size_t v) { return tr.latency[v]; }, out, seed);
}

int Router::gateway(int srcNode, int dstNode, std::vector<Hop>& chain) const {
  chain.clear();
  if (transit_[static_cast<std::size_t>(srcNode)]) return srcNode;  // a router: its paths may leave every way
  // Whether x and y share a link, read from the end with fewer (each link is listed at both ends).
  const auto nextTo = [this](int x, int y) {
    const auto links = [this](int v) {
      return adjStart_[static_cast<std::size_t>(v) + 1] - adjStart_[static_cast<std::size_t>(v)];
    };
    if (links(y) < links(x)) std::swap(x, y);
    for (int e = adjStart_[static_cast<std::size_t>(x)]; e < adjStart_[static_cast<std::size_t>(x) + 1]; ++e) {
      if (adj_[static_cast<std::size_t>(e)].first == y) return true;
    }
    return false;
  };
  int c = srcNode, prev = -1;
  for (std::size_t steps = 0; steps < transit_.size(); ++steps) {
    int next = -1, link = -1, ways = 0;
    for (int e = adjStart_[static_cast<std::size_t>(c)]; e < adjStart_[static_cast<std::size_t>(c) + 1]; ++e) {
      const auto [u, l] = adj_[static_cast<std::size_t>(e)];
      if (u == dstNode) return c;                                         // the path may end here
      if (u == prev || !transit_[static_cast<std::size_t>(u)]) continue;  // no path passes through an endpoint
      if (deadEnd_[static_cast<std::size_t>(u)]) {
        if (nextTo(u, dstNode)) return c;  // it leads to dst as well
        continue;
      }
      ++ways;
      next = u;
      link = l;
    }
    if (ways != 1) return c;
    chain.push_back(Hop{link, linkEnds_[static_cast<std::size_t>(link)].first == c});
    prev = c;
    c = next;
  }
  chain.clear();  // a loop of routers with one way on each: no gateway
  return srcNode;
}

int Router::nodeRoute(int srcNode, int dstNode, std::vector<Hop>& out) const {
  out.clear();
  const int n = static_cast<int>(adjStart_.size()) - 1;
  if (srcNode < 0 || srcNode >= n || dstNode < 0 || dstNode >= n) {
    throw Error(Errc::InvalidArgument, fmt::format("route between nodes {} and {}: topology {} has {} nodes", srcNode,
                                                   dstNode, topo_->name, n));
  }
  if (srcNode == dstNode) return 0;
  if (auto it = explicit_.find({srcNode, dstNode}); it != explicit_.end()) {
    out = it->second;
    return static_cast<int>(out.size());
  }
  // One route from a source (rings, butterflies: each source asks once per phase) needs only the nodes of its
  // shortest paths; a source asked again in a row (all-to-all, trees) gets its BFS tree, which serves them all.
  const bool again = lastSource.router == this && lastSource.node == srcNode;
  lastSource = {this, srcNode};
  if (!again && trees_.find(srcNode) == trees_.end()) {
    // Where every shortest path starts with the same hops (a GPU's only way out is its NIC, the NIC's its leaf) and
    // ends with the same hops, it is those hops around a shortest path between the two gateways: the paths between
    // gateways serve every pair of sources and destinations behind them (a leaf pair's for the servers below), and
    // a walk on them with the pair's own seed picks the links the pair's own search would (the hops and latencies on
    // them are the pair's less the first hops').
    if (const int hops = gatewayRoute(srcNode, dstNode, out); hops != kNoGateway) return hops;
    return pairRoute(Graph{adjStart_, adj_, transit_, linkEnds_, *topo_}, srcNode, dstNode, out)
               ? static_cast<int>(out.size())
               : -1;
  }
  const Tree& tr = tree(srcNode, dstNode);
  if (tr.hops[static_cast<std::size_t>(dstNode)] < 0) return -1;
  walk(srcNode, dstNode, tr, out, pairSeed(srcNode, dstNode));
  return static_cast<int>(out.size());
}

int Router::gatewayRoute(int srcNode, int dstNode, std::vector<Hop>& out) const {
  std::vector<Hop>& head = gatewayHead_;
  std::vector<Hop>& tail = gatewayTail_;  // from dstNode towards srcNode
  const int a = gateway(srcNode, dstNode, head);
  const int b = gateway(dstNode, srcNode, tail);
  if (a == srcNode && b == dstNode) return kNoGateway;
  // The two chains must not meet but at a common gateway (else the whole path is forced: the pair search takes it).
  const auto nodesOf = [this](int from, const std::vector<Hop>& hops) {
    std::vector<int> nodes{from};
    for (const Hop& h : hops) {
      const auto [x, y] = linkEnds_[static_cast<std::size_t>(h.link)];
      nodes.push_back(h.forward ? y : x);
    }
    return nodes;
  };
  const std::vector<int> fromSrc = nodesOf(srcNode, head), fromDst = nodesOf(dstNode, tail);
  for (int x : fromSrc) {
    for (int y : fromDst) {
      if (x == y && !(x == a && x == b)) return kNoGateway;
    }
  }
  const std::uint64_t key =
      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  auto it = gatewayPaths_.find(key);
  if (it == gatewayPaths_.end()) {
    const Graph g{adjStart_, adj_, transit_, linkEnds_, *topo_};
    const int D = pairDag(g, a, b);
    if (D < 0) return -1;
    // Each node's predecessors as the pair search's walk would gather them, once for every pair behind a and b.
    const PairSearch& ps = pairScratch;
    GatewayPaths paths;
    for (int p = 1; p <= D; ++p) {
      for (int v : ps.dag[at(p)]) paths.nodes.push_back(v);
    }
    std::sort(paths.nodes.begin(), paths.nodes.end());
    std::vector<std::pair<int, int>> preds;
    paths.first.push_back(0);
    for (int v : paths.nodes) {
      dagPredecessors(g, a, v, preds);
      paths.preds.insert(paths.preds.end(), preds.begin(), preds.end());
      paths.first.push_back(paths.preds.size());
    }
    const std::size_t size = paths.nodes.size() + paths.preds.size();
    if (gatewayPathNodes_ + size > kMaxGatewayPathNodes) {
      gatewayPaths_.clear();
      gatewayPathNodes_ = 0;
    }
    gatewayPathNodes_ += size;
    it = gatewayPaths_.emplace(key, std::move(paths)).first;
  }
  const GatewayPaths& paths = it->second;
  walkChoosing(
      Graph{adjStart_, adj_, transit_, linkEnds_, *topo_}, a, b,
      [&paths](int v) {
        const auto i =
            static_cast<std::size_t>(std::lower_bound(paths.nodes.begin(), paths.nodes.end(), v) - paths.nodes.begin());
        return std::pair{paths.preds.data() + paths.first[i], paths.first[i + 1] - paths.first[i]};
      },
      out, pairSeed(srcNode, dstNode));
  out.insert(out.begin(), head.begin(), head.end());
  for (std::size_t i = tail.size(); i-- > 0;) out.push_back(Hop{tail[i].link, !tail[i].forward});
  return static_cast<int>(out.size());
}

int Router::distance(int srcNode, int dstNode) const {
  const int n = static_cast<int>(adjStart_.size()) - 1;
  if (srcNode < 0 || srcNode >= n || dstNode < 0 || dstNode >= n) {
    throw Error(Errc::InvalidArgument, fmt::format("distance between nodes {} and {}: topology {} has {} nodes",
                                                   srcNode, dstNode, topo_->name, n));
  }
  const bool again = lastSource.router == this && lastSource.node == srcNode;
  lastSource = {this, srcNode};
  if (!again && trees_.find(srcNode) == trees_.end()) {
    return meetHops(Graph{adjStart_, adj_, transit_, linkEnds_, *topo_}, srcNode, dstNode);
  }
  return tree(srcNode, dstNode).hops[static_cast<std::size_t>(dstNode)];
}

const std::vector<Hop>& Router::route(int srcRank, int dstRank) const {
  const int n = static_cast<int>(rankNode_.size());
  if (srcRank < 0 || srcRank >= n || dstRank < 0 || dstRank >= n) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("route from rank {} to rank {}: topology {} has {} ranks", srcRank, dstRank, topo_->name, n),
        srcRank, dstRank);
  }
  const std::uint64_t key = (static_cast<std::uint64_t>(srcRank) << 32) | static_cast<std::uint32_t>(dstRank);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::vector<Hop> hops;
  if (nodeRoute(rankNode_[static_cast<std::size_t>(srcRank)], rankNode_[static_cast<std::size_t>(dstRank)], hops) < 0) {
    throw Error(Errc::InvalidTopology,
                fmt::format("no path between rank {} ({}) and rank {} ({}) in topology {}", srcRank,
                            topo_->ranks[static_cast<std::size_t>(srcRank)], dstRank,
                            topo_->ranks[static_cast<std::size_t>(dstRank)], topo_->name),
                srcRank, dstRank);
  }
  return cache_.emplace(key, std::move(hops)).first->second;
}

namespace {

// Dinic's max-flow on an undirected capacity graph (each link is a pair of arcs that share the capacity's
// residual bookkeeping in both directions). Iterative augmenting so that long paths (rings) need no deep stack.
class MaxFlow {
 public:
  explicit MaxFlow(int n)
      : out_(static_cast<std::size_t>(n)), level_(static_cast<std::size_t>(n)), next_(out_.size()) {}

  int addEdge(int u, int v, double capUV, double capVU) {
    const int id = static_cast<int>(arcs_.size());
    arcs_.push_back(Arc{v, capUV, capUV});
    arcs_.push_back(Arc{u, capVU, capVU});
    out_[static_cast<std::size_t>(u)].push_back(id);
    out_[static_cast<std::size_t>(v)].push_back(id + 1);
    return id;
  }
  void setBase(int arc, double cap) { arcs_[static_cast<std::size_t>(arc)].base = cap; }
  void reset() {
    for (Arc& a : arcs_) a.cap = a.base;
  }

  double run(int s, int t) {
    double total = 0;
    while (buildLevels(s, t)) {
      std::fill(next_.begin(), next_.end(), 0);
      for (double f; (f = augment(s, t)) > kFlowEpsilon;) total += f;
    }
    return total;
  }

 private:
  struct Arc {
    int to;
    double cap;
    double base;
  };

  bool buildLevels(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<int> queue{s};
    level_[static_cast<std::size_t>(s)] = 0;
    for (std::size_t head = 0; head < queue.size(); ++head) {
      const int u = queue[head];
      for (int id : out_[static_cast<std::size_t>(u)]) {
        const Arc& a = arcs_[static_cast<std::size_t>(id)];
        if (a.cap > kFlowEpsilon && level_[static_cast<std::size_t>(a.to)] < 0) {
          level_[static_cast<std::size_t>(a.to)] = level_[static_cast<std::size_t>(u)] + 1;
          queue.push_back(a.to);
        }
      }
    }
    return level_[static_cast<std::size_t>(t)] >= 0;
  }

  // One augmenting path in the level graph; dead ends are pruned by advancing next_ (Dinic's current-arc rule).
  double augment(int s, int t) {
    std::vector<int> path;  // arc ids
    int u = s;
    while (u != t) {
      auto& edges = out_[static_cast<std::size_t>(u)];
      std::size_t& i = next_[static_cast<std::size_t>(u)];
      while (i < edges.size()) {
        const Arc& a = arcs_[static_cast<std::size_t>(edges[i])];
        if (a.cap > kFlowEpsilon && level_[static_cast<std::size_t>(a.to)] == level_[static_cast<std::size_t>(u)] + 1) {
          break;
        }
        ++i;
      }
      if (i == edges.size()) {
        if (u == s) return 0;
        level_[static_cast<std::size_t>(u)] = -1;  // dead end for the rest of this phase
        const int back = path.back();
        path.pop_back();
        u = arcs_[static_cast<std::size_t>(back ^ 1)].to;
        ++next_[static_cast<std::size_t>(u)];
        continue;
      }
      path.push_back(edges[i]);
      u = arcs_[static_cast<std::size_t>(edges[i])].to;
    }
    double f = std::numeric_limits<double>::infinity();
    for (int id : path) f = std::min(f, arcs_[static_cast<std::size_t>(id)].cap);
    for (int id : path) {
      arcs_[static_cast<std::size_t>(id)].cap -= f;
      arcs_[static_cast<std::size_t>(id ^ 1)].cap += f;
    }
    return f;
  }

  std::vector<Arc> arcs_;
  std::vector<std::vector<int>> out_;
  std::vector<int> level_;
  std::vector<std::size_t> next_;
};

// Flow network of the topology with a super-source and super-sink arc to every rank node; bisect() sets which
// ranks feed the source and which drain to the sink.
class Bisector {
 public:
  Bisector(const Topology& t, const std::unordered_map<std::string, int>& index, const std::vector<int>& rankNode)
      : rankNode_(rankNode), flow_(static_cast<int>(t.nodes.size()) + 2) {
    const int n = static_cast<int>(t.nodes.size());
    source_ = n;
    sink_ = n + 1;
    double total = 0;
    for (const TopoLink& k : t.links) {
      const TopoNode& a = t.nodes[static_cast<std::size_t>(index.at(k.a))];
      const TopoNode& b = t.nodes[static_cast<std::size_t>(index.at(k.b))];
      double cap = k.bandwidthGBps;
      if (a.switchGBps > 0) cap = std::min(cap, a.switchGBps);
      if (b.switchGBps > 0) cap = std::min(cap, b.switchGBps);
      flow_.addEdge(index.at(k.a), index.at(k.b), cap, cap);
      total += cap;
    }
    infinite_ = 2 * total + 1;
    for (int node : rankNode_) {
      if (sourceArc_.count(node)) continue;
      sourceArc_[node] = flow_.addEdge(source_, node, 0, 0);
      sinkArc_[node] = flow_.addEdge(node, sink_, 0, 0);
    }
  }
  /// Max-flow from the ranks with inFirst[r] to the others; a node holding ranks of both halves is a source only.
  double bisect(const std::vector<bool>& inFirst) {
    std::set<int> first;
    for (std::size_t r = 0; r < rankNode_.size(); ++r) {
      if (inFirst[r]) first.insert(rankNode_[r]);
    }
    for (const auto& [node, arc] : sourceArc_) {
      const bool src = first.count(node) > 0;
      flow_.setBase(arc, src ? infinite_ : 0);
      flow_.setBase(sinkArc_.at(node), src ? 0 : infinite_);
    }
    flow_.reset();
    return flow_.run(source_, sink_);
  }

 private:
  const std::vector<int>& rankNode_;
  MaxFlow flow_;
  int source_ = 0, sink_ = 0;
  double infinite_ = 0;
  std::map<int, int> sourceArc_, sinkArc_;
};

double binomial(int n, int k) {
  double c = 1;
  for (int i = 1; i <= k; ++i) c = c * (n - k + i) / i;
  return c;
}

}  // namespace

TopologySummary summarize(const Topology& t) {
  TopologySummary s;
  s.ranks = static_cast<int>(t.ranks.size());
  s.nodes = static_cast<int>(t.nodes.size());
  s.links = static_cast<int>(t.links.size());
  const auto index = topo_detail::indexById(t);
  for (const TopoNode& n : t.nodes) s.switches += n.kind == NodeKind::Switch ? 1 : 0;
  for (const TopoLink& k : t.links) {
    LinkClassSummary& c = s.linkClasses[k.linkClass];
    c.minGBps = c.count ? std::min(c.minGBps, k.bandwidthGBps) : k.bandwidthGBps;
    c.maxGBps = c.count ? std::max(c.maxGBps, k.bandwidthGBps) : k.bandwidthGBps;
    c.totalGBps += k.bandwidthGBps;
    ++c.count;
  }
  const Router router(t);  // validates ids
  std::vector<int> rankNode;
  std::set<std::string> hosts;
  for (int r = 0; r < s.ranks; ++r) {
    rankNode.push_back(router.rankNode(r));
    const TopoNode& n = t.nodes[static_cast<std::size_t>(rankNode.back())];
    hosts.insert(n.host.empty() ? "\x01" + n.id : n.host);  // a rank without a host is its own machine
  }
  s.hosts = static_cast<int>(hosts.size());
  if (s.ranks == 0) return s;

  // Diameter: BFS hop counts, except for pairs that have an explicit route.
  const Adjacency adj = topo_detail::buildAdjacency(t, index);
  std::vector<int> uniqueNodes;
  {
    std::set<int> seen;
    for (int node : rankNode) {
      if (seen.insert(node).second) uniqueNodes.push_back(node);
    }
  }
  std::vector<int> sources;
  if (t.ranks.size() <= kExactDiameterMaxRanks) {
    sources = uniqueNodes;
  } else {
    s.diameterSampled = true;
    std::set<int> seen;
    for (std::size_t i = 0; i < kDiameterSampleSources; ++i) {
      const int node = rankNode[i * t.ranks.size() / kDiameterSampleSources];
      if (seen.insert(node).second) sources.push_back(node);
    }
  }
  std::map<std::pair<int, int>, int> explicitLen;
  for (const auto& [key, path] : t.routes)
    explicitLen[{index.at(key.first), index.at(key.second)}] = static_cast<int>(path.size()) - 1;
  for (const auto& [key, path] : t.routes) {
    explicitLen.emplace(std::make_pair(index.at(key.second), index.at(key.first)), static_cast<int>(path.size()) - 1);
  }
  for (int src : sources) {
    const std::vector<int> hops = topo_detail::bfsHops(adj, src);
    for (int dst : uniqueNodes) {
      int h = hops[static_cast<std::size_t>(dst)];
      if (!explicitLen.empty() && src != dst) {
        if (auto it = explicitLen.find({src, dst}); it != explicitLen.end()) h = it->second;
      }
      s.diameterHops = std::max(s.diameterHops, h);
    }
  }

  // Bisection.
  if (s.ranks < 2) {
    s.bisectionExact = true;
    return s;
  }
  Bisector bisector(t, index, rankNode);
  const int n = s.ranks;
  const int half = n / 2;
  const double splits = n % 2 == 0 ? binomial(n - 1, half - 1) : binomial(n, half);
  const double work = splits * static_cast<double>(t.nodes.size() + t.links.size() + t.ranks.size());
  if (n <= kExactBisectionMaxRanks && work <= kExactBisectionWork) {
    s.bisectionExact = true;
    double best = std::numeric_limits<double>::infinity();
    std::vector<bool> inFirst(static_cast<std::size_t>(n));
    for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
      if (std::popcount(mask) != half) continue;
      if (n % 2 == 0 && !(mask & 1u)) continue;  // even n: each split once, rank 0 on the first side
      for (int r = 0; r < n; ++r) inFirst[static_cast<std::size_t>(r)] = (mask >> r) & 1u;
      best = std::min(best, bisector.bisect(inFirst));
    }
    s.bisectionGBps = best;
  } else {
    std::vector<bool> inFirst(static_cast<std::size_t>(n), false);
    for (int r = 0; r < half; ++r) inFirst[static_cast<std::size_t>(r)] = true;
    s.bisectionGBps = bisector.bisect(inFirst);
  }
  return s;
}

}  // namespace collbench
