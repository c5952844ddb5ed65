#pragma once
/// The backend interface every executor implements, and the registry that finds them by name.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
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
  /// One call of `algorithm` for `spec` on a backend that moves no data, which may time it without building the
  /// schedule (the simulator's data-free methods for schedules too large to build). Every command that simulates
  /// reaches this, so one question gets one method. The default builds the schedule and runs it once.
  virtual RunResult runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params,
                                 const RunOptions& opt);
  /// One line on what `algorithm` does for `spec` on this backend, for the reasons of run headers and -J rows (the
  /// sim backend's emulated NCCL choice: "NCCL 2.28: NVLS/Simple, 16 channels ..."); "" where there is nothing to say.
  virtual std::string describeCall(const CollectiveSpec&, std::string_view) const { return ""; }
};

/// Free-form options a backend understands ("topology" for the simulator, "timeout" ...).
using BackendOptions = std::map<std::string, std::string>;
using BackendFactory = std::function<std::unique_ptr<Backend>(int nranks, const BackendOptions&)>;

/// Registry filled explicitly by each backend library's register function (called by the composition root).
void registerBackend(std::string name, std::string summary, BackendFactory factory);
std::unique_ptr<Backend> makeBackend(std::string_view name, int nranks, const BackendOptions& options = {});
/// (name, summary) of every registered backend.
std::vector<std::pair<std::string, std::string>> backendNames();

}  // namespace collbench
