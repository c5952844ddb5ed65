#pragma once
/// Stateless schedule generators. Each handles any rank count and element count (0 included).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/schedule.h"

namespace collbench {

struct AlgoParams {
  /// Pipelining granularity; 0 = the algorithm's default (see kDefaultTreeChunkBytes and friends).
  std::size_t chunkBytes = 0;
  /// Independent parallel lanes (NCCL channels); the data is split evenly across them. At most kMaxChannels.
  int channels = 1;
  /// Host (node) of each rank, for hierarchical algorithms; filled from the topology's "host" fields.
  std::vector<int> rankHost;
  /// Wire protocol of the schedule (Schedule::protocol, timing only); nullopt: the backend's default.
  std::optional<Protocol> protocol = std::nullopt;
};

/// The most channels a schedule has: NCCL's MAXCHANNELS (src/include/device.h, 64), the most NCCL builds.
inline constexpr int kMaxChannels = 64;

/// The most pipeline chunks a call is cut into (its bytes / chunk_bytes): 16 Mi. The simulator steps a ring's rounds
/// one by one (2 M rounds of 8 ranks in about a second); a schedule holds every chunk's ops.
inline constexpr std::size_t kMaxPipelineChunks = std::size_t{1} << 24;

/// Broadcast/reduce chains and trees pipeline in chunks of this size unless told otherwise. 512 KiB: NCCL's
/// default chunk for the Simple protocol is of this order (NCCL_BUFFSIZE 4 MiB / 8 steps).
inline constexpr std::size_t kDefaultPipelineChunkBytes = 512 * 1024;

using Generator = std::function<Schedule(const CollectiveSpec&, const AlgoParams&)>;

class CostContext;  // the cost model's building blocks (core/models/cost_context.h)
struct Estimate;    // collbench/cost_model.h
/// An algorithm's closed form in the alpha-beta-gamma model: its time for `spec` (count > 0, or a barrier) without
/// the per-call overhead, which the model adds.
using CostFn = Estimate (*)(const CostContext& ctx, const CollectiveSpec& spec, const AlgoParams& params);
/// Upper bound of the transfers the generator emits for `spec` (empty blocks are elided there, not here): what the
/// simulator weighs before building a schedule.
using TransferFn = std::size_t (*)(const CollectiveSpec& spec, const AlgoParams& params);
/// Hops one chunk of a pipeline travels from its first send to its last receive.
using TripFn = std::size_t (*)(const CollectiveSpec& spec, const AlgoParams& params);

/// What the cost model, the simulator, the tuner, the selector and the CLI need to know of an algorithm besides its
/// schedule, so that none of them names algorithms.
struct AlgorithmTraits {
  /// Slices of each channel pipelined in chunks of AlgoParams::chunkBytes (tree: its two trees; chains: one); 0 when
  /// the algorithm is not a pipeline. The simulator extrapolates pipelines with many chunks from a window of them.
  int pipelineSlices = 0;
  bool usesChunkBytes = false;  ///< the generator reads AlgoParams::chunkBytes (the tuner sweeps it)
  bool usesChannels = false;    ///< the generator reads AlgoParams::channels (the tuner sweeps it)
  /// Needs AlgoParams::rankHost (the topology's hosts): left out where no topology says where ranks live.
  bool needsHosts = false;
  /// Emits switch ops (SwitchReduce, Multicast): runs only where a switch reduces in the network (a topology switch
  /// with reduce_GBps > 0: NVLS, SHARP) on the simulator or NCCL; the host backends refuse it, the cost model
  /// marks it unsupported elsewhere.
  bool needsSwitchReduction = false;
  /// Offered by the cost model when there is no topology (CostModel::defaultFlat). Off for algorithms that model
  /// flatters on an ideal flat switch (direct: n-1 concurrent flows per rank cost nothing extra there), that need
  /// hosts, or that match another one there; the model then picks recursive doubling for latency-bound sizes and
  /// Rabenseifner above, as MPICH does (Thakur, Rabenseifner, Gropp 2005).
  bool defaultModel = true;
  /// The schedule is the ring the simulator times in closed form at scale (simulator/ring_model.cc).
  bool simRingModel = false;
  /// The schedule is the host-then-rail ring all-reduce the simulator times without building it at scale
  /// (simulator/hierarchical_model.cc).
  bool simHierarchicalModel = false;
  /// The schedule is `tree` all-reduce, whose extrapolation windows the simulator evaluates without building them on
  /// its fluid network (simulator/tree_model.cc).
  bool simTreeModel = false;
  int minRanks = 1;                ///< smallest rank count the generator accepts
  int maxRanks = 0;                ///< largest rank count the generator accepts; 0 = no limit
  bool powerOfTwo = false;         ///< only power-of-two rank counts
  TransferFn transfers = nullptr;  ///< nullptr: assume every pair exchanges once (n^2)
  /// Pipelines whose chunks share links with the chunks in flight beside them (a tree all-reduce: up its deepest path
  /// and down again): the simulator's extrapolation reads the period before the window's last trip, whose rounds
  /// finish early for lack of followers. nullptr: log2 n hops.
  TripFn pipelineTrip = nullptr;

  /// Whether the generator accepts `nranks` ranks (minRanks, maxRanks, powerOfTwo).
  bool admits(int nranks) const;
  /// Whether the simulator may time a call without building its schedule (its ring model, pipeline extrapolation or
  /// hierarchical model), which calls above kMaterializeTransferLimit transfers need.
  bool timedWithoutSchedule() const { return simRingModel || pipelineSlices > 0 || simHierarchicalModel; }
};

/// Schedules are built (rather than timed without one by the simulator) up to this many transfers: a ring all-reduce
/// schedule holds two ops per transfer at about 150 bytes each, so this is about 1.2 GB.
inline constexpr std::size_t kMaterializeTransferLimit = 4000000;

struct AlgorithmInfo {
  std::string name;       ///< e.g. "ring"
  Collective collective;  ///< what it implements
  std::string summary;    ///< one line for --help and plan
  Generator build;
  bool native = false;     ///< a peer library's own call, run only by its backend (baseline in the same harness)
  CostFn cost = nullptr;   ///< nullptr for native algorithms: the model has no closed form for them
  AlgorithmTraits traits;  ///< what callers may ask of the algorithm without naming it
};

/// Every generator, in a stable order.
const std::vector<AlgorithmInfo>& algorithms();
/// Names of the algorithms implementing `c`.
std::vector<std::string> algorithmNames(Collective c);
/// Finds (collective, name); throws Error{InvalidArgument} listing the valid names.
const AlgorithmInfo& findAlgorithm(Collective c, std::string_view name);
/// The transfers `info` would emit for `spec` (AlgorithmTraits::transfers; n^2 without an estimate).
std::size_t estimateTransfers(const AlgorithmInfo& info, const CollectiveSpec& spec, const AlgoParams& params);
/// Validates the spec (rank-count limits of the algorithm included) and builds the schedule.
Schedule buildSchedule(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params = {});

/// The ring of `channel`: position -> rank; every ring algorithm sends from position q to q+1. With one host (or no
/// rankHost) it is 0..n-1 for every channel. With several hosts each host's ranks stay consecutive (one entry into
/// and one exit from every host, as NCCL's rings), and channel c starts host h at its local rank (c - h) mod size:
/// host h's ring leaves from the local index host h+1 enters at, so consecutive channels use different GPUs (and on
/// rail-optimized clusters different NICs and rails) for the inter-host hops, as NCCL spreads its channels over NICs.
std::vector<int> ringOrder(int nranks, const AlgoParams& params, int channel);

/// `tree` all-reduce runs this many trees (NCCL's double binary tree), each carrying its share of the data on every
/// channel: schedule channel t x channels + c is tree t's channel c.
inline constexpr int kTreeCount = 2;
/// Tree `tree`'s parent of every rank (-1 at its root) on schedule `channel`. Without hosts, or on one host, the double
/// binary tree over ranks. On several hosts NCCL's shape: the double binary tree over hosts, and inside each host a
/// chain through its GPUs whose first GPU talks to the parent and child hosts; channel c starts every host's chain at
/// its local rank c mod size (core/algorithms/tree.cc has the sources).
std::vector<int> treeParents(int nranks, const AlgoParams& params, int tree, int channel);

/// The ranks of each host in rank order, hosts in the order of their index (AlgoParams::rankHost).
std::vector<std::vector<int>> groupByHost(const std::vector<int>& rankHost);

/// Throws Error{InvalidArgument} for nranks < 1, root out of range, channels < 1.
void checkSpec(const CollectiveSpec& spec, const AlgoParams& params);

}  // namespace collbench
