#include "collbench/validator.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "collbench/error.h"

namespace collbench {
namespace {

std::string opName(const Schedule& s, int rank, int i) {
  const Op& op = s.ranks[static_cast<std::size_t>(rank)].ops[static_cast<std::size_t>(i)];
  switch (op.kind) {
    case OpKind::Send:
      return fmt::format("rank {} op {} (send to rank {})", rank, i, op.peer);
    case OpKind::Recv:
      return fmt::format("rank {} op {} (recv from rank {})", rank, i, op.peer);
    case OpKind::RecvReduce:
      return fmt::format("rank {} op {} (recv_reduce from rank {})", rank, i, op.peer);
    case OpKind::SwitchReduce:
    case OpKind::Multicast:
      return fmt::format("rank {} op {} ({}, group {}, root {})", rank, i, toString(op.kind), op.group, op.peer);
    default:
      return fmt::format("rank {} op {} ({})", rank, i, toString(op.kind));
  }
}

[[noreturn]] void fail(const Schedule& s, int rank, int i, const std::string& what) {
  const int peer = s.ranks[static_cast<std::size_t>(rank)].ops[static_cast<std::size_t>(i)].peer;
  throw Error(Errc::InvalidSchedule, fmt::format("{}: {}", opName(s, rank, i), what), rank, peer);
}

std::size_t capacity(const Schedule& s, int rank, BufferKind b) {
  switch (b) {
    case BufferKind::Input:
      return s.spec.inputBytes();
    case BufferKind::Output:
      return s.spec.outputBytes();
    case BufferKind::Scratch:
      return s.ranks[static_cast<std::size_t>(rank)].scratchBytes;
  }
  return 0;
}

void checkLocal(const Schedule& s) {
  const std::size_t es = s.spec.kind == Collective::Barrier ? 1 : s.spec.elementSize();
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      for (int d : op.deps) {
        if (d < 0 || d >= i) fail(s, r, i, fmt::format("dependency {} is not an earlier op of the rank", d));
      }
      if (op.channel < 0) fail(s, r, i, fmt::format("negative channel {}", op.channel));
      auto checkRange = [&](const BufRef& ref, const char* role) {
        const std::size_t cap = capacity(s, r, ref.buffer);
        if (ref.offset > cap || op.bytes > cap - ref.offset) {
          fail(s, r, i,
               fmt::format("{} {}+[{}, {}) is out of bounds of the {} ({} bytes)", role, toString(ref.buffer),
                           ref.offset, ref.offset + op.bytes, toString(ref.buffer), cap));
        }
      };
      if (op.readsOn(r)) checkRange(op.src, "src");
      if (op.writesOn(r)) checkRange(op.dst, "dst");
      const bool combines =
          op.kind == OpKind::Reduce || op.kind == OpKind::RecvReduce || op.kind == OpKind::SwitchReduce;
      if (combines && (op.bytes % es != 0 || op.src.offset % es != 0 || op.dst.offset % es != 0)) {
        fail(s, r, i,
             fmt::format("reduction over {} bytes at src {} / dst {} is not aligned to {}-byte elements", op.bytes,
                         op.src.offset, op.dst.offset, es));
      }
    }
  }
}

/// Union-find-free merge: each matched pair becomes one node (the send's global id represents both), and so does each
/// switch match (all its members' ops: the switch completes the op for the group together).
struct MergedGraph {
  std::vector<std::size_t> base;  // global id of rank r's op 0
  std::vector<int> rep;           // global op id -> node id
  int nodes = 0;
  std::vector<std::vector<int>> succ;  // node -> successor nodes
  std::vector<int> order;              // topological order of nodes (complete iff no deadlock)
};

MergedGraph mergeAndOrder(const Schedule& s, const Matching& m) {
  MergedGraph g;
  const int n = static_cast<int>(s.ranks.size());
  g.base.resize(static_cast<std::size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r)
    g.base[static_cast<std::size_t>(r) + 1] =
        g.base[static_cast<std::size_t>(r)] + s.ranks[static_cast<std::size_t>(r)].ops.size();
  const std::size_t total = g.base.back();
  g.rep.assign(total, -1);
  for (const Match& mt : m.matches) {
    const int id = g.nodes++;
    g.rep[g.base[static_cast<std::size_t>(mt.srcRank)] + static_cast<std::size_t>(mt.srcOp)] = id;
    g.rep[g.base[static_cast<std::size_t>(mt.dstRank)] + static_cast<std::size_t>(mt.dstOp)] = id;
  }
  for (const SwitchMatch& sm : m.switchMatches) {
    const int id = g.nodes++;
    const auto& members = s.switchGroups[static_cast<std::size_t>(sm.group)];
    for (std::size_t x = 0; x < members.size(); ++x) {
      g.rep[g.base[static_cast<std::size_t>(members[x])] + static_cast<std::size_t>(sm.ops[x])] = id;
    }
  }
  for (auto& r : g.rep) {
    if (r < 0) r = g.nodes++;
  }
  g.succ.resize(static_cast<std::size_t>(g.nodes));
  std::vector<int> indeg(static_cast<std::size_t>(g.nodes), 0);
  for (int r = 0; r < n; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const int to = g.rep[g.base[static_cast<std::size_t>(r)] + i];
      for (int d : ops[i].deps) {
        const int from = g.rep[g.base[static_cast<std::size_t>(r)] + static_cast<std::size_t>(d)];
        g.succ[static_cast<std::size_t>(from)].push_back(to);
        ++indeg[static_cast<std::size_t>(to)];
      }
    }
  }
  std::vector<int> ready;
  for (int v = 0; v < g.nodes; ++v) {
    if (indeg[static_cast<std::size_t>(v)] == 0) ready.push_back(v);
  }
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    g.order.push_back(v);
    for (int w : g.succ[static_cast<std::size_t>(v)]) {
      if (--indeg[static_cast<std::size_t>(w)] == 0) ready.push_back(w);
    }
  }
  if (static_cast<int>(g.order.size()) != g.nodes) {
    // Report the first op (rank-major) that can never start.
    std::vector<char> done(static_cast<std::size_t>(g.nodes), 0);
    for (int v : g.order) done[static_cast<std::size_t>(v)] = 1;
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < s.ranks[static_cast<std::size_t>(r)].ops.size(); ++i) {
        if (!done[static_cast<std::size_t>(g.rep[g.base[static_cast<std::size_t>(r)] + i])]) {
          fail(s, r, static_cast<int>(i),
               "deadlock: this op waits in a cycle of dependencies and rendezvous matches and can never complete");
        }
      }
    }
  }
  return g;
}

struct Access {
  std::size_t begin, end;
  int space;  // 0 input, 1 output, 2 scratch; in place, input and output share space 1
  int op;
  bool write;
};

void checkHazards(const Schedule& s, const MergedGraph& g, bool inPlace) {
  const auto nodes = static_cast<std::size_t>(g.nodes);
  const std::size_t words = (nodes + 63) / 64;
  // reach[v] = set of nodes that happen before v.
  std::vector<std::uint64_t> reach(nodes * words, 0);
  for (int v : g.order) {
    const std::uint64_t* rv = &reach[static_cast<std::size_t>(v) * words];
    for (int w : g.succ[static_cast<std::size_t>(v)]) {
      std::uint64_t* rw = &reach[static_cast<std::size_t>(w) * words];
      for (std::size_t k = 0; k < words; ++k) rw[k] |= rv[k];
      rw[static_cast<std::size_t>(v) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(v) % 64);
    }
  }
  auto before = [&](int a, int b) {
    return (reach[static_cast<std::size_t>(b) * words + static_cast<std::size_t>(a) / 64] >>
            (static_cast<std::size_t>(a) % 64)) &
           1u;
  };
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    auto locate = [&](const BufRef& ref, int& space, std::size_t& addr) {
      space = static_cast<int>(ref.buffer);
      addr = ref.offset;
      if (inPlace && ref.buffer != BufferKind::Scratch) {
        space = 1;
        addr += ref.buffer == BufferKind::Input ? s.spec.inPlaceInputOffset(r) : s.spec.inPlaceOutputOffset(r);
      }
    };
    std::vector<Access> acc;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (op.bytes == 0) continue;
      int ss = 0, ds = 0;
      std::size_t sa = 0, da = 0;
      locate(op.src, ss, sa);
      locate(op.dst, ds, da);
      if (op.kind == OpKind::Copy && ss == ds && sa == da) continue;  // identity copy: executors skip it
      if (op.readsOn(r)) acc.push_back({sa, sa + op.bytes, ss, i, false});
      if (op.writesOn(r)) acc.push_back({da, da + op.bytes, ds, i, true});
    }
    std::sort(acc.begin(), acc.end(), [](const Access& a, const Access& b) {
      return a.space != b.space ? a.space < b.space : a.begin < b.begin;
    });
    for (std::size_t x = 0; x < acc.size(); ++x) {
      for (std::size_t y = x + 1; y < acc.size() && acc[y].space == acc[x].space && acc[y].begin < acc[x].end; ++y) {
        const Access &a = acc[x], &b = acc[y];
        if (a.op == b.op || (!a.write && !b.write)) continue;
        const int na = g.rep[g.base[static_cast<std::size_t>(r)] + static_cast<std::size_t>(a.op)];
        const int nb = g.rep[g.base[static_cast<std::size_t>(r)] + static_cast<std::size_t>(b.op)];
        if (before(na, nb) || before(nb, na)) continue;
        const int first = std::min(a.op, b.op), second = std::max(a.op, b.op);
        fail(s, r, second,
             fmt::format("races with op {}: both touch bytes [{}, {}) of the {}{} and neither is ordered before the "
                         "other",
                         first, std::max(a.begin, b.begin), std::min(a.end, b.end),
                         a.space == 2 ? "scratch" : (a.space == 0 ? "input" : "output"),
                         inPlace && a.space == 1 ? " (in place)" : ""));
      }
    }
  }
}

bool performsSwitchOps(const TopoNode& n) { return n.reducesInNetwork() || n.multicasts(); }

}  // namespace

int switchOfRanks(const Router& router, const std::vector<int>& ranks) {
  const Topology& t = router.topology();
  int best = -1, bestFar = -1;
  bool bestCapable = false;
  for (int sw = 0; sw < static_cast<int>(t.nodes.size()); ++sw) {
    if (t.nodes[static_cast<std::size_t>(sw)].kind != NodeKind::Switch) continue;
    // Hop counts are symmetric (links are undirected and transit is a property of the path's inner nodes), so the
    // distances are read from the switch: one breadth-first search per switch rather than one per rank and switch.
    // A switch already farther than the best cannot win, nor one as far that would not win the tie: its search
    // stops there.
    const bool capable = performsSwitchOps(t.nodes[static_cast<std::size_t>(sw)]);
    const bool winsTie = capable && !bestCapable;
    int far = 0;
    for (int r : ranks) {
      const int d = router.distance(sw, router.rankNode(r));
      far = d < 0 ? -1 : std::max(far, d);
      if (far < 0 || (best >= 0 && (far > bestFar || (far == bestFar && !winsTie)))) break;
    }
    if (far < 0 || (best >= 0 && far > bestFar)) continue;
    if (best < 0 || far < bestFar || (far == bestFar && capable && !bestCapable)) {
      best = sw;
      bestFar = far;
      bestCapable = capable;
    }
  }
  return best;
}

std::vector<int> groupSwitches(const Schedule& s, const Topology& t) {
  std::vector<int> out;
  if (s.switchGroups.empty()) return out;
  const Router router(t);
  for (const auto& members : s.switchGroups) out.push_back(switchOfRanks(router, members));
  return out;
}

std::vector<int> validateOnTopology(const Schedule& s, const Topology& t) {
  std::vector<int> sw = groupSwitches(s, t);
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (!op.isSwitch()) continue;
      const int v = sw[static_cast<std::size_t>(op.group)];
      if (v < 0)
        fail(s, r, i, fmt::format("no switch of topology {} connects the ranks of group {}", t.name, op.group));
      const TopoNode& node = t.nodes[static_cast<std::size_t>(v)];
      if (op.kind == OpKind::SwitchReduce && !node.reducesInNetwork()) {
        fail(s, r, i,
             fmt::format("switch {} of group {} cannot reduce (reduce_GBps {}): in-network reduction needs a switch "
                         "with reduce_GBps > 0 (NVLS, SHARP)",
                         node.id, op.group, node.reduceGBps));
      }
      if (op.kind == OpKind::Multicast && !node.multicasts()) {
        fail(s, r, i,
             fmt::format("switch {} of group {} cannot multicast (multicast false, or reduce_GBps 0)", node.id,
                         op.group));
      }
    }
  }
  return sw;
}

void validate(const Schedule& s, const ValidateOptions& opt) {
  if (static_cast<int>(s.ranks.size()) != s.spec.nranks) {
    throw Error(Errc::InvalidSchedule,
                fmt::format("schedule has {} rank programs for {} ranks", s.ranks.size(), s.spec.nranks));
  }
  checkLocal(s);
  const Matching m = matchSchedule(s);
  const MergedGraph g = mergeAndOrder(s, m);
  if (s.totalOps() <= opt.hazardCheckMaxOps) checkHazards(s, g, opt.inPlace);
}

}  // namespace collbench
