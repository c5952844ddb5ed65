#pragma once
// Process-mode support for the CLI: backends that run one rank per process ("gloo") get their world from the
// cluster resolver (TF_CONFIG, Slurm, MPI environment) here, in tools/, so that backend libraries never depend on
// strategy/. Also the per-process buffers and cross-process sums `perf` needs in that mode, and the Open MPI
// baseline (`perf --algo mpi`, which runs collbench-mpi-allreduce under mpirun).
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>

#include "collbench/backend.h"
#include "collbench/reference.h"
#include "collbench/strategy/cluster_resolver.h"

namespace collbench::cli {

struct PerfConfig;

/// Backends that run one rank per process.
bool isProcessBackend(std::string_view backend);

/// BackendOptions for a process backend (keys in backend/host/process_world.h): rank, world, addresses and task
/// names from makeClusterResolverFromEnvironment(); token from COLLBENCH_CLUSTER_TOKEN, else derived from the
/// cluster spec; timeout from COLLBENCH_TIMEOUT_SECONDS when set, else `timeoutSeconds` (the command's -T) when given:
/// it bounds rendezvous too, so a missing worker is reported after it. Throws Error{InvalidArgument} for a ps task or
/// an invalid TF_CONFIG (the resolver's message).
BackendOptions processWorldOptions(const strategy::EnvLookup& env = strategy::systemEnvironment(),
                                   std::optional<double> timeoutSeconds = std::nullopt);

/// One perf row's buffers in this process: every rank's (RankBufferSet) for thread and simulator backends, only
/// `localRank`'s for a process backend (localRank >= 0), laid out the same way.
class PerfBuffers {
 public:
  PerfBuffers(const CollectiveSpec& spec, bool inPlace, int localRank);
  const Buffers& views() const { return local_ ? localViews_ : all_->views(); }
  void fill();
  /// Wrong elements among the ranks this process holds.
  std::size_t countWrong() const;

 private:
  CollectiveSpec spec_;
  int rank_;
  std::optional<RankBufferSet> all_;
  bool local_ = false;
  std::unique_ptr<std::byte[]> in_, out_;
  std::size_t inBytes_ = 0, outBytes_ = 0, allocBytes_ = 0;
  Buffers localViews_;
};

/// `value` summed over every process of the backend's world (a one-element all-reduce through the backend itself);
/// `value` unchanged when the backend holds every rank in this process.
long long sumOverProcesses(Backend& backend, long long value, bool processMode, double timeoutSeconds);

/// `collbench perf --algo mpi`: runs the MPI_Allreduce driver (collbench-mpi-allreduce, next to this executable or
/// at $COLLBENCH_MPI_DRIVER) under `mpirun -np <-g>` with the same size, iteration, check, type and op flags, and
/// copies its nccl-tests table to `out`; COLLBENCH_MPIRUN_ARGS adds mpirun flags ("--mca btl self,tcp"). Returns the
/// driver's exit code.
int runMpiPerf(const PerfConfig& c, std::FILE* out);

}  // namespace collbench::cli
