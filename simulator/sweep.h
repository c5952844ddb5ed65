#pragma once
/// `collbench sweep` as a library: a what-if grid on the simulator, topologies x override sets x rank counts x sizes x
/// algorithms, each point one simulation (Simulator::runAlgorithm), rows in the collbench-sweep record (records.h).
/// SimGrid-free, like sim_backend.h.
///
/// Typical use:
///   sim::SweepRequest r;
///   r.topologies = {"dgx-h100-8x1"};
///   r.sizes = {1 << 20, 64 << 20};
///   r.algorithms = {"ring", "tree"};
///   sim::SweepGrid grid(r);                  // every topology, rank count and spec checked before any simulation
///   const std::vector<SweepRow> rows = sim::runSweep(grid, SweepControl{.jobs = 2});
///
/// The grid's order, which `--shard K/N` splits (parallel.h) and every -j writes: topologies as given, then override
/// sets, then rank counts, then sizes, then algorithms.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collbench/parallel.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench::sim {

/// Rank count meaning "every rank of the topology" (`-g all`).
inline constexpr int kAllRanks = 0;

struct SweepRequest {
  std::vector<std::string> topologies{kDefaultTopology};
  std::vector<std::string> sets{""};  ///< override variants (loadTopologyWithOverrides); "" = the topology unmodified
  std::vector<int> ranks{kAllRanks};
  std::vector<std::size_t> sizes;
  std::vector<std::string> algorithms{"ring"};  ///< "auto" asks the selector
  Collective collective = Collective::AllReduce;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::size_t chunkBytes = 0;
  int channels = 1;
  SimConfig config;
};

/// One topology with one override set and the rank counts swept on it.
struct SweepVariant {
  std::string name, overrides;
  Topology topology;
  std::string fingerprint;
  std::vector<int> ranks;
};

struct SweepPoint {
  std::size_t variant;
  int nranks;
  std::size_t bytes;  ///< the requested size (the row's is max(input, output) bytes)
  std::string algorithm;
};

class SweepGrid {
 public:
  /// Loads every variant and checks every rank count (1..the topology's), algorithm name and spec before any
  /// simulation: Error{InvalidArgument} "-g/--ranks N: topology 'T' has M ranks (use 1..M or all)", or the
  /// algorithm's and checkSpec's errors.
  explicit SweepGrid(SweepRequest request);
  ~SweepGrid();
  SweepGrid(const SweepGrid&) = delete;
  SweepGrid& operator=(const SweepGrid&) = delete;

  const SweepRequest& request() const { return r_; }
  const std::vector<SweepVariant>& variants() const { return variants_; }
  const std::vector<SweepPoint>& points() const { return points_; }
  /// Simulates point `index` (one simulator per (variant, rank count), kept while consecutive points share it).
  SweepRow run(std::size_t index);

 private:
  struct Current;
  SweepRequest r_;
  std::vector<SweepVariant> variants_;
  std::vector<SweepPoint> points_;
  std::unique_ptr<Current> current_;
};

struct SweepControl {
  int jobs = 1;
  Shard shard;
};

/// The rows of the shard's points in grid order, simulated by control.jobs worker processes.
std::vector<SweepRow> runSweep(SweepGrid& grid, const SweepControl& control);

}  // namespace collbench::sim
