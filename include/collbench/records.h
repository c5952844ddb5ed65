#pragma once
/// The record formats collbench writes and reads back, one owner each (as trace.h owns the trace): a plain struct,
/// `toJson` (the writer) and `parseXxx` (the reader), and a schema under docs/:
///   collbench-perf        `perf -J`         PerfRun          docs/perf.schema.json    (gate, report, calibrate)
///   collbench-replay      `replay -J`       ReplayRun        docs/replay.schema.json  (report)
///   collbench-sim         `sim --json`      SimRecord        docs/sim.schema.json
///   collbench-sweep       `sweep -J`        SweepRecord      docs/sweep.schema.json
///   collbench-regret      `regret -J`       RegretRecord     docs/regret.schema.json
///   collbench-calibration `calibrate -J`    CalibrationRecord docs/calibration.schema.json
///   collbench-nccl-calibration `calibrate --model nccl -o`  NcclCalibration (nccl_calibration.h)
///                                                     docs/calibration-nccl.schema.json
/// (the tuning table's owner is tuning.h, docs/tuning.schema.json). Readers check the fields they read and throw
/// Error{InvalidArgument} "<source>: <field path>: <problem>" naming the value (json_fields.h); fields they do not
/// know are allowed, so that a newer writer's additions do not break an older reader. Non-finite numbers are written
/// as null and read back as NaN.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace collbench {

// ---------------------------------------------------------------------------------------------------------------
// Output files

/// Fails with Error{InvalidArgument} unless `path` can be written, naming `flag` ("-J/--output_file"):
/// "<flag> '<path>' exists; pass --force to overwrite it" (an existing file without `force`), "... is a directory",
/// "<flag> '<path>': directory '<dir>' does not exist", "<flag> '<path>': cannot create files in '<dir>': <reason>".
/// Commands call it before any work, so a mistyped path costs no run. It creates nothing (the processes of a process
/// backend may all check the same path). No-op for "".
void checkOutputFile(const std::string& path, bool force, std::string_view flag);
/// One command's output files, as (flag, path) pairs ("" paths skipped): Error{InvalidArgument} "<flag> and <flag>
/// name the same file '<path>'" when two of them resolve to one file (one would overwrite the other).
void checkDistinctOutputs(const std::vector<std::pair<std::string_view, std::string>>& outputs);
/// Writes `text` to `path`, ending it with a newline if it lacks one; Error{InvalidArgument} "cannot write <flag>
/// '<path>'" on failure.
void writeTextFile(const std::string& path, const std::string& text, std::string_view flag);

/// The contents of `path`; Error{InvalidArgument} "cannot read <what> '<path>'" when it cannot be read.
std::string readTextFile(const std::string& path, std::string_view what);

// ---------------------------------------------------------------------------------------------------------------
// Run environment

/// What a run happened on, the "environment" object of perf, regret, calibration and tune records (so that runs can
/// be compared later): "host", "cpus", "cpu" (/proc/cpuinfo's model name, where present), "kernel" (uname),
/// "collbench_version", and "gpu", "driver", "nccl_version" always present (null where no linked backend library
/// could read them), then whatever the registered environment probes report (probeEnvironment, backend_info.h),
/// values of up to 9 digits as integers.
nlohmann::json describeEnvironment();
/// This machine's host name; "unknown" when it cannot be read.
std::string hostName();

/// "collbench <version>": the `tool` field of every record.
std::string toolName();

// ---------------------------------------------------------------------------------------------------------------
// collbench-perf (`collbench perf -J`)

/// One half (out-of-place or in-place) of a perf row.
struct PerfSample {
  double timeUs = 0;
  double algbwGBps = 0;
  double busbwGBps = 0;
  std::optional<long long> wrong;  ///< nullopt: not checked (simulators, -c 0)
  bool operator==(const PerfSample&) const = default;
};

struct PerfRow {
  std::size_t size = 0;  ///< bytes (nccl-tests' size column)
  std::size_t count = 0;
  std::string type, redop;
  int root = -1;
  std::string algorithm;  ///< the algorithm that ran (the selector's choice under --algo auto)
  std::string algorithmReason;
  std::size_t chunkBytes = 0;  ///< read: the config's when the row has none
  int channels = 1;
  PerfSample outOfPlace, inPlace;
  bool operator==(const PerfRow&) const = default;
};

/// A `collbench perf -J` document (format "collbench-perf", version 1).
struct PerfRun {
  static constexpr std::string_view kFormat = "collbench-perf";
  static constexpr int kVersion = 1;

  std::string source;  ///< file name, for messages (not written)
  std::string collective;
  // config
  std::string backend;
  int ranks = 0;
  std::string topology;   ///< "" when not given (host backends)
  std::string algorithm;  ///< as requested: a name or "auto"
  std::size_t minBytes = 0, maxBytes = 0, stepBytes = 0;
  double stepFactor = 1;
  int iters = 0, warmup = 0, check = 0;
  std::string datatype, op;
  int root = 0, average = 1, blocking = 0, channels = 1;
  std::size_t chunkBytes = 0;
  std::string commandLine;
  nlohmann::json environment = nlohmann::json::object();  ///< host, cpu, gpu, versions: free-form provenance
  std::string toolVersion;                                ///< environment.collbench_version ("" if absent)
  std::vector<PerfRow> rows;
  double avgBusbwGBps = 0;
  long long wrongTotal = 0;

  /// Simulator runs repeat exactly; anything else is a measurement.
  bool deterministic() const { return backend == "sim"; }
  bool operator==(const PerfRun&) const = default;
};

/// Errors: "base.json: results[2].out_of_place.time_us: expected a number, got string \"fast\"". Required: format,
/// version, collective, config.{backend, ranks, datatype, op}, results[i].{size, algorithm, out_of_place, in_place}
/// with each half's time_us, algbw_GBps and busbw_GBps; the rest has the defaults above (older files lack them).
PerfRun parsePerfRun(std::string_view text, std::string_view source = "perf");
/// Reads `path` and parses it (the path is the source in messages).
PerfRun readPerfRun(const std::string& path);
nlohmann::json toJson(const PerfRun& r);

// ---------------------------------------------------------------------------------------------------------------
// collbench-replay (`collbench replay -J`)

struct ReplayStepRecord {
  long long step = 0;
  double seconds = 0, computeSeconds = 0, commSeconds = 0, exposedSeconds = 0;
  bool operator==(const ReplayStepRecord&) const = default;
};

struct ReplayEventRecord {
  std::size_t index = 0;
  std::string kind, dtype, op;  ///< op: "" for kinds that do not reduce
  std::size_t bytes = 0;
  std::string group;  ///< the trace's group ("replicas", "workers", "local")
  int nranks = 0;
  std::string algorithm;
  long long step = -1, pack = 0;
  std::string after;  ///< "previous_end" or "previous_issue" (trace.h TraceAfter)
  double computeGapSeconds = 0, issueSeconds = 0, startSeconds = 0, endSeconds = 0;
  double recordedStartSeconds = 0, recordedEndSeconds = 0;
  std::optional<double> recordedIssueSeconds;
  bool operator==(const ReplayEventRecord&) const = default;
};

/// A `collbench replay -J` document (format "collbench-replay", version 1).
struct ReplayRun {
  static constexpr std::string_view kFormat = "collbench-replay";
  static constexpr int kVersion = 1;

  std::string source;  ///< file name, for messages (not written)
  std::string tool;
  std::string commandLine;
  // trace
  std::string tracePath, traceBackend, traceTopology, traceCommand;
  int traceWorldSize = 0;
  bool traceSimulated = false;
  // config
  std::string backend, topology, scaling, overlap, algo;
  int worldSize = 0, workers = 1, localReplicas = 1, warmup = 0;
  // summary (the median step after the first)
  double recordedStepSeconds = 0, stepSeconds = 0, recordedMeanStepSeconds = 0, meanStepSeconds = 0;
  double computeSeconds = 0, commSeconds = 0, exposedSeconds = 0;
  double oneReplicaStepSeconds = 0, efficiency = 0, speedup = 0;
  std::size_t wrong = 0;
  std::vector<ReplayStepRecord> recordedSteps, steps;
  std::vector<ReplayEventRecord> events;
  bool operator==(const ReplayRun&) const = default;
};

/// Errors: Error{InvalidArgument} "<source>: <field path>: <problem>". Required: format, version, trace.{path,
/// world_size}, config.{backend, world_size, scaling}, the summary's times; steps and events may be absent.
ReplayRun parseReplayRun(std::string_view text, std::string_view source = "replay");
nlohmann::json toJson(const ReplayRun& r);

// ---------------------------------------------------------------------------------------------------------------
// collbench-sim (`collbench sim --json`)

/// One simulated collective (format "collbench-sim", version 1).
struct SimRecord {
  static constexpr std::string_view kFormat = "collbench-sim";
  static constexpr int kVersion = 1;

  std::string tool, commandLine;
  std::string topology, topologyFingerprint, model;
  std::string collective, algorithm, datatype;
  int ranks = 0;
  std::size_t bytes = 0, count = 0;
  double timeUs = 0, algbwGBps = 0, busbwGBps = 0;
  std::string method, note;
  bool exact = true;
  std::size_t ops = 0, transfers = 0, simulatedActivities = 0;
  double wallSeconds = 0;
  std::string spansMethod;  ///< "" when the timeline's spans come from the timed method itself
  double spansTimeUs = 0;
  bool operator==(const SimRecord&) const = default;
};
SimRecord parseSimRecord(std::string_view text, std::string_view source = "sim");
nlohmann::json toJson(const SimRecord& r);

// ---------------------------------------------------------------------------------------------------------------
// collbench-sweep (`collbench sweep -J`)

struct SweepRow {
  std::string topology, fingerprint, overrides, algorithm, method, note;  ///< overrides: the `set` field
  int ranks = 0;
  std::size_t bytes = 0, count = 0, ops = 0, transfers = 0, activities = 0;
  double timeUs = 0, algbw = 0, busbw = 0;  ///< µs, GB/s
  double wall = 0, cpu = 0;                 ///< seconds the simulation took (wall_s, cpu_s)
  bool exact = true;
  bool operator==(const SweepRow&) const = default;
};

/// A what-if grid (format "collbench-sweep", version 1).
struct SweepRecord {
  static constexpr std::string_view kFormat = "collbench-sweep";
  static constexpr int kVersion = 1;

  std::string tool, commandLine, collective, datatype, op, model;
  bool crossTraffic = false;
  std::vector<SweepRow> rows;
  std::string shard;  ///< "K/N" when the rows are part K of N of the grid (`--shard`); "" (not written) else
  bool operator==(const SweepRecord&) const = default;
};
SweepRecord parseSweepRecord(std::string_view text, std::string_view source = "sweep");
nlohmann::json toJson(const SweepRecord& r);

// ---------------------------------------------------------------------------------------------------------------
// collbench-regret (`collbench regret -J`)

/// One configuration and its time; times are -1 where nothing was measured.
struct RegretChoice {
  std::string algorithm;
  std::size_t chunkBytes = 0;
  int channels = 1;
  double timeUs = -1;
  bool operator==(const RegretChoice&) const = default;
};

struct RegretRow {
  int nranks = 0;
  std::size_t bytes = 0;
  RegretChoice chosen, best, tableChoice;
  std::string chosenSource;  ///< "table", "model", "trial", ...
  double predictedUs = -1;
  /// The sweep's own chosen, best and table times, before the confirmation (equal to the above where there was none).
  double sweepChosenUs = -1, sweepBestUs = -1, sweepTableUs = -1;

  double regret() const { return best.timeUs > 0 ? chosen.timeUs / best.timeUs : 1.0; }
  double tableRegret() const { return best.timeUs > 0 ? tableChoice.timeUs / best.timeUs : 1.0; }
  double sweepRegret() const { return sweepBestUs > 0 ? sweepChosenUs / sweepBestUs : 1.0; }
  bool operator==(const RegretRow&) const = default;
};

/// The selector's regret over a grid (format "collbench-regret", version 1).
struct RegretRecord {
  static constexpr std::string_view kFormat = "collbench-regret";
  static constexpr int kVersion = 1;

  std::string collective, backend, topology, topologyFingerprint, tuning, commandLine;
  nlohmann::json environment = nlohmann::json::object();
  std::vector<RegretRow> rows;
  double worst = 1, geomean = 1, tableWorst = 1, tableGeomean = 1;
  std::string shard;  ///< "K/N" when the rows are part K of N of the grid (`--shard`); "" (not written) else
  bool operator==(const RegretRecord&) const = default;
};
RegretRecord parseRegretRecord(std::string_view text, std::string_view source = "regret");
nlohmann::json toJson(const RegretRecord& r);

// ---------------------------------------------------------------------------------------------------------------
// collbench-calibration (`collbench calibrate -J`)

struct CalibrationSampleRecord {
  std::string collective, algorithm, origin;
  int nranks = 0, hosts = 1;
  std::size_t bytes = 0;
  double measuredUs = 0, modelUs = 0;
  std::optional<double> simUs;  ///< with --verify-sim
  bool heldOut = false;
  bool operator==(const CalibrationSampleRecord&) const = default;
};

/// Median and worst relative error of a set of samples; nullopt figures when the set is empty.
struct CalibrationErrors {
  std::optional<double> median, worst;
  std::size_t count = 0;
  bool operator==(const CalibrationErrors&) const = default;
};

/// A calibration fit and its samples (format "collbench-calibration", version 1).
struct CalibrationRecord {
  static constexpr std::string_view kFormat = "collbench-calibration";
  static constexpr int kVersion = 1;
  /// The fitted parameters in the order of `identified`.
  static constexpr int kParamCount = 6;
  static constexpr const char* kParamNames[kParamCount] = {"alpha_intra", "alpha_inter", "beta_intra",
                                                           "beta_inter",  "gamma",       "call_overhead"};

  std::string tool, commandLine;
  nlohmann::json environment = nlohmann::json::object();
  std::string topologyFile, topologyFingerprint;
  double intraAlphaUs = 0, intraBetaGBps = 0, interAlphaUs = 0, interBetaGBps = 0;
  double gammaGBps = 0, callOverheadUs = 0;
  struct Tier {
    std::optional<std::size_t> maxWorkingSetBytes;  ///< nullopt: the last tier, unbounded
    double bandwidthScale = 1;
    bool operator==(const Tier&) const = default;
  };
  std::vector<Tier> memoryTiers;
  bool identified[kParamCount] = {false, false, false, false, false, false};
  double fitMedian = 0, fitWorst = 0;
  CalibrationErrors heldOut;
  std::optional<CalibrationErrors> simHeldOut;  ///< with --verify-sim
  std::vector<std::string> notes;
  std::vector<CalibrationSampleRecord> samples;
  bool operator==(const CalibrationRecord&) const = default;
};
CalibrationRecord parseCalibrationRecord(std::string_view text, std::string_view source = "calibration");
nlohmann::json toJson(const CalibrationRecord& r);

}  // namespace collbench
