// The alpha-beta-gamma cost model (see cost_model.h for the model and its sources). Each algorithm's phases are
// read off its generator in core/algorithms/; comments name the generator behaviour each formula relies on.
#include "collbench/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "algorithms/builder.h"
#include "algorithms/generators.h"
#include "collbench/error.h"

namespace collbench {

namespace {

/// Topology bandwidths are GB/s = 1e9 bytes/s = 1e3 bytes/us.
constexpr double kBytesPerUsPerGBps = 1e3;

std::size_t ceilDiv(std::size_t a, std::size_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

bool isNative(std::string_view algorithm) {
  for (const auto& a : algorithms()) {
    if (a.name == algorithm && a.native) return true;
  }
  return false;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::string_view toString(LinkClassKind k) { return k == LinkClassKind::Intra ? "intra" : "inter"; }

CostTerms& CostTerms::operator+=(const CostTerms& o) {
  us += o.us;
  calls += o.calls;
  for (int c = 0; c < kLinkClasses; ++c) {
    alphaCount[c] += o.alphaCount[c];
    betaBytes[c] += o.betaBytes[c];
  }
  gammaBytes += o.gammaBytes;
  return *this;
}

CostTerms CostTerms::operator+(const CostTerms& o) const {
  CostTerms r = *this;
  r += o;
  return r;
}

CostTerms CostTerms::operator*(double k) const {
  CostTerms r = *this;
  r.us *= k;
  r.calls *= k;
  for (int c = 0; c < kLinkClasses; ++c) {
    r.alphaCount[c] *= k;
    r.betaBytes[c] *= k;
  }
  r.gammaBytes *= k;
  return r;
}

// ---------------------------------------------------------------------------------------------------------------

struct CostModel::Impl {
  /// `mult` identical flows between the same pair (channels): each counts on the links it crosses.
  struct Flow {
    int src, dst;
    double bytes;
    int mult = 1;
  };

  Topology topo;
  int n = 0;
  double callOverheadUs = 0;
  std::unique_ptr<Router> router;  // points into `topo`; Impl never moves (held by unique_ptr)
  std::vector<int> node;           // node index per rank
  std::vector<int> host;
  std::vector<double> gammaUsPerByte;  // per rank; 0 = free
  std::vector<double> capBytesPerUs;   // per link, after switch port limits
  CostSummary summary;
  // Scratch for phase(): load per directed link (link * 2 + (forward ? 0 : 1)) and the entries touched.
  mutable std::vector<double> load;
  mutable std::vector<int> touched;
  std::vector<std::unique_ptr<Impl>> tiers;  ///< per memory tier (topo.memoryTiers); empty without tiers

  Impl(Topology t, int nranks, double overheadUs) : topo(std::move(t)), callOverheadUs(overheadUs) {
    if (!(overheadUs >= 0) || !std::isfinite(overheadUs)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("call overhead must be a finite number >= 0 us, got {}", overheadUs));
    }
    if (nranks <= 0) nranks = static_cast<int>(topo.ranks.size());
    if (nranks > static_cast<int>(topo.ranks.size())) {
      throw Error(Errc::InvalidArgument, fmt::format("topology '{}' has {} ranks, the cost model was asked for {}",
                                                     printable(topo.name), topo.ranks.size(), nranks));
    }
    n = nranks;
    router = std::make_unique<Router>(topo);
    host = rankHosts(topo, n);
    for (int r = 0; r < n; ++r) {
      const int idx = router->rankNode(r);
      node.push_back(idx);
      const double gbps = topo.nodes[static_cast<std::size_t>(idx)].reduceGBps;
      gammaUsPerByte.push_back(gbps > 0 ? 1.0 / (gbps * kBytesPerUsPerGBps) : 0.0);
    }
    std::map<std::string, double> switchCap;
    for (const TopoNode& tn : topo.nodes) {
      if (tn.kind == NodeKind::Switch && tn.switchGBps > 0) switchCap[tn.id] = tn.switchGBps;
    }
    for (const TopoLink& l : topo.links) {
      double gbps = l.bandwidthGBps;
      for (const std::string* end : {&l.a, &l.b}) {
        auto it = switchCap.find(*end);
        if (it != switchCap.end()) gbps = std::min(gbps, it->second);
      }
      capBytesPerUs.push_back(gbps * kBytesPerUsPerGBps);
    }
    load.assign(2 * topo.links.size(), 0.0);
    summarize();
    // A call runs on its memory tier's rates: one model per tier, chosen per call by its working set.
    for (std::size_t k = 0; k < topo.memoryTiers.size(); ++k) {
      tiers.push_back(std::make_unique<Impl>(applyMemoryTier(topo, k), n, overheadUs));
    }
  }

  void summarize() {
    summary.ranks = n;
    std::map<int, int> perHost;
    for (int h : host) ++perHost[h];
    summary.hosts = static_cast<int>(perHost.size());
    summary.ranksPerHost = perHost.begin()->second;
    for (const auto& [h, k] : perHost) {
      if (k != summary.ranksPerHost) summary.ranksPerHost = 0;
    }
    double minRate = 0;
    for (int r = 0; r < n; ++r) {
      const double g = topo.nodes[static_cast<std::size_t>(node[static_cast<std::size_t>(r)])].reduceGBps;
      if (g > 0) minRate = minRate == 0 ? g : std::min(minRate, g);
    }
    summary.gammaGBps = minRate;
    for (int c = 0; c < kLinkClasses; ++c) {
      for (int r = 1; r < n && !summary.cls[c].present; ++r) {
        const bool same = host[0] == host[static_cast<std::size_t>(r)];
        if (same != (c == static_cast<int>(LinkClassKind::Intra))) continue;
        const auto& hops = router->route(0, r);
        LinkClassCost lc;
        lc.present = true;
        double cap = std::numeric_limits<double>::infinity();
        for (const Hop& h : hops) {
          lc.alphaUs += topo.links[static_cast<std::size_t>(h.link)].latencyUs;
          cap = std::min(cap, capBytesPerUs[static_cast<std::size_t>(h.link)]);
        }
        lc.betaGBps = hops.empty() ? 0 : cap / kBytesPerUsPerGBps;
        summary.cls[c] = lc;
      }
    }
  }

  int classOf(int a, int b) const {
    return host[static_cast<std::size_t>(a)] == host[static_cast<std::size_t>(b)]
               ? static_cast<int>(LinkClassKind::Intra)
               : static_cast<int>(LinkClassKind::Inter);
  }

  CostTerms gammaCost(double bytes, int rank) const {
    CostTerms t;
    // gammaBytes is counted even when reductions are free (g == 0): it says what the time depends on, so a fit
    // that passes through gamma = 0 can still move away from it.
    if (bytes > 0) {
      t.us = bytes * gammaUsPerByte[static_cast<std::size_t>(rank)];
      t.gammaBytes = bytes;
    }
    return t;
  }

  /// Reduction of `bytes` at the slowest reducer among `ranks` (symmetric phases: every rank reduces as much).
  CostTerms gammaMax(double bytes) const {
    int slowest = 0;
    for (int r = 1; r < n; ++r) {
      if (gammaUsPerByte[static_cast<std::size_t>(r)] > gammaUsPerByte[static_cast<std::size_t>(slowest)]) slowest = r;
    }
    return gammaCost(bytes, slowest);
  }

  /// Costs of concurrent flows: each flow's route latency plus its bytes at the rate of its most loaded link
  /// (capacity / concurrent flows). Zero-byte flows cost their latency only when `keepEmpty` (barrier messages);
  /// otherwise the generators elide them and they cost nothing.
  std::vector<CostTerms> phase(const std::vector<Flow>& flows, bool keepEmpty = false) const {
    for (const Flow& f : flows) {
      if (f.bytes <= 0 && !keepEmpty) continue;
      for (const Hop& h : router->route(f.src, f.dst)) {
        const int k = h.link * 2 + (h.forward ? 0 : 1);
        if (load[static_cast<std::size_t>(k)] == 0) touched.push_back(k);
        load[static_cast<std::size_t>(k)] += f.mult;
      }
    }
    std::vector<CostTerms> out(flows.size());
    for (std::size_t i = 0; i < flows.size(); ++i) {
      const Flow& f = flows[i];
      if (f.bytes <= 0 && !keepEmpty) continue;
      const auto& hops = router->route(f.src, f.dst);
      CostTerms& t = out[i];
      if (hops.empty()) {  // same node: a memory copy at the node's rate
        t = gammaCost(f.bytes, f.dst);
        continue;
      }
      double lat = 0, rate = std::numeric_limits<double>::infinity(), alone = rate;
      for (const Hop& h : hops) {
        const auto li = static_cast<std::size_t>(h.link);
        lat += topo.links[li].latencyUs;
        const double cap = capBytesPerUs[li];
        rate = std::min(rate, cap / load[li * 2 + (h.forward ? 0 : 1)]);
        alone = std::min(alone, cap);
      }
      const int c = classOf(f.src, f.dst);
      t.us = lat + f.bytes / rate;
      t.alphaCount[c] = 1;
      t.betaBytes[c] = f.bytes * alone / rate;
    }
    for (int k : touched) load[static_cast<std::size_t>(k)] = 0;
    touched.clear();
    return out;
  }

  CostTerms phaseMax(const std::vector<Flow>& flows, bool keepEmpty = false) const {
    CostTerms worst;
    for (const CostTerms& t : phase(flows, keepEmpty)) worst = CostTerms::max(worst, t);
    return worst;
  }

  // ---- Rings ----

  /// A ring phase over `ring` (ranks in ring order, transfer i -> i+1) of `steps` steps per round, the first
  /// `reduceSteps` of which are received with a reduction (RecvReduce) before the data moves on, `rounds` rounds
  /// that share the connections (ring.cc: every round is a complete ring on the same channel, so round k+1 starts
  /// on a connection when round k's last transfer there ends). d[i]: transfer i -> i+1; g[i]: reduction at i.
  /// Recurrence: t(i, s) = max(t(i-1, s-1) + g_i [if s-1 reduced], t(i, s-1), t(i+1, s-1) [if recvWaitsSend]) + d_i.
  /// recvWaitsSend: a rank posts the receive of step s only once its own send of step s-1 is done (reduce-scatter's
  /// scratch slot written at s was read by the send of s-1); it binds where the ring's links differ (several hosts).
  CostTerms ringRecurrence(const std::vector<CostTerms>& d, const std::vector<CostTerms>& g, int steps, int reduceSteps,
                           std::size_t rounds, bool recvWaitsSend = false) const {
    const std::size_t m = d.size();
    if (m < 2 || steps == 0 || rounds == 0) return {};
    auto finalTime = [&](const std::vector<CostTerms>& cur, int lastStep) {
      CostTerms end;
      for (std::size_t i = 0; i < m; ++i) {
        CostTerms t = cur[i];
        if (lastStep < reduceSteps) t += g[(i + 1) % m];  // the last receive is folded in at i+1
        end = CostTerms::max(end, t);
      }
      return end;
    };
    if (static_cast<int>(m) > kRingRecurrenceMaxRanks) {
      // Closed form of the recurrence for a uniform ring at the slowest link and reducer: exact when uniform, an
      // upper bound (by the reduction time hidden behind a slow link) otherwise.
      CostTerms dm, gm;
      for (const auto& x : d) dm = CostTerms::max(dm, x);
      for (const auto& x : g) gm = CostTerms::max(gm, x);
      const CostTerms round = (dm + gm) * reduceSteps + dm * (steps - reduceSteps);
      return round * static_cast<double>(rounds);
    }
    std::vector<CostTerms> cur(m), prev(m);
    CostTerms endOf[3];
    const std::size_t simulated = std::min<std::size_t>(rounds, 3);
    for (std::size_t k = 0; k < simulated; ++k) {
      for (int s = 0; s < steps; ++s) {
        for (std::size_t i = 0; i < m; ++i) {
          CostTerms ready;  // data: the block received at step s-1 (from i-1), folded if it was a reduce step
          if (s > 0) {
            ready = prev[(i + m - 1) % m];
            if (s - 1 < reduceSteps) ready += g[i];
          }
          cur[i] = CostTerms::max(ready, prev[i]);  // prev[i]: this connection's previous transfer
          if (recvWaitsSend && s > 0) cur[i] = CostTerms::max(cur[i], prev[(i + 1) % m]);
          cur[i] += d[i];
        }
        std::swap(cur, prev);
      }
      endOf[k] = finalTime(prev, steps - 1);
    }
    if (rounds <= simulated) return endOf[rounds - 1];
    // Steady state: every further round adds what the third added (the rounds are identical).
    const CostTerms perRound = endOf[2] + endOf[1] * -1.0;
    return endOf[2] + perRound * static_cast<double>(rounds - 3);
  }

  /// Delays of one ring step: transfer ring[i] -> ring[i+1] of `bytes` on `mult[r]` identical channels of ring r
  /// (flows of every ring share the links), and the receiver's reduction of `reduceShare` x `bytes` (every channel's
  /// ring passes through every rank and their reductions run at once, sharing the node's rate).
  void ringDelays(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult, double bytes,
                  int reduceShare, std::vector<std::vector<CostTerms>>& d,
                  std::vector<std::vector<CostTerms>>& g) const {
    std::vector<Flow> flows;
    for (std::size_t r = 0; r < rings.size(); ++r) {
      const auto& ring = rings[r];
      for (std::size_t i = 0; i < ring.size(); ++i)
        flows.push_back({ring[i], ring[(i + 1) % ring.size()], bytes, mult[r]});
    }
    const std::vector<CostTerms> cost = phase(flows);
    d.assign(rings.size(), {});
    g.assign(rings.size(), {});
    std::size_t f = 0;
    for (std::size_t r = 0; r < rings.size(); ++r) {
      for (std::size_t i = 0; i < rings[r].size(); ++i) {
        d[r].push_back(cost[f++]);
        g[r].push_back(gammaCost(bytes * reduceShare, rings[r][i]));
      }
    }
  }

  /// Rings run concurrently (their flows share links); the phase ends with the slowest.
  CostTerms ringsPhase(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult, double bytes,
                       int reduceShare, int steps, int reduceSteps, std::size_t rounds,
                       bool recvWaitsSend = false) const {
    if (bytes <= 0) return {};
    std::vector<std::vector<CostTerms>> d, g;
    ringDelays(rings, mult, bytes, reduceShare, d, g);
    CostTerms worst;
    for (std::size_t r = 0; r < rings.size(); ++r) {
      worst = CostTerms::max(worst, ringRecurrence(d[r], g[r], steps, reduceSteps, rounds, recvWaitsSend));
    }
    return worst;
  }

  /// Disjoint rings of one flow each (hierarchical's per-host and per-local-index rings).
  CostTerms ringsPhase(const std::vector<std::vector<int>>& rings, double bytes, int steps, int reduceSteps) const {
    return ringsPhase(rings, std::vector<int>(rings.size(), 1), bytes, 1, steps, reduceSteps, 1);
  }

  /// The rings ring.cc builds: channel c runs on ringOrder(n, p, c) (with several hosts in p.rankHost consecutive
  /// channels enter and leave hosts through different GPUs and NICs), and channels whose slice is empty are elided.
  /// Channels on the same ring are one ring of `mult` parallel flows (one host: every channel is 0..n-1).
  struct ChannelRings {
    std::vector<std::vector<int>> rings;
    std::vector<int> mult;
    int channels = 1;  ///< channels that carry data: every rank reduces that many pieces at once
  };
  ChannelRings channelRings(const AlgoParams& p, std::size_t count) const {
    ChannelRings cr;
    cr.channels =
        static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(p.channels), count)));
    for (int c = 0; c < cr.channels; ++c) {
      std::vector<int> ring = ringOrder(n, p, c);
      const auto it = std::find(cr.rings.begin(), cr.rings.end(), ring);
      if (it == cr.rings.end()) {
        cr.rings.push_back(std::move(ring));
        cr.mult.push_back(1);
      } else {
        ++cr.mult[static_cast<std::size_t>(it - cr.rings.begin())];
      }
    }
    return cr;
  }

  /// ring.cc's pieces: the largest channel slice, its round count and the largest piece (elements).
  struct RingPieces {
    std::size_t rounds, pieceElems;
  };
  static RingPieces ringPieces(std::size_t count, std::size_t es, const AlgoParams& p, std::size_t blocksPerRound) {
    const std::size_t slice = ceilDiv(count, static_cast<std::size_t>(p.channels));
    std::size_t rounds = 1;
    if (p.chunkBytes != 0 && slice != 0) {
      const std::size_t perRound = std::max<std::size_t>(1, p.chunkBytes / es) * blocksPerRound;
      rounds = ceilDiv(slice, perRound);
    }
    return {rounds, ceilDiv(slice, rounds)};
  }

  CostTerms ringAllReduce(const CollectiveSpec& s, const AlgoParams& p) const {
    const std::size_t es = s.elementSize();
    if (n == 1) return gammaCost(static_cast<double>(s.count * es), 0);
    const RingPieces pc = ringPieces(s.count, es, p, static_cast<std::size_t>(n));
    const double block = static_cast<double>(ceilDiv(pc.pieceElems, static_cast<std::size_t>(n)) * es);
    const ChannelRings cr = channelRings(p, s.count);
    return ringsPhase(cr.rings, cr.mult, block, cr.channels, 2 * (n - 1), n - 1, pc.rounds);
  }

  CostTerms ringReduceScatter(const CollectiveSpec& s, const AlgoParams& p) const {
    const std::size_t es = s.elementSize();
    if (n == 1) return gammaCost(static_cast<double>(s.count * es), 0);
    const RingPieces pc = ringPieces(s.count, es, p, 1);
    const ChannelRings cr = channelRings(p, s.count);
    return ringsPhase(cr.rings, cr.mult, static_cast<double>(pc.pieceElems * es), cr.channels, n - 1, n - 1, pc.rounds,
                      /*recvWaitsSend=*/true);
  }

  CostTerms ringAllGather(const CollectiveSpec& s, const AlgoParams& p) const {
    const std::size_t es = s.elementSize();
    const CostTerms copy = gammaMax(static_cast<double>(s.count * es));  // own block in -> out, beside the ring
    if (n == 1) return copy;
    const RingPieces pc = ringPieces(s.count, es, p, 1);
    const ChannelRings cr = channelRings(p, s.count);
    return CostTerms::max(
        ringsPhase(cr.rings, cr.mult, static_cast<double>(pc.pieceElems * es), cr.channels, n - 1, 0, pc.rounds), copy);
  }

  // ---- Recursive doubling and Rabenseifner (recursive.cc's Fold) ----

  struct Fold {
    int p, rem, steps;
    explicit Fold(int nranks)
        : p(static_cast<int>(std::bit_floor(static_cast<unsigned>(nranks)))),
          rem(nranks - p),
          steps(std::countr_zero(static_cast<unsigned>(p))) {}
    bool sitsOut(int r) const { return r < 2 * rem && r % 2 == 0; }
    int newRank(int r) const { return r < 2 * rem ? r / 2 : r - rem; }
    int oldRank(int nr) const { return nr < rem ? 2 * nr + 1 : nr + rem; }
  };

  /// Even ranks below 2 rem hand their whole buffer to r+1 (and get the result back at the end).
  std::vector<Flow> foldFlows(const Fold& f, double bytes, bool back) const {
    std::vector<Flow> flows;
    for (int r = 0; r < 2 * f.rem; r += 2) flows.push_back(back ? Flow{r + 1, r, bytes} : Flow{r, r + 1, bytes});
    return flows;
  }

  /// Every active rank sends `bytes` to its partner at distance `mask` in the folded numbering.
  std::vector<Flow> butterfly(const Fold& f, int mask, double bytes) const {
    std::vector<Flow> flows;
    for (int r = 0; r < n; ++r) {
      if (f.sitsOut(r)) continue;
      flows.push_back({r, f.oldRank(f.newRank(r) ^ mask), bytes});
    }
    return flows;
  }

  CostTerms recursiveDoubling(const CollectiveSpec& s) const {
    const double S = static_cast<double>(s.count * s.elementSize());
    const Fold f(n);
    // Every staying rank copies in -> out first; absorbing ranks meanwhile receive their partner's buffer, then fold.
    CostTerms t = gammaMax(S);
    if (f.rem > 0) t = CostTerms::max(phaseMax(foldFlows(f, S, false)), gammaMax(S)) + gammaMax(S);
    for (int k = 0; k < f.steps; ++k) t += phaseMax(butterfly(f, 1 << k, S)) + gammaMax(S);  // exchange, fold
    if (f.rem > 0) t += phaseMax(foldFlows(f, S, true));
    return t;
  }

  CostTerms rabenseifner(const CollectiveSpec& s) const {
    const std::size_t es = s.elementSize();
    const double S = static_cast<double>(s.count * es);
    if (n == 1) return gammaCost(S, 0);
    const Fold f(n);
    const algo::Partition blocks{s.count, static_cast<std::size_t>(f.p)};
    CostTerms t;
    if (f.rem > 0) t = phaseMax(foldFlows(f, S, false)) + gammaMax(S);  // absorbing ranks receive-and-reduce
    for (int k = 0; k < f.steps; ++k) {
      // New rank 0 keeps blocks [0, p >> (k+1)) at step k, the largest of the even partition: the longest chain.
      const int mask = f.p >> (k + 1);
      const double keep = static_cast<double>(blocks.offset(static_cast<std::size_t>(mask)) * es);
      const CostTerms x = phaseMax(butterfly(f, mask, keep));
      t += x + gammaMax(keep);  // reduce-scatter step: receive-and-reduce the kept half
      t += x;                   // the all-gather step that retraces it
    }
    if (f.rem > 0) t += phaseMax(foldFlows(f, S, true));
    return t;
  }

  // ---- Direct (direct.cc) ----

  CostTerms directPhase(double block) const {
    if (n <= kDirectExactMaxRanks) {
      std::vector<Flow> flows;
      flows.reserve(static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1));
      for (int r = 0; r < n; ++r) {
        for (int d = 1; d < n; ++d) flows.push_back({r, (r + d) % n, block});
      }
      return phaseMax(flows);
    }
    // Per-rank-link bound: rank 0's n-1 flows share its first link and each destination's last link with n-1
    // others; interior links are assumed not to be the bottleneck.
    CostTerms worst;
    for (int d = 1; d < n; ++d) {
      const auto& hops = router->route(0, d);
      if (hops.empty()) {
        worst = CostTerms::max(worst, gammaCost(block, d));
        continue;
      }
      double lat = 0, alone = std::numeric_limits<double>::infinity();
      for (const Hop& h : hops) {
        lat += topo.links[static_cast<std::size_t>(h.link)].latencyUs;
        alone = std::min(alone, capBytesPerUs[static_cast<std::size_t>(h.link)]);
      }
      const double ends = std::min(capBytesPerUs[static_cast<std::size_t>(hops.front().link)],
                                   capBytesPerUs[static_cast<std::size_t>(hops.back().link)]);
      const double rate = std::min(alone, ends / (n - 1));
      CostTerms t;
      const int c = classOf(0, d);
      t.us = lat + block / rate;
      t.alphaCount[c] = 1;
      t.betaBytes[c] = block * alone / rate;
      worst = CostTerms::max(worst, t);
    }
    return worst;
  }

  CostTerms direct(const CollectiveSpec& s) const {
    const std::size_t es = s.elementSize();
    const double block = static_cast<double>(ceilDiv(s.count, static_cast<std::size_t>(n)) * es);
    if (n == 1) return gammaCost(block, 0);
    // All n-1 blocks leave at once (reduce-scatter), the arrivals are folded one after the other, then all-gather.
    const CostTerms rs = CostTerms::max(directPhase(block), gammaMax(block));
    return rs + gammaMax(block * (n - 1)) + directPhase(block);
  }

  // ---- Pipelined double binary tree (tree.cc) ----

  CostTerms tree(const CollectiveSpec& s, const AlgoParams& p) const {
    const std::size_t es = s.elementSize();
    if (n == 1) return gammaCost(static_cast<double>(s.count * es), 0);
    const algo::Partition byTree{s.count, 2};
    const int c = p.channels;
    std::vector<std::vector<int>> parent(2), children[2];
    double chunkBytes[2] = {0, 0};
    std::size_t chunks = 0;
    CostTerms fill;
    std::vector<Flow> steady;
    for (int t = 0; t < 2; ++t) {
      children[t].assign(static_cast<std::size_t>(n), {});
      parent[static_cast<std::size_t>(t)].resize(static_cast<std::size_t>(n));
      int root = 0;
      for (int r = 0; r < n; ++r) {
        const int up = algo::dtreeParent(n, r, t);
        parent[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)] = up;
        if (up < 0)
          root = r;
        else
          children[t][static_cast<std::size_t>(up)].push_back(r);
      }
      const std::size_t slice = ceilDiv(byTree.size(static_cast<std::size_t>(t)), static_cast<std::size_t>(c));
      if (slice == 0) continue;
      const std::size_t k = algo::pipelineChunks(slice, es, p.chunkBytes, kDefaultPipelineChunkBytes);
      chunks = std::max(chunks, k);
      const double C = static_cast<double>(ceilDiv(slice, k) * es);
      chunkBytes[t] = C;
      const int mult = static_cast<int>(
          std::min<std::size_t>(static_cast<std::size_t>(c), byTree.size(static_cast<std::size_t>(t))));
      // Fill: one chunk up (a node folds its children one after the other, then sends up) and down (a node sends
      // to all its children at once, sharing its links).
      const auto& kids = children[t];
      std::function<CostTerms(int)> up = [&](int r) {
        CostTerms acc;
        bool first = true;
        for (int ch : kids[static_cast<std::size_t>(r)]) {
          const CostTerms ready = up(ch);
          const CostTerms start = first ? ready : CostTerms::max(ready, acc);
          acc = start + phaseMax({{ch, r, C, mult}}) + gammaCost(C * mult, r);
          first = false;
        }
        return acc;
      };
      CostTerms last;
      std::function<void(int, const CostTerms&)> down = [&](int r, const CostTerms& at) {
        last = CostTerms::max(last, at);
        const auto& ch = kids[static_cast<std::size_t>(r)];
        if (ch.empty()) return;
        std::vector<Flow> flows;
        for (int x : ch) flows.push_back({r, x, C, mult});
        const std::vector<CostTerms> cost = phase(flows);
        for (std::size_t i = 0; i < ch.size(); ++i) down(ch[i], at + cost[i]);
      };
      down(root, up(root));
      fill = CostTerms::max(fill, last);
      for (int r = 0; r < n; ++r) {
        const int up2 = parent[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
        if (up2 < 0) continue;
        steady.push_back({r, up2, C, mult});
        steady.push_back({up2, r, C, mult});
      }
    }
    if (chunks <= 1) return fill;
    // Steady state: every connection carries one chunk per period while all of them share the links; each node
    // folds its children's chunks of both trees and all channels at its rate.
    // Steady state: every connection carries one chunk per period while all of them share the links (each flow
    // at its most loaded link's share, latency included: a connection's next transfer starts when the last ended);
    // each node folds its children's chunks of both trees and all channels at its rate. Measured against the
    // simulator this is within 5% on flat and NVSwitch topologies and 15% pessimistic for 64 KiB chunks over NICs.
    CostTerms period;
    for (const CostTerms& x : phase(steady)) period = CostTerms::max(period, x);
    for (int r = 0; r < n; ++r) {
      double bytes = 0;
      for (int t = 0; t < 2; ++t)
        bytes += static_cast<double>(children[t][static_cast<std::size_t>(r)].size()) * chunkBytes[t] * c;
      period = CostTerms::max(period, gammaCost(bytes, r));
    }
    return fill + period * static_cast<double>(chunks - 1);
  }

  // ---- Chains for broadcast and reduce (chain.cc) ----

  CostTerms chain(const CollectiveSpec& s, const AlgoParams& p, bool reduce) const {
    const std::size_t es = s.elementSize();
    const double S = static_cast<double>(s.count * es);
    if (n == 1) return gammaCost(S, 0);
    const std::size_t slice = ceilDiv(s.count, static_cast<std::size_t>(p.channels));
    const std::size_t k = algo::pipelineChunks(slice, es, p.chunkBytes, kDefaultPipelineChunkBytes);
    const double C = static_cast<double>(ceilDiv(slice, k) * es);
    const int mult = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(p.channels), s.count));
    // Broadcast: root -> root+1 -> ... -> root-1. Reduce: root+1 -> ... -> root, each receiver folding.
    std::vector<Flow> hops;
    std::vector<int> receivers;
    for (int h = 0; h < n - 1; ++h) {
      const int from = reduce ? (s.root + 1 + h) % n : (s.root + h) % n;
      hops.push_back({from, (from + 1) % n, C, mult});
      receivers.push_back((from + 1) % n);
    }
    const std::vector<CostTerms> x = phase(hops);
    CostTerms fillT, period;
    for (std::size_t h = 0; h < x.size(); ++h) {
      const CostTerms g = reduce ? gammaCost(C * mult, receivers[h]) : CostTerms{};
      fillT += x[h] + g;
      period = CostTerms::max(period, CostTerms::max(x[h], g));
    }
    CostTerms t = fillT + period * static_cast<double>(k - 1);
    if (!reduce) t = CostTerms::max(t, gammaCost(S, s.root));  // the root's own copy runs beside the chain
    return t;
  }

  CostTerms barrier() const {
    CostTerms t;
    for (int d = 1; d < n; d *= 2) {
      std::vector<Flow> flows;
      for (int r = 0; r < n; ++r) flows.push_back({r, (r + d) % n, 0});
      t += phaseMax(flows, /*keepEmpty=*/true);
    }
    return t;
  }

  // ---- Hierarchical (hierarchical.cc) ----

  Estimate hierarchical(const CollectiveSpec& s) const {
    Estimate e;
    std::map<int, std::vector<int>> byHost;
    for (int r = 0; r < n; ++r) byHost[host[static_cast<std::size_t>(r)]].push_back(r);
    std::vector<std::vector<int>> hosts;
    for (auto& [h, ranks] : byHost) hosts.push_back(ranks);
    const std::size_t L = hosts.front().size();
    for (const auto& h : hosts) {
      if (h.size() != L) {
        e.supported = false;
        e.note = fmt::format("hierarchical needs the same number of ranks on every host ({} and {} here)", L, h.size());
        return e;
      }
    }
    const std::size_t es = s.elementSize();
    const std::size_t H = hosts.size();
    const double S = static_cast<double>(s.count * es);
    const std::size_t localElems = ceilDiv(s.count, L);
    CostTerms t;
    if (L == 1) {
      t = gammaMax(S);
    } else {  // ring reduce-scatter inside every host at once
      t = ringsPhase(hosts, static_cast<double>(localElems * es), static_cast<int>(L) - 1, static_cast<int>(L) - 1);
    }
    if (H > 1) {  // one ring all-reduce across hosts per local index, all at once
      std::vector<std::vector<int>> rings(L);
      for (std::size_t i = 0; i < L; ++i) {
        for (const auto& h : hosts) rings[i].push_back(h[i]);
      }
      const double block = static_cast<double>(ceilDiv(localElems, H) * es);
      t += ringsPhase(rings, block, 2 * static_cast<int>(H - 1), static_cast<int>(H) - 1);
    }
    if (L > 1) t += ringsPhase(hosts, static_cast<double>(localElems * es), static_cast<int>(L) - 1, 0);
    e.terms = t;
    return e;
  }

  Estimate estimate(const CollectiveSpec& s, std::string_view algorithm, const AlgoParams& p) const {
    if (!tiers.empty() && s.nranks == n) {
      return tiers[memoryTierIndex(topo, hostWorkingSetBytes(topo, s))]->estimate(s, algorithm, p);
    }
    Estimate e = estimateNetwork(s, algorithm, p);
    if (e.supported && (s.count > 0 || s.kind == Collective::Barrier)) {
      e.terms.calls += 1;
      e.terms.us += callOverheadUs;
    }
    return e;
  }

  /// The estimate without the per-call overhead.
  Estimate estimateNetwork(const CollectiveSpec& s, std::string_view algorithm, const AlgoParams& p) const {
    Estimate e;
    if (s.nranks != n) {
      throw Error(Errc::InvalidArgument, fmt::format("cost model of {} ranks asked about {}", n, describe(s)));
    }
    if (p.channels < 1) {
      throw Error(Errc::InvalidArgument, fmt::format("channels must be at least 1, got {}", p.channels));
    }
    if (isNative(algorithm)) {
      e.supported = false;
      e.note = fmt::format("'{}' is a peer library's own implementation; the model has no closed form for it",
                           printable(algorithm));
      return e;
    }
    bool known = false;
    for (const auto& a : algorithms()) known = known || (a.collective == s.kind && a.name == algorithm);
    if (!known) {
      e.supported = false;
      e.note = fmt::format("no algorithm '{}' for {}", printable(algorithm), toString(s.kind));
      return e;
    }
    if (s.count == 0 && s.kind != Collective::Barrier) return e;
    switch (s.kind) {
      case Collective::AllReduce:
        if (algorithm == "ring")
          e.terms = ringAllReduce(s, p);
        else if (algorithm == "tree")
          e.terms = tree(s, p);
        else if (algorithm == "recursive_doubling")
          e.terms = recursiveDoubling(s);
        else if (algorithm == "rabenseifner")
          e.terms = rabenseifner(s);
        else if (algorithm == "direct")
          e.terms = direct(s);
        else if (algorithm == "hierarchical")
          return hierarchical(s);
        break;
      case Collective::ReduceScatter:
        e.terms = ringReduceScatter(s, p);
        break;
      case Collective::AllGather:
        e.terms = ringAllGather(s, p);
        break;
      case Collective::Broadcast:
        e.terms = chain(s, p, false);
        break;
      case Collective::Reduce:
        e.terms = chain(s, p, true);
        break;
      case Collective::Barrier:
        e.terms = barrier();
        break;
    }
    return e;
  }
};

CostModel::CostModel(Topology topology, int nranks, double callOverheadUs)
    : impl_(std::make_unique<Impl>(std::move(topology), nranks, callOverheadUs)) {}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

CostModel CostModel::defaultFlat(int nranks) {
  return CostModel(flatTopology(std::max(nranks, 1), kDefaultFlatGBps, kDefaultFlatLatencyUs), std::max(nranks, 1));
}

int CostModel::nranks() const { return impl_->n; }
double CostModel::callOverheadUs() const { return impl_->callOverheadUs; }
const Topology& CostModel::topology() const { return impl_->topo; }
const CostSummary& CostModel::summary() const { return impl_->summary; }
const std::vector<int>& CostModel::rankHost() const { return impl_->host; }

Estimate CostModel::estimate(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params) const {
  return impl_->estimate(spec, algorithm, params);
}

// ---------------------------------------------------------------------------------------------------------------

Topology classTopology(const std::string& name, int hosts, int ranksPerHost, const LinkClassCost& intra,
                       const LinkClassCost& inter, double gammaGBps, NodeKind kind) {
  if (hosts < 1 || ranksPerHost < 1) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("class topology needs at least one host and one rank per host, got {} x {}", hosts, ranksPerHost));
  }
  const bool needIntra = ranksPerHost > 1, needInter = hosts > 1;
  if (needIntra && !(intra.betaGBps > 0 && std::isfinite(intra.betaGBps) && intra.alphaUs >= 0)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("intra class needs bandwidth > 0 and latency >= 0 (got {} GB/s, {} us)", intra.betaGBps,
                            intra.alphaUs));
  }
  if (needInter && !(inter.betaGBps > 0 && std::isfinite(inter.betaGBps) && inter.alphaUs >= 0)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("inter class needs bandwidth > 0 and latency >= 0 (got {} GB/s, {} us)", inter.betaGBps,
                            inter.alphaUs));
  }
  if (needIntra && needInter && !(inter.alphaUs > intra.alphaUs)) {
    // Routes tie on hop count (two links either way); the lower latency must be the host's own switch.
    throw Error(
        Errc::InvalidArgument,
        fmt::format("inter latency {} us must exceed intra latency {} us so that routes inside a host stay there",
                    inter.alphaUs, intra.alphaUs));
  }
  Topology t;
  t.name = name;
  t.description =
      fmt::format("{} host(s) x {} rank(s): intra {} us / {} GB/s, inter {} us / {} GB/s, reduce {} GB/s", hosts,
                  ranksPerHost, intra.alphaUs, intra.betaGBps, inter.alphaUs, inter.betaGBps, gammaGBps);
  if (needInter) t.nodes.push_back({"fabric", NodeKind::Switch, "", 0, 0});
  for (int h = 0; h < hosts; ++h) {
    const std::string hostId = fmt::format("h{}", h);
    const std::string sw = hostId + ".sw";
    if (needIntra) t.nodes.push_back({sw, NodeKind::Switch, hostId, 0, 0});
    for (int i = 0; i < ranksPerHost; ++i) {
      const std::string id = fmt::format("{}.r{}", hostId, i);
      t.nodes.push_back({id, kind, hostId, gammaGBps, 0});
      t.ranks.push_back(id);
      if (needIntra) t.links.push_back({id, sw, intra.betaGBps, intra.alphaUs / 2, "intra"});
      if (needInter) t.links.push_back({id, "fabric", inter.betaGBps, inter.alphaUs / 2, "inter"});
    }
  }
  if (!needIntra && !needInter) {  // one rank: a lone node is still a valid topology
    t.nodes.push_back({"sw0", NodeKind::Switch, "", 0, 0});
    t.links.push_back(
        {t.ranks.front(), "sw0", intra.betaGBps > 0 ? intra.betaGBps : kDefaultFlatGBps, intra.alphaUs / 2, "intra"});
  }
  validateTopology(t, name);
  return t;
}

// ---- NCCL's tuning model ---------------------------------------------------------------------------------------
// Constants from NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel,
// ncclTopoGetAlgoTime), src/graph/search.cc (sm90 speed arrays) and src/init.cc (buffer sizes), Hopper (sm90) row;
// indices [algo: tree, ring][proto: LL, LL128, Simple].
namespace {

constexpr int kNcclTree = 0, kNcclRing = 1;
/// baseLatencies: fixed cost of a call (us).
constexpr double kNcclBaseLatUs[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
/// hwLatencies per step (us): NVLINK, PCI, NET.
constexpr double kNcclHwLatNvlinkUs[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kNcclHwLatPciUs[2][3] = {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}};
constexpr double kNcclHwLatNetUs[2][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
/// llMaxBws (GB/s): one node uses the GPU row (Hopper 141.0); more nodes the CPU row, and we assume Intel x86 hosts
/// (DGX H100: Xeon Platinum 8480C): 39.0 for 2 nodes, 20.4 for more.
constexpr double kNcclLlMaxBwHopperN1 = 141.0;
constexpr double kNcclLlMaxBwIntelN2 = 39.0;
constexpr double kNcclLlMaxBwIntelN4 = 20.4;
/// perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws (GB/s per channel), Hopper, [N1, N2, N4].
constexpr double kNcclPerChRingLL128GBps[3] = {36.7, 36.7, 36.7};
constexpr double kNcclPerChTreeLL128GBps[3] = {36.7, 36.7, 29.0};
constexpr double kNcclPerChTreeGBps[3] = {38.7, 41.4, 36.0};
/// Highest per-channel graph bandwidth the topology search tries on sm90 (sm90SpeedArrayIntra[0] /
/// sm90SpeedArrayInter[0] in search.cc): the per-channel limit of Simple rings.
constexpr double kNcclSm90MaxChannelIntraGBps = 60.0;
constexpr double kNcclSm90MaxChannelInterGBps = 48.0;
/// Protocol efficiencies of the model: ring LL moves 8 data bytes per 16-byte line (x0.5), ring LL128 120 of 128
/// (x0.92 in tuning.cc); tree all-reduce x0.92, tree LL x1/3.8, tree LL128 x7/9 on one node, x120/128 on more.
constexpr double kNcclRingLLFactor = 0.5;
constexpr double kNcclRingLL128Factor = 0.92;
constexpr double kNcclTreeFactor = 0.92;
constexpr double kNcclTreeLLFactor = 1.0 / 3.8;
constexpr double kNcclTreeLL128FactorN1 = 7.0 / 9.0;
constexpr double kNcclTreeLL128FactorNet = 120.0 / 128.0;
/// ncclTopoGetAlgoTime: tree all-reduce bandwidth correction per protocol, index log2(bytes >> 6) in [0, 23).
constexpr double kNcclTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
/// Multi-node Simple ring all-reduce latency plateau factor (sm >= 80) and the bytes per channel-rank above which
/// it applies.
constexpr double kNcclRingPlateauFactor = 1.4;
constexpr std::size_t kNcclRingPlateauBytes = 64;
/// getNetOverhead: 1 us per network step on Intel x86, x3 for Simple.
constexpr double kNcclNetOverheadUs = 1.0;
constexpr double kNcclNetOverheadSimpleFactor = 3.0;
/// Buffers (src/init.cc, src/include/device.h): LL 8 lines/thread x 512 threads x NCCL_STEPS 8 x 16 B lines, half of
/// each line data; LL128 120 elements/thread x 640 threads x 8 steps x 8 B, 120 of 128 bytes data; Simple 4 MiB.
constexpr int kNcclSteps = 8;
constexpr std::size_t kNcclLlBuffBytes = 8 * 512 * kNcclSteps * 16;
constexpr std::size_t kNcclLl128BuffBytes = 120 * 640 * kNcclSteps * 8;
constexpr std::size_t kNcclSimpleBuffBytes = std::size_t{1} << 22;

int log2i(std::size_t v) { return v == 0 ? -1 : static_cast<int>(std::bit_width(v)) - 1; }

int scaleIndex(int nnodes) { return nnodes <= 2 ? nnodes - 1 : 2; }

double llMaxBw(int nnodes) {
  return nnodes == 1 ? kNcclLlMaxBwHopperN1 : nnodes == 2 ? kNcclLlMaxBwIntelN2 : kNcclLlMaxBwIntelN4;
}

int ai(NcclAlgo a) { return a == NcclAlgo::Tree ? kNcclTree : kNcclRing; }
int pi(NcclProto p) { return static_cast<int>(p); }

}  // namespace

std::string_view toString(NcclAlgo a) { return a == NcclAlgo::Tree ? "tree" : "ring"; }

std::string_view toString(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return "ll";
    case NcclProto::LL128:
      return "ll128";
    case NcclProto::Simple:
      return "simple";
  }
  return "?";
}

NcclAlgo parseNcclAlgo(std::string_view s) {
  const std::string l = lower(s);
  if (l == "tree") return NcclAlgo::Tree;
  if (l == "ring") return NcclAlgo::Ring;
  throw Error(Errc::InvalidArgument, fmt::format("unknown NCCL algorithm '{}' (available: tree, ring)", printable(s)));
}

NcclProto parseNcclProto(std::string_view s) {
  const std::string l = lower(s);
  if (l == "ll") return NcclProto::LL;
  if (l == "ll128") return NcclProto::LL128;
  if (l == "simple") return NcclProto::Simple;
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown NCCL protocol '{}' (available: ll, ll128, simple)", printable(s)));
}

NcclMachine ncclMachine(const Topology& t, int nranks) {
  const CostModel model(t, nranks);
  const CostSummary& s = model.summary();
  NcclMachine m;
  m.nranks = s.ranks;
  m.nnodes = s.hosts;
  const auto& intra = s.cls[static_cast<int>(LinkClassKind::Intra)];
  const auto& inter = s.cls[static_cast<int>(LinkClassKind::Inter)];
  m.intraGBps = intra.present ? intra.betaGBps : inter.betaGBps;
  m.interGBps = inter.present ? inter.betaGBps : intra.betaGBps;
  m.nvlink = false;
  if (intra.present) {
    Router r(model.topology());
    int peer = 1;
    while (peer < s.ranks && model.rankHost()[static_cast<std::size_t>(peer)] != model.rankHost()[0]) ++peer;
    if (peer < s.ranks) {
      for (const Hop& h : r.route(0, peer))
        m.nvlink = m.nvlink || t.links[static_cast<std::size_t>(h.link)].linkClass == "nvlink";
    }
  }
  return m;
}

std::optional<double> ncclModelTimeUs(Collective coll, NcclAlgo algo, NcclProto proto, int channels, std::size_t bytes,
                                      const NcclMachine& m) {
  if (coll == Collective::Barrier) return std::nullopt;
  if (algo == NcclAlgo::Tree && coll != Collective::AllReduce) return std::nullopt;  // tree is all-reduce only
  if (channels < 1 || m.nranks < 1 || m.nnodes < 1) return std::nullopt;
  const int n = m.nranks, nn = m.nnodes, a = ai(algo), p = pi(proto), idx = scaleIndex(nn);
  if (n == 1) return kNcclBaseLatUs[a][p];
  const int nsteps = coll == Collective::AllReduce                                          ? 2 * (n - 1)
                     : (coll == Collective::ReduceScatter || coll == Collective::AllGather) ? n - 1
                                                                                            : n;
  // Graph bandwidth per channel: the per-GPU link shared by the channels, at most the search's top speed.
  const double perChannel = nn == 1
                                ? std::min(kNcclSm90MaxChannelIntraGBps, m.intraGBps / channels)
                                : std::min(kNcclSm90MaxChannelInterGBps, std::min(m.intraGBps, m.interGBps) / channels);
  double busBw = channels * perChannel;
  if (algo == NcclAlgo::Ring && proto == NcclProto::LL) busBw = std::min(llMaxBw(nn), busBw * kNcclRingLLFactor);
  if (algo == NcclAlgo::Ring && proto == NcclProto::LL128) {
    busBw = std::min(busBw * kNcclRingLL128Factor, channels * kNcclPerChRingLL128GBps[idx]);
  }
  if (algo == NcclAlgo::Tree) busBw = std::min(busBw * kNcclTreeFactor, channels * kNcclPerChTreeGBps[idx]);
  if (algo == NcclAlgo::Tree && proto == NcclProto::LL) busBw = std::min(busBw * kNcclTreeLLFactor, llMaxBw(nn));
  if (algo == NcclAlgo::Tree && proto == NcclProto::LL128) {
    busBw = std::min(busBw * (nn == 1 ? kNcclTreeLL128FactorN1 : kNcclTreeLL128FactorNet),
                     channels * kNcclPerChTreeLL128GBps[idx]);
  }
  // Bus bandwidth to algorithm bandwidth.
  busBw *= algo == NcclAlgo::Ring ? static_cast<double>(n) / nsteps : 0.5;
  double lat = kNcclBaseLatUs[a][p];
  const double intraLatBase = m.nvlink ? kNcclHwLatNvlinkUs[a][p] : kNcclHwLatPciUs[a][p];
  const double ppn = static_cast<double>(n) / nn;
  const double interLat = ppn == 1 ? kNcclHwLatNetUs[kNcclTree][p] : kNcclHwLatNetUs[a][p];
  if (algo == NcclAlgo::Ring) {
    const double hwLat = nn == 1 ? intraLatBase : kNcclHwLatNetUs[a][p];
    if (coll == Collective::Broadcast || coll == Collective::Reduce) {
      // Rings of different channels (sameChannels = 0): a chunk latency per step; Simple uses the tree's.
      const double stepLat = proto == NcclProto::Simple
                                 ? (nn == 1 ? (m.nvlink ? kNcclHwLatNvlinkUs : kNcclHwLatPciUs)[kNcclTree][p]
                                            : kNcclHwLatNetUs[kNcclTree][p])
                                 : hwLat;
      lat += nsteps * stepLat;
    } else {
      double netOverhead = 0;
      if (nn > 1) netOverhead = kNcclNetOverheadUs * (proto == NcclProto::Simple ? kNcclNetOverheadSimpleFactor : 1.0);
      const double intraLat = std::max(intraLatBase, netOverhead);
      const int interSteps = nn == 1 ? 0 : coll == Collective::AllReduce ? 2 * (nn - 1) : nn - 1;
      lat += (nsteps - interSteps) * intraLat + interSteps * interLat;
    }
  } else {
    const int ranksPerNode = n / nn;  // whole ranks, as NCCL's nRanks/nNodes
    lat += 2 * ((ranksPerNode - 1) * intraLatBase + log2i(static_cast<std::size_t>(nn)) * interLat);
  }
  double bw = busBw;
  const int logSize = log2i(bytes >> 6);
  if (algo == NcclAlgo::Tree && logSize >= 0 && logSize < 23) bw *= kNcclTreeCorrection[p][logSize];
  if (algo == NcclAlgo::Ring && proto == NcclProto::Simple && nn > 1 && coll == Collective::AllReduce &&
      bytes / (static_cast<std::size_t>(channels) * static_cast<std::size_t>(n)) >= kNcclRingPlateauBytes) {
    lat *= kNcclRingPlateauFactor;
  }
  if (!(bw > 0)) return std::nullopt;
  return lat + static_cast<double>(bytes) / (kBytesPerUsPerGBps * bw);
}

std::size_t ncclChunkBytes(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return kNcclLlBuffBytes / kNcclSteps / 2;
    case NcclProto::LL128:
      return kNcclLl128BuffBytes / kNcclSteps / 128 * 120;
    case NcclProto::Simple:
      return kNcclSimpleBuffBytes / kNcclSteps;
  }
  return kNcclSimpleBuffBytes / kNcclSteps;
}

double ncclBaseLatencyUs(NcclAlgo a, NcclProto p) { return kNcclBaseLatUs[ai(a)][pi(p)]; }

Topology ncclProtocolTopology(const Topology& t, NcclAlgo algo, NcclProto proto, int channels, int nranks) {
  if (channels < 1) throw Error(Errc::InvalidArgument, fmt::format("channels must be at least 1, got {}", channels));
  if (nranks <= 0) nranks = static_cast<int>(t.ranks.size());
  const int a = ai(algo), p = pi(proto);
  // NCCL tunes by node count (ncclTopoTuneModel's index2 and llMaxBw row) and ranks per node (ppn 1 exposes the
  // tree's network latency).
  const std::vector<int> hosts = rankHosts(t, nranks);
  const int nnodes = hosts.empty() ? 1 : *std::max_element(hosts.begin(), hosts.end()) + 1;
  const int idx = scaleIndex(nnodes);
  const bool onePerNode = nnodes == nranks;
  Topology out = t;
  std::vector<bool> isRank(t.nodes.size(), false), hasNvlink(t.nodes.size(), false);
  std::map<std::string, int> index;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) index[t.nodes[i].id] = static_cast<int>(i);
  for (const std::string& r : t.ranks) isRank[static_cast<std::size_t>(index.at(r))] = true;
  for (const TopoLink& l : t.links) {
    if (l.linkClass == "nvlink")
      hasNvlink[static_cast<std::size_t>(index.at(l.a))] = hasNvlink[static_cast<std::size_t>(index.at(l.b))] = true;
  }
  // Bandwidth the protocol reaches: the model's efficiency factor on every link, and NCCL's caps (per channel for
  // Simple and LL128, in total for LL) on a rank's own links and on network links; the caps of inter-node
  // communicators (per-channel rows N2/N4, the CPU's llMaxBw, the inter-node search speed) once ranks span hosts.
  double efficiency = 1.0, perChannelCap = 0, perChannelNetCap = 0, totalCap = 0;
  if (algo == NcclAlgo::Ring) {
    if (proto == NcclProto::LL) {
      efficiency = kNcclRingLLFactor;
      totalCap = llMaxBw(nnodes);
    } else if (proto == NcclProto::LL128) {
      efficiency = kNcclRingLL128Factor;
      perChannelCap = perChannelNetCap = kNcclPerChRingLL128GBps[idx];
    } else {
      perChannelCap = kNcclSm90MaxChannelIntraGBps;
      perChannelNetCap = kNcclSm90MaxChannelInterGBps;
    }
  } else {
    efficiency = kNcclTreeFactor;
    if (proto == NcclProto::LL) {
      efficiency *= kNcclTreeLLFactor;
      totalCap = llMaxBw(nnodes);
    } else if (proto == NcclProto::LL128) {
      efficiency *= nnodes == 1 ? kNcclTreeLL128FactorN1 : kNcclTreeLL128FactorNet;
      perChannelCap = perChannelNetCap = kNcclPerChTreeLL128GBps[idx];
    } else {
      perChannelCap = perChannelNetCap = kNcclPerChTreeGBps[idx];
    }
  }
  // Per-step hardware latency, half on each end of a route: NVLink (or PCI) inside a node, at least the network
  // post overhead once the communicator spans nodes (NCCL: intraLat = max(intraLat, netOverhead)); the network
  // latency on NIC links, the tree's when every node holds one rank (ppn 1).
  const double netOverhead =
      nnodes > 1 ? kNcclNetOverheadUs * (proto == NcclProto::Simple ? kNcclNetOverheadSimpleFactor : 1.0) : 0.0;
  const double netLat = onePerNode ? kNcclHwLatNetUs[kNcclTree][p] : kNcclHwLatNetUs[a][p];
  for (TopoLink& l : out.links) {
    const auto ia = static_cast<std::size_t>(index.at(l.a)), ib = static_cast<std::size_t>(index.at(l.b));
    const bool atRank = isRank[ia] || isRank[ib];
    const bool network = l.linkClass == "nic" || (atRank && l.linkClass != "pcie" && l.linkClass != "nvlink");
    l.bandwidthGBps *= efficiency;
    // A network link carries at most every channel (an upper bound: rings spread channels over the NICs).
    const double perChannel = network ? perChannelNetCap : perChannelCap;
    if ((atRank || network) && perChannel > 0) l.bandwidthGBps = std::min(l.bandwidthGBps, channels * perChannel);
    if ((atRank || network) && totalCap > 0) l.bandwidthGBps = std::min(l.bandwidthGBps, totalCap);
    double extra = 0;
    if (network)
      extra = netLat / 2;
    else if (l.linkClass == "nvlink" && atRank)
      extra = std::max(kNcclHwLatNvlinkUs[a][p], netOverhead) / 2;
    else if (l.linkClass == "pcie" && atRank && !(hasNvlink[ia] || hasNvlink[ib]))
      extra = std::max(kNcclHwLatPciUs[a][p], netOverhead) / 2;
    l.latencyUs += extra;
  }
  out.name = fmt::format("{}+nccl-{}-{}-c{}-n{}", t.name, toString(algo), toString(proto), channels, nranks);
  return out;
}

}  // namespace collbench
