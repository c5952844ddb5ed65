#pragma once
/// Collective traces: what a training program issued, one event per collective, so that `collbench replay` can run
/// the same sequence on the simulator or another backend (optionally at another world size).
///
/// File format (docs/trace-format.md; JSON, version 2, and version 1 is read too; times in seconds, as the _s
/// suffixes say):
/// ```json
/// { "format": "collbench-trace", "version": 2,
///   "world_size": 4,                       // replicas in sync (workers x local replicas)
///   "topology": {"name": "threads", "workers": 2, "local_replicas": 2},
///   "backend": "host", "simulated": false,
///   "model": "bert-large", "dtype": "bfloat16",                    // what was trained (optional)
///   "tool": "collbench 0.1.0", "command": "collbench train ...",   // provenance (optional)
///   "events": [
///     {"kind": "all_reduce", "bytes": 4096, "dtype": "float", "op": "sum", "group": "replicas", "nranks": 4,
///      "algorithm": "ring", "start_s": 0.0102, "end_s": 0.0107, "compute_gap_s": 0.0100, "step": 0, "pack": 0,
///      "after": "previous_end", "issue_s": 0.0102},
///     {"kind": "broadcast", "bytes": 64, "dtype": "float", "root": 0, "group": "workers", "nranks": 2, ...} ] }
/// ```
/// Event fields: kind (all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier); bytes per rank buffer
/// (CollectiveSpec::inputBytes convention, a multiple of the dtype size); dtype and op in nccl-tests names (op only
/// for reducing kinds); root (broadcast/reduce only, default 0); group: who takes part, "replicas" (all world_size
/// replicas, flat), "workers" (one rank per worker: the cross-worker stage of a hierarchical collective) or
/// "local" (the replicas of one worker), with nranks its size; algorithm run; start_s/end_s from the trace's
/// origin (the strategy's creation; the simulated clock when simulated); compute_gap_s the compute between the
/// point named by `after` and the issue of this collective; step the strategy.run() call it belongs to (-1 before
/// the first); pack the index of the pack within a packed all-reduce (0 otherwise); after (version 2) what that
/// compute waited for: the previous collective's end (a blocking program; the optimizer at a step boundary) or its
/// issue (backward kept computing while it ran); issue_s (version 2) when the program issued the collective (its
/// gradients were ready), <= start_s when it queued behind an earlier collective.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/types.h"

namespace collbench {

struct TraceTopology {
  std::string name = "threads";  ///< topology file name (simulated), "threads" or "processes"
  int workers = 1;
  int localReplicas = 1;
  bool operator==(const TraceTopology&) const = default;
};

/// Group names of TraceEvent::group.
inline constexpr std::string_view kTraceGroupReplicas = "replicas";
inline constexpr std::string_view kTraceGroupWorkers = "workers";
inline constexpr std::string_view kTraceGroupLocal = "local";

/// What the compute before an event (its compute_gap_s) started after: the dependency on backward progress.
enum class TraceAfter {
  PreviousEnd,    ///< "previous_end": the program waited for the previous collective (or the origin) to end
  PreviousIssue,  ///< "previous_issue": it kept computing once the previous collective was issued (overlap)
};
/// "previous_end", "previous_issue".
std::string_view toString(TraceAfter a);

struct TraceEvent {
  Collective kind = Collective::AllReduce;
  std::size_t bytes = 0;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;  ///< meaningful when the kind reduces
  int root = 0;                 ///< meaningful for broadcast and reduce
  std::string group = std::string(kTraceGroupReplicas);
  int nranks = 1;
  std::string algorithm;
  double startSeconds = 0;
  double endSeconds = 0;
  double computeGapSeconds = 0;
  std::int64_t step = -1;
  int pack = 0;
  std::optional<TraceAfter> after;     ///< absent in version 1 traces: `collbench replay --overlap auto` infers it
  std::optional<double> issueSeconds;  ///< issue_s; absent in version 1 traces
  bool operator==(const TraceEvent&) const = default;
};

struct Trace {
  static constexpr std::string_view kFormat = "collbench-trace";
  static constexpr int kVersion = 2;  ///< written; version 1 (without model, dtype, after, issue_s) is read too

  int worldSize = 1;
  TraceTopology topology;
  std::string backend;
  bool simulated = false;
  std::string model;           ///< what was trained ("bert-large"); "" = not recorded
  std::optional<DType> dtype;  ///< the gradients' dtype; absent = not recorded
  std::string tool;            ///< "collbench <version>" (optional)
  std::string command;         ///< command line that produced it (optional)
  std::vector<TraceEvent> events;
  bool operator==(const Trace&) const = default;
};

/// The JSON text of `trace` (`indent` as nlohmann's dump; -1 = one line).
std::string toJson(const Trace& trace, int indent = 2);
/// Parses and validates a trace. Errors are Error{InvalidArgument} naming `source` and the field, with the event
/// index for event fields: `run.json: events[3].nranks: 3 does not match group "workers" (2 workers)`. Unknown
/// fields are errors (a newer writer must bump the version); optional fields: backend, simulated, model, dtype, tool,
/// command, and per event op (reducing kinds need it), root, algorithm, step, pack, after, issue_s. Events must be in
/// program order: a step, start_s or issue_s smaller than the previous event's is an error naming the index.
/// Version 1 traces are read (without the version 2 fields model, dtype, after, issue_s).
Trace parseTrace(std::string_view text, std::string_view source = "trace");
/// Writes toJson(trace) to `path`; throws Error{InvalidArgument} naming the path when it cannot be written.
void writeTrace(const Trace& trace, const std::string& path);
/// Reads and parses `path` (the path is the `source` of errors).
Trace readTrace(const std::string& path);

}  // namespace collbench
