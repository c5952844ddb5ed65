#pragma once
/// The backend interface every executor implements, and the registry that finds them by name.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/schedule.h"

namespace collbench {

/// One rank's user buffers. For an in-place call, input and output point into the same allocation at the offsets
/// CollectiveSpec::inPlace*Offset gives. Simulated backends accept null pointers (they move no data).
struct RankBuffers {
  const void* input = nullptr;
  void* output = nullptr;
};
/// One entry per rank this process executes (all ranks for thread and simulator backends).
using Buffers = std::vector<RankBuffers>;

/// Default bound on how long a rank waits for a peer before failing (CommunicationOptions.timeout_seconds).
inline constexpr double kDefaultTimeoutSeconds = 60.0;

struct RunOptions {
  int iterations = 1;  ///< timed repetitions; RunResult::seconds is their mean
  int warmup = 0;      ///< untimed repetitions before
  double timeoutSeconds = kDefaultTimeoutSeconds;
};

/// What a run reports. Simulated backends have no data, so `wrong` is only meaningful on real ones.
struct RunResult {
  double seconds = 0;               ///< mean seconds per iteration (mean over ranks when rankSeconds is filled)
  std::vector<double> rankSeconds;  ///< per rank, where the backend has a clock per rank (nccl-tests -a)
  std::string algorithm;
  std::size_t wrong = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int nranks() const = 0;
  /// False for simulators: buffers are not touched and results cannot be checked.
  virtual bool movesData() const { return true; }
  /// Runs one schedule on every rank (or this process's ranks); throws Error on timeout or fault.
  virtual RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) = 0;
};

/// Free-form options a backend understands ("topology" for the simulator, "timeout" ...).
using BackendOptions = std::map<std::string, std::string>;
using BackendFactory = std::function<std::unique_ptr<Backend>(int nranks, const BackendOptions&)>;

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
};

/// Registry filled explicitly by each backend library's register function (called by the composition root). A second
/// registration under `name` replaces the first.
void registerBackend(std::string name, std::string summary, BackendFactory factory,
                     BackendCapabilities capabilities = {});
std::unique_ptr<Backend> makeBackend(std::string_view name, int nranks, const BackendOptions& options = {});
/// (name, summary) of every registered backend.
std::vector<std::pair<std::string, std::string>> backendNames();
/// The capabilities backend `name` registered with; throws Error{InvalidArgument} listing the registered backends
/// when there is no backend of that name (the message makeBackend gives).
BackendCapabilities backendCapabilities(std::string_view name);
/// The capabilities of backend `name`, or nullopt when none of that name is registered (names such as `tune`'s
/// "model" that are not backends).
std::optional<BackendCapabilities> findBackendCapabilities(std::string_view name);

}  // namespace collbench
