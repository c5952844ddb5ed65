// Direct all-reduce: every rank owns block r; an all-to-all reduce-scatter (each rank sends block j straight to
// rank j, which folds the n-1 arrivals) followed by an all-to-all all-gather. One step of latency each way, n-1
// concurrent flows per rank: the algorithm of choice on full-bandwidth switches for small n.
#include <algorithm>
#include <limits>

#include "builder.h"
#include "generators.h"
#include "models/cost_context.h"

namespace collbench::algo {

Schedule directAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "direct", params);
  const int n = spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  const Partition blocks{spec.count, nu};
  auto at = [&](int j) { return blocks.offset(static_cast<std::size_t>(j)); };
  auto len = [&](int j) { return blocks.size(static_cast<std::size_t>(j)); };
  for (int r = 0; r < n; ++r) {
    const std::size_t mine = len(r);
    b.needScratch(r, (nu - 1) * mine);
    OpId acc = b.copy(r, in(at(r)), out(at(r)), mine, {});
    std::vector<OpId> sentInput(nu, kNoOp);
    // Staggered peer order (r+1, r+2, ...) so that no rank is everybody's first destination.
    for (int d = 1; d < n; ++d) {
      const int j = (r + d) % n;
      sentInput[static_cast<std::size_t>(j)] = b.send(r, j, in(at(j)), len(j), {});
    }
    for (int d = 1; d < n; ++d) {
      const int j = mod(r - d, n);
      const BufRef slot = scratch(static_cast<std::size_t>(d - 1) * mine);
      const OpId got = b.recv(r, j, slot, mine, {});
      acc = b.reduce(r, slot, out(at(r)), mine, {acc, got});
    }
    for (int d = 1; d < n; ++d) b.send(r, (r + d) % n, out(at(r)), mine, {acc});
    for (int d = 1; d < n; ++d) {
      const int j = mod(r - d, n);
      // The input block j (possibly aliasing the output) must have left before block j arrives.
      b.recv(r, j, out(at(j)), len(j), {sentInput[static_cast<std::size_t>(j)]});
    }
  }
  return b.finish();
}

namespace {

/// One all-to-all step: every rank sends `block` bytes to every other at once.
CostTerms directPhase(const CostContext& ctx, double block) {
  const int n = ctx.n;
  if (n <= kDirectExactMaxRanks) {
    std::vector<CostContext::Flow> flows;
    flows.reserve(static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1));
    for (int r = 0; r < n; ++r) {
      for (int d = 1; d < n; ++d) flows.push_back({r, (r + d) % n, block});
    }
    return ctx.phaseMax(flows);
  }
  // Per-rank-link bound: rank 0's n-1 flows share its first link and each destination's last link with n-1
  // others; interior links are assumed not to be the bottleneck.
  CostTerms worst;
  for (int d = 1; d < n; ++d) {
    const auto& hops = ctx.router->route(0, d);
    if (hops.empty()) {
      worst = CostTerms::max(worst, ctx.gammaCost(block, d));
      continue;
    }
    double lat = 0, alone = std::numeric_limits<double>::infinity();
    for (const Hop& h : hops) {
      lat += ctx.topo.links[static_cast<std::size_t>(h.link)].latencyUs;
      alone = std::min(alone, ctx.capBytesPerUs[static_cast<std::size_t>(h.link)]);
    }
    const double ends = std::min(ctx.capBytesPerUs[static_cast<std::size_t>(hops.front().link)],
                                 ctx.capBytesPerUs[static_cast<std::size_t>(hops.back().link)]);
    const double rate = std::min(alone, ends / (n - 1));
    CostTerms t;
    const int c = ctx.classOf(0, d);
    t.us = lat + block / rate;
    t.alphaCount[c] = 1;
    t.betaBytes[c] = block * alone / rate;
    worst = CostTerms::max(worst, t);
  }
  return worst;
}

Estimate directCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams&) {
  const int n = ctx.n;
  const std::size_t es = s.elementSize();
  const double block = static_cast<double>(ceilDiv(s.count, static_cast<std::size_t>(n)) * es);
  if (n == 1) return estimateOf(ctx.gammaCost(block, 0));
  // All n-1 blocks leave at once (reduce-scatter), the arrivals are folded one after the other, then all-gather.
  const CostTerms rs = CostTerms::max(directPhase(ctx, block), ctx.gammaMax(block));
  return estimateOf(rs + ctx.gammaMax(block * (n - 1)) + directPhase(ctx, block));
}

/// Every rank sends to every other twice (reduce-scatter, all-gather).
std::size_t directTransfers(const CollectiveSpec& spec, const AlgoParams&) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  return 2 * n * (n - 1);
}

}  // namespace

AlgorithmInfo directAlgorithm() {
  // Off the default model: its n-1 concurrent flows per rank cost nothing extra on the ideal flat switch.
  return {.name = "direct",
          .collective = Collective::AllReduce,
          .summary = "all-to-all reduce-scatter + all-gather, one step each way",
          .build = directAllReduce,
          .cost = directCost,
          .traits = {.defaultModel = false, .transfers = directTransfers}};
}

}  // namespace collbench::algo
