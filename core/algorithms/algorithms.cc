#include "collbench/algorithms.h"

#include <fmt/ranges.h>

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
  return {std::move(name), c, std::move(summary),
          [n](const CollectiveSpec& spec, const AlgoParams&) { return nativeSchedule(spec, n); }, true};
}

}  // namespace

const std::vector<AlgorithmInfo>& algorithms() {
  using C = Collective;
  static const std::vector<AlgorithmInfo> kAll = {
      {"ring", C::AllReduce, "ring reduce-scatter + all-gather, 2(n-1) steps, bandwidth optimal", algo::ringAllReduce},
      {"tree", C::AllReduce, "NCCL double binary tree, pipelined in chunks, log-depth latency", algo::treeAllReduce},
      {"recursive_doubling", C::AllReduce, "log2(n) full-buffer exchanges, latency optimal for small messages",
       algo::recursiveDoublingAllReduce},
      {"rabenseifner", C::AllReduce, "recursive-halving reduce-scatter + recursive-doubling all-gather",
       algo::rabenseifnerAllReduce},
      {"direct", C::AllReduce, "all-to-all reduce-scatter + all-gather, one step each way", algo::directAllReduce},
      {"hierarchical", C::AllReduce, "ring reduce-scatter in each host, ring all-reduce across hosts, all-gather",
       algo::hierarchicalAllReduce},
      {"ring", C::ReduceScatter, "ring reduce-scatter, n-1 steps", algo::ringReduceScatter},
      {"ring", C::AllGather, "ring all-gather, n-1 steps", algo::ringAllGather},
      {"ring", C::Broadcast, "pipelined chain from the root around the ring", algo::chainBroadcast},
      {"ring", C::Reduce, "pipelined chain around the ring ending at the root", algo::chainReduce},
      {"dissemination", C::Barrier, "ceil(log2 n) rounds of zero-byte messages", algo::disseminationBarrier},
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

void checkSpec(const CollectiveSpec& spec, const AlgoParams& params) {
  if (spec.nranks < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("number of ranks must be at least 1, got {}", spec.nranks));
  }
  if (spec.root < 0 || spec.root >= spec.nranks) {
    throw Error(Errc::InvalidArgument,
                fmt::format("root {} is not a rank of {} (valid: 0..{})", spec.root, spec.nranks, spec.nranks - 1));
  }
  if (params.channels < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("channels must be at least 1, got {}", params.channels));
  }
}

Schedule buildSchedule(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params) {
  checkSpec(spec, params);
  return findAlgorithm(spec.kind, algorithm).build(spec, params);
}

}  // namespace collbench
