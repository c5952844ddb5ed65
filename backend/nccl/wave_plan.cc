#include "wave_plan.h"

#include <algorithm>

#include "collbench/error.h"

namespace collbench::nccl {
namespace {

std::size_t alignUp(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

}  // namespace

WavePlan planWaves(const Schedule& s) {
  WavePlan plan;
  plan.matching = matchSchedule(s);
  const auto n = s.ranks.size();
  std::vector<std::vector<int>> remaining(n), pool(n);
  std::vector<std::vector<std::vector<int>>> dependents(n);
  std::vector<std::vector<char>> ready(n);
  std::size_t total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    const auto& ops = s.ranks[r].ops;
    total += ops.size();
    remaining[r].assign(ops.size(), 0);
    dependents[r].resize(ops.size());
    ready[r].assign(ops.size(), 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (int d : ops[i].deps) {
        if (d < 0 || static_cast<std::size_t>(d) >= i) {
          throw Error(Errc::InvalidSchedule,
                      fmt::format("rank {} op {} depends on op {}, which is not an earlier op of the rank", r, i, d),
                      static_cast<int>(r));
        }
        ++remaining[r][i];
        dependents[r][static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
      }
      if (ops[i].isComm()) {
        ++plan.commOps;
      } else {
        ++plan.localOps;
      }
      if (remaining[r][i] == 0) {
        pool[r].push_back(static_cast<int>(i));
        ready[r][i] = 1;
      }
    }
  }
  plan.stagingOffset.resize(n);
  for (std::size_t r = 0; r < n; ++r) plan.stagingOffset[r].assign(s.ranks[r].ops.size(), 0);
  plan.stagingBytes.assign(n, 0);

  const auto& opMatch = plan.matching.opMatch;
  const auto& matches = plan.matching.matches;
  std::size_t done = 0;
  while (done < total) {
    Wave w;
    w.ranks.resize(n);
    bool any = false;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& ops = s.ranks[r].ops;
      std::vector<int> keep;
      for (int i : pool[r]) {
        const Op& op = ops[static_cast<std::size_t>(i)];
        if (!op.isComm()) {
          w.ranks[r].local.push_back(i);
          continue;
        }
        const Match& m = matches[static_cast<std::size_t>(opMatch[r][static_cast<std::size_t>(i)])];
        const bool sender = op.kind == OpKind::Send;
        const auto pr = static_cast<std::size_t>(sender ? m.dstRank : m.srcRank);
        const auto po = static_cast<std::size_t>(sender ? m.dstOp : m.srcOp);
        if (ready[pr][po]) {
          w.ranks[r].comm.push_back(i);
        } else {
          keep.push_back(i);
        }
      }
      pool[r] = std::move(keep);
      any = any || !w.ranks[r].empty();
    }
    if (!any) {
      // Nothing can start: some comm op waits for a partner that itself waits (directly or not) on this rank.
      for (std::size_t r = 0; r < n; ++r) {
        if (pool[r].empty()) continue;
        const int i = *std::min_element(pool[r].begin(), pool[r].end());
        const Op& op = s.ranks[r].ops[static_cast<std::size_t>(i)];
        const Match& m = matches[static_cast<std::size_t>(opMatch[r][static_cast<std::size_t>(i)])];
        const int partnerOp = op.kind == OpKind::Send ? m.dstOp : m.srcOp;
        throw Error(Errc::InvalidSchedule,
                    fmt::format("schedule {} deadlocks: rank {} op {} ({} with rank {}) waits for rank {} op {}, "
                                "which can never start",
                                s.algorithm, r, i, toString(op.kind), op.peer, op.peer, partnerOp),
                    static_cast<int>(r), op.peer);
      }
      COLLBENCH_CHECK(false, "wave planning stalled with {} of {} ops done and nothing ready", done, total);
    }
    for (std::size_t r = 0; r < n; ++r) {
      auto& rw = w.ranks[r];
      std::sort(rw.comm.begin(), rw.comm.end(), [&](int a, int b) {
        return opMatch[r][static_cast<std::size_t>(a)] < opMatch[r][static_cast<std::size_t>(b)];
      });
      std::sort(rw.local.begin(), rw.local.end());
      std::size_t staging = 0;
      for (int i : rw.comm) {
        const Op& op = s.ranks[r].ops[static_cast<std::size_t>(i)];
        if (op.kind != OpKind::RecvReduce) continue;
        plan.stagingOffset[r][static_cast<std::size_t>(i)] = staging;
        staging += alignUp(op.bytes, kStagingAlignBytes);
      }
      plan.stagingBytes[r] = std::max(plan.stagingBytes[r], staging);
    }
    // Everything in the wave completes before the next one starts; release the dependents.
    for (std::size_t r = 0; r < n; ++r) {
      for (const auto* list : {&w.ranks[r].comm, &w.ranks[r].local}) {
        for (int i : *list) {
          ready[r][static_cast<std::size_t>(i)] = 0;
          ++done;
          for (int d : dependents[r][static_cast<std::size_t>(i)]) {
            if (--remaining[r][static_cast<std::size_t>(d)] == 0) {
              pool[r].push_back(d);
              ready[r][static_cast<std::size_t>(d)] = 1;
            }
          }
        }
      }
    }
    plan.waves.push_back(std::move(w));
  }
  return plan;
}

}  // namespace collbench::nccl
