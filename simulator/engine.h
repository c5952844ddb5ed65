#pragma once
// The simulation methods behind Simulator (sim_backend.h explains each). Internal to simulator/.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "collbench/schedule.h"
#include "sim_backend.h"
#include "world.h"

namespace collbench::sim::detail {

/// Every transfer and reduction as its own SimGrid activity; `groupSwitch` is the switch node of each switch group
/// (validateOnTopology), empty when the schedule has none.
SimResult simulateExact(World& w, const Schedule& s, const Matching& m, bool timeline,
                        const std::vector<int>& groupSwitch = {});
/// The dependency graph evaluated batch by batch: the transfers that can start once the previous batch finished are
/// split into contention groups, each distinct group is simulated once, and identical groups reuse its times.
SimResult simulateAggregated(World& w, const Schedule& s, const Matching& m, bool timeline);
/// Ring all-reduce evaluated step by step without a schedule (the aggregated method, streamed).
SimResult simulateRingModel(World& w, const CollectiveSpec& spec, const AlgoParams& params);

/// Per-flow times of contention groups, simulated once per distinct group. A group is a set of flows that share
/// links, each with its start time; its key describes it completely (start offsets from the group's first flow,
/// flow sizes, each flow's links by their bandwidth and latency, and which flows share which link), so two groups
/// with one key behave identically in SimGrid.
class GroupCache {
 public:
  GroupCache(World& w, bool crossTraffic) : world_(w), crossTraffic_(crossTraffic) {}
  /// Durations of the flows (src, dst, bytes, start time) of several link-disjoint groups; `start` may be empty (all
  /// together). `group[i]` numbers the group of flow i (0..groups-1). Simulates the groups not seen before, at once.
  std::vector<double> durations(const std::vector<int>& src, const std::vector<int>& dst,
                                const std::vector<std::uint64_t>& bytes, const std::vector<double>& start,
                                const std::vector<int>& group, int groups);
  std::size_t patterns() const { return cache_.size(); }

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint64_t>& k) const;
  };
  World& world_;
  bool crossTraffic_;
  std::unordered_map<std::vector<std::uint64_t>, std::vector<double>, KeyHash> cache_;
};

/// Numbers the groups of flows (src[i] -> dst[i]) that share a directed link, transitively (with cross-traffic, the
/// reverse routes count too); returns the group count.
int contentionGroups(World& w, const std::vector<int>& src, const std::vector<int>& dst, bool crossTraffic,
                     std::vector<int>& group);

}  // namespace collbench::sim::detail
