#pragma once
/// Simulation fidelity: the simulated time of every row of a measured nccl-tests table against the measured one
/// (`collbench fidelity LOG... --topology T`), per size and summarised by size class.
///
/// The error of a row is signed: simulated / measured - 1 of the out-of-place time (+0.25: the simulator is 25%
/// slow; -0.9: ten times too fast). Summaries are of |error|: the median (mean of the middle two for an even count),
/// the p90 (nearest rank: the ceil(0.9 n)-th smallest), the worst, and the geometric mean (exp of the mean of
/// log max(|error|, kGeomeanErrorFloor)), the figure ASTRA-sim publishes for its validation ("Geomean error rate" of
/// nccl-tests all-reduce per size, docs/fidelity.md "Against ASTRA-sim"). Real tables carry single-row hiccups,
/// which is why the median and p90, not the mean, judge a topology (shared/realdata/README.md).
///
/// The simulator is not called from here (core does not depend on it): the caller passes a function that times one
/// call, so `collbench fidelity` plugs in the SimGrid simulator and tests plug in closed forms.
///
/// File format (docs/fidelity.schema.json; JSON, version 1):
/// ```json
/// { "format": "collbench-fidelity", "version": 1, "tool": "collbench 0.1.0", "command_line": "collbench fidelity ...",
///   "logs": [ { "log": "h100x8.csv", "collective": "all_reduce", "ranks": 8, "nodes": 1, "nccl_version": "",
///               "topology": "dgx-h100-8x1", "topology_fingerprint": "0123456789abcdef", "algorithm": "auto",
///               "rows": [ {"bytes": 8, "line": 14, "measured_us": 13.67, "simulated_us": 1.2, "algorithm": "ring",
///                          "measured_busbw_GBps": 0.0, "simulated_busbw_GBps": 0.01, "error": -0.912} ],
///               "summary": {"all": {"rows": 32, "median": 0.76, "p90": 0.91, "worst": 0.95, "geomean": 0.7},
///                           "small": {...}, "medium": {...}, "large": {...}} } ] }
/// ```
/// The summary is recomputed from the rows when read (a mismatch is an error: the file was edited by hand).
#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/nccl_tests_log.h"
#include "collbench/types.h"

namespace collbench {

/// Size classes of the summary (issue 23): latency-bound below 64 KiB, bandwidth-bound above 16 MiB, the protocol
/// and pipeline transition between (NCCL's LL/LL128/Simple switch-overs fall in it on NVLink systems).
enum class SizeClass { Small, Medium, Large };
inline constexpr std::size_t kSmallBelowBytes = std::size_t{64} << 10;
inline constexpr std::size_t kLargeAboveBytes = std::size_t{16} << 20;
inline constexpr std::array<SizeClass, 3> kSizeClasses = {SizeClass::Small, SizeClass::Medium, SizeClass::Large};
SizeClass sizeClassOf(std::size_t bytes);
/// "small", "medium", "large" (the JSON keys).
std::string_view toString(SizeClass c);
/// "< 64 KiB", "64 KiB - 16 MiB", "> 16 MiB".
std::string_view describe(SizeClass c);

/// The floor of |error| in the geometric mean: 0.1%, the resolution the table prints errors at (one decimal of a
/// percent). A row the simulator hits exactly (error 0, log undefined) or to 0.001% would otherwise pull the mean
/// towards 0 as far as a 1000x miss pushes it up; floored, such a row counts as 0.1%, a printed "+0.0"/"+0.1".
/// ASTRA-sim's validation page gives its geomean without saying how it treats a 0 error.
inline constexpr double kGeomeanErrorFloor = 0.001;

/// |error| statistics of a set of rows (all zero when rows == 0).
struct ErrorStats {
  std::size_t rows = 0;
  double median = 0, p90 = 0, worst = 0;
  /// exp(mean of log max(|e|, kGeomeanErrorFloor)): the geometric mean of |error|, as ASTRA-sim's "geomean error".
  double geomean = 0;
  bool operator==(const ErrorStats&) const = default;
};
/// Median, nearest-rank p90, maximum and floored geometric mean of |e| over `errors`.
ErrorStats errorStats(std::vector<double> errors);

struct FidelityRow {
  std::size_t bytes = 0;
  int line = 0;  ///< line of the row in the log
  double measuredUs = 0, simulatedUs = 0;
  double measuredBusbwGBps = 0;  ///< as the log printed it
  double simulatedBusbwGBps = 0;
  std::string algorithm;  ///< what the simulator ran for this row ("ring", "nccl NVLSTree/Simple, 16 channels")
  double error() const { return simulatedUs / measuredUs - 1; }
  bool operator==(const FidelityRow&) const = default;
};

/// One log against one topology.
struct FidelityLog {
  std::string log;  ///< the file
  Collective collective = Collective::AllReduce;
  int ranks = 0, nodes = 1;
  std::string ncclVersion;  ///< of the measurement, "" when the log does not say
  int gpusPerThread = 1;    ///< GPUs one thread of the measurement launched (nccl-tests -g), which the timing takes
  std::string topology, topologyFingerprint;
  std::string algorithm;  ///< --algo
  std::vector<FidelityRow> rows;
  ErrorStats all;
  std::array<ErrorStats, 3> byClass;  ///< indexed by SizeClass
  bool operator==(const FidelityLog&) const = default;
};

struct FidelityDocument {
  static constexpr std::string_view kFormat = "collbench-fidelity";
  static constexpr int kVersion = 1;
  std::string tool;         ///< "collbench <version>"
  std::string commandLine;  ///< that produced it
  std::vector<FidelityLog> logs;
  bool operator==(const FidelityDocument&) const = default;
};

/// One call to time: what the log's row measured.
struct FidelityCall {
  Collective collective = Collective::AllReduce;
  int nranks = 0;
  std::size_t bytes = 0;  ///< the row's size, as nccl-tests counts it
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
};
struct SimulatedCall {
  double seconds = 0;
  std::string algorithm;
};
using SimulateFn = std::function<SimulatedCall(const FidelityCall&)>;

struct FidelityOptions {
  /// -g: the rank count of a log that does not state one (a CSV without gpu_count); 0 = none given.
  int ranks = 0;
  /// The collective of a log that does not name it (nccl-tests before 2.17, CSV tables).
  Collective defaultCollective = Collective::AllReduce;
  std::string topology, topologyFingerprint, algorithm = "auto";
};

/// The rank count to simulate `log` at: the log's own, else options.ranks. Throws Error{InvalidArgument} naming the
/// source when neither gives one, or when both do and differ.
int fidelityRanks(const NcclTestsLog& log, const std::string& source, int ranksFlag);

/// Times every row of `log` with `simulate` and compares. Throws Error{InvalidArgument} naming the source and line
/// for a row whose measured time is 0 or whose type or redop collbench does not know; rows smaller than one element
/// are skipped (nothing to time).
FidelityLog compareWithSimulation(const NcclTestsLog& log, const std::string& source, const FidelityOptions& options,
                                  const SimulateFn& simulate);
/// Fills all and byClass from rows.
void summarize(FidelityLog& f);

/// The per-size table (size, measured us, simulated us, error %, measured busbw, simulated busbw, algorithm), then
/// the summary lines, all lines but the rows starting with '#'.
std::string formatFidelityTable(const FidelityLog& f);

/// The JSON text of `doc` (`indent` as nlohmann's dump).
std::string toJson(const FidelityDocument& doc, int indent = 2);
/// Parses and validates; errors are Error{InvalidArgument} "<source>: <field path>: <problem>". Unknown fields are
/// errors; the stored summaries must equal those recomputed from the rows.
FidelityDocument parseFidelityDocument(std::string_view text, std::string_view source = "fidelity");
/// Writes toJson(doc) to `path`; throws Error{InvalidArgument} naming the path when it cannot be written.
void writeFidelityDocument(const FidelityDocument& doc, const std::string& path);

}  // namespace collbench
