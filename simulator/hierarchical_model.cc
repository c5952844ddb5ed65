// Hierarchical all-reduce without a schedule (core/algorithms/hierarchical.cc builds 2 n (L-1 + H-1) transfers: 67 M
// at 16384 GPUs). The schedule is three ring phases, each gated per rank by a join of everything the rank did before:
//   A. ring reduce-scatter inside every host (L ranks, L-1 steps, channel 0);
//   B. per local index i, ring reduce-scatter then all-gather across the H hosts (channel 1) on block (i+1) mod L;
//   C. ring all-gather inside every host.
// In a ring phase over m positions with gate G (per rank: every op of the phase depends on the rank's previous join),
// the transfer of step s from position q to q+1 carries block (q - s) mod m (reduce-scatter) or (q + 1 - s) mod m
// (all-gather) and starts when
//   its send is ready: G[q] at s = 0, else the receive of step s-1 at q completed (its reduction included);
//   its receive is ready: G[q+1] (the all-gather's other dependency, the receiver's own reduce-scatter send of the
//   step, finished before the join that G is);
//   the previous transfer on the connection q -> q+1 ended (FIFO; connections of earlier phases ended before G).
// The next phase's gate at a rank is the latest end of its ops (sends end with their transfers).
//
// Exactness. The model applies only when no directed link carries two connections (contentionGroups over the
// connections of all phases: every group is one connection; with cross-traffic the reverse routes count), no two
// ranks share a node, and no block is empty. Then a transfer is alone on its links for its whole life (other
// connections never use them, its own connection is FIFO), so its duration is the lone flow's on its route whatever
// its start, and the schedule's dependency graph is the max-plus recurrence above over those durations and the
// reductions' bytes / reduce_GBps. Reductions of one rank run one at a time unless a transfer ends before the
// previous reduction at its receiver did; that is checked, and the result is then marked approximate.
//
// Symmetry. A ring phase is a function of its per-position inputs (the two durations of a flow for the two block
// sizes, the receiver's reduction rate, the gate), and rings whose inputs are equal bit for bit give equal outputs:
// one representative per class is evaluated (every rail's ring across hosts, every host's ring on a symmetric
// fabric). Within a ring whose inputs repeat with period p (p divides m; uniform blocks, so every transfer of a step
// has one size), the state after every step repeats with period p as well (the same operations on the same values),
// so p positions stand for all m: a rail ring across 16384 servers is evaluated over one pod's worth of servers.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

#include "collbench/algorithms.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

/// A rank's reductions are taken to run one after the other; a transfer ending this much (relative to the time)
/// before its receiver's previous reduction ends is an overlap (SimGrid would share the node's rate).
constexpr double kOverlapTolerance = 1e-12;

/// Per ring position: the durations of the flow to the next position for the two block sizes (small, small + 1
/// element), the reduction rate of the position's rank (bytes/s, 0 = free) and its gate.
struct Position {
  double small, large, rate, gate;
};

bool samePositions(const Position* a, const Position* b, std::size_t k) {
  return std::memcmp(a, b, k * sizeof(Position)) == 0;
}

/// Smallest p dividing m with in[q] == in[q - p] for every q (bit for bit); m when there is none.
std::size_t periodOf(const std::vector<Position>& in) {
  const std::size_t m = in.size();
  for (std::size_t p = 1; p < m; ++p) {
    if (m % p == 0 && samePositions(in.data(), in.data() + p, m - p)) return p;
  }
  return m;
}

struct RingPhase {
  std::size_t len;      // elements the phase's ring covers
  std::size_t es;       // element size
  bool reduce;          // reduce-scatter (reductions on receive), else all-gather
  bool* overlapping;    // set when a rank's reductions would overlap
  std::size_t* folded;  // positions evaluated (after symmetry and periods), for the note

  /// The gates after the phase, for `in` (one ring of in.size() positions).
  std::vector<double> run(const std::vector<Position>& in) const {
    const std::size_t m = in.size();
    const std::size_t base = len / m, extra = len % m;
    const std::size_t p = extra == 0 ? periodOf(in) : m;  // uneven blocks move with the step: no period
    *folded += p;
    std::vector<double> recvDone(p), connFree(p, 0), reduceEnd(p, 0), out(p);
    for (std::size_t q = 0; q < p; ++q) out[q] = recvDone[q] = in[q].gate;
    for (std::size_t s = 0; s + 1 < m; ++s) {
      std::vector<double> next(recvDone);
      for (std::size_t q = 0; q < p; ++q) {
        const std::size_t to = (q + 1) % p;
        // Block carried from position q (full ring index q + k p has the same size when the blocks are even).
        const std::size_t block = reduce ? (q + m - s % m) % m : (q + 1 + m - s % m) % m;
        const bool big = block < extra;
        const double bytes = static_cast<double>((base + (big ? 1 : 0)) * es);
        const double start = std::max({recvDone[q], in[to].gate, connFree[q]});
        const double end = start + (big ? in[q].large : in[q].small);
        connFree[q] = end;
        double done = end;
        if (reduce && in[to].rate > 0) {
          if (end < reduceEnd[to] - kOverlapTolerance * reduceEnd[to]) *overlapping = true;
          done = end + bytes / in[to].rate;
          reduceEnd[to] = done;
        }
        next[to] = done;
        out[q] = std::max(out[q], end);
        out[to] = std::max(out[to], done);
      }
      recvDone.swap(next);
    }
    std::vector<double> gates(m);
    for (std::size_t q = 0; q < m; ++q) gates[q] = out[q % p];
    return gates;
  }
};

/// A ring of a phase: its ranks in ring order, the elements it covers, and the index of its first connection in the
/// model's connection list (connection q: position q -> q+1).
struct Ring {
  std::vector<int> ranks;
  std::size_t len, firstFlow;
};

/// Rings that share links (through contention groups of several connections) evaluated together step by step, as
/// the ring model does: every step's flows go to the group cache with their starts, and a group of several flows
/// must find the same group of the previous step gone from its links (else `shared` is set).
struct JointPhase {
  World& w;
  GroupCache& cache;
  std::size_t es;
  const std::vector<int>& src;
  const std::vector<int>& dst;
  const std::vector<int>& group;  // by connection
  const std::vector<std::size_t>& groupSize;
  bool* overlapping;
  bool* shared;
  std::size_t* folded;

  /// Runs `kinds` (true: reduce-scatter, false: all-gather; each gated by the previous) over `rings` on `gate`.
  void run(const std::vector<const Ring*>& rings, std::initializer_list<bool> kinds, std::vector<double>& gate) const {
    const std::size_t m = rings.front()->ranks.size(), flows = rings.size() * m;
    std::vector<int> fs(flows), fd(flows), fg(flows);
    std::unordered_map<int, int> local;
    for (std::size_t k = 0; k < rings.size(); ++k) {
      for (std::size_t q = 0; q < m; ++q) {
        const std::size_t c = rings[k]->firstFlow + q;
        fs[k * m + q] = src[c];
        fd[k * m + q] = dst[c];
        fg[k * m + q] = local.try_emplace(group[c], static_cast<int>(local.size())).first->second;
      }
    }
    const auto groups = static_cast<int>(local.size());
    std::vector<char> multi(local.size(), 0);
    for (const auto& [global, l] : local)
      multi[static_cast<std::size_t>(l)] = groupSize[static_cast<std::size_t>(global)] > 1;
    std::vector<double> prevGroupEnd(local.size(), 0), groupEnd(local.size());
    std::vector<std::uint64_t> bytes(flows), wireBytes(flows);
    std::vector<double> start(flows), recvDone(flows), next(flows), connFree(flows, 0), reduceEnd(flows, 0), out(flows);
    std::vector<double> rate(flows);
    for (std::size_t f = 0; f < flows; ++f) rate[f] = w.reduceRate(fs[f]);
    bool sameFlows = false;
    for (const bool reduce : kinds) {
      // Position f = k m + q holds rank rings[k]->ranks[q]; its flow goes to position k m + (q + 1) mod m.
      for (std::size_t f = 0; f < flows; ++f) out[f] = recvDone[f] = gate[static_cast<std::size_t>(fs[f])];
      for (std::size_t s = 0; s + 1 < m; ++s) {
        for (std::size_t k = 0; k < rings.size(); ++k) {
          const std::size_t len = rings[k]->len, base = len / m, extra = len % m;
          for (std::size_t q = 0; q < m; ++q) {
            const std::size_t f = k * m + q, to = k * m + (q + 1) % m;
            const std::size_t block = reduce ? (q + m - s) % m : (q + 1 + m - s) % m;
            bytes[f] = (base + (block < extra ? 1 : 0)) * es;
            start[f] = std::max({recvDone[f], gate[static_cast<std::size_t>(fs[to])], connFree[f]});
          }
        }
        // A protocol: flows wait its step latency, then carry its wire bytes (World::wire, as the ring model does).
        if (w.wireActive()) {
          for (std::size_t f = 0; f < flows; ++f) {
            const Wire wire = w.wire(fs[f], fd[f], bytes[f]);
            start[f] += wire.delay;
            wireBytes[f] = wire.bytes;
          }
        }
        const std::vector<double> dur =
            cache.stepDurations(fs, fd, w.wireActive() ? wireBytes : bytes, start, fg, groups, sameFlows);
        sameFlows = true;
        std::fill(groupEnd.begin(), groupEnd.end(), 0.0);
        for (std::size_t f = 0; f < flows; ++f) {
          const std::size_t q = f % m, to = f - q + (q + 1) % m;
          const double end = start[f] + dur[f];
          const auto g = static_cast<std::size_t>(fg[f]);
          if (multi[g]) {
            if (start[f] < prevGroupEnd[g] - kOverlapTolerance * std::max(end, 1e-9)) *shared = true;
            groupEnd[g] = std::max(groupEnd[g], end);
          }
          connFree[f] = end;
          double done = end;
          if (reduce && rate[to] > 0) {
            if (end < reduceEnd[to] - kOverlapTolerance * reduceEnd[to]) *overlapping = true;
            done = end + static_cast<double>(bytes[f]) / rate[to];
            reduceEnd[to] = done;
          }
          next[to] = done;
          out[f] = std::max(out[f], end);
          out[to] = std::max(out[to], done);
        }
        for (std::size_t g = 0; g < groupEnd.size(); ++g) {
          if (multi[g]) prevGroupEnd[g] = groupEnd[g];
        }
        recvDone.swap(next);
      }
      *folded += flows;
      for (std::size_t f = 0; f < flows; ++f) gate[static_cast<std::size_t>(fs[f])] = out[f];
    }
  }
};

}  // namespace

std::optional<SimResult> simulateHierarchicalModel(World& w, const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  if (spec.kind != Collective::AllReduce || n < 2 || params.rankHost.size() != nu) return std::nullopt;
  const std::vector<std::vector<int>> hosts = groupByHost(params.rankHost);
  const std::size_t L = hosts.front().size(), H = hosts.size();
  for (const auto& h : hosts) {
    if (h.size() != L) return std::nullopt;
  }
  const std::size_t es = spec.elementSize();
  // Phase B's ring i covers block (i + 1) mod L of the buffer in L blocks; every block of every ring is non-empty.
  if ((L > 1 && spec.count < L) || spec.count / L < H) return std::nullopt;
  {
    std::vector<char> seen;
    for (int r = 0; r < n; ++r) {
      const auto hostIndex = static_cast<std::size_t>(w.hostIndex(r));
      if (hostIndex >= seen.size()) seen.resize(hostIndex + 1, 0);
      if (seen[hostIndex]) return std::nullopt;  // two ranks on one node: their reductions share it
      seen[hostIndex] = 1;
    }
  }
  // The rings (intra: one per host; inter: one per local index) and every connection of the collective.
  std::vector<Ring> intra, inter;
  std::vector<int> src, dst;
  auto addRing = [&](std::vector<Ring>& set, std::vector<int> ranks, std::size_t len) {
    const std::size_t first = src.size();
    for (std::size_t q = 0; q < ranks.size(); ++q) {
      src.push_back(ranks[q]);
      dst.push_back(ranks[(q + 1) % ranks.size()]);
    }
    set.push_back(Ring{std::move(ranks), len, first});
  };
  if (L > 1) {
    for (const auto& h : hosts) addRing(intra, h, spec.count);
  }
  if (H > 1) {
    for (std::size_t i = 0; i < L; ++i) {
      std::vector<int> ring;
      for (const auto& h : hosts) ring.push_back(h[i]);
      const std::size_t blk = (i + 1) % L;
      addRing(inter, std::move(ring), spec.count / L + (blk < spec.count % L ? 1 : 0));
    }
  }
  {
    std::vector<std::pair<int, int>> pairs;
    for (std::size_t i = 0; i < src.size(); ++i) pairs.emplace_back(src[i], dst[i]);
    w.prefetchRoutes(std::move(pairs));
  }
  std::vector<int> group;
  const int groups = contentionGroups(w, src, dst, w.config().crossTraffic, group);
  std::vector<std::size_t> groupSize(static_cast<std::size_t>(groups), 0);
  for (int g : group) ++groupSize[static_cast<std::size_t>(g)];
  // A group must not mix the host rings' connections with the rings across hosts (their phases are not evaluated
  // together).
  const std::size_t intraFlows = intra.size() * L;
  {
    std::vector<char> kind(static_cast<std::size_t>(groups), 0);
    for (std::size_t c = 0; c < src.size(); ++c) {
      char& k = kind[static_cast<std::size_t>(group[c])];
      const char mine = c < intraFlows ? 1 : 2;
      if (k != 0 && k != mine) return std::nullopt;
      k = mine;
    }
  }

  GroupCache cache(w, w.config().crossTraffic);
  const std::size_t before = w.activities();
  std::vector<double> gate(nu, 0);
  if (L == 1) {  // hierarchical.cc copies the input to the output first
    for (int r = 0; r < n; ++r) {
      const double rate = w.reduceRate(r);
      gate[static_cast<std::size_t>(r)] = rate > 0 ? static_cast<double>(spec.count * es) / rate : 0;
    }
  }
  bool overlapping = false, shared = false;
  std::size_t folded = 0, evaluatedRings = 0, rings = 0;
  const JointPhase joint{w, cache, es, src, dst, group, groupSize, &overlapping, &shared, &folded};
  // A phase over a set of rings: rings tied by groups of several connections together (JointPhase); every other ring
  // through its class of equal rings (RingPhase: durations of its connections alone on their links).
  auto phase = [&](const std::vector<Ring>& set, std::initializer_list<bool> kinds) {
    std::vector<int> parent(set.size());
    std::iota(parent.begin(), parent.end(), 0);
    auto root = [&](int x) {
      while (parent[static_cast<std::size_t>(x)] != x) x = parent[static_cast<std::size_t>(x)];
      return x;
    };
    std::unordered_map<int, int> ringOfGroup;
    std::vector<char> tied(set.size(), 0);
    for (std::size_t k = 0; k < set.size(); ++k) {
      for (std::size_t q = 0; q < set[k].ranks.size(); ++q) {
        const int g = group[set[k].firstFlow + q];
        if (groupSize[static_cast<std::size_t>(g)] < 2) continue;
        tied[k] = 1;
        const auto [it, fresh] = ringOfGroup.try_emplace(g, static_cast<int>(k));
        if (!fresh) parent[static_cast<std::size_t>(root(static_cast<int>(k)))] = root(it->second);
      }
    }
    std::map<int, std::vector<const Ring*>> clusters;
    for (std::size_t k = 0; k < set.size(); ++k) {
      if (tied[k]) clusters[root(static_cast<int>(k))].push_back(&set[k]);
    }
    for (const auto& [r, members] : clusters) {
      joint.run(members, kinds, gate);
      evaluatedRings += members.size() * kinds.size();
    }
    rings += set.size() * kinds.size();
    for (const bool reduce : kinds) {
      std::unordered_map<std::string, std::vector<double>> classes;
      std::vector<double> next(gate);
      for (std::size_t k = 0; k < set.size(); ++k) {
        if (tied[k]) continue;
        const Ring& ring = set[k];
        const std::size_t m = ring.ranks.size(), base = ring.len / m;
        std::vector<int> fs(src.begin() + static_cast<std::ptrdiff_t>(ring.firstFlow),
                            src.begin() + static_cast<std::ptrdiff_t>(ring.firstFlow + m));
        std::vector<int> fd(dst.begin() + static_cast<std::ptrdiff_t>(ring.firstFlow),
                            dst.begin() + static_cast<std::ptrdiff_t>(ring.firstFlow + m));
        // Each connection alone on its links, with the protocol's step latency and wire bytes (World::wire).
        auto alone = [&](std::size_t blockBytes) {
          std::vector<std::uint64_t> onWire(m, blockBytes);
          std::vector<double> delay(m, 0);
          for (std::size_t q = 0; q < m; ++q) {
            const Wire wire = w.wire(fs[q], fd[q], blockBytes);
            onWire[q] = wire.bytes;
            delay[q] = wire.delay;
          }
          std::vector<int> own(m);
          std::iota(own.begin(), own.end(), 0);
          std::vector<double> d = cache.durations(fs, fd, onWire, {}, own, static_cast<int>(m));
          for (std::size_t q = 0; q < m; ++q) d[q] += delay[q];
          return d;
        };
        const std::vector<double> small = alone(base * es);
        const std::vector<double> large = ring.len % m == 0 ? small : alone((base + 1) * es);
        std::vector<Position> in(m);
        for (std::size_t q = 0; q < m; ++q) {
          in[q] =
              Position{small[q], large[q], w.reduceRate(ring.ranks[q]), gate[static_cast<std::size_t>(ring.ranks[q])]};
        }
        std::string key(reinterpret_cast<const char*>(in.data()), m * sizeof(Position));
        key.append(reinterpret_cast<const char*>(&ring.len), sizeof ring.len);
        auto [it, fresh] = classes.try_emplace(std::move(key));
        if (fresh) {
          it->second = RingPhase{ring.len, es, reduce, &overlapping, &folded}.run(in);
          ++evaluatedRings;
        }
        for (std::size_t q = 0; q < m; ++q) next[static_cast<std::size_t>(ring.ranks[q])] = it->second[q];
      }
      for (std::size_t k = 0; k < set.size(); ++k) {
        if (tied[k]) continue;
        for (int r : set[k].ranks) gate[static_cast<std::size_t>(r)] = next[static_cast<std::size_t>(r)];
      }
    }
  };
  if (L > 1) phase(intra, {true});
  if (H > 1) phase(inter, {true, false});
  if (L > 1) phase(intra, {false});

  SimResult res;
  res.method = "hierarchical-model";
  res.seconds = *std::max_element(gate.begin(), gate.end());
  res.exact = !overlapping && !shared;
  res.note = fmt::format("{} of {} ring positions evaluated ({} of {} ring phases; the rest equal by symmetry)", folded,
                         2 * (nu * (L > 1 ? 1 : 0) + (H > 1 ? nu : 0)), evaluatedRings, rings);
  if (shared) res.note += "; flows of consecutive steps share links at the same time";
  if (overlapping) res.note += "; reductions of one rank overlap (a transfer ends before the previous reduction)";
  res.transfers = 2 * nu * (L - 1 + H - 1);
  res.ops = 2 * res.transfers;
  res.simulatedActivities = w.activities() - before;
  res.patterns = cache.patterns();
  return res;
}

}  // namespace collbench::sim::detail
