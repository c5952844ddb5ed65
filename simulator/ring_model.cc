// Ring all-reduce without a schedule: the aggregated method streamed step by step, for rank counts whose schedule
// does not fit in memory (8192 ranks x 1 GiB is 268 M ops). It evaluates exactly the dependency graph that
// core/algorithms/ring.cc builds when no block is empty (the caller checks that):
//   transfer (piece p, step s, ring position r) goes from position r to r+1 of the piece's channel's ring
//   (ringOrder(): rank r -> r+1 on one host) and carries
//     block (r - s) mod n in reduce-scatter steps s < n-1, block (r + 1 - t) mod n in all-gather step t = s-(n-1);
//   its send is ready when the receive of step s-1 on rank r completed (including the reduction during
//   reduce-scatter), or at 0 for s = 0; its receive is ready at once (reduce-scatter) or after the receiver's own
//   reduce-scatter send of step t (all-gather), which the block chain already implies (n-1 hops of it lead here);
//   and it waits for the previous transfer on its (r, r+1, channel) connection, which spans pieces.
#include <algorithm>
#include <bit>
#include <map>
#include <numeric>
#include <optional>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

struct Piece {
  std::size_t offset, length;
  int channel;
  int round;
};

// The pieces of ring.cc: split across channels, then into rounds of at most chunk elements per block.
std::vector<Piece> ringPieces(std::size_t elems, std::size_t elemSize, const AlgoParams& p, std::size_t n) {
  std::vector<Piece> out;
  for (int c = 0; c < p.channels; ++c) {
    const std::size_t parts = static_cast<std::size_t>(p.channels);
    const std::size_t sliceOff =
        static_cast<std::size_t>(c) * (elems / parts) + std::min<std::size_t>(c, elems % parts);
    const std::size_t sliceLen = elems / parts + (static_cast<std::size_t>(c) < elems % parts ? 1 : 0);
    std::size_t rounds = 1;
    if (p.chunkBytes != 0 && sliceLen != 0) {
      const std::size_t perRound = std::max<std::size_t>(1, p.chunkBytes / elemSize) * n;
      rounds = (sliceLen + perRound - 1) / perRound;
    }
    for (std::size_t k = 0; k < rounds; ++k) {
      const std::size_t off = k * (sliceLen / rounds) + std::min(k, sliceLen % rounds);
      const std::size_t len = sliceLen / rounds + (k < sliceLen % rounds ? 1 : 0);
      out.push_back(Piece{sliceOff + off, len, c, static_cast<int>(k)});
    }
  }
  return out;
}

// Steady state of a ring phase (see simulateRingModel): a step's times must equal the previous step's plus the period
// within this fraction of the period (far above the rounding of differences of times: 1e-18 s at 10 ms against
// periods of microseconds), for this many steps in a row, before the rest of the phase is continued by the period.
// The continued times are then within kPeriodTolerance x period x steps of the step-by-step ones.
constexpr double kPeriodTolerance = 1e-9;
constexpr int kPeriodicSteps = 2;

std::size_t blockLen(std::size_t pieceLen, std::size_t n, std::size_t b) {
  return pieceLen / n + (b < pieceLen % n ? 1 : 0);
}

// Candidate periods whose full check failed before one is given up for the whole ring (each check walks every flow).
constexpr int kPeriodAttempts = 3;

// A round whose flows repeat: every active channel's ring, and within the ring every p-th position, the same (see
// reduceRing). Stepping `positions` positions of the first active channel, each flow taken from a representative
// contention group, gives every channel's times at every position: those of position q mod positions.
struct RingReduction {
  std::size_t positions = 0;
  std::vector<int> src, dst;  // per stepped position: the endpoints of the flow standing for it
};

// What a flow's step depends on besides its contention group: whether it is a memory copy (and then its sender's
// rate), its receiver's reduction rate and its protocol cost; and a hash of its route's links (checked exactly by
// the groups' structures), to pick candidate periods cheaply.
struct FlowInputs {
  bool copy = false;
  double sendRate = 0, recvRate = 0;
  Wire wire;
  std::uint64_t routeHash = 0;
  std::size_t groupSize = 0;
  bool sameStep(const FlowInputs& o) const {
    return copy == o.copy && sendRate == o.sendRate && recvRate == o.recvRate && wire.bytes == o.wire.bytes &&
           wire.delay == o.wire.delay;
  }
  bool operator==(const FlowInputs& o) const {
    return sameStep(o) && routeHash == o.routeHash && groupSize == o.groupSize;
  }
};

// Symmetry of a round with blocks of one size (`blockBytes`). Flow i of the full step (channel active[a], ring
// position q, i = a n + q) is mapped to position q mod p of the first active channel. The round reduces to those p
// positions when (checked, not assumed):
//   - each flow's inputs (FlowInputs::sameStep) equal its image's;
//   - the flows of a contention group map to distinct positions, the groups that hold flows mapped to one position
//     all map onto one set of positions, and groups mapped onto one set have one structure (GroupCache::structure,
//     flows in position order);
//   - the representative groups chosen per set (with their real endpoints) share no link with one another.
// Then, step by step, every flow's start, duration and end equal its image's: by induction from equal initial times,
// a start is a maximum over the image's neighbours' times, and a group's durations are a function of its structure,
// offsets and sizes, which are the image group's. p is the smallest divisor of n that passes (n: the channels alone
// fold).
std::optional<RingReduction> reduceRing(World& w, GroupCache& cache, const std::vector<std::vector<int>>& rings,
                                        const std::vector<int>& active, const std::vector<double>& rate,
                                        std::uint64_t blockBytes) {
  const std::size_t channels = active.size();
  const std::size_t n = rings[static_cast<std::size_t>(active[0])].size();
  const std::size_t total = channels * n;
  std::vector<int> src(total), dst(total), netOf(total, -1), netSrc, netDst, group;
  std::vector<FlowInputs> in(total);
  for (std::size_t a = 0; a < channels; ++a) {
    const auto& ring = rings[static_cast<std::size_t>(active[a])];
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t i = a * n + q;
      src[i] = ring[q];
      dst[i] = ring[(q + 1) % n];
      FlowInputs& f = in[i];
      f.copy = w.sameNode(src[i], dst[i]);
      f.recvRate = rate[static_cast<std::size_t>(dst[i])];
      if (f.copy) {
        f.sendRate = rate[static_cast<std::size_t>(src[i])];
        continue;
      }
      f.wire = w.wire(src[i], dst[i], blockBytes);
      std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the links' bandwidths and latencies
      for (DirLink l : w.route(src[i], dst[i])) {
        for (double v : {w.bandwidth(l), w.latency(l)}) {
          h ^= std::bit_cast<std::uint64_t>(v);
          h *= 1099511628211ull;
        }
      }
      f.routeHash = h;
      netOf[i] = static_cast<int>(netSrc.size());
      netSrc.push_back(src[i]);
      netDst.push_back(dst[i]);
    }
  }
  const int groups = contentionGroups(w, netSrc, netDst, w.config().crossTraffic, group);
  std::vector<std::vector<std::size_t>> members(static_cast<std::size_t>(groups));
  auto groupOf = [&](std::size_t i) -> std::vector<std::size_t>& {
    return members[static_cast<std::size_t>(group[static_cast<std::size_t>(netOf[i])])];
  };
  for (std::size_t i = 0; i < total; ++i) {
    if (netOf[i] >= 0) groupOf(i).push_back(i);
  }
  for (std::size_t i = 0; i < total; ++i) {
    if (netOf[i] >= 0) in[i].groupSize = groupOf(i).size();
  }

  // The full check of period p.
  auto tryPeriod = [&](std::size_t p) -> std::optional<RingReduction> {
    auto pos = [&](std::size_t i) { return (i % n) % p; };
    for (std::size_t i = 0; i < total; ++i) {
      if (!in[i].sameStep(in[pos(i)])) return std::nullopt;
    }
    // Per position: the set of positions its groups map onto (setOf: an index into the sets below); per set, its
    // groups' one structure and the first of them, which stands for the others.
    std::vector<int> setOf(p, -1);
    std::map<std::vector<std::size_t>, int> setIndex;
    std::vector<std::vector<std::uint64_t>> setStructure;
    std::vector<std::vector<std::size_t>> setFlows;  // the representative group's flows, in position order
    std::vector<std::size_t> order;
    std::vector<std::pair<int, int>> flows;
    for (auto& fl : members) {
      order = fl;
      std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return pos(x) < pos(y); });
      std::vector<std::size_t> at;
      for (std::size_t f : order) at.push_back(pos(f));
      if (std::adjacent_find(at.begin(), at.end()) != at.end()) return std::nullopt;
      flows.clear();
      for (std::size_t f : order) flows.emplace_back(src[f], dst[f]);
      std::vector<std::uint64_t> structure = cache.structure(flows);
      const auto [it, added] = setIndex.try_emplace(at, static_cast<int>(setStructure.size()));
      if (added) {
        setStructure.push_back(std::move(structure));
        setFlows.push_back(order);
      } else if (setStructure[static_cast<std::size_t>(it->second)] != structure) {
        return std::nullopt;
      }
      for (std::size_t q : at) {
        if (setOf[q] >= 0 && setOf[q] != it->second) return std::nullopt;
        setOf[q] = it->second;
      }
    }
    RingReduction out;
    out.positions = p;
    out.src.assign(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(p));
    out.dst.assign(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(p));
    std::vector<int> repSrc, repDst, repSet, repGroup;
    for (std::size_t set = 0; set < setFlows.size(); ++set) {
      for (std::size_t f : setFlows[set]) {
        out.src[pos(f)] = src[f];
        out.dst[pos(f)] = dst[f];
        repSrc.push_back(src[f]);
        repDst.push_back(dst[f]);
        repSet.push_back(static_cast<int>(set));
      }
    }
    // Representatives of different sets on a common link would contend where their images do not.
    const int repGroups = contentionGroups(w, repSrc, repDst, w.config().crossTraffic, repGroup);
    if (static_cast<std::size_t>(repGroups) != setFlows.size()) return std::nullopt;
    std::vector<int> groupSet(static_cast<std::size_t>(repGroups), -1);
    for (std::size_t j = 0; j < repGroup.size(); ++j) {
      int& gs = groupSet[static_cast<std::size_t>(repGroup[j])];
      if (gs >= 0 && gs != repSet[j]) return std::nullopt;
      gs = repSet[j];
    }
    return out;
  };

  int attempts = 0;
  for (std::size_t p = 1; p <= n && attempts < kPeriodAttempts; ++p) {
    if (n % p != 0 || (p == n && channels == 1)) continue;
    bool candidate = true;
    for (std::size_t i = 0; candidate && i < total; ++i) candidate = in[i] == in[(i % n) % p];
    if (!candidate) continue;
    if (auto r = tryPeriod(p)) return r;
    ++attempts;
  }
  return std::nullopt;
}

}  // namespace

/// True when ring.cc's schedule for these parameters has no elided (empty) block, which the model assumes.
bool ringModelApplies(const CollectiveSpec& spec, const AlgoParams& params) {
  if (spec.kind != Collective::AllReduce || spec.nranks < 2) return false;
  const auto n = static_cast<std::size_t>(spec.nranks);
  for (const Piece& p : ringPieces(spec.count, spec.elementSize(), params, n)) {
    if (p.length < n) return false;
  }
  return true;
}

SimResult simulateRingModel(World& w, const CollectiveSpec& spec, const AlgoParams& params) {
  COLLBENCH_CHECK(ringModelApplies(spec, params), "ring model on {}", describe(spec));
  const int n = spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  const std::size_t es = spec.elementSize();
  const std::vector<Piece> pieces = ringPieces(spec.count, es, params, nu);
  const int channels = params.channels;
  const int steps = 2 * (n - 1);
  int maxRounds = 0;
  for (const Piece& p : pieces) maxRounds = std::max(maxRounds, p.round + 1);
  // Piece of (channel, round), -1 when that channel has fewer rounds.
  const auto rounds = static_cast<std::size_t>(maxRounds);
  const auto at = [rounds](int channel, int round) {
    return static_cast<std::size_t>(channel) * rounds + static_cast<std::size_t>(round);
  };
  std::vector<int> pieceAt(static_cast<std::size_t>(channels) * rounds, -1);
  for (std::size_t i = 0; i < pieces.size(); ++i) pieceAt[at(pieces[i].channel, pieces[i].round)] = static_cast<int>(i);

  // Per channel and ring position r: end of the last transfer on connection r -> r+1, and when the last receive
  // completed at position r (reduction included). A step writes the next ones, which are then swapped in: the
  // previous step's stay (connNext, recvNext) for the steady-state check.
  std::vector<double> connFree(static_cast<std::size_t>(channels) * nu, 0), connNext(connFree.size(), 0);
  std::vector<double> recvDone(static_cast<std::size_t>(channels) * nu, 0), recvNext(recvDone.size(), 0);
  std::vector<double> rate(nu);
  bool sharedNodes = false;
  {
    std::vector<int> ranksOnHost(nu, 0);
    for (int r = 0; r < n; ++r) {
      rate[static_cast<std::size_t>(r)] = w.reduceRate(r);
      if (++ranksOnHost[static_cast<std::size_t>(w.hostIndex(r))] > 1) sharedNodes = true;
    }
  }
  const bool finiteReduce = std::any_of(rate.begin(), rate.end(), [](double x) { return x > 0; });

  // Ring of each channel (position -> rank, as ring.cc builds it). Connections, receive times and blocks below are
  // indexed by ring position; rates and routes by rank.
  std::vector<std::vector<int>> rings;
  for (int c = 0; c < channels; ++c) rings.push_back(ringOrder(n, params, c));
  {
    std::vector<std::pair<int, int>> pairs;
    for (const auto& ring : rings) {
      for (int q = 0; q < n; ++q)
        pairs.emplace_back(ring[static_cast<std::size_t>(q)], ring[static_cast<std::size_t>((q + 1) % n)]);
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    w.prefetchRoutes(std::move(pairs));
  }
  GroupCache cache(w, w.config().crossTraffic);
  SimResult res;
  res.method = "ring-model";
  const std::size_t before = w.activities();
  if (finiteReduce && (channels > 1 || sharedNodes)) {
    res.exact = false;
    res.note = "reductions of concurrent channels or of ranks sharing a node may overlap (taken as delays here)";
  }

  // The flows of a step: for each active channel, r -> r+1 for every rank (index a * n + r). Pairs on one node are
  // memory copies; the others ("network flows", index j) go to the contention groups.
  std::vector<int> src, dst, netIndex, fs, fd, g;
  std::vector<std::uint64_t> bytes, newBytes, fb, wireBytes;
  // Versions of `bytes` (a new one whenever its contents change): the sizes the durations were computed for and the
  // sizes of the previous step's state.
  constexpr std::uint64_t kNoVersion = ~std::uint64_t{0};
  std::uint64_t bytesVersion = 0, prevBytesVersion = kNoVersion, periodVersion = kNoVersion;
  std::vector<double> fstart, start, dur;
  const std::vector<double>* durOf =
      &dur;                            // the durations of the step: `dur`, or the cache's when all are network flows
  const std::vector<double> noStarts;  // groups of one flow: durations do not depend on starts
  std::vector<char> copyFlow;          // a pair on one node: a memory copy
  bool allNetwork = false;
  // The channels stepped (all active ones, or the first alone when the round reduces) and the ring positions stepped
  // in each (n, or the reduction's period).
  std::vector<int> prevChannels, active, stepped, groupSize;
  std::size_t m = nu, prevM = 0;
  std::optional<RingReduction> reduction;
  std::vector<int> reducedFor;  // the active channels and block size `reduction` was found for
  std::uint64_t reducedBytes = 0;
  std::size_t reducedRounds = 0, reductions = 0, builtFor = 0, stepsPositions = 0;
  int groups = 0;
  bool multiFlowGroups = false;
  bool sameStructure = false;  // this step's pairs and groups are the previous step's
  std::vector<double> prevGroupEnd, groupEnd;
  double prevEnd = 0, makespan = 0;
  const double kTolRel = 1e-12;
  std::vector<double> reduceTime;  // per flow: its reduction on the receiver in reduce-scatter steps
  std::uint64_t reduceVersion = kNoVersion;
  bool havePrev = false;  // connNext and recvNext hold the previous step's state of the active channels
  std::size_t prevActive = 0;
  int periodicSteps = 0;
  std::size_t continued = 0;  // steps continued by their period
  for (int k = 0; k < maxRounds; ++k) {
    active.clear();
    for (int c = 0; c < channels; ++c) {
      if (pieceAt[at(c, k)] >= 0) active.push_back(c);
    }
    // Blocks of one size (every active piece a multiple of n elements): every step moves the same bytes.
    const std::size_t firstLength = pieces[static_cast<std::size_t>(pieceAt[at(active[0], k)])].length;
    const bool uniformBlocks = std::all_of(active.begin(), active.end(), [&](int c) {
      return pieces[static_cast<std::size_t>(pieceAt[at(c, k)])].length % nu == 0;
    });
    const bool equalPieces = std::all_of(active.begin(), active.end(), [&](int c) {
      return pieces[static_cast<std::size_t>(pieceAt[at(c, k)])].length == firstLength;
    });
    const bool reducible = uniformBlocks && equalPieces;
    const std::uint64_t blockBytes = firstLength / nu * es;
    if (reducible && (active != reducedFor || blockBytes != reducedBytes)) {
      reduction = reduceRing(w, cache, rings, active, rate, blockBytes);
      reducedFor = active;
      reducedBytes = blockBytes;
      ++reductions;
    }
    // The induction behind the reduction starts from every channel's times at q equal to the stepped one's at q mod m
    // (so they are after a reduced round, and at the start; a round that was not reduced may have left them apart).
    const bool reduced = reducible && reduction.has_value() && [&] {
      const std::size_t from = static_cast<std::size_t>(active[0]) * nu, period = reduction->positions;
      for (int c : active) {
        for (std::size_t q = 0; q < nu; ++q) {
          const std::size_t i = static_cast<std::size_t>(c) * nu + q;
          if (recvDone[i] != recvDone[from + q % period] || connFree[i] != connFree[from + q % period]) return false;
        }
      }
      return true;
    }();
    const std::vector<int> stepping = reduced ? std::vector<int>{active[0]} : active;
    m = reduced ? reduction->positions : nu;
    if (stepping != prevChannels || m != prevM || (reduced && builtFor != reductions)) {
      builtFor = reduced ? reductions : 0;
      if (stepping != prevChannels || m != prevM) havePrev = false;
      sameStructure = false;
      src.clear();
      dst.clear();
      if (reduced) {
        src = reduction->src;
        dst = reduction->dst;
      } else {
        for (int c : active) {
          const auto& ring = rings[static_cast<std::size_t>(c)];
          for (int q = 0; q < n; ++q) {
            src.push_back(ring[static_cast<std::size_t>(q)]);
            dst.push_back(ring[static_cast<std::size_t>((q + 1) % n)]);
          }
        }
      }
      netIndex.clear();
      fs.clear();
      fd.clear();
      copyFlow.assign(src.size(), 0);
      for (std::size_t i = 0; i < src.size(); ++i) {
        if (w.sameNode(src[i], dst[i])) {
          copyFlow[i] = 1;
          continue;
        }
        netIndex.push_back(static_cast<int>(i));
        fs.push_back(src[i]);
        fd.push_back(dst[i]);
      }
      allNetwork = netIndex.size() == src.size();
      groups = contentionGroups(w, fs, fd, w.config().crossTraffic, g);
      groupSize.assign(static_cast<std::size_t>(groups), 0);
      for (int gi : g) ++groupSize[static_cast<std::size_t>(gi)];
      multiFlowGroups = std::any_of(groupSize.begin(), groupSize.end(), [](int x) { return x > 1; });
      prevChannels = stepping;
      prevM = m;
      prevBytesVersion = kNoVersion;
    }
    stepped = stepping;
    const int mi = static_cast<int>(m);
    for (int s = 0; s < steps; ++s) {
      const bool rs = s < n - 1;
      if (!uniformBlocks || s == 0) {
        newBytes.clear();
        for (int c : stepped) {
          const Piece& p = pieces[static_cast<std::size_t>(pieceAt[at(c, k)])];
          for (int r = 0; r < mi; ++r) {
            const int b = rs ? ((r - s) % n + n) % n : ((r + 1 - (s - (n - 1))) % n + n) % n;
            newBytes.push_back(blockLen(p.length, nu, static_cast<std::size_t>(b)) * es);
          }
        }
        if (newBytes != bytes) {
          std::swap(newBytes, bytes);
          ++bytesVersion;
        }
      }
      // Starts: the send waits for the previous receive on its rank (reduced during reduce-scatter) and for the
      // previous transfer on its connection.
      start.resize(src.size());
      for (std::size_t a = 0; a < stepped.size(); ++a) {
        const auto c = static_cast<std::size_t>(stepped[a]);
        for (int r = 0; r < mi; ++r) {
          const double sendReady = s == 0 ? 0 : recvDone[c * nu + static_cast<std::size_t>(r)];
          start[a * m + static_cast<std::size_t>(r)] =
              std::max(sendReady, connFree[c * nu + static_cast<std::size_t>(r)]);
        }
      }
      // A protocol: network flows wait its step latency, then carry its wire bytes (World::wire, as the Dag does).
      if (w.wireActive()) {
        wireBytes.clear();
        for (int i : netIndex) {
          const auto iu = static_cast<std::size_t>(i);
          const Wire wire = w.wire(src[iu], dst[iu], bytes[iu]);
          start[iu] += wire.delay;
          wireBytes.push_back(wire.bytes);
        }
      }
      // Durations. Groups of one flow do not depend on when they start, so a step with the previous step's sizes
      // reuses its times outright (uniform blocks: every step); groups of several flows are keyed by their offsets.
      // When every flow is a network flow and no protocol rewrites sizes, the step's own vectors are the flows'.
      if (multiFlowGroups || bytesVersion != prevBytesVersion) {
        const bool direct = allNetwork && !w.wireActive();
        if (!direct) {
          fb.clear();
          fstart.clear();
          for (std::size_t j = 0; j < netIndex.size(); ++j) {
            const auto i = netIndex[j];
            fb.push_back(w.wireActive() ? wireBytes[j] : bytes[static_cast<std::size_t>(i)]);
            fstart.push_back(start[static_cast<std::size_t>(i)]);
          }
        }
        const std::vector<double>& netDur =
            cache.stepDurations(fs, fd, direct ? bytes : fb, multiFlowGroups ? (direct ? start : fstart) : noStarts, g,
                                groups, sameStructure);
        if (allNetwork) {
          durOf = &netDur;
        } else {
          durOf = &dur;
          dur.assign(src.size(), 0);
          for (std::size_t i = 0; i < src.size(); ++i) {
            if (!copyFlow[i]) continue;
            const double rt = rate[static_cast<std::size_t>(src[i])];
            dur[i] = rt > 0 ? static_cast<double>(bytes[i]) / rt : 0;
          }
          for (std::size_t j = 0; j < netIndex.size(); ++j) dur[static_cast<std::size_t>(netIndex[j])] = netDur[j];
        }
        prevBytesVersion = bytesVersion;
      }
      // Ends, and the checks: a group of several flows was simulated alone on its links, so the same group of the
      // previous step must have left them (a group of one flow is alone on its links, whose previous user is the
      // same connection, which is FIFO).
      groupEnd.assign(static_cast<std::size_t>(groups), 0);
      if (reduceVersion != bytesVersion) {
        reduceTime.resize(src.size());
        for (std::size_t i = 0; i < src.size(); ++i) {
          const double rt = rate[static_cast<std::size_t>(dst[i])];
          reduceTime[i] = rt > 0 ? static_cast<double>(bytes[i]) / rt : 0;
        }
        reduceVersion = bytesVersion;
      }
      // Every flow a network flow: flow i is network flow i, and the group check runs in the same pass.
      const bool groupCheckHere = multiFlowGroups && allNetwork;
      const double* durations = durOf->data();
      double lo = -1, hi = 0;
      for (std::size_t a = 0; a < stepped.size(); ++a) {
        const auto c = static_cast<std::size_t>(stepped[a]);
        for (int r = 0; r < mi; ++r) {
          const std::size_t i = a * m + static_cast<std::size_t>(r);
          const double end = start[i] + durations[i];
          connNext[c * nu + static_cast<std::size_t>(r)] = end;
          const int to = r + 1 == mi ? 0 : r + 1;  // position
          const double done = end + (rs ? reduceTime[i] : 0);
          recvNext[c * nu + static_cast<std::size_t>(to)] = done;
          makespan = std::max(makespan, done);
          lo = lo < 0 ? start[i] : std::min(lo, start[i]);
          hi = std::max(hi, end);
          if (groupCheckHere && groupSize[static_cast<std::size_t>(g[i])] > 1) {
            const auto gu = static_cast<std::size_t>(g[i]);
            if (res.exact && sameStructure && start[i] < prevGroupEnd[gu] - kTolRel * std::max(end, 1e-9)) {
              res.exact = false;
              res.note = fmt::format("flows of steps {} and {} share links at the same time", s - 1, s);
            }
            groupEnd[gu] = std::max(groupEnd[gu], end);
          }
        }
      }
      if (multiFlowGroups && !groupCheckHere) {
        for (std::size_t j = 0; j < netIndex.size(); ++j) {
          const auto gu = static_cast<std::size_t>(g[j]);
          if (groupSize[gu] < 2) continue;
          const auto i = static_cast<std::size_t>(netIndex[j]);
          const double end = start[i] + (*durOf)[i];
          if (res.exact && sameStructure && start[i] < prevGroupEnd[gu] - kTolRel * std::max(end, 1e-9)) {
            res.exact = false;
            res.note = fmt::format("flows of steps {} and {} share links at the same time", s - 1, s);
          }
          groupEnd[gu] = std::max(groupEnd[gu], end);
        }
      }
      if (res.exact && !sameStructure && lo < prevEnd - kTolRel * std::max(prevEnd, 1e-9)) {
        res.exact = false;
        res.note = fmt::format("steps {} and {} overlap in time while their flows change (not checked link by link)",
                               s - 1, s);
      }
      prevEnd = std::max(prevEnd, hi);
      std::swap(prevGroupEnd, groupEnd);
      sameStructure = true;
      std::swap(connFree, connNext);
      std::swap(recvDone, recvNext);
      // Steady state. A step maps (receive times, connection times) to the next ones through maxima, sums and the
      // group durations, which depend only on offsets within groups: shifting every input time by P shifts every
      // output by P while the block sizes repeat. So once a step's state is the previous one plus P (every entry),
      // each further step of the phase adds P, and the rest of the phase is continued at once. Entries are compared
      // within kPeriodTolerance of P (rounding of the differences), kPeriodicSteps steps in a row.
      bool shifted = bytesVersion == periodVersion && havePrev && prevActive == stepped.size();
      const std::size_t c0 = static_cast<std::size_t>(stepped[0]) * nu;
      const double period = shifted ? recvDone[c0] - recvNext[c0] : 0;
      shifted = shifted && period > 0;
      for (std::size_t a = 0; shifted && a < stepped.size(); ++a) {
        const std::size_t from = static_cast<std::size_t>(stepped[a]) * nu;
        for (std::size_t i = from; shifted && i < from + m; ++i) {
          shifted = std::abs(recvDone[i] - recvNext[i] - period) <= kPeriodTolerance * period &&
                    std::abs(connFree[i] - connNext[i] - period) <= kPeriodTolerance * period;
        }
      }
      periodicSteps = shifted ? periodicSteps + 1 : 0;
      havePrev = true;
      prevActive = stepped.size();
      periodVersion = bytesVersion;
      const int phaseLast = rs ? n - 2 : steps - 1;
      if (periodicSteps >= kPeriodicSteps && s < phaseLast) {
        const int rest = phaseLast - s;
        const double jump = static_cast<double>(rest) * period;
        for (int c : stepped) {
          for (std::size_t i = static_cast<std::size_t>(c) * nu; i < static_cast<std::size_t>(c) * nu + m; ++i) {
            recvDone[i] += jump;
            connFree[i] += jump;
            makespan = std::max(makespan, recvDone[i]);
          }
        }
        prevEnd += jump;
        for (double& e : prevGroupEnd) e += jump;
        s += rest;
        continued += static_cast<std::size_t>(rest);
        periodicSteps = 0;
        havePrev = false;
      }
    }
    if (reduced) {
      // Every active channel's position q ends the round as position q mod m of the stepped one.
      const std::size_t from = static_cast<std::size_t>(active[0]) * nu;
      for (int c : active) {
        for (std::size_t q = 0; q < nu; ++q) {
          const std::size_t to = static_cast<std::size_t>(c) * nu + q;
          if (to == from + q % m) continue;
          recvDone[to] = recvDone[from + q % m];
          connFree[to] = connFree[from + q % m];
        }
      }
      havePrev = false;
      ++reducedRounds;
      stepsPositions = m;
    }
  }
  res.seconds = makespan;
  if (reducedRounds > 0) {
    res.note +=
        fmt::format("{}{} of {} rounds stepped {} of {} ring positions of one of {} channels (the rest repeat them)",
                    res.note.empty() ? "" : "; ", reducedRounds, maxRounds, stepsPositions, nu, channels);
  }
  if (continued > 0) {
    res.note += fmt::format("{}{} of {} steps continued by the steady-state period", res.note.empty() ? "" : "; ",
                            continued, static_cast<std::size_t>(maxRounds) * static_cast<std::size_t>(steps));
  }
  const std::size_t transfers = pieces.size() * nu * static_cast<std::size_t>(steps);
  res.transfers = transfers;
  res.ops = 2 * transfers;
  res.simulatedActivities = w.activities() - before;
  res.patterns = cache.patterns();
  return res;
}

}  // namespace collbench::sim::detail
