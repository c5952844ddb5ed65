// The cost model's building blocks (cost_context.h); the model itself is described in collbench/cost_model.h.
#include "cost_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "collbench/error.h"
#include "collbench/validator.h"

namespace collbench {

CostContext::CostContext(Topology t, int nranks) : topo(std::move(t)) {
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
    linkPath.push_back(wirePathOf(l.linkClass));
  }
  onGpuRanks = gpuRanks(topo, n);
  if (onGpuRanks) netLatency = networkLatency(topo, n);
  load_.assign(2 * topo.links.size(), 0.0);
  summarize();
}

void CostContext::summarize() {
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

int CostContext::classOf(int a, int b) const {
  return host[static_cast<std::size_t>(a)] == host[static_cast<std::size_t>(b)]
             ? static_cast<int>(LinkClassKind::Intra)
             : static_cast<int>(LinkClassKind::Inter);
}

CostTerms CostContext::gammaCost(double bytes, int rank) const {
  CostTerms t;
  // gammaBytes is counted even when reductions are free (g == 0): it says what the time depends on, so a fit
  // that passes through gamma = 0 can still move away from it.
  if (bytes > 0) {
    t.us = bytes * gammaUsPerByte[static_cast<std::size_t>(rank)];
    t.gammaBytes = bytes;
  }
  return t;
}

// Reduction of `bytes` at the slowest reducer among `ranks` (symmetric phases: every rank reduces as much).
CostTerms CostContext::gammaMax(double bytes) const {
  int slowest = 0;
  for (int r = 1; r < n; ++r) {
    if (gammaUsPerByte[static_cast<std::size_t>(r)] > gammaUsPerByte[static_cast<std::size_t>(slowest)]) slowest = r;
  }
  return gammaCost(bytes, slowest);
}

// Costs of concurrent flows: each flow's route latency plus its bytes at the rate of its most loaded link
// (capacity / concurrent flows). Zero-byte flows cost their latency only when `keepEmpty` (barrier messages);
// otherwise the generators elide them and they cost nothing.
std::vector<CostTerms> CostContext::phase(const std::vector<Flow>& flows, bool keepEmpty) const {
  routes_.assign(flows.size(), nullptr);
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    if (f.bytes <= 0 && !keepEmpty) continue;
    routes_[i] = &router->route(f.src, f.dst);
    for (const Hop& h : *routes_[i]) {
      const int k = h.link * 2 + (h.forward ? 0 : 1);
      if (load_[static_cast<std::size_t>(k)] == 0) touched_.push_back(k);
      load_[static_cast<std::size_t>(k)] += f.mult;
    }
  }
  std::vector<CostTerms> out(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    if (f.bytes <= 0 && !keepEmpty) continue;
    const auto& hops = *routes_[i];
    CostTerms& t = out[i];
    if (hops.empty()) {  // same node: a memory copy at the node's rate
      t = gammaCost(f.bytes, f.dst);
      continue;
    }
    double lat = 0, rate = std::numeric_limits<double>::infinity(), alone = rate;
    NcclPath path = NcclPath::Nvl;  // the worst class of the route's links (NcclPath orders best first)
    for (const Hop& h : hops) {
      const auto li = static_cast<std::size_t>(h.link);
      lat += topo.links[li].latencyUs;
      const double cap = capBytesPerUs[li];
      rate = std::min(rate, cap / load_[li * 2 + (h.forward ? 0 : 1)]);
      alone = std::min(alone, cap);
      path = std::max(path, linkPath[li]);
    }
    const double bytes = wire_.wireBytes(f.bytes);
    if (wire_.active) usedSimple_ = usedSimple_ || wire_.protocolOf(f.bytes) == Protocol::Simple;
    const int c = classOf(f.src, f.dst);
    t.us = wire_.latencyUs(f.bytes, path, lat) + bytes / rate;
    t.alphaCount[c] = 1;
    t.betaBytes[c] = bytes * alone / rate;
  }
  for (int k : touched_) load_[static_cast<std::size_t>(k)] = 0;
  touched_.clear();
  return out;
}

int CostContext::switchOf(const std::vector<int>& ranks) const {
  usedSwitch_ = true;
  const auto [it, added] = switchOf_.try_emplace(ranks, -1);
  if (added) it->second = switchOfRanks(*router, ranks);
  return it->second;
}

void CostContext::beginCall(std::optional<Protocol> protocol) const {
  wire_ = WireRule::of(onGpuRanks, protocol, netLatency);
  usedSimple_ = false;
  usedSwitch_ = false;
}

double CostContext::switchShare(int sw) const { return wire_.switchShare(topo.nodes[static_cast<std::size_t>(sw)]); }

double CostContext::launchFloorUs() const { return wire_.launchFloorUs(usedSimple_, usedSwitch_); }

CostTerms CostContext::phaseMax(const std::vector<Flow>& flows, bool keepEmpty) const {
  CostTerms worst;
  for (const CostTerms& t : phase(flows, keepEmpty)) worst = CostTerms::max(worst, t);
  return worst;
}

// ---- Rings ----

namespace {

// Memoized ring phases per model, at most this many (a key holds up to 2 x 1024 CostTerms, 115 KB: 7 MB).
constexpr std::size_t kRingMemoEntries = 64;

bool sameBits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

bool sameTerms(const CostTerms& a, const CostTerms& b) {
  bool same = sameBits(a.us, b.us) && sameBits(a.calls, b.calls) && sameBits(a.gammaBytes, b.gammaBytes);
  for (int k = 0; k < kLinkClasses; ++k) {
    same = same && sameBits(a.alphaCount[k], b.alphaCount[k]) && sameBits(a.betaBytes[k], b.betaBytes[k]);
  }
  return same;
}

}  // namespace

// The smallest p dividing d.size() with d[i] == d[i + p] and g[i] == g[i + p] bit for bit (a ring of identical hosts:
// the ranks per host, or the hosts per leaf times that; d.size() when there is none).
std::size_t CostContext::ringPeriod(const std::vector<CostTerms>& d, const std::vector<CostTerms>& g) {
  const std::size_t m = d.size();
  for (std::size_t p = 1; p < m; ++p) {
    if (m % p != 0) continue;
    bool periodic = true;
    for (std::size_t i = p; i < m && periodic; ++i) periodic = sameTerms(d[i], d[i - p]) && sameTerms(g[i], g[i - p]);
    if (periodic) return p;
  }
  return m;
}

// A ring phase over `ring` (ranks in ring order, transfer i -> i+1) of `steps` steps per round, the first
// `reduceSteps` of which are received with a reduction (RecvReduce) before the data moves on, `rounds` rounds
// that share the connections (ring.cc: every round is a complete ring on the same channel, so round k+1 starts
// on a connection when round k's last transfer there ends). d[i]: transfer i -> i+1; g[i]: reduction at i.
// Recurrence: t(i, s) = max(t(i-1, s-1) + g_i [if s-1 reduced], t(i, s-1), t(i+1, s-1) [if recvWaitsSend]) + d_i.
// recvWaitsSend: a rank posts the receive of step s only once its own send of step s-1 is done (reduce-scatter's
// scratch slot written at s was read by the send of s-1); it binds where the ring's links differ (several hosts).
CostTerms CostContext::ringRecurrence(const std::vector<CostTerms>& d, const std::vector<CostTerms>& g, int steps,
                                      int reduceSteps, std::size_t rounds, bool recvWaitsSend) const {
  const std::size_t m = d.size();
  if (m < 2 || steps == 0 || rounds == 0) return {};
  auto finalTime = [&](const std::vector<CostTerms>& cur, int lastStep) {
    CostTerms end;
    for (std::size_t i = 0; i < cur.size(); ++i) {
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
  // Symmetry: with d and g periodic in p (p divides m), every step maps a p-periodic state to a p-periodic one by
  // the same operations on the same values, so the first p entries are the whole state, bit for bit; the maxima over
  // all m entries see each value of the first period again later, and ties keep the earlier one.
  const std::size_t period = ringPeriod(d, g);
  const std::size_t simulated = std::min<std::size_t>(rounds, 3);
  // The selector asks for the same phase under several configurations (ring and ring_bidir, chunk sizes that leave
  // one round): the rounds' ends are memoized on everything they depend on.
  std::string key;
  auto keyPart = [&key](const void* data, std::size_t size) { key.append(static_cast<const char*>(data), size); };
  const char waits = recvWaitsSend ? 1 : 0;
  keyPart(&m, sizeof m);
  keyPart(&steps, sizeof steps);
  keyPart(&reduceSteps, sizeof reduceSteps);
  keyPart(&simulated, sizeof simulated);
  keyPart(&waits, sizeof waits);
  keyPart(d.data(), period * sizeof(CostTerms));
  keyPart(g.data(), period * sizeof(CostTerms));
  if (ringMemo_.size() >= kRingMemoEntries) ringMemo_.clear();
  auto [memo, fresh] = ringMemo_.try_emplace(std::move(key));
  CostTerms* endOf = memo->second.data();
  std::vector<CostTerms> cur(fresh ? period : 0), prev(fresh ? period : 0);
  for (std::size_t k = 0; fresh && k < simulated; ++k) {
    for (int s = 0; s < steps; ++s) {
      for (std::size_t i = 0; i < period; ++i) {
        CostTerms ready;  // data: the block received at step s-1 (from i-1), folded if it was a reduce step
        if (s > 0) {
          ready = prev[(i + period - 1) % period];
          if (s - 1 < reduceSteps) ready += g[i];
        }
        cur[i] = CostTerms::max(ready, prev[i]);  // prev[i]: this connection's previous transfer
        if (recvWaitsSend && s > 0) cur[i] = CostTerms::max(cur[i], prev[(i + 1) % period]);
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

// Delays of one ring step: transfer ring[i] -> ring[i+1] of `bytes` on `mult[r]` identical channels of ring r
// (flows of every ring share the links), and the receiver's reduction of `reduceShare` x `bytes` (every channel's
// ring passes through every rank and their reductions run at once, sharing the node's rate).
void CostContext::ringDelays(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult, double bytes,
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

// Rings run concurrently (their flows share links); the phase ends with the slowest.
CostTerms CostContext::ringsPhase(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult,
                                  double bytes, int reduceShare, int steps, int reduceSteps, std::size_t rounds,
                                  bool recvWaitsSend) const {
  if (bytes <= 0) return {};
  std::vector<std::vector<CostTerms>> d, g;
  ringDelays(rings, mult, bytes, reduceShare, d, g);
  CostTerms worst;
  for (std::size_t r = 0; r < rings.size(); ++r) {
    worst = CostTerms::max(worst, ringRecurrence(d[r], g[r], steps, reduceSteps, rounds, recvWaitsSend));
  }
  return worst;
}

// Disjoint rings of one flow each (hierarchical's per-host and per-local-index rings).
CostTerms CostContext::ringsPhase(const std::vector<std::vector<int>>& rings, double bytes, int steps,
                                  int reduceSteps) const {
  return ringsPhase(rings, std::vector<int>(rings.size(), 1), bytes, 1, steps, reduceSteps, 1);
}

CostContext::ChannelRings CostContext::channelRings(const AlgoParams& p, std::size_t count) const {
  ChannelRings cr;
  cr.channels =
      static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(p.channels), count)));
  for (int c = 0; c < cr.channels; ++c) cr.add(ringOrder(n, p, c));
  return cr;
}

void CostContext::ChannelRings::add(std::vector<int> ring) {
  const auto it = std::find(rings.begin(), rings.end(), ring);
  if (it == rings.end()) {
    rings.push_back(std::move(ring));
    mult.push_back(1);
  } else {
    ++mult[static_cast<std::size_t>(it - rings.begin())];
  }
}

CostContext::RingPieces CostContext::ringPieces(std::size_t count, std::size_t es, const AlgoParams& p,
                                                std::size_t blocksPerRound) {
  const std::size_t slice = ceilDiv(count, static_cast<std::size_t>(p.channels));
  std::size_t rounds = 1;
  if (p.chunkBytes != 0 && slice != 0) {
    const std::size_t perRound = std::max<std::size_t>(1, p.chunkBytes / es) * blocksPerRound;
    rounds = ceilDiv(slice, perRound);
  }
  return {rounds, ceilDiv(slice, rounds)};
}

}  // namespace collbench
