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

class TreeWindow {
 public:
  /// Bytes of state per (slice, rank, round), and per (slice, rank) beside it (the tree, two connections with their
  /// routes and route-cache entries, the flows in flight: measured at 131072 ranks, 2 slices and 76 rounds, 2.04 GB
  /// peak against 1.49 GB for the hierarchical model's run on the same fabric, 0.34 GB of it cells).
  static constexpr std::size_t kCellBytes = 2 * sizeof(double) + 1;
  static constexpr double kBytesPerSliceRank = 1000;
  TreeWindow(World& w, const CollectiveSpec& spec, const AlgoParams& p, std::size_t window)
      : w_(w),
        net_(w),
        n_(spec.nranks),
        slices_(kTreeCount * p.channels),
        window_(static_cast<int>(window)),
        bytes_(spec.count * spec.elementSize() / static_cast<std::size_t>(slices_) / window) {
    const auto sr = static_cast<std::size_t>(slices_) * static_cast<std::size_t>(n_);
    COLLBENCH_CHECK(sr <= std::numeric_limits<std::uint32_t>::max() && window < (std::size_t{1} << 30),
                    "tree model: {} slice-ranks and {} rounds exceed its tags", sr, window);
    parent_.resize(sr);
    childIndex_.assign(sr, 0);
    kidStart_.assign(sr + 1, 0);
    for (int t = 0; t < kTreeCount; ++t) {
      for (int c = 0; c < p.channels; ++c) {
        const int s = t * p.channels + c;
        const std::vector<int> parent = treeParents(n_, p, t, s);
        std::copy(parent.begin(), parent.end(), parent_.begin() + at(s, 0));
      }
    }
    // Children in rank order (the schedule folds them so), as one array per slice and rank.
    for (int s = 0; s < slices_; ++s) {
      for (int r = 0; r < n_; ++r) {
        if (const int up = parent_[at(s, r)]; up >= 0) ++kidStart_[at(s, up) + 1];
      }
    }
    for (std::size_t i = 0; i < sr; ++i) kidStart_[i + 1] += kidStart_[i];
    kids_.resize(static_cast<std::size_t>(kidStart_[sr]));
    std::vector<int> fill(kidStart_.begin(), kidStart_.end() - 1);
    for (int s = 0; s < slices_; ++s) {
      for (int r = 0; r < n_; ++r) {
        const int up = parent_[at(s, r)];
        if (up < 0) continue;
        const std::size_t u = at(s, up);
        childIndex_[at(s, r)] = fill[u] - kidStart_[u];
        kids_[static_cast<std::size_t>(fill[u]++)] = r;
      }
    }
    cells_.assign(sr * static_cast<std::size_t>(window_), Cell{});
    sides_.assign(cells_.size(), 0);
    // Routes source by source up front (Router keeps a few search trees; event order would redo one per pair).
    std::vector<std::pair<int, int>> pairs;
    for (int s = 0; s < slices_; ++s) {
      for (int r = 0; r < n_; ++r) {
        const int up = parent_[at(s, r)];
        if (up < 0 || w.sameNode(r, up)) continue;
        pairs.emplace_back(r, up);
        pairs.emplace_back(up, r);
      }
    }
    w.prefetchRoutes(std::move(pairs));
    // Each connection's route, latency and wire cost (one chunk size: the same for every transfer on it).
    links_.resize(2 * sr);
    for (int s = 0; s < slices_; ++s) {
      for (int r = 0; r < n_; ++r) {
        const std::size_t i = at(s, r);
        const int up = parent_[i];
        if (up < 0 || w.sameNode(r, up)) continue;
        links_[2 * i] = connection(r, up);
        links_[2 * i + 1] = connection(up, r);
      }
    }
    upNext_.assign(sr, 0);
    downNext_.assign(sr, 0);
    upBusy_.assign(sr, 0);
    downBusy_.assign(sr, 0);
    upFree_.assign(sr, 0);
    downFree_.assign(sr, 0);
    roundEnd_.assign(window, 0);
  }

  /// Runs the window; returns each round's end.
  const std::vector<double>& run() {
    for (int s = 0; s < slices_; ++s) {
      for (int r = 0; r < n_; ++r) {
        const std::size_t sr = at(s, r);
        if (parent_[sr] < 0) continue;
        for (int k = 0; k < window_; ++k) {
          if (kidCount(sr) == 0) upReady(cell(sr, k), 0);     // a leaf sends at once
          if (childIndex_[sr] == 0) upReady(cell(sr, k), 0);  // the first child is received at once
        }
        tryUp(s, r, 0);
      }
    }
    drain();
    net_.run([&](std::uint64_t tag, double t) {
      handle(tag, t);
      drain();
    });
    return roundEnd_;
  }

  /// Wire bytes per round on every directed link the window uses, over its bandwidth, at the busiest link.
  double busiestRoundSeconds() {
    std::vector<double> linkBytes(2 * w_.topology().links.size(), 0);
    for (const Connection& c : links_) {
      if (c.route == nullptr) continue;
      for (DirLink l : *c.route) linkBytes[static_cast<std::size_t>(l)] += static_cast<double>(c.wire.bytes);
    }
    double busiest = 0;
    for (std::size_t l = 0; l < linkBytes.size(); ++l) {
      if (linkBytes[l] > 0) busiest = std::max(busiest, linkBytes[l] / w_.bandwidth(static_cast<DirLink>(l)));
    }
    return busiest;
  }

 private:
  std::size_t at(int s, int r) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(r);
  }
  // Round-major: a chunk's cells at the ranks of one server's chain (consecutive ranks, where most of the events
  // are) share cache lines.
  std::size_t cell(std::size_t sr, int k) const {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(slices_) * static_cast<std::size_t>(n_) + sr;
  }
  int kidCount(std::size_t sr) const { return kidStart_[sr + 1] - kidStart_[sr]; }
  /// A work item's tag: its round, its (slice, rank) and its kind, in fields (no division to read them back; the
  /// constructor checks they fit).
  static std::uint64_t tag(Kind kind, std::size_t sr, int k) {
    return (static_cast<std::uint64_t>(k) << kTagRoundShift | sr) << 2 | kind;
  }
  static constexpr int kTagRoundShift = 32;

  /// What every transfer of a connection between two nodes pays.
  struct Connection {
    const std::vector<DirLink>* route = nullptr;
    double latency = 0;
    Wire wire;
  };
  Connection connection(int src, int dst) {
    const std::vector<DirLink>& route = w_.route(src, dst);
    return {&route, net_.latency(route), w_.wire(src, dst, bytes_)};
  }

  /// Starts a transfer of one chunk on the connection (same node: a copy at the node's rate, or nothing to wait for).
  void start(const Connection& c, int src, double t, std::uint64_t tag) {
    if (c.route == nullptr) {
      if (w_.reduceRate(src) > 0 && bytes_ > 0) {
        net_.exec(src, static_cast<double>(bytes_), t, tag);
      } else {
        done_.push_back({tag, t});
      }
      return;
    }
    net_.transfer(*c.route, c.latency, c.wire.bytes, t + c.wire.delay, tag);
  }

  void tryUp(int s, int r, int k) {
    const std::size_t sr = at(s, r);
    if (k >= window_ || upBusy_[sr] || upNext_[sr] != k) return;
    const std::size_t c = cell(sr, k);
    if ((sides_[c] & kSideMask) < 2) return;
    upBusy_[sr] = 1;
    start(links_[2 * sr], r, std::max(cells_[c].upAt, upFree_[sr]), tag(kUp, sr, k));
  }
  void tryDown(int s, int r, int k) {
    const std::size_t sr = at(s, r);
    if (k >= window_ || downBusy_[sr] || downNext_[sr] != k) return;
    const std::size_t c = cell(sr, k);
    if (sides_[c] >> kDownShift < 2) return;
    downBusy_[sr] = 1;
    start(links_[2 * sr + 1], parent_[sr], std::max(cells_[c].downAt, downFree_[sr]), tag(kDown, sr, k));
  }

  /// r holds chunk k's result: its children may receive it.
  void result(int s, int r, int k, double t) {
    const std::size_t sr = at(s, r);
    for (int i = kidStart_[sr]; i < kidStart_[sr + 1]; ++i) {
      const int kid = kids_[static_cast<std::size_t>(i)];
      downReady(cell(at(s, kid), k), t);
      tryDown(s, kid, k);
    }
  }

  /// r's parent folded r's chunk k: the next child's may come, or the parent's own chunk is complete.
  void folded(int s, int r, int k, double t) {
    const std::size_t sr = at(s, r);
    const int up = parent_[sr];
    const std::size_t su = at(s, up);
    const int next = childIndex_[sr] + 1;
    if (next < kidCount(su)) {
      const int kid = kids_[static_cast<std::size_t>(kidStart_[su]) + static_cast<std::size_t>(next)];
      upReady(cell(at(s, kid), k), t);
      tryUp(s, kid, k);
    } else if (parent_[su] >= 0) {
      upReady(cell(su, k), t);
      tryUp(s, up, k);
    } else {
      result(s, up, k, t);
    }
  }

  void handle(std::uint64_t tag, double t) {
    const auto sr32 = static_cast<std::uint32_t>(tag >> 2);
    const auto sr = static_cast<std::size_t>(sr32);
    const auto k = static_cast<int>(tag >> (2 + kTagRoundShift));
    const auto s = static_cast<int>(sr32 / static_cast<std::uint32_t>(n_));
    const auto r = static_cast<int>(sr32 % static_cast<std::uint32_t>(n_));
    roundEnd_[static_cast<std::size_t>(k)] = std::max(roundEnd_[static_cast<std::size_t>(k)], t);
    switch (static_cast<Kind>(tag & 3)) {
      case kUp: {
        upBusy_[sr] = 0;
        upFree_[sr] = t;
        upNext_[sr] = k + 1;
        downReady(cell(sr, k), t);
        tryDown(s, r, k);
        const int up = parent_[sr];
        if (w_.reduceRate(up) > 0 && bytes_ > 0) {
          net_.exec(up, static_cast<double>(bytes_), t, this->tag(kFold, sr, k));
        } else {
          folded(s, r, k, t);
        }
        tryUp(s, r, k + 1);
        break;
      }
      case kFold:
        folded(s, r, k, t);
        break;
      case kDown:
        downBusy_[sr] = 0;
        downFree_[sr] = t;
        downNext_[sr] = k + 1;
        result(s, r, k, t);
        tryDown(s, r, k + 1);
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
  std::uint64_t bytes_;  // one chunk
  // Per (slice, rank): the tree, children in rank order (CSR), its index among its parent's children, and its two
  // connections (next chunk, busy, free since).
  std::vector<int> parent_, childIndex_, kidStart_, kids_;
  std::vector<int> upNext_, downNext_;
  std::vector<char> upBusy_, downBusy_;
  std::vector<double> upFree_, downFree_;
  std::vector<Connection> links_;  // per (slice, rank): up, then down
  // Per (slice, rank, chunk): r's up and down transfer of the chunk. For each, the later of the times its two sides
  // (its send and its receive op) were ready, and beside it (a byte per cell: the cells are most of the model's
  // memory) how many of those sides are: up in the low bits, down in the high.
  struct Cell {
    double upAt = 0, downAt = 0;
  };
  static constexpr int kDownShift = 4;
  static constexpr std::uint8_t kSideMask = (1U << kDownShift) - 1;
  void upReady(std::size_t c, double t) {
    cells_[c].upAt = std::max(cells_[c].upAt, t);
    ++sides_[c];
  }
  void downReady(std::size_t c, double t) {
    cells_[c].downAt = std::max(cells_[c].downAt, t);
    sides_[c] = static_cast<std::uint8_t>(sides_[c] + (1U << kDownShift));
  }
  static_assert(sizeof(Cell) + sizeof(std::uint8_t) == kCellBytes);
  std::vector<Cell> cells_;
  std::vector<std::uint8_t> sides_;
  std::vector<double> roundEnd_;
  struct Done {
    std::uint64_t tag;
    double t;
  };
  std::vector<Done> done_;
};

}  // namespace

PipelineWindow simulateTreeWindow(World& w, const CollectiveSpec& spec, const AlgoParams& params, std::size_t window) {
  // Its state, before any of it is allocated: a cell per slice, rank and round, and per slice and rank the tree,
  // both connections and their routes (measured: about kBytesPerSliceRank).
  const double slicesRanks = static_cast<double>(kTreeCount * params.channels) * static_cast<double>(spec.nranks);
  const double need = slicesRanks * (static_cast<double>(window) * static_cast<double>(TreeWindow::kCellBytes) +
                                     TreeWindow::kBytesPerSliceRank);
  if (const double available = availableMemoryBytes(); need > available) {
    throw Error(Errc::InvalidArgument,
                fmt::format("tree on {} ranks with {} channels: the tree model's {}-round window needs {:.2f} GB of "
                            "memory, more than the {:.2f} GB available; use fewer channels or ranks",
                            spec.nranks, params.channels, window, need / kBytesPerGB, available / kBytesPerGB));
  }
  TreeWindow tree(w, spec, params, window);
  PipelineWindow out;
  out.roundEnd = tree.run();
  out.seconds = *std::max_element(out.roundEnd.begin(), out.roundEnd.end());
  out.busiestRoundSeconds = tree.busiestRoundSeconds();
  out.method = "tree-model";
  return out;
}

}  // namespace collbench::sim::detail
