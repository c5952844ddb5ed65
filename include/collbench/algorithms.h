#pragma once
/// Stateless schedule generators. Each handles any rank count and element count (0 included).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/schedule.h"

namespace collbench {

struct AlgoParams {
  /// Pipelining granularity; 0 = the algorithm's default (see kDefaultTreeChunkBytes and friends).
  std::size_t chunkBytes = 0;
  /// Independent parallel lanes (NCCL channels); the data is split evenly across them.
  int channels = 1;
  /// Host (node) of each rank, for hierarchical algorithms; filled from the topology's "host" fields.
  std::vector<int> rankHost;
};

/// Broadcast/reduce chains and trees pipeline in chunks of this size unless told otherwise. 512 KiB: NCCL's
/// default chunk for the Simple protocol is of this order (NCCL_BUFFSIZE 4 MiB / 8 steps).
inline constexpr std::size_t kDefaultPipelineChunkBytes = 512 * 1024;

using Generator = std::function<Schedule(const CollectiveSpec&, const AlgoParams&)>;

struct AlgorithmInfo {
  std::string name;       ///< e.g. "ring"
  Collective collective;  ///< what it implements
  std::string summary;    ///< one line for --help and plan
  Generator build;
  bool native = false;  ///< a peer library's own call, run only by its backend (baseline in the same harness)
};

/// Every generator, in a stable order.
const std::vector<AlgorithmInfo>& algorithms();
/// Names of the algorithms implementing `c`.
std::vector<std::string> algorithmNames(Collective c);
/// Finds (collective, name); throws Error{InvalidArgument} listing the valid names.
const AlgorithmInfo& findAlgorithm(Collective c, std::string_view name);
/// Validates the spec and builds the schedule.
Schedule buildSchedule(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params = {});

/// The ring of `channel`: position -> rank; every ring algorithm sends from position q to q+1. With one host (or no
/// rankHost) it is 0..n-1 for every channel. With several hosts each host's ranks stay consecutive (one entry into
/// and one exit from every host, as NCCL's rings), and channel c starts host h at its local rank (c - h) mod size:
/// host h's ring leaves from the local index host h+1 enters at, so consecutive channels use different GPUs (and on
/// rail-optimized clusters different NICs and rails) for the inter-host hops, as NCCL spreads its channels over NICs.
std::vector<int> ringOrder(int nranks, const AlgoParams& params, int channel);

/// Throws Error{InvalidArgument} for nranks < 1, root out of range, channels < 1.
void checkSpec(const CollectiveSpec& spec, const AlgoParams& params);

}  // namespace collbench
