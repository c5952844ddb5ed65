#include "dag.h"

#include <algorithm>
#include <unordered_map>

#include "collbench/error.h"

namespace collbench::sim::detail {
namespace {

// Connection key: channels fit in 16 bits and ranks in 24 (the topology generators stop at 2^20 nodes).
constexpr int kChannelBits = 16;
constexpr int kRankBits = 24;

std::uint64_t connKey(int src, int dst, int channel) {
  return (static_cast<std::uint64_t>(src) << (kRankBits + kChannelBits)) |
         (static_cast<std::uint64_t>(dst) << kChannelBits) | static_cast<std::uint64_t>(channel);
}

}  // namespace

void Dag::Timing::switchFlow(Dag&, int, double) {
  COLLBENCH_CHECK(false, "this simulation method does not time switch ops (the exact and fluid methods do)");
}

Dag::Dag(const Schedule& s, const Matching& m, World& w, std::vector<int> groupSwitch)
    : s_(s), m_(m), world_(w), groupSwitch_(std::move(groupSwitch)) {
  COLLBENCH_CHECK(groupSwitch_.size() == s.switchGroups.size(), "{} group switches for {} switch groups",
                  groupSwitch_.size(), s.switchGroups.size());
  const int n = static_cast<int>(s.ranks.size());
  rankOffset_.resize(static_cast<std::size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    rankOffset_[static_cast<std::size_t>(r) + 1] =
        rankOffset_[static_cast<std::size_t>(r)] + static_cast<int>(s.ranks[static_cast<std::size_t>(r)].ops.size());
  }
  const auto total = static_cast<std::size_t>(rankOffset_.back());
  opRank_.resize(total);
  pending_.resize(total);
  readyT_.assign(total, 0);
  start_.assign(total, -1);
  end_.assign(total, -1);
  depStart_.assign(total + 1, 0);
  for (int r = 0; r < n; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto g = static_cast<std::size_t>(globalOp(r, static_cast<int>(i)));
      opRank_[g] = r;
      pending_[g] = static_cast<int>(ops[i].deps.size());
      for (int d : ops[i].deps) {
        if (d < 0 || d >= static_cast<int>(i)) {
          throw Error(Errc::InvalidSchedule,
                      fmt::format("rank {} op {}: dep {} is not an earlier op of the rank", r, i, d), r);
        }
        ++depStart_[static_cast<std::size_t>(globalOp(r, d)) + 1];
      }
    }
  }
  for (std::size_t g = 0; g < total; ++g) depStart_[g + 1] += depStart_[g];
  dependents_.resize(static_cast<std::size_t>(depStart_.back()));
  std::vector<int> fill(depStart_.begin(), depStart_.end() - 1);
  for (int r = 0; r < n; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (int d : ops[i].deps) {
        dependents_[static_cast<std::size_t>(fill[static_cast<std::size_t>(globalOp(r, d))]++)] =
            globalOp(r, static_cast<int>(i));
      }
    }
  }

  // Transfers, and their FIFO connections in program order (matchSchedule pairs them in that order).
  xf_.resize(m.matches.size());
  std::unordered_map<std::uint64_t, int> connOf;
  std::vector<int> connCount;
  for (std::size_t k = 0; k < m.matches.size(); ++k) {
    const Match& mt = m.matches[k];
    const Op& so = s.ranks[static_cast<std::size_t>(mt.srcRank)].ops[static_cast<std::size_t>(mt.srcOp)];
    const Op& ro = s.ranks[static_cast<std::size_t>(mt.dstRank)].ops[static_cast<std::size_t>(mt.dstOp)];
    COLLBENCH_CHECK(so.channel >= 0 && so.channel < (1 << kChannelBits), "channel {}", so.channel);
    Xfer& x = xf_[k];
    x.src = mt.srcRank;
    x.dst = mt.dstRank;
    x.sendOp = globalOp(mt.srcRank, mt.srcOp);
    x.recvOp = globalOp(mt.dstRank, mt.dstOp);
    x.channel = so.channel;
    x.bytes = so.bytes;
    x.reduce = ro.kind == OpKind::RecvReduce;
    auto [it, inserted] =
        connOf.try_emplace(connKey(mt.srcRank, mt.dstRank, so.channel), static_cast<int>(connCount.size()));
    if (inserted) connCount.push_back(0);
    x.conn = it->second;
    x.seq = connCount[static_cast<std::size_t>(x.conn)]++;
  }
  connStart_.assign(connCount.size() + 1, 0);
  for (std::size_t c = 0; c < connCount.size(); ++c) connStart_[c + 1] = connStart_[c] + connCount[c];
  connMatches_.resize(xf_.size());
  for (std::size_t k = 0; k < xf_.size(); ++k) {
    const int at = connStart_[static_cast<std::size_t>(xf_[k].conn)] + xf_[k].seq;
    connMatches_[static_cast<std::size_t>(at)] = static_cast<int>(k);
  }
  connNext_.assign(connCount.size(), 0);
  connFree_.assign(connCount.size(), 0);
  agg_.reserve(s.switchGroups.size());
  for (std::size_t g = 0; g < s.switchGroups.size(); ++g) agg_.push_back(aggregation(g));
  sstate_.resize(m.switchMatches.size());
  for (std::size_t k = 0; k < m.switchMatches.size(); ++k) {
    const std::size_t members = m.switchMatches[k].ops.size();
    const Aggregation& a = agg_[static_cast<std::size_t>(m.switchMatches[k].group)];
    SwitchState& st = sstate_[k];
    st.ready.assign(members, -1);
    st.downDone.assign(members, 0);
    st.pointWaiting.assign(a.points.size(), 0);
    for (const std::vector<int>* below : {&a.memberPoint, &a.pointParent}) {
      for (int q : *below) {
        if (q >= 0) ++st.pointWaiting[static_cast<std::size_t>(q)];
      }
    }
    st.pointDown.assign(a.points.size(), 0);
    st.upsLeft = static_cast<int>(members + a.points.size());
  }
}

const Op& Dag::op(int g) const {
  const int r = opRank_[static_cast<std::size_t>(g)];
  return s_.ranks[static_cast<std::size_t>(r)]
      .ops[static_cast<std::size_t>(g - rankOffset_[static_cast<std::size_t>(r)])];
}

void Dag::begin(Timing& timing) {
  timing_ = &timing;
  for (std::size_t g = 0; g < pending_.size(); ++g) {
    if (pending_[g] == 0) opReady(static_cast<int>(g), 0);
  }
  drain();
}

void Dag::complete(std::uint64_t tag, double t) {
  post(tag, t);
  drain();
}

void Dag::drain() {
  // Max-plus propagation does not depend on the order in which finished work is handled.
  while (!work_.empty()) {
    const Work w = work_.back();
    work_.pop_back();
    handle(w.tag, w.t);
  }
}

void Dag::handle(std::uint64_t tag, double t) {
  const auto id = static_cast<int>(tag >> 2);
  switch (static_cast<TagKind>(tag & 3)) {
    case kLocal:
      opDone(id, t);
      break;
    case kTransfer: {
      Xfer& x = xf_[static_cast<std::size_t>(id)];
      x.end = t;
      const auto c = static_cast<std::size_t>(x.conn);
      connFree_[c] = t;
      const int next = ++connNext_[c];
      opDone(x.sendOp, t);
      const double rate = world_.reduceRate(x.dst);
      if (x.reduce && rate > 0 && x.bytes > 0) {
        timing_->exec(*this, Dag::tag(kReduce, static_cast<std::uint64_t>(id)), x.dst, t, static_cast<double>(x.bytes));
      } else {
        opDone(x.recvOp, t);
      }
      if (const int at = connStart_[c] + next; at < connStart_[c + 1])
        tryStart(connMatches_[static_cast<std::size_t>(at)]);
      break;
    }
    case kReduce:
      opDone(xf_[static_cast<std::size_t>(id)].recvOp, t);
      break;
    case kSwitch:
      switchFlowDone(id, t);
      break;
    default:
      COLLBENCH_CHECK(false, "tag {}", tag);
  }
}

void Dag::opReady(int g, double t) {
  const Op& o = op(g);
  const int rank = opRank_[static_cast<std::size_t>(g)];
  start_[static_cast<std::size_t>(g)] = t;
  if (o.isComm()) {
    const int m = m_.opMatch[static_cast<std::size_t>(rank)]
                            [static_cast<std::size_t>(g - rankOffset_[static_cast<std::size_t>(rank)])];
    Xfer& x = xf_[static_cast<std::size_t>(m)];
    (o.kind == OpKind::Send ? x.sendReady : x.recvReady) = t;
    tryStart(m);
    return;
  }
  if (o.isSwitch()) {
    switchReady(g, rank, t);
    return;
  }
  // A copy onto itself moves nothing.
  const bool nothing = o.bytes == 0 || (o.kind == OpKind::Copy && o.src == o.dst);
  if (nothing || world_.reduceRate(rank) == 0) {
    post(tag(kLocal, static_cast<std::uint64_t>(g)), t);
  } else {
    timing_->exec(*this, tag(kLocal, static_cast<std::uint64_t>(g)), rank, t, static_cast<double>(o.bytes));
  }
}

void Dag::tryStart(int m) {
  Xfer& x = xf_[static_cast<std::size_t>(m)];
  if (x.sendReady < 0 || x.recvReady < 0 || x.start >= 0) return;
  const auto c = static_cast<std::size_t>(x.conn);
  if (connNext_[c] != x.seq) return;  // an earlier transfer of the connection has not finished
  double t = std::max({x.sendReady, x.recvReady, connFree_[c]});
  const bool network = !world_.sameNode(x.src, x.dst);
  if (network) {
    const Wire wire = world_.wire(x.src, x.dst, x.bytes);
    x.wireBytes = wire.bytes;
    x.delay = wire.delay;
    t += wire.delay;
  }
  x.start = t;
  if (network) {
    timing_->transfer(*this, m, t);
  } else if (world_.reduceRate(x.src) > 0 && x.bytes > 0) {
    timing_->exec(*this, tag(kTransfer, static_cast<std::uint64_t>(m)), x.src, t, static_cast<double>(x.bytes));
  } else {
    post(tag(kTransfer, static_cast<std::uint64_t>(m)), t);
  }
}

// Switch ops (sim_backend.h): the switch streams them (cut-through, as NVLS's multimem instructions): a
// SwitchReduce's reduced bytes go down to the root while the members' contributions go up, a Multicast's copies go
// down to the members while the root's bytes go up; an op completes on a member when its data has arrived. Members
// behind an aggregation switch (Aggregation) send up to it, and it sends on to the switch above it once all of them
// have started; a multicast's copy goes down to it once and from it to each of those below it.
void Dag::switchReady(int g, int rank, double t) {
  const int i = g - rankOffset_[static_cast<std::size_t>(rank)];
  const int k = m_.opMatch[static_cast<std::size_t>(rank)][static_cast<std::size_t>(i)];
  const SwitchMatch& sm = m_.switchMatches[static_cast<std::size_t>(k)];
  const auto& members = s_.switchGroups[static_cast<std::size_t>(sm.group)];
  const int x = static_cast<int>(std::lower_bound(members.begin(), members.end(), rank) - members.begin());
  SwitchState& st = sstate_[static_cast<std::size_t>(k)];
  st.ready[static_cast<std::size_t>(x)] = t;
  const Op& o = op(g);
  const bool root = rank == o.peer;
  if (root) st.rootReady = t;
  if (o.kind == OpKind::SwitchReduce) {
    if (root) {
      for (std::size_t y = 0; y < members.size(); ++y) {
        if (st.ready[y] >= 0) startReductionUp(k, static_cast<int>(y), t);
      }
    } else if (st.rootReady >= 0) {
      startReductionUp(k, x, t);
    }
    return;
  }
  if (root) {
    startSwitchFlow(k, x, -1, World::SwitchLeg::Up, t);
    const std::size_t points = agg_[static_cast<std::size_t>(sm.group)].points.size();
    for (std::size_t q = 0; q < points; ++q) startSwitchFlow(k, -1, static_cast<int>(q), World::SwitchLeg::Down, t);
    for (std::size_t y = 0; y < members.size(); ++y) {
      if (st.ready[y] >= 0) startSwitchFlow(k, static_cast<int>(y), -1, World::SwitchLeg::Down, t);
    }
  } else if (st.rootReady >= 0) {
    startSwitchFlow(k, x, -1, World::SwitchLeg::Down, t);
  }
}

void Dag::startReductionUp(int k, int member, double t) {
  SwitchState& st = sstate_[static_cast<std::size_t>(k)];
  const SwitchMatch& sm = m_.switchMatches[static_cast<std::size_t>(k)];
  startSwitchFlow(k, member, -1, World::SwitchLeg::Up, t);
  // An aggregation switch sends on once everything below it has started, and so on up.
  const Aggregation& a = agg_[static_cast<std::size_t>(sm.group)];
  for (int q = a.memberPoint[static_cast<std::size_t>(member)];
       q >= 0 && --st.pointWaiting[static_cast<std::size_t>(q)] == 0; q = a.pointParent[static_cast<std::size_t>(q)]) {
    startSwitchFlow(k, -1, q, World::SwitchLeg::Up, t);
  }
  if (++st.upsStarted < static_cast<int>(st.ready.size())) return;
  const auto& members = s_.switchGroups[static_cast<std::size_t>(sm.group)];
  const int root =
      op(globalOp(members[static_cast<std::size_t>(member)], sm.ops[static_cast<std::size_t>(member)])).peer;
  const auto rootMember = std::lower_bound(members.begin(), members.end(), root) - members.begin();
  startSwitchFlow(k, static_cast<int>(rootMember), -1, World::SwitchLeg::ReducedDown, t);
}

void Dag::startSwitchFlow(int k, int member, int point, World::SwitchLeg leg, double t) {
  const SwitchMatch& sm = m_.switchMatches[static_cast<std::size_t>(k)];
  const auto& members = s_.switchGroups[static_cast<std::size_t>(sm.group)];
  const Aggregation& a = agg_[static_cast<std::size_t>(sm.group)];
  const int sw = groupSwitch_[static_cast<std::size_t>(sm.group)];
  const Op& o = op(globalOp(members.front(), sm.ops.front()));
  // A member's contribution and its copy travel between it and its aggregation switch; the reduced bytes come down to
  // the root, and a multicast's bytes go up from it, all the way. An aggregation switch's leg joins it to the switch
  // above it: the next aggregation switch, or the group's.
  int lower = 0, upper = sw;
  if (member >= 0) {
    lower = world_.rankNode(members[static_cast<std::size_t>(member)]);
    const int q = a.memberPoint[static_cast<std::size_t>(member)];
    const bool viaPoint =
        leg == World::SwitchLeg::Down || (leg == World::SwitchLeg::Up && o.kind == OpKind::SwitchReduce);
    if (q >= 0 && viaPoint) upper = a.points[static_cast<std::size_t>(q)];
  } else {
    lower = a.points[static_cast<std::size_t>(point)];
    const int parent = a.pointParent[static_cast<std::size_t>(point)];
    if (parent >= 0) upper = a.points[static_cast<std::size_t>(parent)];
  }
  const int f = static_cast<int>(sflow_.size());
  sflow_.push_back({k, member, point, lower, upper, leg, world_.switchBytes(sw, o.bytes)});
  timing_->switchFlow(*this, f, t);
}

void Dag::switchFlowDone(int f, double t) {
  const SwitchFlow fl = sflow_[static_cast<std::size_t>(f)];
  const SwitchMatch& sm = m_.switchMatches[static_cast<std::size_t>(fl.match)];
  const auto& members = s_.switchGroups[static_cast<std::size_t>(sm.group)];
  const Aggregation& a = agg_[static_cast<std::size_t>(sm.group)];
  SwitchState& st = sstate_[static_cast<std::size_t>(fl.match)];
  auto memberOp = [&](std::size_t y) { return globalOp(members[y], sm.ops[y]); };
  const Op& o = op(memberOp(0));
  const auto rootMember =
      static_cast<std::size_t>(std::lower_bound(members.begin(), members.end(), o.peer) - members.begin());
  if (o.kind == OpKind::SwitchReduce) {
    // The root has the reduction once every contribution is in and the reduced bytes have arrived.
    if (fl.leg == World::SwitchLeg::ReducedDown) {
      st.downLeft = false;
      if (st.upsLeft == 0) opDone(memberOp(rootMember), t);
    } else if (--st.upsLeft == 0) {
      // Every contribution is in: the members' inputs are free again.
      for (std::size_t y = 0; y < members.size(); ++y) {
        if (y != rootMember) opDone(memberOp(y), t);
      }
      if (!st.downLeft) opDone(memberOp(rootMember), t);
    }
    return;
  }
  // A copy is complete once it has arrived, the copies to the aggregation switches above it too, and the root's bytes
  // have all left the root.
  const auto finish = [&](std::size_t y) {
    if (st.downDone[y] != kCopyArrived || st.upsDone < 0) return;
    for (int q = a.memberPoint[y]; q >= 0; q = a.pointParent[static_cast<std::size_t>(q)]) {
      if (!st.pointDown[static_cast<std::size_t>(q)]) return;
    }
    st.downDone[y] = kCopyDone;
    opDone(memberOp(y), t);
  };
  if (fl.leg == World::SwitchLeg::Up) {
    st.upsDone = t;
    for (std::size_t y = 0; y < members.size(); ++y) finish(y);
  } else if (fl.member < 0) {
    st.pointDown[static_cast<std::size_t>(fl.point)] = 1;
    for (std::size_t y = 0; y < members.size(); ++y) finish(y);
  } else {
    st.downDone[static_cast<std::size_t>(fl.member)] = kCopyArrived;
    finish(static_cast<std::size_t>(fl.member));
  }
}

Dag::Aggregation Dag::aggregation(std::size_t group) const {
  const auto& members = s_.switchGroups[group];
  const int sw = groupSwitch_[group];
  const Topology& t = world_.topology();
  Aggregation a;
  a.memberPoint.assign(members.size(), -1);
  // Level by level, what is still to join (the members, then the last level's aggregation switches) meets at its first
  // switch on the way up that reduces and multicasts, before the group's switch, where two or more of it do.
  struct Joining {
    bool member;
    std::size_t index;  // into members or a.points
    int node;
  };
  std::vector<Joining> level;
  for (std::size_t y = 0; y < members.size(); ++y) level.push_back({true, y, world_.rankNode(members[y])});
  while (level.size() > 1) {
    std::vector<int> first(level.size(), -1);
    std::unordered_map<int, int> behind;
    for (std::size_t i = 0; i < level.size(); ++i) {
      const std::vector<int> path = world_.pathNodes(level[i].node, sw);
      for (std::size_t h = 1; h + 1 < path.size(); ++h) {
        const TopoNode& node = t.nodes[static_cast<std::size_t>(path[h])];
        if (node.reducesInNetwork() && node.multicasts()) {
          first[i] = path[h];
          ++behind[path[h]];
          break;
        }
      }
    }
    std::vector<Joining> next;
    std::unordered_map<int, int> index;
    for (std::size_t i = 0; i < level.size(); ++i) {
      if (first[i] < 0 || behind[first[i]] < 2) continue;  // alone behind it: nothing to aggregate
      const auto [it, fresh] = index.try_emplace(first[i], static_cast<int>(a.points.size()));
      if (fresh) {
        next.push_back({false, a.points.size(), first[i]});
        a.points.push_back(first[i]);
        a.pointParent.push_back(-1);
      }
      (level[i].member ? a.memberPoint : a.pointParent)[level[i].index] = it->second;
    }
    level = std::move(next);
  }
  return a;
}

void Dag::opDone(int g, double t) {
  end_[static_cast<std::size_t>(g)] = t;
  ++done_;
  for (int k = depStart_[static_cast<std::size_t>(g)]; k < depStart_[static_cast<std::size_t>(g) + 1]; ++k) {
    const auto d = static_cast<std::size_t>(dependents_[static_cast<std::size_t>(k)]);
    readyT_[d] = std::max(readyT_[d], t);
    if (--pending_[d] == 0) opReady(static_cast<int>(d), readyT_[d]);
  }
}

void Dag::checkFinished() const {
  if (done_ == opRank_.size()) return;
  for (std::size_t g = 0; g < end_.size(); ++g) {
    if (end_[g] >= 0) continue;
    const int r = opRank_[g];
    const int i = static_cast<int>(g) - rankOffset_[static_cast<std::size_t>(r)];
    const Op& o = op(static_cast<int>(g));
    throw Error(Errc::InvalidSchedule,
                fmt::format("the schedule deadlocks: rank {} op {} ({}{}, channel {}) never completes", r, i,
                            toString(o.kind), o.peer >= 0 ? fmt::format(" with rank {}", o.peer) : "", o.channel),
                r, o.peer);
  }
}

double Dag::makespan() const {
  double t = 0;
  for (double e : end_) t = std::max(t, e);
  return t;
}

std::vector<Span> Dag::spans() const {
  std::vector<Span> out;
  out.reserve(end_.size());
  for (std::size_t g = 0; g < end_.size(); ++g) {
    const Op& o = op(static_cast<int>(g));
    const int r = opRank_[g];
    const int i = static_cast<int>(g) - rankOffset_[static_cast<std::size_t>(r)];
    Span sp;
    sp.rank = r;
    sp.op = i;
    sp.peer = o.peer;
    sp.channel = o.channel;
    sp.bytes = o.bytes;
    if (o.isComm()) {
      const Xfer& x =
          xf_[static_cast<std::size_t>(m_.opMatch[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)])];
      sp.kind = o.kind == OpKind::Send ? SpanKind::Send : SpanKind::Recv;
      sp.start = x.start;
      sp.end = x.end;
      out.push_back(sp);
      if (o.kind == OpKind::RecvReduce && end_[g] > x.end) {
        sp.kind = SpanKind::Reduce;
        sp.start = x.end;
        sp.end = end_[g];
        out.push_back(sp);
      }
    } else if (o.isSwitch()) {
      // On the timeline a switch reduction is a reduction and a multicast a receive from its root (`peer`).
      sp.kind = o.kind == OpKind::SwitchReduce ? SpanKind::Reduce : SpanKind::Recv;
      sp.start = start_[g];
      sp.end = end_[g];
      out.push_back(sp);
    } else {
      sp.kind = o.kind == OpKind::Copy ? SpanKind::Copy : SpanKind::Reduce;
      sp.start = start_[g];
      sp.end = end_[g];
      out.push_back(sp);
    }
  }
  return out;
}

}  // namespace collbench::sim::detail
