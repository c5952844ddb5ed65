// `collbench merge` as a library (include/collbench/merge.h): shards' documents joined in K order.
#include "collbench/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/parallel.h"
#include "collbench/regret.h"

namespace collbench {

namespace {

/// The most shards one merge joins: it names every shard's file on one command line, which Linux caps at 2 MiB of
/// arguments (ARG_MAX), so no merge names more than 2^20 files (a one-byte name and its NUL each). A larger N in a
/// shard field is a broken file, and checking it first keeps a merge from walking billions of shard numbers.
constexpr int kMaxMergeShards = 1 << 20;
/// Missing shards a message lists by number before it gives only their count (one short line for any N).
constexpr std::size_t kMissingListed = 5;

/// The shard of each part (parsed from its `shard` field), sorted by K; throws unless the parts are exactly 1..N of
/// one N.
template <class Doc, class ShardOf>
std::vector<ShardPart<Doc>> inShardOrder(std::vector<ShardPart<Doc>> parts, ShardOf shardOf) {
  if (parts.empty()) throw Error(Errc::InvalidArgument, "merge: no files given");
  std::vector<std::pair<Shard, std::size_t>> order;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& s = shardOf(parts[i].doc);
    if (s.empty()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {} has no shard field: it is not the output of a --shard K/N run",
                              printable(parts[i].source)));
    }
    Shard k;
    try {
      k = parseShard(s, [](const char*) { return nullptr; });
    } catch (const Error&) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {}: shard '{}' is not K/N", printable(parts[i].source), printable(s)));
    }
    if (k.count > kMaxMergeShards) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {}: shard '{}': N is more than {}, the most shard files one command line can "
                              "name",
                              printable(parts[i].source), printable(s), kMaxMergeShards));
    }
    order.push_back({k, i});
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first.index < b.first.index; });
  const int n = order.front().first.count;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& [k, at] = order[i];
    if (k.count != n) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {} is shard {} but {} is a shard of {}", printable(parts[at].source),
                              k.toString(), printable(parts[order.front().second].source), n));
    }
    if (i > 0 && order[i - 1].first.index == k.index) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {} and {} are both shard {}", printable(parts[order[i - 1].second].source),
                              printable(parts[at].source), k.toString()));
    }
  }
  if (static_cast<int>(order.size()) != n) {
    // The K are distinct and in 1..n: the first few gaps, found in at most order.size() + kMissingListed steps.
    const std::size_t missingCount = static_cast<std::size_t>(n) - order.size();
    std::vector<int> missing;
    std::size_t j = 0;
    for (int k = 1; k <= n && missing.size() < kMissingListed; ++k) {
      if (j < order.size() && order[j].first.index == k)
        ++j;
      else
        missing.push_back(k);
    }
    throw Error(Errc::InvalidArgument,
                fmt::format("merge: {} of {} shards given; missing {}{}", order.size(), n, fmt::join(missing, ", "),
                            missingCount > missing.size() ? fmt::format(", ... ({} in all)", missingCount) : ""));
  }
  std::vector<ShardPart<Doc>> out;
  for (const auto& [k, at] : order) out.push_back(std::move(parts[at]));
  return out;
}

/// Throws naming both files and the field when a part disagrees with the first on what was swept.
void requireSame(const std::string& field, const std::string& first, const std::string& value,
                 const std::string& firstSource, const std::string& source) {
  if (first == value) return;
  throw Error(Errc::InvalidArgument,
              fmt::format("merge: {}: {} '{}' differs from {}'s '{}' (shards of different grids)", printable(source),
                          field, printable(value), printable(firstSource), printable(first)));
}

}  // namespace

TuningTable mergeTuningTables(std::vector<ShardPart<TuningTable>> parts) {
  parts = inShardOrder(std::move(parts), [](const TuningTable& t) -> const std::string& { return t.provenance.shard; });
  TuningTable out = parts.front().doc;
  out.provenance.shard.clear();
  for (TuningSection& s : out.sections) s.entries.clear();
  for (const ShardPart<TuningTable>& p : parts) {
    const std::string& src = parts.front().source;
    requireSame("provenance.topology_fingerprint", out.provenance.topologyFingerprint,
                p.doc.provenance.topologyFingerprint, src, p.source);
    requireSame("provenance.backend", out.provenance.backend, p.doc.provenance.backend, src, p.source);
    requireSame("sections", std::to_string(out.sections.size()), std::to_string(p.doc.sections.size()), src, p.source);
    for (std::size_t i = 0; i < out.sections.size(); ++i) {
      const TuningSection& s = p.doc.sections[i];
      requireSame(fmt::format("sections[{}].library", i), out.sections[i].library, s.library, src, p.source);
      requireSame(fmt::format("sections[{}].fingerprint", i), out.sections[i].fingerprint, s.fingerprint, src,
                  p.source);
      out.sections[i].entries.insert(out.sections[i].entries.end(), s.entries.begin(), s.entries.end());
    }
  }
  return out;
}

SweepRecord mergeSweepRecords(std::vector<ShardPart<SweepRecord>> parts) {
  parts = inShardOrder(std::move(parts), [](const SweepRecord& r) -> const std::string& { return r.shard; });
  SweepRecord out = parts.front().doc;
  out.shard.clear();
  out.rows.clear();
  for (const ShardPart<SweepRecord>& p : parts) {
    const std::string& src = parts.front().source;
    requireSame("collective", out.collective, p.doc.collective, src, p.source);
    requireSame("datatype", out.datatype, p.doc.datatype, src, p.source);
    requireSame("op", out.op, p.doc.op, src, p.source);
    requireSame("model", out.model, p.doc.model, src, p.source);
    requireSame("crosstraffic", out.crossTraffic ? "true" : "false", p.doc.crossTraffic ? "true" : "false", src,
                p.source);
    out.rows.insert(out.rows.end(), p.doc.rows.begin(), p.doc.rows.end());
  }
  return out;
}

RegretRecord mergeRegretRecords(std::vector<ShardPart<RegretRecord>> parts) {
  parts = inShardOrder(std::move(parts), [](const RegretRecord& r) -> const std::string& { return r.shard; });
  RegretRecord out = parts.front().doc;
  out.shard.clear();
  out.rows.clear();
  for (const ShardPart<RegretRecord>& p : parts) {
    const std::string& src = parts.front().source;
    requireSame("collective", out.collective, p.doc.collective, src, p.source);
    requireSame("backend", out.backend, p.doc.backend, src, p.source);
    requireSame("topology_fingerprint", out.topologyFingerprint, p.doc.topologyFingerprint, src, p.source);
    requireSame("tuning", out.tuning, p.doc.tuning, src, p.source);
    out.rows.insert(out.rows.end(), p.doc.rows.begin(), p.doc.rows.end());
  }
  const RegretSummary s = summarizeRegret(out.rows);
  out.worst = s.worst;
  out.geomean = s.geomean;
  out.tableWorst = s.tableWorst;
  out.tableGeomean = s.tableGeomean;
  return out;
}

std::string mergeShardFiles(const std::vector<std::string>& paths, std::string* what) {
  if (paths.empty()) throw Error(Errc::InvalidArgument, "merge: no files given");
  std::vector<std::string> texts;
  std::string format;
  for (const std::string& p : paths) {
    texts.push_back(readTextFile(p, "shard"));
    const nlohmann::json doc = parseJsonDocument(texts.back(), p);
    const std::string f = doc.is_object() && doc.contains("format") && doc["format"].is_string()
                              ? doc["format"].get<std::string>()
                              : std::string();
    if (f != "collbench-tuning" && f != SweepRecord::kFormat && f != RegretRecord::kFormat) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {}: format '{}' is not collbench-tuning, {} or {}", printable(p), printable(f),
                              SweepRecord::kFormat, RegretRecord::kFormat));
    }
    if (!format.empty() && f != format) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("merge: {} is {} but {} is {}", printable(p), f, printable(paths.front()), format));
    }
    format = f;
  }
  if (what) *what = format;
  if (format == SweepRecord::kFormat) {
    std::vector<ShardPart<SweepRecord>> parts;
    for (std::size_t i = 0; i < paths.size(); ++i) parts.push_back({paths[i], parseSweepRecord(texts[i], paths[i])});
    return toJson(mergeSweepRecords(std::move(parts))).dump(2);
  }
  if (format == RegretRecord::kFormat) {
    std::vector<ShardPart<RegretRecord>> parts;
    for (std::size_t i = 0; i < paths.size(); ++i) parts.push_back({paths[i], parseRegretRecord(texts[i], paths[i])});
    return toJson(mergeRegretRecords(std::move(parts))).dump(2);
  }
  std::vector<ShardPart<TuningTable>> parts;
  for (std::size_t i = 0; i < paths.size(); ++i) parts.push_back({paths[i], parseTuningTable(texts[i], paths[i])});
  return toJson(mergeTuningTables(std::move(parts)));
}

}  // namespace collbench
