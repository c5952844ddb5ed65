#pragma once
/// `collbench merge`: the outputs of a grid's shards (`--shard K/N` of tune, sweep and regret; parallel.h) joined
/// into the document the unsharded run writes, byte-identical apart from provenance (a tuning table's provenance, a
/// record's command line and tool, and the timing fields a sweep row carries: wall_s, cpu_s).
///
/// Each shard's document says which part it is (the `shard` field, "K/N"); the parts may be given in any order. A
/// shard holds a contiguous block of the grid, so the merge concatenates the parts in K order. Refused with
/// Error{InvalidArgument} naming the file: a document without a shard field, parts of different N, a missing or
/// repeated K, mixed formats, or parts that disagree on what was swept (topology fingerprint, backend, collective,
/// network model, sections).
#include <string>
#include <vector>

#include "collbench/records.h"
#include "collbench/tuning.h"

namespace collbench {

/// A shard's document and the file it came from (for messages).
template <class Doc>
struct ShardPart {
  std::string source;
  Doc doc;
};

/// Tables: sections in the first part's order, each section's entries concatenated in K order; the provenance is the
/// first part's without its shard field.
TuningTable mergeTuningTables(std::vector<ShardPart<TuningTable>> parts);
/// Sweep records: rows concatenated in K order; the first part's header without its shard field.
SweepRecord mergeSweepRecords(std::vector<ShardPart<SweepRecord>> parts);
/// Regret records: rows concatenated in K order, the worst and geometric means recomputed over every row
/// (summarizeRegret, regret.h); the first part's header without its shard field.
RegretRecord mergeRegretRecords(std::vector<ShardPart<RegretRecord>> parts);

/// Reads `paths` (one format: collbench tuning table, collbench-sweep or collbench-regret, told by their "format"
/// field), merges them and returns the text the unsharded run writes, with `what` set to the format's name.
std::string mergeShardFiles(const std::vector<std::string>& paths, std::string* what = nullptr);

}  // namespace collbench
