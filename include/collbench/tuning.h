#pragma once
/// Tuning tables: what `collbench tune` measured, per (topology fingerprint, collective, nranks, bytes), and the
/// interpolation the selector uses between measured points. Also NCCL's example tuner plugin CSV (export and
/// parse-back).
///
/// JSON format (one entry per line when written by toJson):
///   { "format": "collbench-tuning", "version": 1,
///     "provenance": { "tool": "collbench 0.1.0", "command_line": "...", "backend": "sim", "host": "...",
///                     "date": "2025-01-01T00:00:00Z", "topology": "dgx-h100-8x1", "topology_fingerprint": "..." },
///     "sections": [ { "topology": "dgx-h100-8x1", "fingerprint": "0123456789abcdef", "backend": "sim",
///                     "library": "collbench",
///                     "entries": [ { "collective": "all_reduce", "nranks": 8, "nnodes": 1, "bytes": 1048576,
///                                    "candidates": [ { "algorithm": "ring", "chunk_bytes": 0, "channels": 1,
///                                                      "time_us": 13.3 }, ... ] } ] } ] }
/// - bytes is the nccl-tests size column (per-rank buffer for all-reduce, broadcast, reduce; the total for
///   reduce-scatter and all-gather), time_us the measured time of one call.
/// - library "collbench": candidates are collbench algorithms with their best (chunk_bytes, channels) at that point;
///   library "nccl": NCCL's own algorithm (ring, tree) with "protocol" (ll, ll128, simple) and channels, what the
///   NCCL tuner export reads.
/// - fingerprint "" means "measured without a topology" (host backends): it matches callers without one.
/// Loading rejects, with one line "<source>: <field path>: <problem> (got <value>)": malformed JSON, unknown fields,
/// wrong format/version/types, nranks < 1, nnodes < 1 or > nranks, non-finite or negative times, channels < 1,
/// unknown collectives, algorithms and protocols, empty candidate lists and duplicate points.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/nccl_model.h"
#include "collbench/types.h"

namespace collbench {

struct Topology;

struct TuningCandidate {
  std::string algorithm;
  std::string protocol;  ///< NCCL protocol for library "nccl"; empty for collbench algorithms
  std::size_t chunkBytes = 0;
  int channels = 1;
  double timeUs = 0;
};

struct TuningEntry {
  Collective collective = Collective::AllReduce;
  int nranks = 1;
  int nnodes = 1;
  std::size_t bytes = 0;
  /// Sorted by time (fastest first) on load and by the tuner; the first is the table's choice.
  std::vector<TuningCandidate> candidates;
};

inline constexpr std::string_view kLibraryCollbench = "collbench";
inline constexpr std::string_view kLibraryNccl = "nccl";

struct TuningSection {
  std::string topology;     ///< name, for messages
  std::string fingerprint;  ///< fingerprint(Topology); "" = measured without a topology
  std::string backend;
  std::string library = std::string(kLibraryCollbench);
  std::vector<TuningEntry> entries;

  /// The entry at exactly this point, or nullptr.
  const TuningEntry* find(Collective c, int nranks, std::size_t bytes) const;
};

struct TuningProvenance {
  std::string tool, commandLine, backend, host, date, topology, topologyFingerprint;
  std::string shard;  ///< "K/N" when the table holds shard K of N of a grid (`tune --shard`); "" (not written) else
};

struct TuningTable {
  TuningProvenance provenance;
  std::vector<TuningSection> sections;

  /// The section for (fingerprint, library): one of `backend` when there are several, else the first; nullptr when
  /// none has that fingerprint.
  const TuningSection* find(std::string_view fingerprint, std::string_view library = kLibraryCollbench,
                            std::string_view backend = {}) const;
};

/// One section from several sweeps of the same grid (`tune --passes`): each candidate's time is the mean of its times
/// in the passes, and each entry is sorted again. A machine's modes can outlast one point's repetitions, so one pass
/// ranks a point in whichever mode it met; the mean ranks by the expected time over the modes the passes met.
/// Error{InvalidArgument} when the passes do not hold the same points and candidates.
TuningSection meanOfPasses(const std::vector<TuningSection>& passes);

/// Parses and validates (see the format above); `source` names the file in messages. Candidates are sorted by time.
TuningTable parseTuningTable(const std::string& jsonText, const std::string& source);
/// Reads and parses a file; Error{InvalidArgument} when it cannot be read.
TuningTable loadTuningTable(const std::string& path);
/// The JSON form (parses back to an equal table).
std::string toJson(const TuningTable& t);

/// Where `--algo auto` gets its table (tools call this once and hand the table to the Selector), first found wins:
///   1. `explicitPath` (--tuning FILE);
///   2. $COLLBENCH_TUNING_FILE;
///   3. with a topology, the shipped table of that topology: "<name>.<backend>.json", then "<name>.sim.json", in each
///      directory of the colon-separated $COLLBENCH_TUNING_PATH, then in reports/tuning/ of the source tree
///      (kShippedTuningDir). A shipped table is used only when it holds a section for the topology's fingerprint: a
///      table of another version of the file is stale and skipped, with a note saying so.
/// Without a topology nothing is looked up (a host table describes one machine). Explicit files that cannot be read
/// or parsed throw Error{InvalidArgument}; shipped ones are only looked at.
struct FoundTuningTable {
  std::optional<TuningTable> table;
  std::string path;  ///< the file read, "" when none
  std::string how;   ///< "--tuning", "COLLBENCH_TUNING_FILE" or "shipped table for <topology>"
  std::string note;  ///< why no table was used (when `table` is empty), for `collbench plan`
  /// "<path> (<how>)" or "none (<note>)".
  std::string describe() const;
};
inline constexpr std::string_view kShippedTuningDir = "reports/tuning";
FoundTuningTable findTuningTable(const std::string& explicitPath, const Topology* topology,
                                 std::string_view backend = "sim");

/// Which AlgoParams an algorithm reads: sweeping the others only repeats the same schedule.
struct ParamSpace {
  bool chunk = false;
  bool channels = false;
};
ParamSpace paramSpace(Collective c, std::string_view algorithm);
/// The (chunk_bytes, channels) pairs worth trying for an algorithm: the cross product of `chunks` and `channels` over
/// the parameters it reads, (0, 1) for the others. `rankHost` is copied into each.
std::vector<AlgoParams> sweepConfigs(Collective c, std::string_view algorithm, const std::vector<std::size_t>& chunks,
                                     const std::vector<int>& channels, const std::vector<int>& rankHost = {});

// ---- Measurement (tune and regret: Runner::times, run.h) ----

struct MeasureOptions {
  int iterations = 5;  ///< timed iterations per repetition (RunOptions::iterations)
  int warmup = 1;
  int repeats = 7;  ///< repetitions; the fastest repetition's mean is the result (one run on simulators)
  double timeoutSeconds = kDefaultTimeoutSeconds;
};

// ---- Interpolation ----

/// A model time (us) for (algorithm, chunk, channels) at (nranks, bytes), or nullopt where the algorithm cannot run.
using ModelTimeFn = std::function<std::optional<double>(std::string_view algorithm, std::size_t chunkBytes,
                                                        int channels, int nranks, std::size_t bytes)>;

/// How a prediction relates to the table.
enum class TableFit { Exact, Interpolated, Extrapolated };
std::string_view toString(TableFit f);

struct TablePrediction {
  TuningCandidate candidate;  ///< algorithm and the configuration taken from the nearest corner; timeUs predicted
  TableFit fit = TableFit::Exact;
  int nranksLo = 0, nranksHi = 0;        ///< table rank counts around the query
  std::size_t bytesLo = 0, bytesHi = 0;  ///< table sizes around the query (at the nearest rank count)
  bool modelShaped = false;              ///< true: model x interpolated correction; false: log-time interpolation
};

/// Predicts every algorithm of `section`'s `collective` entries at (nranks, bytes), fastest first. Between table
/// points (bilinear in log(bytes) and nranks over the enclosing points; clamped to the nearest edge outside) the
/// interpolated quantity is log(measured / model) when `model` gives times at the corners and at the query, so the
/// model supplies the shape and the table the scale; without a model, log(measured time). At a table point the
/// prediction is the measured time, so the fastest prediction is the table's choice. Algorithms the model says
/// cannot run at the query are left out. `nnodes` > 0 (the query's hosts): only entries of the same host layout are
/// used, that many hosts (TuningEntry::nnodes), or one rank per host when the query has one rank per host, so no
/// prediction crosses a host boundary. Empty when the section has no such entry for the collective.
std::vector<TablePrediction> predictFromTable(const TuningSection& section, Collective collective, int nranks,
                                              std::size_t bytes, const ModelTimeFn& model = {}, int nnodes = 0);

// ---- NCCL example tuner plugin CSV (NCCL_TUNER_CONFIG_FILE) ----
// Format of NVIDIA/nccl ext-tuner/example (plugins/tuner/example since 2.29), one config per line:
//   collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
// collective_type: broadcast, reduce, allgather, reducescatter, allreduce; algorithm: tree, ring, collnet_direct,
// collnet_chain, nvls, nvls_tree, pat; protocol: ll, ll128, simple; channels, nNodes, nRanks, numPipeOps, regBuff:
// integers, -1 = any / NCCL's default. Lines starting with '#' and empty lines are ignored; the plugin applies the
// first line that matches (collective, min_bytes <= nBytes <= max_bytes, nodes, ranks), where nBytes is the
// nccl-tests size. Lines are read into a 256-byte buffer.

// NcclTunerRule (one line of it) is in nccl_model.h, whose NcclEnv carries the rules NCCL_TUNER_CONFIG_FILE names.

/// The plugin's collective names: allreduce, reducescatter, allgather, broadcast, reduce (barrier has none: throws
/// Error{InvalidArgument}).
std::string_view ncclTunerCollectiveName(Collective c);

/// The plugin's algorithm and protocol names (its parseAlgorithm / parseProtocol): tree, ring, collnet_direct,
/// collnet_chain, nvls, nvls_tree, pat; ll, ll128, simple.
std::string_view ncclTunerAlgorithmName(NcclAlgorithm a);
std::string_view ncclTunerProtocolName(NcclProtocol p);

/// Rules from the "nccl" sections of `table`: per (collective, nranks, nnodes), the fastest candidate at each size,
/// size ranges split at the geometric mean of neighbouring sizes (the first from 0, the last to SIZE_MAX), equal
/// neighbours merged. Throws Error{InvalidArgument} when the table has no nccl section.
std::vector<NcclTunerRule> ncclTunerRules(const TuningTable& table);
/// The CSV text (a '#' header naming the fields and the table's provenance, then one rule per line).
std::string ncclTunerCsv(const std::vector<NcclTunerRule>& rules, const TuningProvenance& provenance);
/// Parses the CSV as the plugin does, but strictly: Error{InvalidArgument} "<source>:<line>: <field>: <problem>
/// (got <value>)" for a wrong field count, unknown names, non-numeric or out-of-range numbers, min > max, and lines
/// longer than the plugin's 255 characters.
std::vector<NcclTunerRule> parseNcclTunerCsv(const std::string& text, const std::string& source);
/// The rule the plugin would apply to a call as nccl-tests issues it (one operation per group, buffers not
/// registered: numPipeOps 1, regBuff 0): the first that matches and that `usable` accepts (the plugin passes over a
/// rule whose algorithm and protocol NCCL marks "ignore"), or nullptr.
const NcclTunerRule* matchNcclTunerRule(const std::vector<NcclTunerRule>& rules, Collective c, std::size_t bytes,
                                        int nnodes, int nranks,
                                        const std::function<bool(const NcclTunerRule&)>& usable = {});

}  // namespace collbench
