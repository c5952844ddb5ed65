// Contention groups and their cache: the heart of the aggregated methods. A step's flows are split into groups that
// share directed links; a group's outcome in SimGrid depends only on what its key records, so each distinct key is
// simulated once.
#include <algorithm>
#include <bit>
#include <numeric>

#include "collbench/error.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

int findRoot(std::vector<int>& parent, int x) {
  while (parent[static_cast<std::size_t>(x)] != x) {
    parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    x = parent[static_cast<std::size_t>(x)];
  }
  return x;
}

}  // namespace

std::size_t GroupCache::KeyHash::operator()(const std::vector<std::uint64_t>& k) const {
  // FNV-1a over the words: keys are short and compared in full on collisions.
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t v : k) {
    h ^= v;
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h);
}

int contentionGroups(World& w, const std::vector<int>& src, const std::vector<int>& dst, bool crossTraffic,
                     std::vector<int>& group) {
  const std::size_t n = src.size();
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::unordered_map<DirLink, int> owner;
  owner.reserve(n * 4);
  auto use = [&](int flow, DirLink l) {
    auto [it, inserted] = owner.try_emplace(l, flow);
    if (!inserted) {
      const int a = findRoot(parent, flow), b = findRoot(parent, it->second);
      if (a != b) parent[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (DirLink l : w.route(src[i], dst[i])) use(static_cast<int>(i), l);
    // SimGrid's cross-traffic loads the reverse route with the acknowledgements.
    if (crossTraffic) {
      for (DirLink l : w.route(dst[i], src[i])) use(static_cast<int>(i), l);
    }
  }
  group.assign(n, -1);
  std::vector<int> rootGroup(n, -1);
  int groups = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int r = findRoot(parent, static_cast<int>(i));
    int& g = rootGroup[static_cast<std::size_t>(r)];
    if (g < 0) g = groups++;
    group[i] = g;
  }
  return groups;
}

std::vector<double> GroupCache::durations(const std::vector<int>& src, const std::vector<int>& dst,
                                          const std::vector<std::uint64_t>& bytes, const std::vector<double>& start,
                                          const std::vector<int>& group, int groups) {
  const std::size_t n = src.size();
  std::vector<std::vector<int>> members(static_cast<std::size_t>(groups));
  for (std::size_t i = 0; i < n; ++i) members[static_cast<std::size_t>(group[i])].push_back(static_cast<int>(i));
  // Offsets from each group's first start.
  std::vector<double> offset(n, 0);
  if (!start.empty()) {
    std::vector<double> first(static_cast<std::size_t>(groups), 0);
    std::vector<bool> seen(static_cast<std::size_t>(groups), false);
    for (std::size_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::size_t>(group[i]);
      first[g] = seen[g] ? std::min(first[g], start[i]) : start[i];
      seen[g] = true;
    }
    for (std::size_t i = 0; i < n; ++i) offset[i] = start[i] - first[static_cast<std::size_t>(group[i])];
  }

  std::vector<double> out(n, 0);
  // Groups whose key is new: simulated together (they are link-disjoint, so they do not interact).
  struct Pending {
    std::vector<std::uint64_t> key;
    std::vector<int> flows;  // canonical order
    std::vector<int> sameKeyGroups;
  };
  std::vector<Pending> pending;
  std::unordered_map<std::vector<std::uint64_t>, std::size_t, KeyHash> pendingIndex;
  std::vector<std::vector<int>> canonical(static_cast<std::size_t>(groups));

  for (int g = 0; g < groups; ++g) {
    std::vector<int>& fl = members[static_cast<std::size_t>(g)];
    // Canonical order: by size, then by the parameters of the links along the route; ties keep their order.
    auto signature = [&](int f) {
      std::vector<std::uint64_t> sig{std::bit_cast<std::uint64_t>(offset[static_cast<std::size_t>(f)]),
                                     bytes[static_cast<std::size_t>(f)]};
      for (DirLink l : world_.route(src[static_cast<std::size_t>(f)], dst[static_cast<std::size_t>(f)])) {
        sig.push_back(std::bit_cast<std::uint64_t>(world_.bandwidth(l)));
        sig.push_back(std::bit_cast<std::uint64_t>(world_.latency(l)));
      }
      return sig;
    };
    if (fl.size() > 1) {
      std::vector<std::pair<std::vector<std::uint64_t>, int>> sigs;
      sigs.reserve(fl.size());
      for (int f : fl) sigs.emplace_back(signature(f), f);
      std::stable_sort(sigs.begin(), sigs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (std::size_t i = 0; i < fl.size(); ++i) fl[i] = sigs[i].second;
    }
    // Key: the flows in canonical order, each with its offset, its size and its links relabelled by first appearance.
    std::vector<std::uint64_t> key{fl.size()};
    std::unordered_map<DirLink, std::uint64_t> label;
    for (int f : fl) {
      const auto& route = world_.route(src[static_cast<std::size_t>(f)], dst[static_cast<std::size_t>(f)]);
      key.push_back(std::bit_cast<std::uint64_t>(offset[static_cast<std::size_t>(f)]));
      key.push_back(bytes[static_cast<std::size_t>(f)]);
      key.push_back(route.size());
      for (DirLink l : route) {
        auto [it, inserted] = label.try_emplace(l, label.size());
        key.push_back(it->second);
        key.push_back(std::bit_cast<std::uint64_t>(world_.bandwidth(l)));
        key.push_back(std::bit_cast<std::uint64_t>(world_.latency(l)));
      }
      if (crossTraffic_) {
        const auto& back = world_.route(dst[static_cast<std::size_t>(f)], src[static_cast<std::size_t>(f)]);
        key.push_back(back.size());
        for (DirLink l : back) {
          auto [it, inserted] = label.try_emplace(l, label.size());
          key.push_back(it->second);
          key.push_back(std::bit_cast<std::uint64_t>(world_.bandwidth(l)));
          key.push_back(std::bit_cast<std::uint64_t>(world_.latency(l)));
        }
      }
    }
    canonical[static_cast<std::size_t>(g)] = fl;
    auto hit = cache_.find(key);
    if (hit != cache_.end()) {
      for (std::size_t i = 0; i < fl.size(); ++i) out[static_cast<std::size_t>(fl[i])] = hit->second[i];
      continue;
    }
    auto [pit, inserted] = pendingIndex.try_emplace(key, pending.size());
    if (inserted) pending.push_back(Pending{std::move(key), fl, {}});
    pending[pit->second].sameKeyGroups.push_back(g);
  }
  if (pending.empty()) return out;

  std::vector<std::pair<int, int>> pairs;
  std::vector<std::uint64_t> sizes;
  std::vector<double> offsets;
  bool anyOffset = false;
  for (const Pending& p : pending) {
    for (int f : p.flows) {
      pairs.emplace_back(src[static_cast<std::size_t>(f)], dst[static_cast<std::size_t>(f)]);
      sizes.push_back(bytes[static_cast<std::size_t>(f)]);
      offsets.push_back(offset[static_cast<std::size_t>(f)]);
      anyOffset = anyOffset || offsets.back() > 0;
    }
  }
  const std::vector<double> simulated =
      world_.simulateTogether(pairs, sizes, anyOffset ? offsets : std::vector<double>{});
  std::size_t at = 0;
  for (Pending& p : pending) {
    std::vector<double> d(simulated.begin() + static_cast<std::ptrdiff_t>(at),
                          simulated.begin() + static_cast<std::ptrdiff_t>(at + p.flows.size()));
    at += p.flows.size();
    for (int g : p.sameKeyGroups) {
      const auto& fl = canonical[static_cast<std::size_t>(g)];
      for (std::size_t i = 0; i < fl.size(); ++i) out[static_cast<std::size_t>(fl[i])] = d[i];
    }
    cache_.emplace(std::move(p.key), std::move(d));
  }
  return out;
}

}  // namespace collbench::sim::detail
