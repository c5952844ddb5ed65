#pragma once
/// Proves a schedule is well formed before anything runs it.
#include <vector>

#include "collbench/schedule.h"
#include "collbench/topology.h"

namespace collbench {

struct ValidateOptions {
  /// Also check hazards (unordered conflicting accesses) when input and output alias, NCCL in-place style.
  bool inPlace = false;
  /// The hazard check is quadratic; skip it above this many ops (matching and deadlock checks always run).
  std::size_t hazardCheckMaxOps = 20000;
};

/// Checks: deps point to earlier ops; ranges are in bounds of the spec's input/output and the rank's scratch;
/// reduction ranges are whole elements; every send has a matching receive of equal size on the same channel;
/// the program completes under rendezvous semantics (no deadlock); no two accesses to overlapping bytes where one
/// writes are unordered. Throws Error{InvalidSchedule} whose message names the rank, the op index and the peer.
/// Switch ops: each has a valid group that lists the rank and the root, and matches an op of equal kind, root and
/// bytes on every other member (schedule.h).
void validate(const Schedule& s, const ValidateOptions& opt = {});

/// The switch that performs each switch group's ops on `t` (a node index, one per Schedule::switchGroups): the switch
/// nearest to all of the group's ranks (fewest hops to the farthest member), the one their GPUs hang off (a server's
/// NVSwitch, the fabric switch above several servers); ties go to a switch that reduces or multicasts, then to the
/// lower node index. -1 for a group no switch connects. `t` has at least s.spec.nranks ranks.
std::vector<int> groupSwitches(const Schedule& s, const Topology& t);
/// groupSwitches' choice for one group of ranks on router.topology() (-1 when no switch connects them).
int switchOfRanks(const Router& router, const std::vector<int>& ranks);
/// What validate() cannot know without the network: the switch of every op's group can perform it (a SwitchReduce
/// needs TopoNode::reducesInNetwork(), a Multicast TopoNode::multicasts()). Throws Error{InvalidSchedule} naming the
/// first op that cannot run (rank, op index) and the switch; returns groupSwitches(s, t). Call after validate().
std::vector<int> validateOnTopology(const Schedule& s, const Topology& t);

}  // namespace collbench
