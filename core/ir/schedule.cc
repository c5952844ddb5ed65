#include "collbench/schedule.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

#include "collbench/error.h"

namespace collbench {

std::string_view toString(OpKind k) {
  switch (k) {
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::RecvReduce:
      return "recv_reduce";
    case OpKind::Copy:
      return "copy";
    case OpKind::Reduce:
      return "reduce";
    case OpKind::SwitchReduce:
      return "switch_reduce";
    case OpKind::Multicast:
      return "multicast";
  }
  return "?";
}

std::string_view toString(BufferKind b) {
  switch (b) {
    case BufferKind::Input:
      return "in";
    case BufferKind::Output:
      return "out";
    case BufferKind::Scratch:
      return "scratch";
  }
  return "?";
}

std::string_view toString(Protocol p) {
  switch (p) {
    case Protocol::LL:
      return "LL";
    case Protocol::LL128:
      return "LL128";
    case Protocol::Simple:
      return "Simple";
  }
  return "?";
}

Protocol parseProtocol(std::string_view s) {
  for (Protocol p : {Protocol::LL, Protocol::LL128, Protocol::Simple}) {
    const std::string_view name = toString(p);
    if (std::equal(s.begin(), s.end(), name.begin(), name.end(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(b); })) {
      return p;
    }
  }
  throw Error(Errc::InvalidArgument, fmt::format("unknown protocol '{}' (available: LL, LL128, Simple)", printable(s)));
}

std::size_t Schedule::totalOps() const {
  std::size_t n = 0;
  for (const auto& r : ranks) n += r.ops.size();
  return n;
}

std::size_t Schedule::resultBytes(int rank) const {
  if (spec.kind == Collective::Reduce && rank != spec.root) return 0;
  return spec.outputBytes();
}

namespace {

[[noreturn]] void switchFail(int rank, int i, const Op& op, const std::string& what) {
  throw Error(Errc::InvalidSchedule,
              fmt::format("rank {} op {} ({}, group {}, channel {}): {}", rank, i, toString(op.kind), op.group,
                          op.channel, what),
              rank, op.peer);
}

/// Checks the groups and each switch op's group and root; fills m.switchMatches and their opMatch entries.
void matchSwitchOps(const Schedule& s, Matching& m) {
  const int n = static_cast<int>(s.ranks.size());
  const int groups = static_cast<int>(s.switchGroups.size());
  // position[g][rank] = index of rank in group g, -1 when not a member.
  std::vector<std::vector<int>> position(static_cast<std::size_t>(groups), std::vector<int>(s.ranks.size(), -1));
  for (int g = 0; g < groups; ++g) {
    const auto& members = s.switchGroups[static_cast<std::size_t>(g)];
    if (members.empty()) throw Error(Errc::InvalidSchedule, fmt::format("switch group {} has no ranks", g));
    for (std::size_t k = 0; k < members.size(); ++k) {
      const int r = members[k];
      if (r < 0 || r >= n || (k > 0 && r <= members[k - 1])) {
        throw Error(Errc::InvalidSchedule,
                    fmt::format("switch group {}: ranks must be distinct ranks of {} in ascending order, got {}", g, n,
                                fmt::join(members, ", ")));
      }
      position[static_cast<std::size_t>(g)][static_cast<std::size_t>(r)] = static_cast<int>(k);
    }
  }
  // (group, channel) -> per member, its ops of that (group, channel) in program order.
  std::map<std::pair<int, int>, std::vector<std::vector<int>>> lanes;
  for (int r = 0; r < n; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (!op.isSwitch()) continue;
      if (op.group < 0 || op.group >= groups) {
        switchFail(
            r, i, op,
            groups == 0 ? "the schedule has no switch groups" : fmt::format("not a switch group (0..{})", groups - 1));
      }
      const auto& pos = position[static_cast<std::size_t>(op.group)];
      if (pos[static_cast<std::size_t>(r)] < 0) {
        switchFail(r, i, op,
                   fmt::format("rank {} is not a member of the group (ranks {})", r,
                               fmt::join(s.switchGroups[static_cast<std::size_t>(op.group)], ", ")));
      }
      if (op.peer < 0 || op.peer >= n || pos[static_cast<std::size_t>(op.peer)] < 0) {
        switchFail(r, i, op, fmt::format("root {} is not a member of the group", op.peer));
      }
      auto& lane = lanes[{op.group, op.channel}];
      lane.resize(s.switchGroups[static_cast<std::size_t>(op.group)].size());
      lane[static_cast<std::size_t>(pos[static_cast<std::size_t>(r)])].push_back(i);
    }
  }
  for (const auto& [key, perMember] : lanes) {
    const auto [g, channel] = key;
    const auto& members = s.switchGroups[static_cast<std::size_t>(g)];
    std::size_t most = 0;
    for (const auto& ops : perMember) most = std::max(most, ops.size());
    for (std::size_t k = 0; k < most; ++k) {
      // The first member that has the k-th op is the reference; every member must have a matching one.
      std::size_t ref = 0;
      while (perMember[ref].size() <= k) ++ref;
      const int refRank = members[ref];
      const int refOp = perMember[ref][k];
      const Op& a = s.ranks[static_cast<std::size_t>(refRank)].ops[static_cast<std::size_t>(refOp)];
      SwitchMatch sm{g, channel, std::vector<int>(members.size(), -1)};
      for (std::size_t x = 0; x < members.size(); ++x) {
        const int r = members[x];
        if (perMember[x].size() <= k) {
          switchFail(refRank, refOp, a,
                     fmt::format("rank {} of the group has no matching op (it issues {} ops of this group and channel)",
                                 r, perMember[x].size()));
        }
        const int i = perMember[x][k];
        const Op& b = s.ranks[static_cast<std::size_t>(r)].ops[static_cast<std::size_t>(i)];
        if (b.kind != a.kind || b.peer != a.peer || b.bytes != a.bytes) {
          switchFail(r, i, b,
                     fmt::format("matches rank {} op {} ({} root {}, {} bytes) but is a {} with root {} of {} bytes",
                                 refRank, refOp, toString(a.kind), a.peer, a.bytes, toString(b.kind), b.peer, b.bytes));
        }
        sm.ops[x] = i;
        m.opMatch[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = static_cast<int>(m.switchMatches.size());
      }
      m.switchMatches.push_back(std::move(sm));
    }
  }
}

}  // namespace

void requireNoSwitchOps(const Schedule& s, std::string_view backend) {
  if (!s.usesSwitch()) return;
  throw Error(
      Errc::Unsupported,
      fmt::format("{} needs a switch that reduces (NVLS/SHARP), which backend '{}' does not have; run it on "
                  "--backend sim or nccl",
                  s.algorithm.empty() ? std::string("this schedule") : "algorithm '" + s.algorithm + "'", backend));
}

Matching matchSchedule(const Schedule& s) {
  Matching m;
  const int n = static_cast<int>(s.ranks.size());
  m.opMatch.resize(static_cast<std::size_t>(n));
  // (src, dst, channel) -> op indices in program order, on each side.
  std::map<std::tuple<int, int, int>, std::vector<int>> sends, recvs;
  for (int r = 0; r < n; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)].ops;
    m.opMatch[static_cast<std::size_t>(r)].assign(ops.size(), -1);
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (!op.isComm()) continue;
      if (op.peer < 0 || op.peer >= n || op.peer == r) {
        throw Error(
            Errc::InvalidSchedule,
            fmt::format("rank {} op {} ({}): peer {} is not another rank of {}", r, i, toString(op.kind), op.peer, n),
            r, op.peer);
      }
      if (op.kind == OpKind::Send) {
        sends[{r, op.peer, op.channel}].push_back(i);
      } else {
        recvs[{op.peer, r, op.channel}].push_back(i);
      }
    }
  }
  for (const auto& [key, sendOps] : sends) {
    const auto [src, dst, channel] = key;
    auto it = recvs.find(key);
    const std::size_t nrecv = it == recvs.end() ? 0 : it->second.size();
    if (nrecv < sendOps.size()) {
      const int op = sendOps[nrecv];
      throw Error(Errc::InvalidSchedule,
                  fmt::format("rank {} op {} (send to rank {}, channel {}) has no matching receive on rank {}", src, op,
                              dst, channel, dst),
                  src, dst);
    }
    for (std::size_t k = 0; k < sendOps.size(); ++k) {
      const int so = sendOps[k], ro = it->second[k];
      const Op& sop = s.ranks[static_cast<std::size_t>(src)].ops[static_cast<std::size_t>(so)];
      const Op& rop = s.ranks[static_cast<std::size_t>(dst)].ops[static_cast<std::size_t>(ro)];
      if (sop.bytes != rop.bytes) {
        throw Error(Errc::InvalidSchedule,
                    fmt::format("rank {} op {} sends {} bytes to rank {} but its matching receive (rank {} op {}) "
                                "expects {} bytes",
                                src, so, sop.bytes, dst, dst, ro, rop.bytes),
                    src, dst);
      }
      m.opMatch[static_cast<std::size_t>(src)][static_cast<std::size_t>(so)] = static_cast<int>(m.matches.size());
      m.opMatch[static_cast<std::size_t>(dst)][static_cast<std::size_t>(ro)] = static_cast<int>(m.matches.size());
      m.matches.push_back(Match{src, so, dst, ro});
    }
  }
  for (const auto& [key, recvOps] : recvs) {
    const auto [src, dst, channel] = key;
    auto it = sends.find(key);
    const std::size_t nsend = it == sends.end() ? 0 : it->second.size();
    if (recvOps.size() > nsend) {
      const int op = recvOps[nsend];
      throw Error(Errc::InvalidSchedule,
                  fmt::format("rank {} op {} (receive from rank {}, channel {}) has no matching send on rank {}", dst,
                              op, src, channel, src),
                  dst, src);
    }
  }
  matchSwitchOps(s, m);
  return m;
}

std::string dump(const Schedule& s) {
  std::string out = fmt::format("# schedule {} for {}: {} ops{}\n", s.algorithm, describe(s.spec), s.totalOps(),
                                s.protocol ? fmt::format(", protocol {}", toString(*s.protocol)) : "");
  for (std::size_t g = 0; g < s.switchGroups.size(); ++g) {
    out += fmt::format("switch group {}: ranks {}\n", g, fmt::join(s.switchGroups[g], ","));
  }
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& prog = s.ranks[r];
    const int rank = static_cast<int>(r);
    out += fmt::format("rank {} ({} ops, scratch {} B)\n", r, prog.ops.size(), prog.scratchBytes);
    for (std::size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      out += fmt::format("  {:4} {:<11}", i, toString(op.kind));
      if (op.isComm()) out += fmt::format(" peer {:<3} ch {:<2}", op.peer, op.channel);
      if (op.isSwitch()) out += fmt::format(" group {} root {} ch {}", op.group, op.peer, op.channel);
      if (op.readsOn(rank)) out += fmt::format(" src {}+{}", toString(op.src.buffer), op.src.offset);
      if (op.writesOn(rank)) out += fmt::format(" dst {}+{}", toString(op.dst.buffer), op.dst.offset);
      out += fmt::format(" {} B", op.bytes);
      if (!op.deps.empty()) out += fmt::format(" deps {}", fmt::join(op.deps, ","));
      out += '\n';
    }
  }
  return out;
}

}  // namespace collbench
