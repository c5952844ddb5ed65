#pragma once
/// What the backend registry (backend.h) knows beyond the factories, filled by the same register functions: each
/// backend's capabilities (device, ranks per process, native algorithms), and what each backend library can read
/// about the machine. Tools and the strategy ask here rather than include a backend's header or test its name.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/backend.h"

namespace collbench {

/// Where a backend's ranks run.
enum class DeviceKind {
  Cpu,        ///< CPU threads or processes of this machine
  Gpu,        ///< GPUs of this machine
  Simulated,  ///< a model of a topology; no device is touched
};

/// How many of the world's ranks one process of a backend executes.
enum class RanksPerProcess {
  All,  ///< every rank in this process (threads, streams, simulated actors); Buffers has nranks entries
  One,  ///< one rank per process, started by a launcher (`collbench launch`); Buffers has this rank's entry
  /// One rank per process when a launcher described a cluster of several workers (TF_CONFIG, Slurm, MPI),
  /// otherwise every rank in this process.
  OneWhenLaunched,
};

/// What a backend declares about itself when it registers, so that tools and the strategy decide by property rather
/// than by the backend's name. The defaults describe a CPU backend that runs every rank in one process.
struct BackendCapabilities {
  DeviceKind device = DeviceKind::Cpu;
  RanksPerProcess ranksPerProcess = RanksPerProcess::All;
  /// What Backend::movesData() returns on every instance: false when buffers are never touched (simulators).
  bool movesData = true;
  /// Every rank runs on one device (device index 0 in rank listings), e.g. several ranks' streams on one GPU.
  bool sharedDevice = false;
  /// The "topology" option's value when none is given (simulated backends); empty when the backend takes none.
  std::string defaultTopology;
  /// The native algorithms (AlgorithmInfo::native: a peer library's own call, e.g. "nccl", "gloo_ring") this backend
  /// runs; every backend that moves data runs collbench's own schedules besides.
  std::vector<std::string> nativeAlgorithms;
  /// The most ranks the backend runs (0: no bound of its own), and why, for the one-line refusal of a larger world.
  int maxRanks = 0;
  std::string maxRanksReason;
};

/// Admission of a world size: throws Error{InvalidArgument} naming `flag`, the ranks asked for, the backend's bound
/// and its reason when `nranks` exceeds capabilities.maxRanks.
void admitRanks(std::string_view backend, int nranks, std::string_view flag);

/// registerBackend (backend.h) with the backend's capabilities (there: the defaults). A second registration under
/// `name` replaces the first, capabilities included.
void registerBackend(std::string name, std::string summary, BackendFactory factory, BackendCapabilities capabilities);
/// The capabilities backend `name` registered with; throws Error{InvalidArgument} listing the registered backends
/// when there is no backend of that name (the message makeBackend gives).
BackendCapabilities backendCapabilities(std::string_view name);
/// The capabilities of backend `name`, or nullopt when none of that name is registered (names such as `tune`'s
/// "model" that are not backends).
std::optional<BackendCapabilities> findBackendCapabilities(std::string_view name);

/// The native algorithm that runs NCCL's own collective (core/algorithms registers it as AlgorithmInfo::native; a
/// backend that runs it lists it in BackendCapabilities::nativeAlgorithms).
inline constexpr std::string_view kNcclNativeAlgorithm = "nccl";

/// The native algorithms of backend `name` (BackendCapabilities::nativeAlgorithms: none for backends that declared
/// none); throws Error{InvalidArgument} listing the registered backends when there is no backend of that name.
std::vector<std::string> backendNativeAlgorithms(std::string_view name);

/// What a backend library can read about this machine for run records (perf -J "environment"): "gpu", "gpu_count",
/// "driver", "nccl_version", ... A probe leaves out what it cannot read; it must not crash or throw on a machine
/// without the hardware (a probe that throws anyway contributes nothing).
using EnvironmentProbe = std::function<std::map<std::string, std::string>()>;
/// Registered by a backend library's register function; a second registration under `library` replaces the first.
void registerEnvironmentProbe(std::string library, EnvironmentProbe probe);
/// Every registered probe's fields, merged in registration order.
std::map<std::string, std::string> probeEnvironment();

}  // namespace collbench
