// Contention groups and their cache: the heart of the aggregated methods. A step's flows are split into groups that
// share directed links; a group's outcome in SimGrid depends only on what its key records, so each distinct key is
// simulated once.
#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "collbench/error.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

// SimGrid's surf/precision as World sets it (world.cc): flows due within it of an event end with the event.
constexpr double kSharedRoutePrecisionSeconds = 1e-13;
// Groups up to this many flows are ordered by insertion sort (quadratic, but no allocation; NVLink groups have 7).
constexpr std::size_t kInsertionSortFlows = 32;

int findRoot(std::vector<int>& parent, int x) {
  while (parent[static_cast<std::size_t>(x)] != x) {
    parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    x = parent[static_cast<std::size_t>(x)];
  }
  return x;
}

}  // namespace

void sharedRouteDurationsInto(const double* offset, const std::uint64_t* bytes, std::size_t m, double latency,
                              double bandwidth, double* out, SharedRouteScratch& scratch) {
  std::vector<std::size_t>& order = scratch.order;
  order.resize(m);
  std::iota(order.begin(), order.end(), 0);
  // Stable by offset: the order is unique, so a small group's insertion sort (no buffer to allocate) equals it.
  if (m <= kInsertionSortFlows) {
    for (std::size_t i = 1; i < m; ++i) {
      const std::size_t f = order[i];
      std::size_t j = i;
      for (; j > 0 && offset[f] < offset[order[j - 1]]; --j) order[j] = order[j - 1];
      order[j] = f;
    }
  } else {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return offset[a] < offset[b]; });
  }
  std::fill_n(out, m, 0.0);
  std::vector<double>& left = scratch.left;
  left.assign(m, 0);
  std::vector<std::size_t>& active = scratch.active;
  std::vector<std::size_t>& still = scratch.still;
  active.clear();
  std::size_t next = 0;
  double t = 0;
  while (next < m || !active.empty()) {
    // The next event: a flow's latency ends (it joins the sharing) or the active flow with the least bytes left ends.
    const double arrival = next < m ? offset[order[next]] + latency : std::numeric_limits<double>::infinity();
    double finish = std::numeric_limits<double>::infinity();
    const double share = active.empty() ? 0 : bandwidth / static_cast<double>(active.size());
    for (std::size_t f : active) finish = std::min(finish, t + left[f] / share);
    if (arrival <= finish) {
      for (std::size_t f : active) left[f] -= (arrival - t) * share;
      t = arrival;
      const std::size_t f = order[next++];
      left[f] = static_cast<double>(bytes[f]);
      if (left[f] <= 0) {
        out[f] = t - offset[f];
      } else {
        active.push_back(f);
      }
      continue;
    }
    const double least = (finish - t) * share;
    t = finish;
    still.clear();
    for (std::size_t f : active) {
      // Flows due within SimGrid's precision of this event end with it (surf/precision, world.cc).
      if (left[f] - least <= kSharedRoutePrecisionSeconds * share) {
        out[f] = t - offset[f];
      } else {
        left[f] -= least;
        still.push_back(f);
      }
    }
    active.swap(still);
  }
}

std::vector<double> sharedRouteDurations(const std::vector<double>& offset, const std::vector<std::uint64_t>& bytes,
                                         double latency, double bandwidth) {
  std::vector<double> out(offset.size(), 0);
  SharedRouteScratch scratch;
  sharedRouteDurationsInto(offset.data(), bytes.data(), offset.size(), latency, bandwidth, out.data(), scratch);
  return out;
}

void GroupCache::appendLinks(const std::vector<DirLink>& route, std::vector<std::uint64_t>& key, std::uint64_t& labels,
                             std::vector<DirLink>& labelled) {
  key.push_back(route.size());
  for (DirLink l : route) {
    std::uint64_t& label = linkLabel_[static_cast<std::size_t>(l)];
    if (label == kNoLabel) {
      label = labels++;
      labelled.push_back(l);
    }
    key.push_back(label);
    key.push_back(std::bit_cast<std::uint64_t>(world_.bandwidth(l)));
    key.push_back(std::bit_cast<std::uint64_t>(world_.latency(l)));
  }
}

bool GroupCache::sameRoute(const std::vector<const std::vector<DirLink>*>& routes, const std::vector<int>& flows) {
  const auto& first = *routes[static_cast<std::size_t>(flows[0])];
  return std::all_of(flows.begin(), flows.end(), [&](int f) { return *routes[static_cast<std::size_t>(f)] == first; });
}

std::pair<double, double> GroupCache::routeLatencyBandwidth(const std::vector<DirLink>& route) const {
  double latency = 0, bandwidth = std::numeric_limits<double>::infinity();
  for (DirLink l : route) {
    latency += world_.latency(l);
    bandwidth = std::min(bandwidth, world_.bandwidth(l));
  }
  return {latency, bandwidth};
}

void GroupCache::closedFormGroup(const std::vector<const std::vector<DirLink>*>& routes,
                                 const std::vector<double>& offset, const std::vector<std::uint64_t>& bytes,
                                 const std::vector<int>& flows, std::vector<double>& out) {
  const auto [latency, bandwidth] = routeLatencyBandwidth(*routes[static_cast<std::size_t>(flows[0])]);
  std::vector<double> off, d(flows.size());
  std::vector<std::uint64_t> b;
  for (int f : flows) {
    off.push_back(offset[static_cast<std::size_t>(f)]);
    b.push_back(bytes[static_cast<std::size_t>(f)]);
  }
  sharedRouteDurationsInto(off.data(), b.data(), flows.size(), latency, bandwidth, d.data(), sharedScratch_);
  for (std::size_t k = 0; k < flows.size(); ++k) out[static_cast<std::size_t>(flows[k])] = d[k];
}

std::vector<std::uint64_t> GroupCache::structure(const std::vector<std::pair<int, int>>& flows) {
  if (linkLabel_.empty()) linkLabel_.assign(world_.topology().links.size() * 2, kNoLabel);
  std::vector<std::uint64_t> key;
  std::vector<DirLink> labelled;
  std::uint64_t labels = 0;
  for (auto [a, b] : flows) {
    appendLinks(world_.route(a, b), key, labels, labelled);
    if (crossTraffic_) appendLinks(world_.route(b, a), key, labels, labelled);
  }
  for (DirLink l : labelled) linkLabel_[static_cast<std::size_t>(l)] = kNoLabel;
  return key;
}

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

  // Each flow's route and the class of its route's link parameters (bandwidth and latency along it, numbered by
  // first appearance in this cache's lifetime: any fixed numbering gives a canonical order, and the key below
  // records the parameters themselves).
  std::vector<const std::vector<DirLink>*> routes(n), backRoutes(crossTraffic_ ? n : 0);
  std::vector<std::uint64_t> routeClass(n);
  std::vector<std::uint64_t> params;
  for (std::size_t i = 0; i < n; ++i) {
    routes[i] = &world_.route(src[i], dst[i]);
    if (crossTraffic_) backRoutes[i] = &world_.route(dst[i], src[i]);
    params.clear();
    for (DirLink l : *routes[i]) {
      params.push_back(std::bit_cast<std::uint64_t>(world_.bandwidth(l)));
      params.push_back(std::bit_cast<std::uint64_t>(world_.latency(l)));
    }
    routeClass[i] = routeClasses_.try_emplace(params, routeClasses_.size()).first->second;
  }
  if (linkLabel_.empty()) linkLabel_.assign(world_.topology().links.size() * 2, kNoLabel);
  std::vector<DirLink> labelled;
  std::vector<std::uint64_t> key;

  for (int g = 0; g < groups; ++g) {
    std::vector<int>& fl = members[static_cast<std::size_t>(g)];
    if (fl.size() > 1 && closedForm_ && sameRoute(routes, fl)) {
      closedFormGroup(routes, offset, bytes, fl, out);
      continue;
    }
    // Canonical order: by offset, size and route class; ties keep their order.
    if (fl.size() > 1) {
      std::stable_sort(fl.begin(), fl.end(), [&](int a, int b) {
        const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
        if (offset[ua] != offset[ub]) return offset[ua] < offset[ub];
        if (bytes[ua] != bytes[ub]) return bytes[ua] < bytes[ub];
        return routeClass[ua] < routeClass[ub];
      });
    }
    // Key: the flows in canonical order, each with its offset, its size and its links relabelled by first appearance.
    key.assign(1, fl.size());
    std::uint64_t labels = 0;
    auto addLinks = [&](const std::vector<DirLink>& route) { appendLinks(route, key, labels, labelled); };
    for (int f : fl) {
      const auto fu = static_cast<std::size_t>(f);
      key.push_back(std::bit_cast<std::uint64_t>(offset[fu]));
      key.push_back(bytes[fu]);
      addLinks(*routes[fu]);
      if (crossTraffic_) addLinks(*backRoutes[fu]);
    }
    for (DirLink l : labelled) linkLabel_[static_cast<std::size_t>(l)] = kNoLabel;
    labelled.clear();
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

const std::vector<double>& GroupCache::stepDurations(const std::vector<int>& src, const std::vector<int>& dst,
                                                     const std::vector<std::uint64_t>& bytes,
                                                     const std::vector<double>& start, const std::vector<int>& group,
                                                     int groups, bool sameFlows) {
  const std::size_t n = src.size();
  const auto gn = static_cast<std::size_t>(groups);
  const bool comparable = sameFlows && stepOut_.size() == n;
  if (!comparable) {
    // New flows: the groups' members, one group after another (stepFlows_ from stepBegin_[g]), and each group's
    // structure (its flows' links, relabelled by first appearance, in flow order), numbered so that groups of one
    // structure share a number.
    stepOut_.assign(n, 0);
    stepBegin_.assign(gn + 1, 0);
    for (std::size_t i = 0; i < n; ++i) ++stepBegin_[static_cast<std::size_t>(group[i]) + 1];
    std::partial_sum(stepBegin_.begin(), stepBegin_.end(), stepBegin_.begin());
    stepFlows_.resize(n);
    {
      std::vector<std::size_t> fill(stepBegin_.begin(), stepBegin_.end() - 1);
      for (std::size_t i = 0; i < n; ++i) stepFlows_[fill[static_cast<std::size_t>(group[i])]++] = static_cast<int>(i);
    }
    stepStructure_.assign(gn, 0);
    stepRoutes_.resize(n);
    for (std::size_t i = 0; i < n; ++i) stepRoutes_[i] = &world_.route(src[i], dst[i]);
    stepClosedForm_.assign(gn, 0);
    std::vector<int> members;
    for (std::size_t gi = 0; gi < gn; ++gi) {
      members.assign(stepFlows_.begin() + static_cast<std::ptrdiff_t>(stepBegin_[gi]),
                     stepFlows_.begin() + static_cast<std::ptrdiff_t>(stepBegin_[gi + 1]));
      stepClosedForm_[gi] = members.size() > 1 && closedForm_ && sameRoute(stepRoutes_, members) ? 1 : 0;
    }
    std::vector<std::pair<int, int>> flows;
    for (std::size_t gi = 0; gi < gn; ++gi) {
      flows.clear();
      for (std::size_t k = stepBegin_[gi]; k < stepBegin_[gi + 1]; ++k) {
        const auto fu = static_cast<std::size_t>(stepFlows_[k]);
        flows.emplace_back(src[fu], dst[fu]);
      }
      stepStructure_[gi] = structures_.try_emplace(structure(flows), structures_.size()).first->second;
    }
    stepOffset_.clear();
    stepBytes_.clear();
    stepBytesByFlow_.clear();
  }
  // Offsets from each group's first start and sizes, in member order (stepFlows_); sizes are gathered only when
  // they changed (a ring step's usually do not).
  const bool sameBytes = comparable && bytes == stepBytesByFlow_;
  if (!sameBytes) {
    stepBytesByFlow_ = bytes;
    bytesNow_.resize(n);
    for (std::size_t k = 0; k < n; ++k) bytesNow_[k] = bytes[static_cast<std::size_t>(stepFlows_[k])];
  }
  const std::vector<std::uint64_t>& sizes = sameBytes ? stepBytes_ : bytesNow_;
  if (start.empty()) {
    offsetNow_.assign(n, 0);
  } else {
    offsetNow_.resize(n);  // every entry is written below
  }
  const bool compare = comparable && stepOffset_.size() == n;
  // A group whose offsets and sizes equal the previous call's keeps its times; else a group of the same structure
  // with the same offsets and sizes, flow for flow, behaves the same (memo); else its key is built (durations()).
  std::vector<int> subSrc, subDst, subGroup, subFlow;
  std::vector<std::uint64_t> subBytes;
  std::vector<double> subStart;
  std::vector<std::size_t> missed;
  std::vector<std::vector<std::uint64_t>> missedKeys;
  int subGroups = 0;
  std::vector<std::uint64_t> memoKey;
  for (std::size_t gi = 0; gi < gn; ++gi) {
    const std::size_t b = stepBegin_[gi], e = stepBegin_[gi + 1];
    // The group's offsets, while its members are in cache for the comparison below.
    if (!start.empty()) {
      double first = std::numeric_limits<double>::infinity();
      for (std::size_t k = b; k < e; ++k) {
        offsetNow_[k] = start[static_cast<std::size_t>(stepFlows_[k])];
        first = std::min(first, offsetNow_[k]);
      }
      for (std::size_t k = b; k < e; ++k) offsetNow_[k] -= first;
    }
    if (compare) {
      // Bitwise, as the key compares them.
      bool same = true;
      for (std::size_t k = b; same && k < e; ++k) {
        same = std::bit_cast<std::uint64_t>(offsetNow_[k]) == std::bit_cast<std::uint64_t>(stepOffset_[k]) &&
               (sameBytes || sizes[k] == stepBytes_[k]);
      }
      if (same) continue;
    }
    if (stepClosedForm_[gi]) {
      const auto [latency, bandwidth] = routeLatencyBandwidth(*stepRoutes_[static_cast<std::size_t>(stepFlows_[b])]);
      closedOut_.resize(e - b);
      sharedRouteDurationsInto(&offsetNow_[b], &sizes[b], e - b, latency, bandwidth, closedOut_.data(), sharedScratch_);
      for (std::size_t k = b; k < e; ++k) stepOut_[static_cast<std::size_t>(stepFlows_[k])] = closedOut_[k - b];
      continue;
    }
    memoKey.assign(1, stepStructure_[gi]);
    for (std::size_t k = b; k < e; ++k) {
      memoKey.push_back(std::bit_cast<std::uint64_t>(offsetNow_[k]));
      memoKey.push_back(sizes[k]);
    }
    if (auto hit = stepMemo_.find(memoKey); hit != stepMemo_.end()) {
      for (std::size_t k = b; k < e; ++k) stepOut_[static_cast<std::size_t>(stepFlows_[k])] = hit->second[k - b];
      continue;
    }
    const int sub = subGroups++;
    missed.push_back(gi);
    missedKeys.push_back(memoKey);
    for (std::size_t k = b; k < e; ++k) {
      const auto fu = static_cast<std::size_t>(stepFlows_[k]);
      subSrc.push_back(src[fu]);
      subDst.push_back(dst[fu]);
      subBytes.push_back(bytes[fu]);
      if (!start.empty()) subStart.push_back(start[fu]);
      subGroup.push_back(sub);
      subFlow.push_back(stepFlows_[k]);
    }
  }
  if (subGroups > 0) {
    const std::vector<double> d = durations(subSrc, subDst, subBytes, subStart, subGroup, subGroups);
    for (std::size_t j = 0; j < subFlow.size(); ++j) stepOut_[static_cast<std::size_t>(subFlow[j])] = d[j];
    for (std::size_t m = 0; m < missed.size(); ++m) {
      std::vector<double> times;
      for (std::size_t k = stepBegin_[missed[m]]; k < stepBegin_[missed[m] + 1]; ++k) {
        times.push_back(stepOut_[static_cast<std::size_t>(stepFlows_[k])]);
      }
      stepMemo_.try_emplace(std::move(missedKeys[m]), std::move(times));
    }
  }
  std::swap(stepOffset_, offsetNow_);
  if (!sameBytes) std::swap(stepBytes_, bytesNow_);
  return stepOut_;
}

}  // namespace collbench::sim::detail
