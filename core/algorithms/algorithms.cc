#include "collbench/algorithms.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>

#include "collbench/error.h"
#include "generators.h"

namespace collbench {

namespace {

Schedule nativeSchedule(const CollectiveSpec& spec, std::string name) {
  Schedule s;
  s.spec = spec;
  s.algorithm = std::move(name);
  s.ranks.resize(static_cast<std::size_t>(spec.nranks));
  s.native = true;
  return s;
}

AlgorithmInfo native(std::string name, Collective c, std::string summary) {
  const std::string n = name;
  return {.name = std::move(name),
          .collective = c,
          .summary = std::move(summary),
          .build = [n](const CollectiveSpec& spec, const AlgoParams&) { return nativeSchedule(spec, n); },
          .native = true,
          .traits = {.defaultModel = false}};
}

/// The rank counts `t` admits, in words.
std::string rankLimits(const AlgorithmTraits& t) {
  std::string s = fmt::format("at least {}", t.minRanks);
  if (t.maxRanks > 0) s += fmt::format(", at most {}", t.maxRanks);
  if (t.powerOfTwo) s += ", a power of two";
  return s;
}

}  // namespace

const std::vector<AlgorithmInfo>& algorithms() {
  using C = Collective;
  static const std::vector<AlgorithmInfo> kAll = {
      algo::ringAllReduceAlgorithm(),
      algo::treeAllReduceAlgorithm(),
      algo::recursiveDoublingAlgorithm(),
      algo::rabenseifnerAlgorithm(),
      algo::directAlgorithm(),
      algo::hierarchicalAlgorithm(),
      algo::ringReduceScatterAlgorithm(),
      algo::ringAllGatherAlgorithm(),
      algo::chainBroadcastAlgorithm(),
      algo::chainReduceAlgorithm(),
      algo::disseminationBarrierAlgorithm(),
      algo::ringBidirAllReduceAlgorithm(),
      algo::nvlsAlgorithm(),
      algo::nvlsTreeAlgorithm(),
      algo::collnetDirectAlgorithm(),
      algo::collnetChainAlgorithm(),
      // Peer libraries' own implementations, measured in the same harness (backends nccl, gloo, mpi).
      native("nccl", C::AllReduce, "ncclAllReduce (nccl backends; NCCL_ALGO/NCCL_PROTO apply)"),
      native("nccl", C::ReduceScatter, "ncclReduceScatter (nccl backends)"),
      native("nccl", C::AllGather, "ncclAllGather (nccl backends)"),
      native("nccl", C::Broadcast, "ncclBroadcast (nccl backends)"),
      native("nccl", C::Reduce, "ncclReduce (nccl backends)"),
      native("gloo_ring", C::AllReduce, "gloo::AllreduceRing (gloo backend)"),
      native("gloo_ring_chunked", C::AllReduce, "gloo::AllreduceRingChunked (gloo backend)"),
      native("gloo_halving_doubling", C::AllReduce, "gloo::AllreduceHalvingDoubling (gloo backend)"),
      native("gloo_bcube", C::AllReduce, "gloo::AllreduceBcube (gloo backend)"),
      native("mpi", C::AllReduce, "MPI_Allreduce of Open MPI (collbench-mpi-allreduce under mpirun)"),
  };
  return kAll;
}

std::vector<std::string> algorithmNames(Collective c) {
  std::vector<std::string> names;
  for (const auto& a : algorithms()) {
    if (a.collective == c) names.push_back(a.name);
  }
  return names;
}

const AlgorithmInfo& findAlgorithm(Collective c, std::string_view name) {
  for (const auto& a : algorithms()) {
    if (a.collective == c && a.name == name) return a;
  }
  throw Error(Errc::InvalidArgument, fmt::format("unknown algorithm '{}' for {} (available: {})", name, toString(c),
                                                 fmt::join(algorithmNames(c), ", ")));
}

bool AlgorithmTraits::admits(int nranks) const {
  if (nranks < minRanks || (maxRanks > 0 && nranks > maxRanks)) return false;
  return !powerOfTwo || std::has_single_bit(static_cast<unsigned>(nranks));
}

std::size_t estimateTransfers(const AlgorithmInfo& info, const CollectiveSpec& spec, const AlgoParams& params) {
  const auto n = static_cast<std::size_t>(std::max(spec.nranks, 0));
  if (n <= 1) return 0;
  return info.traits.transfers ? info.traits.transfers(spec, params) : n * n;  // unknown: every pair once
}

void checkSpec(const CollectiveSpec& spec, const AlgoParams& params) {
  if (spec.nranks < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("number of ranks must be at least 1, got {}", spec.nranks));
  }
  if (spec.root < 0 || spec.root >= spec.nranks) {
    throw Error(Errc::InvalidArgument,
                fmt::format("root {} is not a rank of {} (valid: 0..{})", spec.root, spec.nranks, spec.nranks - 1));
  }
  const std::size_t bytes = spec.count * spec.elementSize();
  if (params.chunkBytes > 0 && bytes / std::max(params.chunkBytes, spec.elementSize()) > kMaxPipelineChunks) {
    throw Error(Errc::InvalidArgument,
                fmt::format("chunks of {} B cut the call's {} B into more than {} pipeline chunks; use larger chunks",
                            params.chunkBytes, bytes, kMaxPipelineChunks));
  }
  if (params.channels < 1 || params.channels > kMaxChannels) {
    throw Error(Errc::InvalidArgument,
                fmt::format("channels must be 1..{} (NCCL's MAXCHANNELS), got {}", kMaxChannels, params.channels));
  }
}

Schedule buildSchedule(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params) {
  checkSpec(spec, params);
  const AlgorithmInfo& info = findAlgorithm(spec.kind, algorithm);
  if (!info.traits.admits(spec.nranks)) {
    throw Error(Errc::InvalidArgument, fmt::format("algorithm '{}' cannot run {} ranks ({})", info.name, spec.nranks,
                                                   rankLimits(info.traits)));
  }
  Schedule s = info.build(spec, params);
  // Generators set the protocol through their ScheduleBuilder; this covers one that builds its schedule otherwise.
  if (!s.native && !s.protocol) s.protocol = params.protocol;
  return s;
}

}  // namespace collbench
