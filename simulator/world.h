#pragma once
// The SimGrid side of the simulator: one engine and one platform per process (SimGrid allows a single engine per
// process and seals its platform at the first run, so Simulator runs each simulation in a forked child that builds
// a World, see isolate.h). Internal to simulator/.
#include <cstdint>
#include <functional>
#include <optional>
#include <simgrid/s4u.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "collbench/nccl_model.h"
#include "collbench/schedule.h"
#include "collbench/topology.h"
#include "collbench/wire_rule.h"
#include "sim_backend.h"

namespace collbench::sim::detail {

/// One direction of a topology link: link index * 2 + (0 when a->b, 1 when b->a).
using DirLink = int;
inline DirLink dirLink(const Hop& h) { return h.link * 2 + (h.forward ? 0 : 1); }

/// What one transfer costs on the wire under the run's protocol (sim_backend.h "Protocols").
struct Wire {
  std::uint64_t bytes = 0;  ///< bytes on the wire: data bytes / the protocol's payload efficiency
  double delay = 0;         ///< seconds of the protocol's latency beyond the route's before the transfer starts
};
/// How transfers choose their protocol (collbench/wire_rule.h, shared with the cost model).
using WireRule = collbench::WireRule;

/// Platform built from a Topology: a SimGrid host per node that carries ranks, a SPLITDUPLEX link per topology link
/// (bandwidth capped by the per-port limit switch_GBps of a switch at either end; switches themselves are not
/// resources, so a non-blocking switch adds no contention), and a bypass route per communicating node pair,
/// installed on first use along Router's path.
class World {
 public:
  /// The three legs of a switch op's data (sim_backend.h): a member's bytes up to the switch, the switch's bytes down
  /// to a member (multicast), and reduced bytes down to the root, through the switch's per-port reduction rate.
  enum class SwitchLeg { Up, Down, ReducedDown };

  /// Creates the process's SimGrid engine: call once per process.
  World(const Topology& topology, int nranks, const SimConfig& config, WireRule wire = {});
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int nranks() const { return nranks_; }
  const SimConfig& config() const { return config_; }
  const Topology& topology() const { return topo_; }
  /// Directed links from rank a's node to rank b's node (empty when they share a node).
  const std::vector<DirLink>& route(int a, int b);
  /// Computes the routes of these rank pairs source by source (Router keeps a few BFS trees; asking in random order
  /// would redo one per pair).
  void prefetchRoutes(std::vector<std::pair<int, int>> pairs);
  bool sameNode(int a, int b) const { return router_.rankNode(a) == router_.rankNode(b); }
  /// Reduction (and local copy) throughput of the rank's node in bytes/s; 0 means infinitely fast.
  double reduceRate(int rank) const;
  double bandwidth(DirLink l) const { return linkBandwidth_[static_cast<std::size_t>(l / 2)]; }
  double latency(DirLink l) const { return linkLatency_[static_cast<std::size_t>(l / 2)]; }
  int hostIndex(int rank) const { return rankHost_[static_cast<std::size_t>(rank)]; }
  int hostOfNode(int node) const { return nodeHost_[static_cast<std::size_t>(node)]; }

  /// Whether transfers pay a protocol (wire() is the identity otherwise).
  bool wireActive() const { return wire_.active; }
  /// The wire cost of `bytes` from rank src to rank dst (different nodes) under the rule (WireRule): the protocol's
  /// efficiency, and its latency on the route's path class (the worst of its links' wirePathOf) less the route's own
  /// latency, which SimGrid's links charge. Records the protocol for launchFloor().
  Wire wire(int src, int dst, std::uint64_t bytes);
  /// Seconds the call pays once: NCCL's base latency of the fixed protocol, or of the slowest-to-launch protocol the
  /// transfers timed so far used under the point-to-point rule (LL's when none), or NCCL's NVLS latency when switch
  /// ops ran (noteSwitchOps) and it is larger; 0 without a protocol.
  double launchFloor() const;
  /// The call performs switch ops (NVLS, SHARP): NCCL models their latency once per call, not per step (tuning.cc:
  /// NVLS latency = its hwLatency, no per-step term), so launchFloor() covers it.
  void noteSwitchOps() { switchOps_ = true; }
  /// Bytes a leg of a switch op through switch node `sw` moves for `bytes` data bytes: bytes / WireRule::switchShare
  /// (an in-host NVSwitch's NVLS at NCCL's share of the link rate under a protocol; otherwise unchanged).
  std::uint64_t switchBytes(int sw, std::uint64_t bytes) const;

  double now() const { return simgrid::s4u::Engine::get_clock(); }
  /// Starts a transfer between the nodes of two ranks (not the same node) after `delay` seconds; `tag` comes back in
  /// the completion handler.
  void startComm(int src, int dst, std::uint64_t bytes, std::uint64_t tag, double delay = 0);
  /// Starts a transfer between node `lower` (a rank's node, or a switch that reduces or multicasts) and switch node
  /// `sw` (one that reduces or multicasts) along Router's path; ReducedDown also crosses the switch's reduction port
  /// toward `lower` (reduce_GBps).
  void startSwitchComm(int lower, int sw, SwitchLeg leg, std::uint64_t bytes, std::uint64_t tag);
  /// The directed links of that leg: Router's path from `lower` up to the switch, or from the switch down.
  std::vector<DirLink> switchRoute(int lower, int sw, SwitchLeg leg) const;
  /// The nodes of Router's path from node `from` to node `to`, both included.
  std::vector<int> pathNodes(int from, int to) const;
  int rankNode(int rank) const { return router_.rankNode(rank); }
  /// Reducing switches' ports: the directed link leaving the switch -> the rate (bytes/s) at which the switch delivers
  /// reduced bytes on it (reduce_GBps), which ReducedDown legs cross besides the link.
  const std::unordered_map<DirLink, double>& reducePortRates() const { return reducePortRate_; }
  /// Starts `bytes` of reduction work on the rank's node (shared with the node's other executions).
  void startExec(int rank, double bytes, std::uint64_t tag);
  /// Runs the engine until no activity is left, calling `onDone(tag)` at each completion (activities may be started
  /// from the handler).
  void run(const std::function<void(std::uint64_t)>& onDone);

  /// Simulates the given flows alone on an idle network, flow i starting `offset[i]` seconds after the first (all at
  /// once when `offset` is empty); returns their durations from their own start (latency included). Pairs must be on
  /// different nodes.
  std::vector<double> simulateTogether(const std::vector<std::pair<int, int>>& pairs,
                                       const std::vector<std::uint64_t>& bytes, const std::vector<double>& offset = {});

  std::size_t activities() const { return activities_; }

 private:
  struct Delayed {
    int src, dst;
    std::uint64_t bytes, tag;
  };
  void startNow(int src, int dst, std::uint64_t bytes, std::uint64_t tag);
  void installRoute(int srcRank, int dstRank);
  /// A free slot of live_ for an activity carrying `tag`.
  std::size_t takeSlot(std::uint64_t tag);
  void completed(const simgrid::s4u::Activity& a);

  const Topology& topo_;
  SimConfig config_;
  Router router_;
  int nranks_;
  simgrid::s4u::NetZone* zone_ = nullptr;
  std::vector<simgrid::s4u::Host*> hosts_;  // by host index
  simgrid::s4u::Host* sleeper_ = nullptr;   // keeps the engine running until delayed flows start
  simgrid::s4u::ExecPtr sleeping_;
  std::vector<int> rankHost_;           // rank -> host index
  std::vector<int> nodeHost_;           // topology node -> host index, -1 without ranks
  std::vector<double> hostReduceRate_;  // bytes/s, 0 = infinite
  std::vector<simgrid::s4u::SplitDuplexLink*> links_;
  // Switches that reduce or multicast: node -> host index of the switch as a transfer end, and of its reduction
  // output (where it reduces); DirLink leaving a reducing switch -> that port's reduction resource.
  std::unordered_map<int, int> switchHost_, switchReduceHost_;
  std::unordered_map<int, simgrid::s4u::Link*> reducePort_;
  std::unordered_map<DirLink, double> reducePortRate_;
  std::unordered_map<std::uint64_t, bool> switchRoutes_;            // (lower node << 32 | switch node) << 2 | leg
  std::vector<double> linkBandwidth_, linkLatency_;                 // bytes/s and s, after switch caps
  std::unordered_map<std::uint64_t, std::vector<DirLink>> routes_;  // src rank << 32 | dst rank
  std::unordered_map<std::uint64_t, bool> installed_;               // src node << 32 | dst node
  std::vector<simgrid::s4u::ActivityPtr> live_;                     // slot -> running activity
  std::vector<std::uint64_t> liveTag_;
  std::vector<std::size_t> freeSlots_;
  std::vector<simgrid::s4u::ActivityPtr> finished_;  // released one callback later (SimGrid still holds them)
  const std::function<void(std::uint64_t)>* onDone_ = nullptr;
  std::size_t activities_ = 0;
  WireRule wire_;
  std::vector<NcclPath> linkPath_;                    // topology link -> its path class (Nvl, Pxb for PCIe, Net)
  bool switchOps_ = false;                            // switch ops ran: the floor is at least NCCL's NVLS latency
  bool usedSimple_ = false;                           // the point-to-point rule chose Simple for some transfer
  simgrid::s4u::Host* delayHost_ = nullptr;           // runs the bounded executions that delay transfers
  std::unordered_map<std::size_t, Delayed> delayed_;  // slot of a delaying execution -> the transfer it starts
};

}  // namespace collbench::sim::detail
