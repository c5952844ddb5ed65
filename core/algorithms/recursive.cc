// Recursive doubling and Rabenseifner all-reduce (Thakur, Rabenseifner, Gropp 2005, "Optimization of collective
// communication operations in MPICH"). Non-powers of two: with p the largest power of two <= n and rem = n - p,
// each even rank r < 2*rem first hands its data to r+1 and receives the result at the end, so p ranks remain.
#include <bit>

#include "builder.h"
#include "generators.h"
#include "models/cost_context.h"

namespace collbench::algo {
namespace {

/// Rank folding for non-powers of two.
struct Fold {
  int n, p, rem;
  explicit Fold(int nranks)
      : n(nranks), p(static_cast<int>(std::bit_floor(static_cast<unsigned>(nranks)))), rem(nranks - p) {}
  bool sitsOut(int r) const { return r < 2 * rem && r % 2 == 0; }
  bool absorbs(int r) const { return r < 2 * rem && r % 2 == 1; }
  int newRank(int r) const { return r < 2 * rem ? r / 2 : r - rem; }
  int oldRank(int nr) const { return nr < rem ? 2 * nr + 1 : nr + rem; }
  int steps() const { return std::countr_zero(static_cast<unsigned>(p)); }
};

}  // namespace

Schedule recursiveDoublingAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "recursive_doubling", params);
  const std::size_t count = spec.count;
  const Fold f(spec.nranks);
  for (int r = 0; r < f.n; ++r) {
    if (f.sitsOut(r)) {
      const OpId sent = b.send(r, r + 1, in(0), count, {});
      b.recv(r, r + 1, out(0), count, {sent});
      continue;
    }
    // Work in the output; every incoming buffer lands in scratch and is folded in locally, so a rank's send of
    // its current value never races with the fold of its partner's.
    b.needScratch(r, count);
    OpId cur = b.copy(r, in(0), out(0), count, {});
    OpId scratchFree = kNoOp;
    auto absorb = [&](int peer, OpId sent) {
      const OpId got = b.recv(r, peer, scratch(0), count, {scratchFree});
      cur = b.reduce(r, scratch(0), out(0), count, {cur, got, sent});
      scratchFree = cur;
    };
    if (f.absorbs(r)) absorb(r - 1, kNoOp);
    const int nr = f.newRank(r);
    for (int k = 0; k < f.steps(); ++k) {
      const int partner = f.oldRank(nr ^ (1 << k));
      const OpId sent = b.send(r, partner, out(0), count, {cur});
      absorb(partner, sent);
    }
    if (f.absorbs(r)) b.send(r, r - 1, out(0), count, {cur});
  }
  return b.finish();
}

Schedule rabenseifnerAllReduce(const CollectiveSpec& spec, const AlgoParams& params) {
  ScheduleBuilder b(spec, "rabenseifner", params);
  const std::size_t count = spec.count;
  const Fold f(spec.nranks);
  if (f.n == 1) {
    b.copy(0, in(0), out(0), count, {});
    return b.finish();
  }
  const Partition blocks{count, static_cast<std::size_t>(f.p)};
  auto elemOf = [&](int block) { return blocks.offset(static_cast<std::size_t>(block)); };
  for (int r = 0; r < f.n; ++r) {
    if (f.sitsOut(r)) {
      const OpId sent = b.send(r, r + 1, in(0), count, {});
      b.recv(r, r + 1, out(0), count, {sent});
      continue;
    }
    OpId last = kNoOp;
    bool inOutput = false;  // whether this rank's partial values live in the output yet
    if (f.absorbs(r)) {
      last = b.recvReduce(r, r - 1, in(0), out(0), count, {});
      inOutput = true;
    }
    const int nr = f.newRank(r);
    // Reduce-scatter by recursive halving: keep one half of the current block range, send the other.
    int lo = 0, hi = f.p;
    struct Step {
      int partner, sentLo, sentHi;
      OpId sent;
    };
    std::vector<Step> steps;
    for (int k = 0; k < f.steps(); ++k) {
      const int mask = f.p >> (k + 1);
      const int partner = f.oldRank(nr ^ mask);
      const int mid = lo + (hi - lo) / 2;
      const bool upper = (nr & mask) != 0;
      const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
      const int sendLo = upper ? lo : mid, sendHi = upper ? mid : hi;
      const std::size_t sendElems = elemOf(sendHi) - elemOf(sendLo), keepElems = elemOf(keepHi) - elemOf(keepLo);
      const BufRef sendSrc = inOutput ? out(elemOf(sendLo)) : in(elemOf(sendLo));
      const BufRef keepSrc = inOutput ? out(elemOf(keepLo)) : in(elemOf(keepLo));
      const OpId sent = b.send(r, partner, sendSrc, sendElems, {last});
      last = b.recvReduce(r, partner, keepSrc, out(elemOf(keepLo)), keepElems, {last});
      inOutput = true;
      steps.push_back(Step{partner, sendLo, sendHi, sent});
      lo = keepLo;
      hi = keepHi;
    }
    // All-gather by recursive doubling, retracing the halving steps in reverse.
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      const OpId sent = b.send(r, it->partner, out(elemOf(lo)), elemOf(hi) - elemOf(lo), {last});
      const OpId got =
          b.recv(r, it->partner, out(elemOf(it->sentLo)), elemOf(it->sentHi) - elemOf(it->sentLo), {it->sent, last});
      last = b.join(r, {got, sent});
      lo = std::min(lo, it->sentLo);
      hi = std::max(hi, it->sentHi);
    }
    if (f.absorbs(r)) b.send(r, r - 1, out(0), count, {last});
  }
  return b.finish();
}

namespace {

/// Even ranks below 2 rem hand their whole buffer to r+1 (and get the result back at the end).
std::vector<CostContext::Flow> foldFlows(const Fold& f, double bytes, bool back) {
  std::vector<CostContext::Flow> flows;
  for (int r = 0; r < 2 * f.rem; r += 2)
    flows.push_back(back ? CostContext::Flow{r + 1, r, bytes} : CostContext::Flow{r, r + 1, bytes});
  return flows;
}

/// Every active rank sends `bytes` to its partner at distance `mask` in the folded numbering.
std::vector<CostContext::Flow> butterfly(const Fold& f, int mask, double bytes) {
  std::vector<CostContext::Flow> flows;
  for (int r = 0; r < f.n; ++r) {
    if (f.sitsOut(r)) continue;
    flows.push_back({r, f.oldRank(f.newRank(r) ^ mask), bytes});
  }
  return flows;
}

Estimate recursiveDoublingCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams&) {
  const double S = static_cast<double>(s.count * s.elementSize());
  const Fold f(ctx.n);
  // Every staying rank copies in -> out first; absorbing ranks meanwhile receive their partner's buffer, then fold.
  CostTerms t = ctx.gammaMax(S);
  if (f.rem > 0) t = CostTerms::max(ctx.phaseMax(foldFlows(f, S, false)), ctx.gammaMax(S)) + ctx.gammaMax(S);
  for (int k = 0; k < f.steps(); ++k) t += ctx.phaseMax(butterfly(f, 1 << k, S)) + ctx.gammaMax(S);  // exchange, fold
  if (f.rem > 0) t += ctx.phaseMax(foldFlows(f, S, true));
  return estimateOf(t);
}

Estimate rabenseifnerCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams&) {
  const std::size_t es = s.elementSize();
  const double S = static_cast<double>(s.count * es);
  if (ctx.n == 1) return estimateOf(ctx.gammaCost(S, 0));
  const Fold f(ctx.n);
  const Partition blocks{s.count, static_cast<std::size_t>(f.p)};
  CostTerms t;
  if (f.rem > 0) t = ctx.phaseMax(foldFlows(f, S, false)) + ctx.gammaMax(S);  // absorbing ranks receive-and-reduce
  for (int k = 0; k < f.steps(); ++k) {
    // New rank 0 keeps blocks [0, p >> (k+1)) at step k, the largest of the even partition: the longest chain.
    const int mask = f.p >> (k + 1);
    const double keep = static_cast<double>(blocks.offset(static_cast<std::size_t>(mask)) * es);
    const CostTerms x = ctx.phaseMax(butterfly(f, mask, keep));
    t += x + ctx.gammaMax(keep);  // reduce-scatter step: receive-and-reduce the kept half
    t += x;                       // the all-gather step that retraces it
  }
  if (f.rem > 0) t += ctx.phaseMax(foldFlows(f, S, true));
  return estimateOf(t);
}

/// Every rank exchanges once per step, plus the fold's hand-over and return.
std::size_t recursiveDoublingTransfers(const CollectiveSpec& spec, const AlgoParams&) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  return n * (ceilLog2(n) + 2);
}

/// Twice the steps of recursive doubling: the halving reduce-scatter, then the doubling all-gather.
std::size_t rabenseifnerTransfers(const CollectiveSpec& spec, const AlgoParams&) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  return n * (2 * ceilLog2(n) + 2);
}

}  // namespace

AlgorithmInfo recursiveDoublingAlgorithm() {
  return {.name = "recursive_doubling",
          .collective = Collective::AllReduce,
          .summary = "log2(n) full-buffer exchanges, latency optimal for small messages",
          .build = recursiveDoublingAllReduce,
          .cost = recursiveDoublingCost,
          .traits = {.transfers = recursiveDoublingTransfers}};
}

AlgorithmInfo rabenseifnerAlgorithm() {
  return {.name = "rabenseifner",
          .collective = Collective::AllReduce,
          .summary = "recursive-halving reduce-scatter + recursive-doubling all-gather",
          .build = rabenseifnerAllReduce,
          .cost = rabenseifnerCost,
          .traits = {.transfers = rabenseifnerTransfers}};
}

}  // namespace collbench::algo
