#include "collbench/schedule.h"

#include <fmt/ranges.h>

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

std::size_t Schedule::totalOps() const {
  std::size_t n = 0;
  for (const auto& r : ranks) n += r.ops.size();
  return n;
}

std::size_t Schedule::resultBytes(int rank) const {
  if (spec.kind == Collective::Reduce && rank != spec.root) return 0;
  return spec.outputBytes();
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
  return m;
}

std::string dump(const Schedule& s) {
  std::string out = fmt::format("# schedule {} for {}: {} ops\n", s.algorithm, describe(s.spec), s.totalOps());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& prog = s.ranks[r];
    out += fmt::format("rank {} ({} ops, scratch {} B)\n", r, prog.ops.size(), prog.scratchBytes);
    for (std::size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      out += fmt::format("  {:4} {:<11}", i, toString(op.kind));
      if (op.isComm()) out += fmt::format(" peer {:<3} ch {:<2}", op.peer, op.channel);
      if (op.reads()) out += fmt::format(" src {}+{}", toString(op.src.buffer), op.src.offset);
      if (op.writes()) out += fmt::format(" dst {}+{}", toString(op.dst.buffer), op.dst.offset);
      out += fmt::format(" {} B", op.bytes);
      if (!op.deps.empty()) out += fmt::format(" deps {}", fmt::join(op.deps, ","));
      out += '\n';
    }
  }
  return out;
}

}  // namespace collbench
