#pragma once
// Process-mode support for the CLI: backends that run one rank per process (RanksPerProcess) get their world from the
// cluster resolver (TF_CONFIG, Slurm, MPI environment) here, in tools/, so that backend libraries never depend on
// strategy/. Also the per-process buffers and cross-process sums `perf` needs in that mode, and the Open MPI
// baseline (`perf --algo mpi`, which runs collbench-mpi-allreduce under mpirun).
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/backend.h"
#include "collbench/reference.h"
#include "collbench/strategy/cluster_resolver.h"

namespace collbench::cli {

struct PerfConfig;

/// Whether backend `backend` runs one rank per process here (BackendCapabilities::ranksPerProcess: One, or
/// OneWhenLaunched with a launched cluster of several workers in `env`); false for a name no backend registered.
bool oneRankPerProcess(std::string_view backend, const strategy::EnvLookup& env = strategy::systemEnvironment());

/// The registered simulated backends (DeviceKind::Simulated) for messages, joined by " or "; "a simulated backend"
/// when none is linked in.
std::string simulatedBackendNames();

/// Whether a launcher described a cluster to this process: TF_CONFIG (collbench launch), Slurm or mpirun variables.
/// Without one the cluster resolver falls back to a world of one.
bool clusterEnvironmentPresent(const strategy::EnvLookup& env = strategy::systemEnvironment());

/// BackendOptions for a process backend (keys in rendezvous/process_world.h): rank, world, addresses and task
/// names from makeClusterResolverFromEnvironment(); token from COLLBENCH_CLUSTER_TOKEN, else derived from the
/// cluster spec; timeout from COLLBENCH_TIMEOUT_SECONDS when set, else `timeoutSeconds` (the command's -T) when given:
/// it bounds rendezvous too, so a missing worker is reported after it. Throws Error{InvalidArgument} for a ps task or
/// an invalid TF_CONFIG (the resolver's message).
BackendOptions processWorldOptions(const strategy::EnvLookup& env = strategy::systemEnvironment(),
                                   std::optional<double> timeoutSeconds = std::nullopt);

/// The process id of every rank of a process backend (one all-reduce through it, so every process calls this at the
/// same point); `rank` is this process's rank.
std::vector<long long> pidsOfRanks(Backend& backend, int rank, double timeoutSeconds);

/// `collbench perf --algo mpi`: runs the MPI_Allreduce driver (collbench-mpi-allreduce, next to this executable or
/// at $COLLBENCH_MPI_DRIVER) under `mpirun -np <-g>` with the same size, iteration, check, type and op flags, and
/// copies its nccl-tests table to `out`; COLLBENCH_MPIRUN_ARGS adds mpirun flags ("--mca btl self,tcp"). Flags the
/// driver cannot honour (another collective or backend, a type MPI has no reduction for here, --topology,
/// --channels, --chunk-bytes) are rejected before mpirun starts; a failed mpirun is one Error{BackendError} line that
/// names the log holding mpirun's full output. -J gets the rows of the driver's table. Returns the driver's exit code.
int runMpiPerf(const PerfConfig& c, std::FILE* out);

// ---- The nccl backend with one rank per process (kept apart from the gloo code above) ----

/// The NCCL unique id that every rank of a one-rank-per-process world must share (the nccl backend's
/// NcclIdExchange, given the options of processWorldOptions()): rank 0 creates it with `newId` and publishes it in
/// the rendezvous store it serves at option "master" (the gloo backend's TCP store, with its token) until every other
/// rank has fetched it; the others fetch it there. Waits at most option "timeout" seconds (default
/// kDefaultTimeoutSeconds). World 1: newId(), no store. Throws Error{Timeout} naming the rank that did not come:
/// on rank 0 the first rank that has not fetched the id, elsewhere rank 0; Error{Unsupported} for store=file:...
std::string exchangeNcclId(const BackendOptions& world, const std::function<std::string()>& newId);

}  // namespace collbench::cli
