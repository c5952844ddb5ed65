// The tree model: windows of the pipelined tree all-reduce (`tree`, algorithms.h treeParents) evaluated on the fluid
// network without building their schedule. It is the dependency graph buildSchedule emits, op for op, driven the way
// the Dag drives a schedule (rendezvous, FIFO connections, reduction after receive), with state per slice, rank and
// chunk instead of per op: at 16384 GPUs and 8 slices a 64-chunk window is 17 M transfers, whose schedule would take
// 12 GB. tests/sim/test_sim_aggregation.cc (TreeModel) pins it to the fluid method on the window's schedule.
//
// One chunk k of slice s at rank r (children folded one after the other, in rank order):
//   up     r -> parent: sends once r folded all its children's chunk k (at once for a leaf), received as the parent's
//          fold of child i, ready once the parent folded child i - 1 (at once for its first child);
//   fold   the parent reduces the chunk at its node's rate after it arrived;
//   down   parent -> r: sends once the parent holds the result (its own down arrived, or its last fold at the root),
//          received once r's up of chunk k has gone.
// Each (slice, rank) has one connection up and one down, each carrying its chunks in order.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/run.h"
#include "engine.h"
#include "fluid.h"

namespace collbench::sim::detail {
namespace {

enum Kind : std::uint64_t { kUp = 0, kDown = 1, kFold = 2 };

constexpr double kBytesPerGB = 1e9;
/// representTreeChannels simulates every channel where more of the network links its simulated channels cross are
/// shared with the others. With 4 channels at 1 GiB on multi_node: not rail-optimized, 128 servers, 162 of 858 (one
/// channel in four read +6.1 % there); two GPUs per NIC, 256 of 272; rail-optimized three-level fabrics share a few
/// spine-core links where routes of two rails meet, 4 of 9109 at 2048 servers and 1 of 68921 at 16384.
constexpr double kSharedNetworkLinks = 0.01;

class TreeWindow {
 public:
  /// Bytes of state per (slice, rank, round), and per (slice, rank) beside it (its record, routes and route-cache
  /// entries, the flows in flight: measured at 131072 ranks, 2 slices and 76 rounds, 1.88 GB peak against 1.49 GB for
  /// the hierarchical model's run on the same fabric, 0.18 GB of it cells).
  static constexpr std::size_t kCellBytes = sizeof(double) + 1;
  static constexpr double kBytesPerSliceRank = 1000;
  TreeWindow(World& w, const CollectiveSpec& spec, const AlgoParams& p, std::size_t window,
             const TreeChannels& channels)
      : w_(w),
        net_(w),
        n_(spec.nranks),
        slices_(kTreeCount * channels.simulatedPerTree(p.channels)),
        window_(static_cast<int>(window)),
        bytes_(spec.count * spec.elementSize() / static_cast<std::size_t>(kTreeCount * p.channels) / window),
        linkShare_(channels.linkShare) {
    const auto sr = static_cast<std::size_t>(slices_) * static_cast<std::size_t>(n_);
    COLLBENCH_CHECK(sr <= std::numeric_limits<std::uint32_t>::max() && window < (std::size_t{1} << 30),
                    "tree model: {} slice-ranks and {} rounds exceed its tags", sr, window);
    nodes_.resize(sr);
    const int perTree = channels.simulatedPerTree(p.channels);
    for (int t = 0; t < kTreeCount; ++t) {
      for (int i = 0; i < perTree; ++i) {
        const int s = t * perTree + i;
        const std::vector<int> parent = treeParents(n_, p, t, t * p.channels + i * channels.every);
        for (int r = 0; r < n_; ++r) {
          const int up = parent[static_cast<std::size_t>(r)];
          nodes_[at(s, r)].parent = up < 0 ? kNone : static_cast<std::uint32_t>(at(s, up));
        }
      }
    }
    for (std::size_t l = 0; l < linkShare_.size(); ++l) {
      if (linkShare_[l] > 0) net_.scaleLink(static_cast<DirLink>(l), linkShare_[l]);
    }
    for (std::size_t h = 0; h < channels.hostShare.size(); ++h) {
      if (channels.hostShare[h] > 0) net_.scaleHost(static_cast<int>(h), channels.hostShare[h]);
    }
    // Children in rank order (the schedule folds them so), as one array per slice and rank.
    std::vector<std::uint32_t> kidStart(sr + 1, 0);
    for (const Node& v : nodes_) {
      if (v.parent != kNone) ++kidStart[v.parent + 1];
    }
    for (std::size_t i = 0; i < sr; ++i) kidStart[i + 1] += kidStart[i];
    kids_.resize(kidStart[sr]);
    std::vector<std::uint32_t> fill(kidStart.begin(), kidStart.end() - 1);
    for (std::size_t i = 0; i < sr; ++i) {
      Node& v = nodes_[i];
      v.kidStart = kidStart[i];
      v.kidCount = checkedNarrow(kidStart[i + 1] - kidStart[i]);
      if (v.parent == kNone) continue;
      v.childIndex = checkedNarrow(fill[v.parent] - kidStart[v.parent]);
      kids_[fill[v.parent]++] = static_cast<std::uint32_t>(i);
    }
    cells_.assign(sr * static_cast<std::size_t>(window_), 0);
    sides_.assign(cells_.size(), 0);
    // Routes source by source up front (Router keeps a few search trees; event order would redo one per pair).
    std::vector<std::pair<int, int>> pairs;
    for (std::size_t i = 0; i < sr; ++i) {
      if (nodes_[i].parent == kNone) continue;
      const int r = rankOf(i), up = rankOf(nodes_[i].parent);
      if (w.sameNode(r, up)) continue;
      pairs.emplace_back(r, up);
      pairs.emplace_back(up, r);
    }
    w.prefetchRoutes(std::move(pairs));
    // Each connection's route (copied next to the others, in slice-rank order), latency and wire cost (one chunk
    // size: the same for every transfer on it).
    for (std::size_t i = 0; i < sr; ++i) {
      Node& v = nodes_[i];
      if (v.parent == kNone) continue;
      const int r = rankOf(i), up = rankOf(v.parent);
      v.parentFolds = w.reduceRate(up) > 0 && bytes_ > 0;
      if (w.sameNode(r, up)) continue;
      v.up = connection(r, up);
      v.down = connection(up, r);
    }
  }

  /// Runs the window; returns each round's end.
  const std::vector<double>& run() {
    roundEnd_.assign(static_cast<std::size_t>(window_), 0);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const Node& v = nodes_[i];
      if (v.parent == kNone) continue;
      for (int k = 0; k < window_; ++k) {
        if (v.kidCount == 0) upReady(cell(i, k), 0);    // a leaf sends at once
        if (v.childIndex == 0) upReady(cell(i, k), 0);  // the first child is received at once
      }
      tryUp(i, 0);
    }
    drain();
    while (const auto done = net_.next()) {
      handle(done->tag, done->t);
      drain();
    }
    return roundEnd_;
  }

  /// Wire bytes per round on every directed link the window uses, over its bandwidth, at the busiest link.
  double busiestRoundSeconds() {
    std::vector<double> linkBytes(2 * w_.topology().links.size(), 0);
    for (const Node& v : nodes_) {
      for (const Connection& c : {v.up, v.down}) {
        for (DirLink l : route(c))
          linkBytes[static_cast<std::size_t>(l)] += static_cast<double>(costs_[c.cost].wire.bytes);
      }
    }
    double busiest = 0;
    for (std::size_t l = 0; l < linkBytes.size(); ++l) {
      const double share = linkShare_.empty() ? 1.0 : linkShare_[l];
      if (linkBytes[l] > 0) busiest = std::max(busiest, linkBytes[l] / (w_.bandwidth(static_cast<DirLink>(l)) * share));
    }
    return busiest;
  }

 private:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  /// A connection between the nodes of two ranks: its route in routes_ (none within a node) and what every transfer
  /// on it pays (costs_).
  struct Connection {
    std::uint32_t route = 0, cost = 0;
    std::uint8_t hops = 0;
  };
  struct Cost {
    double latency = 0;
    Wire wire;
  };
  /// A (slice, rank): its tree (parent and children as slice-rank indices), its connections up and down (next chunk,
  /// busy, free since). One record, so that an event touches one or two cache lines of it rather than one per field.
  struct Node {
    double upFree = 0, downFree = 0;
    std::uint32_t parent = kNone, kidStart = 0;
    std::int32_t upNext = 0, downNext = 0;
    Connection up, down;
    std::uint16_t childIndex = 0, kidCount = 0;
    bool upBusy = false, downBusy = false, parentFolds = false;
  };
  static std::uint16_t checkedNarrow(std::uint32_t v) {
    COLLBENCH_CHECK(v <= std::numeric_limits<std::uint16_t>::max(), "tree model: {} children of one rank", v);
    return static_cast<std::uint16_t>(v);
  }

  std::size_t at(int s, int r) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(r);
  }
  int rankOf(std::size_t sr) const { return static_cast<int>(sr % static_cast<std::size_t>(n_)); }
  // Round-major: a chunk's cells at the ranks of one server's chain (consecutive ranks, where most of the events
  // are) share cache lines (8.0 s against 9.0 s rank-major for tree x4 at 16384 GPUs).
  std::size_t cell(std::size_t sr, int k) const { return static_cast<std::size_t>(k) * nodes_.size() + sr; }
  /// A work item's tag: its round, its (slice, rank) and its kind, in fields (no division to read them back; the
  /// constructor checks they fit).
  static std::uint64_t tag(Kind kind, std::size_t sr, int k) {
    return (static_cast<std::uint64_t>(k) << kTagRoundShift | sr) << 2 | kind;
  }
  static constexpr int kTagRoundShift = 32;

  std::span<const DirLink> route(const Connection& c) const { return {routes_.data() + c.route, c.hops}; }
  Connection connection(int src, int dst) {
    const std::vector<DirLink>& hops = w_.route(src, dst);
    COLLBENCH_CHECK(hops.size() <= std::numeric_limits<std::uint8_t>::max() &&
                        routes_.size() + hops.size() <= std::numeric_limits<std::uint32_t>::max(),
                    "tree model: a route of {} hops", hops.size());
    Connection c;
    c.route = static_cast<std::uint32_t>(routes_.size());
    c.hops = static_cast<std::uint8_t>(hops.size());
    routes_.insert(routes_.end(), hops.begin(), hops.end());
    const Cost cost{net_.latency(hops), w_.wire(src, dst, bytes_)};
    auto [it, inserted] = costIndex_.try_emplace({cost.latency, cost.wire.bytes, cost.wire.delay},
                                                 static_cast<std::uint32_t>(costs_.size()));
    if (inserted) costs_.push_back(cost);
    c.cost = it->second;
    return c;
  }

  /// Starts a transfer of one chunk on the connection (same node: a copy at the node's rate, or nothing to wait for).
  void start(const Connection& c, int src, double t, std::uint64_t tag) {
    if (c.hops == 0) {
      if (w_.reduceRate(src) > 0 && bytes_ > 0) {
        net_.exec(src, static_cast<double>(bytes_), t, tag);
      } else {
        done_.push_back({tag, t});
      }
      return;
    }
    const Cost& cost = costs_[c.cost];
    net_.transfer(route(c), cost.latency, cost.wire.bytes, t + cost.wire.delay, tag);
  }

  void tryUp(std::size_t sr, int k) {
    Node& v = nodes_[sr];
    if (k >= window_ || v.upBusy || v.upNext != k) return;
    const std::size_t c = cell(sr, k);
    if ((sides_[c] & kSideMask) < 2) return;
    v.upBusy = true;
    start(v.up, rankOf(sr), std::max(cells_[c], v.upFree), tag(kUp, sr, k));
  }
  void tryDown(std::size_t sr, int k) {
    Node& v = nodes_[sr];
    if (k >= window_ || v.downBusy || v.downNext != k) return;
    const std::size_t c = cell(sr, k);
    if (sides_[c] >> kDownShift < 2) return;
    v.downBusy = true;
    start(v.down, rankOf(v.parent), std::max(cells_[c], v.downFree), tag(kDown, sr, k));
  }

  /// sr holds chunk k's result: its children may receive it.
  void result(std::size_t sr, int k, double t) {
    const Node& v = nodes_[sr];
    for (std::uint32_t i = v.kidStart; i < v.kidStart + v.kidCount; ++i) {
      const std::uint32_t kid = kids_[i];
      downReady(cell(kid, k), t);
      tryDown(kid, k);
    }
  }

  /// sr's parent folded sr's chunk k: the next child's may come, or the parent's own chunk is complete.
  void folded(std::size_t sr, int k, double t) {
    const Node& v = nodes_[sr];
    const std::size_t su = v.parent;
    const Node& u = nodes_[su];
    const int next = v.childIndex + 1;
    if (next < u.kidCount) {
      const std::uint32_t kid = kids_[u.kidStart + static_cast<std::uint32_t>(next)];
      upReady(cell(kid, k), t);
      tryUp(kid, k);
    } else if (u.parent != kNone) {
      upReady(cell(su, k), t);
      tryUp(su, k);
    } else {
      result(su, k, t);
    }
  }

  void handle(std::uint64_t tag, double t) {
    const auto sr = static_cast<std::size_t>(static_cast<std::uint32_t>(tag >> 2));
    const auto k = static_cast<int>(tag >> (2 + kTagRoundShift));
    roundEnd_[static_cast<std::size_t>(k)] = std::max(roundEnd_[static_cast<std::size_t>(k)], t);
    Node& v = nodes_[sr];
    switch (static_cast<Kind>(tag & 3)) {
      case kUp: {
        v.upBusy = false;
        v.upFree = t;
        v.upNext = k + 1;
        downReady(cell(sr, k), t);
        tryDown(sr, k);
        if (v.parentFolds) {
          net_.exec(rankOf(v.parent), static_cast<double>(bytes_), t, this->tag(kFold, sr, k));
        } else {
          folded(sr, k, t);
        }
        tryUp(sr, k + 1);
        break;
      }
      case kFold:
        folded(sr, k, t);
        break;
      case kDown:
        v.downBusy = false;
        v.downFree = t;
        v.downNext = k + 1;
        result(sr, k, t);
        tryDown(sr, k + 1);
        break;
    }
  }

  /// Completions that took no time (same-node copies on a node without a rate).
  void drain() {
    while (!done_.empty()) {
      const auto [tag, t] = done_.back();
      done_.pop_back();
      handle(tag, t);
    }
  }

  World& w_;
  FluidNetwork net_;
  int n_, slices_, window_;
  std::uint64_t bytes_;                   // one chunk
  const std::vector<double>& linkShare_;  // TreeChannels::linkShare (the caller's, which outlives the window)
  std::vector<Node> nodes_;               // per (slice, rank)
  std::vector<std::uint32_t> kids_;       // children of each (slice, rank), from its kidStart
  std::vector<DirLink> routes_;           // the connections' routes, one after the other
  std::vector<Cost> costs_;               // what a transfer pays, per distinct latency and wire cost
  std::map<std::tuple<double, std::uint64_t, double>, std::uint32_t> costIndex_;
  // Per (slice, rank, chunk): r's up and down transfer of the chunk, one after the other. The cell holds the later of
  // the times the up transfer's two sides (its send and its receive op) were ready until it starts, then the same for
  // the down transfer: either side of the down comes after the up has gone (its own up, or the parent's result, which
  // folded it). Beside it (a byte per cell: the cells are most of the model's memory) how many sides are ready: up in
  // the low bits, down in the high.
  static constexpr int kDownShift = 4;
  static constexpr std::uint8_t kSideMask = (1U << kDownShift) - 1;
  void upReady(std::size_t c, double t) {
    cells_[c] = std::max(cells_[c], t);
    ++sides_[c];
  }
  void downReady(std::size_t c, double t) {
    cells_[c] = sides_[c] >> kDownShift == 0 ? t : std::max(cells_[c], t);
    sides_[c] = static_cast<std::uint8_t>(sides_[c] + (1U << kDownShift));
  }
  static_assert(sizeof(double) + sizeof(std::uint8_t) == kCellBytes);
  std::vector<double> cells_;
  std::vector<std::uint8_t> sides_;
  std::vector<double> roundEnd_;
  std::vector<FluidNetwork::Done> done_;
};

}  // namespace

TreeChannels representTreeChannels(World& w, const CollectiveSpec& spec, const AlgoParams& params) {
  TreeChannels out;
  if (params.channels <= 1) return out;
  const int n = spec.nranks;
  const Topology& topo = w.topology();
  // Connections crossing each directed link and reductions or copies on each host: of every channel, and of the
  // simulated ones.
  struct Count {
    double all = 0, simulated = 0;
  };
  std::vector<Count> links(2 * topo.links.size()), hosts(static_cast<std::size_t>(n));
  // A channel's tree depends on it only through its remainder modulo the hosts' sizes (treeParents): one tree per
  // remainder, counted for each of its channels.
  std::size_t period = 1;
  if (static_cast<int>(params.rankHost.size()) == n) {
    std::map<int, std::size_t> hostSize;
    for (int h : params.rankHost) ++hostSize[h];
    for (const auto& [h, size] : hostSize) period = std::min(std::lcm(period, size), std::size_t{1} << 20);
  }
  struct Channels {
    int channel = 0;  // one of them
    double all = 0, simulated = 0;
  };
  std::map<std::pair<int, std::size_t>, Channels> byTree;  // (tree, remainder)
  for (int t = 0; t < kTreeCount; ++t) {
    for (int c = 0; c < params.channels; ++c) {
      const int channel = t * params.channels + c;
      Channels& k =
          byTree.try_emplace({t, static_cast<std::size_t>(channel) % period}, Channels{channel}).first->second;
      k.all += 1;
      if (c % kChannelsPerRepresentative == 0) k.simulated += 1;
    }
  }
  for (const auto& entry : byTree) {
    const Channels& k = entry.second;
    const std::vector<int> parent = treeParents(n, params, entry.first.first, k.channel);
    for (int r = 0; r < n; ++r) {
      const int up = parent[static_cast<std::size_t>(r)];
      if (up < 0) continue;
      const auto work = [&](int rank) {
        Count& h = hosts[static_cast<std::size_t>(w.hostIndex(rank))];
        h.all += k.all;
        h.simulated += k.simulated;
      };
      work(up);                 // the parent folds r's chunks
      if (w.sameNode(r, up)) {  // each direction is a copy at its sender
        work(r);
        work(up);
        continue;
      }
      for (auto [a, b] : {std::pair{r, up}, std::pair{up, r}}) {
        for (DirLink l : w.route(a, b)) {
          links[static_cast<std::size_t>(l)].all += k.all;
          links[static_cast<std::size_t>(l)].simulated += k.simulated;
        }
      }
    }
  }
  // Network links (outside one host) the simulated channels share with others, of those they cross.
  std::unordered_map<std::string_view, const std::string*> hostOf;
  for (const TopoNode& v : topo.nodes) hostOf.emplace(v.id, &v.host);
  std::size_t network = 0, shared = 0;
  for (std::size_t l = 0; l < links.size(); ++l) {
    if (links[l].simulated == 0) continue;
    const TopoLink& link = topo.links[l / 2];
    const std::string &ha = *hostOf.at(link.a), &hb = *hostOf.at(link.b);
    if (!ha.empty() && ha == hb) continue;
    ++network;
    if (links[l].simulated < links[l].all) ++shared;
  }
  if (static_cast<double>(shared) > kSharedNetworkLinks * static_cast<double>(network)) return out;
  out.every = kChannelsPerRepresentative;
  const auto share = [](const Count& c) { return c.simulated > 0 ? c.simulated / c.all : 0.0; };
  out.linkShare.reserve(links.size());
  for (const Count& c : links) out.linkShare.push_back(share(c));
  out.hostShare.reserve(hosts.size());
  for (const Count& c : hosts) out.hostShare.push_back(share(c));
  return out;
}

PipelineWindow simulateTreeWindow(World& w, const CollectiveSpec& spec, const AlgoParams& params, std::size_t window,
                                  const TreeChannels& channels) {
  // Its state, before any of it is allocated: a cell per slice, rank and round, and per slice and rank the tree,
  // both connections and their routes (measured: about kBytesPerSliceRank).
  const double slicesRanks =
      static_cast<double>(kTreeCount * channels.simulatedPerTree(params.channels)) * static_cast<double>(spec.nranks);
  const double need = slicesRanks * (static_cast<double>(window) * static_cast<double>(TreeWindow::kCellBytes) +
                                     TreeWindow::kBytesPerSliceRank);
  if (const double available = availableMemoryBytes(); need > available) {
    throw Error(Errc::InvalidArgument,
                fmt::format("tree on {} ranks with {} channels: the tree model's {}-round window needs {:.2f} GB of "
                            "memory, more than the {:.2f} GB available; use fewer channels or ranks",
                            spec.nranks, params.channels, window, need / kBytesPerGB, available / kBytesPerGB));
  }
  TreeWindow tree(w, spec, params, window, channels);
  PipelineWindow out;
  out.roundEnd = tree.run();
  out.seconds = *std::max_element(out.roundEnd.begin(), out.roundEnd.end());
  out.busiestRoundSeconds = tree.busiestRoundSeconds();
  out.method = "tree-model";
  return out;
}

}  // namespace collbench::sim::detail
