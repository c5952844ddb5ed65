#pragma once
/// `collbench regret` as a library: on a held-out grid (sizes and rank counts that are not table points) every
/// algorithm is measured and the selector's choice compared with the best one measured (chosen / oracle time), as
/// RegretRow / RegretRecord (records.h, docs/regret.schema.json).
///
/// Typical use:
///   RegretRequest r;
///   r.table = loadTuningTable("t.json");
///   r.topology = loadTopology("dgx-h100-8x1");  r.topologyPath = "dgx-h100-8x1";
///   RegretSweep sweep(std::move(r));                    // finds the section, builds the held-out grid
///   const std::vector<RegretRow> rows = sweepRegret(sweep, RegretControl{.jobs = 2});
///   const RegretSummary s = summarizeRegret(rows);      // worst, geometric mean
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collbench/parallel.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"

namespace collbench {

/// Held-out sizes are rounded down to this many bytes so that every element type and 16-byte RS/AG block divides them
/// (nccl-tests rounds per-rank counts to 16 bytes).
inline constexpr std::size_t kRegretSizeAlignBytes = 16;
/// The confirmation of a point times its two or three configurations for this many rounds per --repeats: a sweep's
/// round holds ~20 configurations, so the confirmation's rounds are ~10x shorter, and 3x as many of them span a few
/// milliseconds of noise as the sweep's do.
inline constexpr int kConfirmationRoundsPerRepeat = 3;

struct RegretRequest {
  std::string backend = "sim";
  std::string topologyPath;  ///< the backend's "topology" option
  std::optional<Topology> topology;
  TuningTable table;
  std::string tablePath;  ///< for reasons and the record
  Collective collective = Collective::AllReduce;
  DType dtype = DType::F32;
  std::vector<int> ranks;          ///< empty: the rank counts inside the table's range that it lacks
  std::vector<std::size_t> sizes;  ///< empty: geometric midpoints of the table's sizes
  std::vector<std::size_t> chunks{0, 128 << 10, 2 << 20};  ///< the oracle's chunk_bytes values
  std::vector<int> channels{1, 2, 4};                      ///< the oracle's channel counts
  MeasureOptions measure;
};

/// The held-out grid: rank counts x sizes (nccl-tests sizes), and a note when it could not hold out rank counts.
struct RegretGrid {
  std::vector<int> ranks;
  std::vector<std::size_t> sizes;
  std::string note;
};

/// The held-out grid of `section` for `collective`: `ranks` when given, else those in [min, max] of the table's rank
/// counts (capped at `topologyRanks` when > 0) that it lacks, else the table's own with a note; `sizes` when given,
/// else the geometric midpoints of the first rank count's consecutive sizes, rounded down to kRegretSizeAlignBytes.
/// Error{InvalidArgument} when the section holds no entry of the collective or no midpoint lies between sizes.
RegretGrid heldOutGrid(const TuningSection& section, Collective collective, int topologyRanks, std::vector<int> ranks,
                       std::vector<std::size_t> sizes, const std::string& tableName);

/// The worst and geometric-mean regrets of rows (chosen / best, and the table's choice / best).
struct RegretSummary {
  double worst = 1, geomean = 1, tableWorst = 1, tableGeomean = 1;
  std::optional<std::size_t> worstRow;  ///< index of the worst row (the first of equals)
  bool trialled = false;                ///< some row's chosen configuration differs from the table's
};
RegretSummary summarizeRegret(const std::vector<RegretRow>& rows);

/// How a regret sweep runs.
struct RegretControl {
  int jobs = 1;
  Shard shard;
};

/// One held-out grid and the runners that measure it. Grid point i is (ranks[i / sizes], sizes[i % sizes]).
class RegretSweep {
 public:
  /// Finds the table's collbench section for the topology's fingerprint and backend and builds the grid;
  /// Error{InvalidArgument} naming the table when there is none.
  explicit RegretSweep(RegretRequest request);
  ~RegretSweep();
  RegretSweep(const RegretSweep&) = delete;
  RegretSweep& operator=(const RegretSweep&) = delete;

  const RegretRequest& request() const { return r_; }
  const RegretGrid& grid() const { return grid_; }
  const TuningSection& section() const { return *section_; }
  std::size_t points() const { return grid_.ranks.size() * grid_.sizes.size(); }
  /// Whether the backend moves data (times are measured, not simulated: the confirmation runs).
  bool measured() const;

  /// Grid point `index`: the chosen configuration (what `perf --algo auto` runs: the table's choice after the
  /// trial), the table's choice, and the best of every algorithm at every (chunk, channels) `tune` sweeps, timed
  /// together; on measured backends, where the best beat the chosen or the table's choice, the three again
  /// together (kConfirmationRoundsPerRepeat). nullopt where the size has no elements at that rank count.
  std::optional<RegretRow> measurePoint(std::size_t index);
  /// Rows that sit at a table point (held-out rows should not).
  int tablePoints(const std::vector<RegretRow>& rows) const;

 private:
  struct RankState;
  RegretRequest r_;
  const TuningSection* section_ = nullptr;
  RegretGrid grid_;
  std::unique_ptr<RankState> state_;
};

/// The rows of the shard's grid points, in grid order, from control.jobs worker processes.
std::vector<RegretRow> sweepRegret(RegretSweep& sweep, const RegretControl& control);

}  // namespace collbench
