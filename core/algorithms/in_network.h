#pragma once
// Shared by the algorithms whose reduction runs in a switch across hosts (nvls_tree.cc, collnet.cc): the ranks of
// each host, NCCL's buffer slots for switch ops, NCCL's chunk cascade, and the cost model's view of the switch that
// serves a group of ranks.
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "builder.h"
#include "collbench/cost_model.h"
#include "models/cost_context.h"

namespace collbench::algo {

/// Chunks of one lane in flight: NCCL_STEPS (NCCL 2.28 src/include/device.h), the slots of a connection's buffer.
inline constexpr std::size_t kNcclSteps = 8;

/// The ranks of each host (rank order, hosts in the order of their index). Throws Error{InvalidArgument} naming
/// `algorithm` when p.rankHost does not give every rank's host, or when hosts hold different numbers of ranks.
std::vector<std::vector<int>> ranksByHost(const CollectiveSpec& spec, const AlgoParams& p, std::string_view algorithm);

/// The local rank `local` of every host, in host order: a rail (same local index, same NIC) across hosts.
std::vector<int> railOf(const std::vector<std::vector<int>>& hosts, std::size_t local);

/// The order of one root's switch ops per lane (a chunk stream of one channel), as NCCL's warps process a lane's
/// chunks one after the other: the load (SwitchReduce) of loop i follows the load of loop i - 1, and reuses the
/// buffer slot of loop i - kNcclSteps, so it waits for that loop's store (Multicast); stores go in order. Op ids are
/// the root's, so a lane has one root.
class SwitchSlots {
 public:
  explicit SwitchSlots(std::size_t lanes)
      : slots_(lanes, std::vector<OpId>(kNcclSteps, kNoOp)), lastLoad_(lanes, kNoOp) {}
  OpId slotFree(std::size_t lane, std::size_t loop) const { return slots_[lane][loop % kNcclSteps]; }
  OpId previousLoad(std::size_t lane) const { return lastLoad_[lane]; }
  OpId previousStore(std::size_t lane, std::size_t loop) const {
    return slots_[lane][(loop + kNcclSteps - 1) % kNcclSteps];
  }
  void loaded(std::size_t lane, OpId load) { lastLoad_[lane] = load; }
  void stored(std::size_t lane, std::size_t loop, OpId store) { slots_[lane][loop % kNcclSteps] = store; }

 private:
  std::vector<std::vector<OpId>> slots_;
  std::vector<OpId> lastLoad_;
};

/// The loads of one chunk [at, at+len) of a lane: every member of switch group `group` issues a SwitchReduce to
/// `root` of its `partial` range (after ready[m]; the root also after its previous load and once its slot is free).
/// Returns them in the order of `members`.
std::vector<OpId> switchLoads(ScheduleBuilder& b, SwitchSlots& slots, std::size_t lane, std::size_t loop, int group,
                              const std::vector<int>& members, int root, BufRef partial, std::size_t at,
                              std::size_t len, const std::vector<OpId>& ready, int channel);
/// The stores of that chunk: every member issues a Multicast from `root` into its output (after after[m]; the root
/// also after its previous store), and the root's store takes the chunk's slot. Returns them in the order of
/// `members`.
std::vector<OpId> switchStores(ScheduleBuilder& b, SwitchSlots& slots, std::size_t lane, std::size_t loop, int group,
                               const std::vector<int>& members, int root, std::size_t at, std::size_t len,
                               const std::vector<OpId>& after, int channel);

/// NCCL's chunk cascade: starting from `chunkBytes`, each (factor, floor) step halves the chunk while it is above
/// `floor` and `bytes` < factor x `concurrent` x chunk (src/enqueue.cc, per algorithm). At least one element.
std::size_t cascadeChunkElems(std::size_t chunkBytes, std::size_t bytes, std::size_t concurrent, std::size_t elemSize,
                              std::initializer_list<std::pair<double, std::size_t>> steps);

/// The switch that performs a group's switch ops as the cost model sees it (validator.h switchOfRanks), with the
/// members' routes to it: the longest latency and the slowest link, and its reduction rate.
struct SwitchPath {
  int sw = -1;
  double latencyUs = 0;
  double linkBytesPerUs = 0;
  double reduceBytesPerUs = 0;
};
/// The path of `ranks`' switch, or nullopt with `why` saying what is missing (`what` names the switch's role).
std::optional<SwitchPath> reducingSwitch(const CostContext& ctx, const std::vector<int>& ranks, std::string_view what,
                                         std::string& why);
/// The path of `ranks` to switch node `sw` (one that reduces), its rates at the call's share of them
/// (CostContext::switchShare).
SwitchPath switchPath(const CostContext& ctx, const std::vector<int>& ranks, int sw);
/// Latency and bottleneck (bytes/us) of the route between two ranks.
std::pair<double, double> routeOf(const CostContext& ctx, int a, int b);

/// An unsupported estimate saying why.
Estimate unsupportedEstimate(std::string why);

}  // namespace collbench::algo
