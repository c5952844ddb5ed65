#pragma once
/// Sweeps over many cores and a cluster (`tune`, `sweep`, `regret`): a grid's points run in forked worker processes
/// (`-j N`), and a deterministic 1/N of a grid runs per job of a cluster (`--shard K/N`), whose outputs
/// `collbench merge` joins (merge.h). A launcher (Slurm job array, mpirun) starts the jobs; nothing here schedules.
///
/// Why processes, not threads: SimGrid allows one engine per process, and each simulation already runs in a child of
/// its own (simulator/README.md "Processes"), so a worker is a plain fork of the command that owns its grid.
///
/// Typical use:
///   const Shard shard = parseShard("2/4");                        // or "auto": the launcher's rank and size
///   const auto [begin, end] = shard.range(grid.size());           // this job's contiguous block of the grid
///   std::vector<std::size_t> items(end - begin);
///   std::iota(items.begin(), items.end(), begin);
///   const std::vector<std::string> out = runInProcesses(items, [&](std::size_t i) { return encode(run(grid[i])); },
///                                                       ParallelOptions{jobs});
///   // out[k] is item k's result, in the order of `items`, whatever worker ran it.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace collbench {

/// Which 1/count of a grid a job runs (`--shard K/N`, K in 1..N).
///
/// Shard K holds the contiguous block of grid indices [floor((K-1)T/N), floor(KT/N)) of a grid of T points, in the
/// grid's own order (the order a -j 1 run writes). Blocks rather than every N-th point: concatenating the shards'
/// outputs in K order is then the unsharded output, even where a point writes nothing (a tuning point whose every
/// configuration was pruned), so `collbench merge` needs no per-row grid index in the formats.
struct Shard {
  int index = 1;  ///< K (1-based)
  int count = 1;  ///< N
  bool whole() const { return count == 1; }
  /// [begin, end) of this shard's grid indices among `total`.
  std::pair<std::size_t, std::size_t> range(std::size_t total) const;
  /// "K/N" (the records' `shard` field).
  std::string toString() const;
  bool operator==(const Shard&) const = default;
};

/// Reads an environment variable (std::getenv by default; tests pass a map).
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnvironment();

/// Parses `--shard`: "K/N" with 1 <= K <= N, or "auto", which asks the launcher (shardFromEnvironment).
/// Error{InvalidArgument} "--shard '<text>': ..." naming the value otherwise.
Shard parseShard(std::string_view text, const EnvLookup& env = processEnvironment());

/// The shard of this process under a launcher, first found wins:
///   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE  (Open MPI's mpirun)
///   PMI_RANK / PMI_SIZE                          (MPICH and Intel MPI's Hydra)
///   SLURM_PROCID / SLURM_NTASKS                  (srun, when it starts more than one task)
///   SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1 / SLURM_ARRAY_TASK_COUNT  (sbatch --array)
/// A rank r of a world of size s runs shard r+1 of s. Error{InvalidArgument} "--shard auto: ..." when no launcher
/// variable is set or a value is not a number in range.
Shard shardFromEnvironment(const EnvLookup& env = processEnvironment());

/// `path` with every "{shard}" replaced by the shard's K, so that the ranks of one `mpirun` command line write
/// different files ("tune.{shard}.json" -> "tune.3.json"); `path` unchanged when it has none.
std::string shardPath(std::string_view path, const Shard& shard);

/// Worker processes when `-j` is not given: the cores (std::thread::hardware_concurrency), at least 1.
int defaultJobs();

/// Pseudo-backend of `tune` and `regret`: the cost model instead of measurements.
inline constexpr std::string_view kModelBackend = "model";

/// Whether a backend name moves data (BackendCapabilities::movesData; false for the model; true for a name no
/// backend registered, so that it never runs in parallel).
bool backendMovesData(std::string_view backend);

/// The worker count for `-j` (`given`: nullopt when the flag is absent): defaultJobs() on backends that move no data,
/// 1 on those that do. Error{InvalidArgument} for -j < 1, and for -j > 1 on a backend that moves data: configurations
/// timed at once would disturb each other's times (separate machines, `--shard`, do not).
int resolveJobs(std::optional<int> given, std::string_view backend);

struct ParallelOptions {
  int jobs = 1;  ///< worker processes; 1 runs every item in this process, in order
  /// Called in this process after each item finishes (`done` of `total`; `index`: the item's grid index), e.g. to
  /// print progress on a terminal.
  std::function<void(std::size_t done, std::size_t total, std::size_t index)> progress = {};
};

/// work(i) for each i of `items`, the results in the order of `items`. With jobs > 1 and more than one item, up to
/// `jobs` forked workers take the next item as they finish one (points cost unequal times), so the results do not
/// depend on which worker ran what. `work` must depend only on its item and on state the fork copies: a worker's
/// side effects (caches, files it writes) stay in that worker. stdout and stderr are flushed before forking.
/// An exception in `work` stops the run: the first one (in completion order) is thrown here as Error with its code
/// and message, after every worker has exited; a worker that dies without answering is Error{BackendError} naming
/// the item and the signal or exit status.
std::vector<std::string> runInProcesses(const std::vector<std::size_t>& items,
                                        const std::function<std::string(std::size_t)>& work,
                                        const ParallelOptions& options);

/// Progress as "\r<prefix>[k/n] what" on stderr, only when stderr is a terminal (results go to stdout and files).
class TerminalProgress {
 public:
  explicit TerminalProgress(std::string prefix);
  ~TerminalProgress();
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;
  void show(std::size_t done, std::size_t total, const std::string& what);
  bool enabled() const { return tty_; }

 private:
  std::string prefix_;
  bool tty_;
  bool shown_ = false;
};

}  // namespace collbench
