#pragma once
/// `collbench tune` as a library: a TuneRequest (what to sweep, on which backend) -> a TuningTable (tuning.h) of
/// collbench's algorithms x chunk_bytes x channels at every (rank count, collective, size) point of the grid.
///
/// Typical use:
///   TuneRequest r;
///   r.backend = "model";                       // or "sim" (registered by the composition root), "host", ...
///   r.collectives = {Collective::AllReduce};
///   r.sizes = {1 << 10, 1 << 20};
///   r.ranks = {2, 4};
///   Tuner tuner(r);                            // validates against the topology; throws Error{InvalidArgument}
///   const TuningTable table = tuneCollbench(tuner, TuneControl{.jobs = 2});
///
/// The grid (Tuner::grid) is every point in the order the table lists them: rank counts as given (or
/// defaultTuneRanks), then collectives as given, then sizes ascending; its indices are what `--shard K/N` splits
/// (parallel.h) and the order a -j N run writes, whatever worker measured which point.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/backend.h"
#include "collbench/parallel.h"
#include "collbench/run.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"

namespace collbench {

/// Host counts whose first and last rank counts `tune` adds by default: the first few, then powers of two (a
/// 1024-host cluster keeps a short list).
inline constexpr int kBoundaryHostCountsAll = 4;

/// Default rank counts on a topology: powers of two up to its rank count, the full count, and where hosts hold
/// several ranks, the first two and the last rank count of host counts 1..kBoundaryHostCountsAll and powers of two,
/// e.g. 2,4,8,9,10,16,17,18,24,25,26,32 on 4 hosts of 8. Times jump where a rank count first needs another host, and
/// the selector never interpolates across that boundary; the first two rank counts of a host count put one or two
/// ranks on the new host, whose NICs then carry several channels' ring hops, where the cost model (which takes every
/// flow on a link as concurrent) is up to 20% pessimistic (h100-4x8-rail, 1 MiB): they are measured, not modelled.
std::vector<int> defaultTuneRanks(const Topology& t);

/// One point of the grid: a table entry's key and the spec timed there.
struct TunePoint {
  Collective collective;
  int nranks;
  std::size_t bytes;  ///< table key (nccl-tests size)
  CollectiveSpec spec;
};

/// The points for one rank count: sizes as nccl-tests walks them, keyed by the row size perf prints; sizes whose
/// element count rounds to 0 are left out.
std::vector<TunePoint> tunePointsFor(const std::vector<Collective>& collectives, int nranks,
                                     const std::vector<std::size_t>& sizes, DType dtype);

/// What to sweep. Values are parsed already (the CLI names the flags in its own errors); the Tuner checks what
/// depends on the topology and the algorithm registry.
struct TuneRequest {
  std::string backend = "sim";
  std::string topologyPath;          ///< the backend's "topology" option; "" without one
  std::optional<Topology> topology;  ///< loaded from topologyPath
  std::vector<Collective> collectives{Collective::AllReduce};
  std::vector<std::size_t> sizes;  ///< nccl-tests sizes (sizeSequence of -b/-e/-f)
  std::vector<std::size_t> chunks{0, 128 << 10, 2 << 20};
  std::vector<int> channels{1, 2, 4};
  std::vector<int> ranks;               ///< empty: defaultTuneRanks (or 2,4 without a topology)
  std::vector<std::string> algorithms;  ///< only these (empty: every schedule algorithm of the collectives)
  DType dtype = DType::F32;
  MeasureOptions measure;
  double prune = 0;      ///< skip configurations the cost model puts more than this many times above its best (0: none)
  BackendOptions world;  ///< a process backend's world (processWorldOptions), merged into the backend's options
  int localRank = -1;    ///< >= 0: one rank per process
  std::string commandLine, host;  ///< provenance
};

/// How a sweep runs: worker processes, the shard, progress.
struct TuneControl {
  int jobs = 1;                ///< > 1 only on backends that move no data (the caller refuses otherwise)
  Shard shard;                 ///< the grid's part this run sweeps
  std::string progressPrefix;  ///< e.g. "pass 2/3: "
};

class Tuner {
 public:
  /// Throws Error{InvalidArgument} for an empty collective list, barrier, a rank count above the topology's, or an
  /// --algos name that is no schedule algorithm of the collectives swept.
  explicit Tuner(TuneRequest request);
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  const TuneRequest& request() const { return r_; }
  const std::vector<int>& ranks() const { return r_.ranks; }
  /// Every point in table order (see the file comment).
  const std::vector<TunePoint>& grid() const { return grid_; }

  /// Provenance of a table this tuner writes (tool version, command line, host, UTC date, topology fingerprint).
  TuningProvenance provenance() const;
  /// An empty section keyed by this tuner's topology, backend and `library`.
  TuningSection newSection(std::string_view library) const;
  /// Hosts the first n ranks span (1 without a topology).
  int hostsOf(int n) const;
  /// Schedule algorithms swept for (c, n): the filter, and those needing hosts only where the ranks' hosts are equal.
  std::vector<std::string> algorithmsFor(Collective c, int n) const;
  /// A runner over the backend for n ranks (the topology option from `topologyPath`, else the request's).
  std::unique_ptr<OwnedRunner> timerFor(int n, const std::string& topologyPath = "") const;

  /// The table entry of grid point `index`: every configuration timed (or modelled), sorted fastest first; nullopt
  /// when none could run (all unsupported or pruned). Reuses one runner per rank count across consecutive calls.
  std::optional<TuningEntry> measurePoint(std::size_t index);
  /// Configurations timed at grid point `index` (progress totals).
  std::size_t configurationsAt(std::size_t index) const;

  /// Whether points measured so far ran on a backend that moves data (their times vary between passes).
  bool measuresHardware() const { return measuresHardware_; }

 private:
  struct RankState;
  RankState& stateFor(int n);

  TuneRequest r_;
  std::vector<TunePoint> grid_;
  std::unique_ptr<RankState> state_;
  bool measuresHardware_ = false;
};

/// One pass over the shard's points of the grid: a collbench section, entries in grid order. With control.jobs > 1
/// the points run in worker processes (parallel.h) and the section is the one a -j 1 run gives.
TuningSection sweepCollbench(Tuner& tuner, const TuneControl& control);

/// `passes` sweeps (measured backends only: a simulator or the model gives the same times every pass) joined by
/// meanOfPasses.
TuningSection sweepCollbenchPasses(Tuner& tuner, const TuneControl& control, int passes);

/// Serialises one entry for a worker's answer (exact: doubles round-trip) and reads it back; "" is "no entry".
std::string encodeTuningEntry(const std::optional<TuningEntry>& e);
std::optional<TuningEntry> decodeTuningEntry(std::string_view text);

}  // namespace collbench
