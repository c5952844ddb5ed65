#pragma once
/// Schedules as files (docs/schedule-format.md, docs/schedule.schema.json), like MSCCL's XML plans: what
/// `collbench plan --schedule-out` writes and what `collbench plan|sim|perf --schedule FILE` runs.
///
/// A file holds the collective it implements and, per rank, the ops of the schedule IR (schedule.h). Offsets and
/// sizes are either bytes (the file runs at its own size only) or chunks: with a top-level `"chunks": K` each rank's
/// input buffer is K equal chunks, every offset and size counts chunks, and the file runs at every size whose
/// input element count K divides.
/// ```json
/// { "format": "collbench-schedule", "version": 1, "algorithm": "bidir_ring",
///   "collective": {"kind": "all_reduce", "nranks": 4, "dtype": "float", "op": "sum"},
///   "chunks": 8,
///   "ranks": [
///     {"scratch_chunks": 0, "ops": [
///       {"kind": "send", "peer": 1, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1},
///       {"kind": "recv_reduce", "peer": 3, "src": {"buffer": "input", "chunk": 3},
///        "dst": {"buffer": "output", "chunk": 3}, "chunk_count": 1, "deps": [0], "channel": 0} ]} ] }
/// ```
/// In bytes the ref fields are `offset`, the size `bytes`, the scratch `scratch_bytes`, and `collective.count`
/// (elements, CollectiveSpec's convention) is required; with `chunks` it is absent. `peer` is for send, recv and
/// recv_reduce only; `src` for the kinds that read (all but recv), `dst` for those that write (all but send);
/// `deps` (earlier op indices of the rank) defaults to [], `channel` to 0. Optional: `protocol` ("LL", "LL128",
/// "Simple": Schedule::protocol, timing only); provenance: description, tool, command.
///
/// Reading validates everything before anything runs, out of place and in place (perf runs both): the fields
/// (unknown, missing, wrong type), ranks and peers in range, buffer names, deps that are earlier ops, ranges within
/// their buffers, then validate() (matching sends and receives, deadlock, races). A chunk file is validated once
/// with one element per chunk; every size it runs at scales each range by the same factor, which preserves all of
/// those properties. Errors are one line, Error{InvalidArgument}, naming the source, the rank, the op index and the
/// field: `schedule.json: ranks[2].ops[5].peer: 9 is not a rank (0..3)`.
#include <string>
#include <string_view>

#include "collbench/schedule.h"

namespace collbench {

struct ScheduleFile {
  static constexpr std::string_view kFormat = "collbench-schedule";
  static constexpr int kVersion = 1;

  /// The schedule. With chunks > 0 its offsets, sizes and scratch sizes count chunks (not bytes) and spec.count is 0:
  /// instantiate() gives the schedule of a size.
  Schedule schedule;
  /// 0: offsets and sizes are bytes (the file runs at spec.count only); else the input's chunks.
  std::size_t chunks = 0;
  std::string description;  ///< optional
  std::string tool;         ///< "collbench <version>" (optional)
  std::string command;      ///< command line that wrote it (optional)
  std::string source;       ///< where it was read from: the prefix of instantiate()'s errors (not written)
};

/// The bytes form of a generated schedule, with the tool's version and `command`. Throws Error{InvalidArgument} for
/// a native schedule (a library's own call has no ops to write).
ScheduleFile toScheduleFile(const Schedule& s, std::string command = {});
/// The JSON text (one op per line, so that a diff shows which ops changed).
std::string toJson(const ScheduleFile& f);
/// Parses and validates (see above). `source` names the file in errors.
ScheduleFile parseScheduleFile(std::string_view text, std::string_view source = "schedule");
/// Reads and parses `path` (the path is the source of errors).
ScheduleFile readScheduleFile(const std::string& path);
/// Writes toJson(f) to `path`; throws Error{InvalidArgument} naming the path when it cannot be written.
void writeScheduleFile(const ScheduleFile& f, const std::string& path);

/// The file's schedule for `spec`: the same collective (kind, nranks, dtype, op, root) and, in bytes, the same count;
/// in chunks, a count whose input element count the chunks divide. Otherwise throws Error{InvalidArgument} naming
/// the source, the size and what the file needs.
Schedule instantiate(const ScheduleFile& f, const CollectiveSpec& spec);
/// Bytes of the size column of perf and sim for the file's own size (max of input and output); 0 for chunk files.
std::size_t ownSizeBytes(const ScheduleFile& f);

}  // namespace collbench
