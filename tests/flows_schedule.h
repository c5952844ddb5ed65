#pragma once
// A hand-built schedule of independent transfers, for simulator tests that time flows against closed forms.
#include <cstddef>
#include <utility>
#include <vector>

#include "collbench/schedule.h"

namespace collbench::testing {

/// Each (src, dst) pair sends `bytes` once, all at t = 0, each on its own channel; the other ranks of n do nothing.
inline Schedule flowsSchedule(int n, const std::vector<std::pair<int, int>>& pairs, std::size_t bytes) {
  Schedule s;
  s.spec = CollectiveSpec{Collective::AllReduce, n, 0, DType::F32};
  s.algorithm = "test-flows";
  s.ranks.resize(static_cast<std::size_t>(n));
  int channel = 0;
  for (auto [src, dst] : pairs) {
    Op send;
    send.kind = OpKind::Send;
    send.peer = dst;
    send.bytes = bytes;
    send.channel = channel;
    Op recv = send;
    recv.kind = OpKind::Recv;
    recv.peer = src;
    s.ranks[static_cast<std::size_t>(src)].ops.push_back(send);
    s.ranks[static_cast<std::size_t>(dst)].ops.push_back(recv);
    ++channel;
  }
  return s;
}

}  // namespace collbench::testing
