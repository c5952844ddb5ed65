#pragma once
// The simulation methods behind Simulator (sim_backend.h explains each). Internal to simulator/.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collbench/schedule.h"
#include "sim_backend.h"
#include "world.h"

namespace collbench::sim::detail {

/// Reusable buffers of sharedRouteDurationsInto (a ring step solves thousands of small groups).
struct SharedRouteScratch {
  std::vector<std::size_t> order, active, still;
  std::vector<double> left;
};

/// Every transfer and reduction as its own SimGrid activity; `groupSwitch` is the switch node of each switch group
/// (validateOnTopology), empty when the schedule has none.
SimResult simulateExact(World& w, const Schedule& s, const Matching& m, bool timeline,
                        const std::vector<int>& groupSwitch = {});
/// The dependency graph evaluated batch by batch: the transfers that can start once the previous batch finished are
/// split into contention groups, each distinct group is simulated once, and identical groups reuse its times.
SimResult simulateAggregated(World& w, const Schedule& s, const Matching& m, bool timeline);
/// The dependency graph timed by an event-driven fluid model instead of SimGrid (fluid.cc): CM02's latency phase and
/// penalties, each flow at its smallest weighted share of its links (no max-min redistribution). Needs CM02 without
/// cross-traffic; the result is never marked exact. Switch ops' legs are flows like transfers (`groupSwitch` as for
/// simulateExact).
SimResult simulateFluid(World& w, const Schedule& s, const Matching& m, bool timeline,
                        const std::vector<int>& groupSwitch = {});
/// Ring all-reduce evaluated step by step without a schedule (the aggregated method, streamed).
SimResult simulateRingModel(World& w, const CollectiveSpec& spec, const AlgoParams& params);
/// Hierarchical all-reduce evaluated without a schedule as three gated ring phases (hierarchical_model.cc), one ring
/// per class of equal rings and one period of each; nullopt where its conditions do not hold (a link carries two
/// connections, ranks share a node, an empty block, hosts of different sizes): then the schedule is simulated.
std::optional<SimResult> simulateHierarchicalModel(World& w, const CollectiveSpec& spec, const AlgoParams& params);

/// A pipeline's extrapolation window (simulator.cc extrapolate): the time of each round (the last transfer or
/// reduction of chunk k of any slice), and the wire bytes per round of its busiest directed link over the link's
/// bandwidth (no round is shorter).
struct PipelineWindow {
  double seconds = 0;
  std::vector<double> roundEnd;
  double busiestRoundSeconds = 0;
  std::string method;
  std::size_t simulatedActivities = 0, patterns = 0;
};
/// The channels of `tree` the tree model simulates, and the capacity they get of what they share with the others.
/// NCCL's channels of one tree differ only by where each host's chain starts (treeParents), hence by the rail they
/// take; on a rail-optimized fabric each channel's network links are its own, and the channels share only their
/// hosts' NVLink and reductions, which they load alike. There one channel in kChannelsPerRepresentative stands for the
/// next ones: a resource keeps the part of its capacity that the simulated channels' connections are of all of its
/// connections, so each simulated flow gets the share its channel's would. Not exact: flows of several channels on one
/// GPU's NVLink are at different points of their pipelines, and where one waits the others take its share; the
/// simulated flow cannot (measured against every channel simulated: simulator/README.md `tree-model`; tested by
/// TreeModel.RepresentedChannels).
struct TreeChannels {
  /// Channel c of a tree is simulated when c % every == 0 (every 1: all, and the shares below are empty).
  int every = 1;
  std::vector<double> linkShare;  ///< per directed link, 0 where no simulated connection crosses it
  std::vector<double> hostShare;  ///< per host (World::hostIndex): of its reductions and copies
  int simulatedPerTree(int channels) const { return (channels + every - 1) / every; }
};
/// Channels of one tree one simulated channel stands for.
inline constexpr int kChannelsPerRepresentative = 4;
/// Chunks per channel, in trips of a chunk up its tree and down again (AlgorithmTraits::pipelineTrip), from which one
/// channel stands for others. In the pipeline's fill and drain a GPU's NVLink carries fewer channels' flows than in
/// its steady state, and the others would take the idle ones' share; the simulated flow, held to its channel's share,
/// cannot. The error falls with the trips the pipeline is long: about 6 % / trips with 4 channels and 12 % / trips
/// with 8 (multi_node 16 servers, a 22-hop trip, x4: 32 / 64 / 128 / 256 chunks read +4.0 / +2.2 / +1.0 / +0.5 %; x8,
/// 128 chunks: +2.0 %; 2048 servers, a 36-hop trip, 1 GiB: x4 256 chunks -1.1 %, x8 128 chunks +3.7 %).
inline constexpr std::size_t kRepresentedTrips = 6;
/// The channels to simulate for `tree` with params.channels channels on `w`: one in kChannelsPerRepresentative, or
/// all where the network links the simulated ones cross are shared with the others (a fabric that is not
/// rail-optimized, or NICs shared by GPUs) on more than kSharedNetworkLinks of them.
TreeChannels representTreeChannels(World& w, const CollectiveSpec& spec, const AlgoParams& params);
/// A window of `tree` all-reduce (chunks of one size, spec.count / (kTreeCount x channels x window) elements each)
/// on the fluid network without its schedule (tree_model.cc), of the channels `channels` says; with all of them, equal
/// to simulateFluid on the window's schedule. Needs CM02 without cross-traffic, like the fluid method.
PipelineWindow simulateTreeWindow(World& w, const CollectiveSpec& spec, const AlgoParams& params, std::size_t window,
                                  const TreeChannels& channels = {});

/// Per-flow times of contention groups, simulated once per distinct group. A group is a set of flows that share
/// links, each with its start time; its key describes it completely (start offsets from the group's first flow,
/// flow sizes, each flow's links by their bandwidth and latency, and which flows share which link), so two groups
/// with one key behave identically in SimGrid.
class GroupCache {
 public:
  GroupCache(World& w, bool crossTraffic)
      : world_(w), crossTraffic_(crossTraffic), closedForm_(!crossTraffic && w.config().model == NetworkModel::CM02) {}
  /// Durations of the flows (src, dst, bytes, start time) of several link-disjoint groups; `start` may be empty (all
  /// together). `group[i]` numbers the group of flow i (0..groups-1). Simulates the groups not seen before, at once.
  std::vector<double> durations(const std::vector<int>& src, const std::vector<int>& dst,
                                const std::vector<std::uint64_t>& bytes, const std::vector<double>& start,
                                const std::vector<int>& group, int groups);
  /// durations() for a sequence of steps over the same flows and groups (`sameFlows`: src, dst and group are the
  /// previous call's): a group whose start offsets (from its first start) and sizes equal the previous call's keeps
  /// its times without building its key, which is a function of exactly these and of the unchanged routes. The
  /// result equals durations().
  /// The reference stays valid until the next call.
  const std::vector<double>& stepDurations(const std::vector<int>& src, const std::vector<int>& dst,
                                           const std::vector<std::uint64_t>& bytes, const std::vector<double>& start,
                                           const std::vector<int>& group, int groups, bool sameFlows);
  std::size_t patterns() const { return cache_.size(); }
  /// The structure of flows (src, dst) taken in this order: each route's links relabelled by first appearance, with
  /// their bandwidths and latencies (and the reverse routes' under cross-traffic). Groups of equal structure whose
  /// flows have equal offsets and sizes, flow for flow, have equal durations.
  std::vector<std::uint64_t> structure(const std::vector<std::pair<int, int>>& flows);

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint64_t>& k) const;
  };
  /// True when every flow of the group takes one route: nothing else uses its links, so under CM02 max-min sharing
  /// (no cross-traffic, equal sharing penalties) each flow waits its route's latency and then gets an equal share of
  /// the route's slowest link, a processor-sharing queue solved in closed form (sharedRouteDurations).
  static bool sameRoute(const std::vector<const std::vector<DirLink>*>& routes, const std::vector<int>& flows);
  void closedFormGroup(const std::vector<const std::vector<DirLink>*>& routes, const std::vector<double>& offset,
                       const std::vector<std::uint64_t>& bytes, const std::vector<int>& flows,
                       std::vector<double>& out);
  /// A route's latency (sum) and bandwidth (its slowest link).
  std::pair<double, double> routeLatencyBandwidth(const std::vector<DirLink>& route) const;

  /// Appends a route to a key: its length, then per link its label (numbered by first appearance since the last
  /// reset of linkLabel_, recorded in `labelled`), bandwidth and latency.
  void appendLinks(const std::vector<DirLink>& route, std::vector<std::uint64_t>& key, std::uint64_t& labels,
                   std::vector<DirLink>& labelled);

  World& world_;
  bool crossTraffic_;
  bool closedForm_;  // CM02 without cross-traffic: groups of flows on one route have a closed form
  std::unordered_map<std::vector<std::uint64_t>, std::vector<double>, KeyHash> cache_;
  static constexpr std::uint64_t kNoLabel = ~std::uint64_t{0};
  std::unordered_map<std::vector<std::uint64_t>, std::uint64_t, KeyHash> routeClasses_;  // link parameters -> class
  std::vector<std::uint64_t> linkLabel_;  // directed link -> its label in the key being built, kNoLabel outside
  // stepDurations: each group's flows (stepFlows_ from stepBegin_[g] to stepBegin_[g + 1]) and structure number,
  // structures by key, and times by structure, offsets and sizes.
  std::vector<int> stepFlows_;
  std::vector<std::size_t> stepBegin_;
  std::vector<std::uint64_t> stepStructure_;
  std::vector<const std::vector<DirLink>*> stepRoutes_;
  std::vector<char> stepClosedForm_;
  std::unordered_map<std::vector<std::uint64_t>, std::uint64_t, KeyHash> structures_;
  std::unordered_map<std::vector<std::uint64_t>, std::vector<double>, KeyHash> stepMemo_;
  std::vector<double> stepOut_;  // the previous stepDurations call's result, by flow
  // The previous and this call's offsets and sizes, in stepFlows_ order; scratch for closed-form groups.
  std::vector<double> stepOffset_, offsetNow_, closedOut_;
  std::vector<std::uint64_t> stepBytes_, bytesNow_, stepBytesByFlow_;  // ... and the previous call's sizes by flow
  SharedRouteScratch sharedScratch_;
};

/// Durations (latency included, from each flow's own start) of flows that share one route and nothing else: each
/// joins after `latency` seconds and then gets bandwidth / (flows joined and not done) bytes/s.
std::vector<double> sharedRouteDurations(const std::vector<double>& offset, const std::vector<std::uint64_t>& bytes,
                                         double latency, double bandwidth);
/// sharedRouteDurations on m flows into out[0..m), with reusable buffers; the same arithmetic, so the same times.
void sharedRouteDurationsInto(const double* offset, const std::uint64_t* bytes, std::size_t m, double latency,
                              double bandwidth, double* out, SharedRouteScratch& scratch);

/// Numbers the groups of flows (src[i] -> dst[i]) that share a directed link, transitively (with cross-traffic, the
/// reverse routes count too); returns the group count.
int contentionGroups(World& w, const std::vector<int>& src, const std::vector<int>& dst, bool crossTraffic,
                     std::vector<int>& group);

}  // namespace collbench::sim::detail
