// collbench-perf: `collbench perf -J`, read by gate, report and calibrate (records.h, docs/perf.schema.json).
#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/types.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

namespace {

/// Rank counts and roots beyond this are typos, not worlds (the topology loader's bound).
constexpr std::int64_t kMaxRanks = 1 << 24;

PerfSample readSample(const JsonFields& row, const char* field) {
  const JsonFields h = row.object(field);
  PerfSample s;
  s.timeUs = h.number("time_us", 0);
  s.algbwGBps = h.number("algbw_GBps", 0);
  s.busbwGBps = h.number("busbw_GBps", 0);
  if (h.has("wrong")) s.wrong = h.integer("wrong", 0);
  return s;
}

json sampleJson(const PerfSample& s) {
  return {{"time_us", s.timeUs},
          {"algbw_GBps", s.algbwGBps},
          {"busbw_GBps", s.busbwGBps},
          {"wrong", s.wrong ? json(*s.wrong) : json(nullptr)}};
}

}  // namespace

PerfRun parsePerfRun(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, PerfRun::kFormat, PerfRun::kVersion);
  PerfRun r;
  r.source = std::string(source);
  r.collective = top.string("collective");
  const JsonFields cfg = top.object("config");
  r.backend = cfg.string("backend");
  r.ranks = static_cast<int>(cfg.integer("ranks", 1, kMaxRanks));
  r.topology = cfg.stringOr("topology", "");
  r.algorithm = cfg.stringOr("algorithm", "auto");
  r.minBytes = static_cast<std::size_t>(cfg.integerOr("minbytes", 0, 0));
  r.maxBytes = static_cast<std::size_t>(cfg.integerOr("maxbytes", 0, 0));
  r.stepBytes = static_cast<std::size_t>(cfg.integerOr("stepbytes", 0, 0));
  r.stepFactor = cfg.has("stepfactor") ? cfg.number("stepfactor", 0) : 1;
  r.iters = static_cast<int>(cfg.integerOr("iters", 0, 0, INT32_MAX));
  r.warmup = static_cast<int>(cfg.integerOr("warmup_iters", 0, 0, INT32_MAX));
  r.check = static_cast<int>(cfg.integerOr("check", 0, 0, INT32_MAX));
  r.datatype = cfg.string("datatype");
  r.op = cfg.string("op");
  r.root = static_cast<int>(cfg.integerOr("root", 0, 0, kMaxRanks));
  r.average = static_cast<int>(cfg.integerOr("average", 1, 0, INT32_MAX));
  r.blocking = static_cast<int>(cfg.integerOr("blocking", 0, 0, 1));
  r.channels = static_cast<int>(cfg.integerOr("channels", 1, 1, INT32_MAX));
  r.chunkBytes = static_cast<std::size_t>(cfg.integerOr("chunk_bytes", 0, 0));
  r.commandLine = top.stringOr("command_line", "");
  if (top.has("environment")) {
    const JsonFields env = top.object("environment");
    r.environment = top.need("environment");
    r.toolVersion = env.stringOr("collbench_version", "");
  }
  const json& rows = top.array("results");
  std::set<std::pair<std::string, std::size_t>> seen;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const JsonFields row = top.element("results", i);
    PerfRow p;
    p.size = static_cast<std::size_t>(row.integer("size", 0));
    p.count = static_cast<std::size_t>(row.integerOr("count", 0, 0));
    p.type = row.stringOr("type", r.datatype);
    p.redop = row.stringOr("redop", r.op);
    p.root = static_cast<int>(row.integerOr("root", -1, -1, kMaxRanks));
    p.algorithm = row.string("algorithm");
    if (p.algorithm.empty()) row.fail("algorithm", "must not be empty");
    p.algorithmReason = row.stringOr("algorithm_reason", "");
    p.chunkBytes = static_cast<std::size_t>(row.integerOr("chunk_bytes", static_cast<std::int64_t>(r.chunkBytes), 0));
    p.channels = static_cast<int>(row.integerOr("channels", r.channels, 1, INT32_MAX));
    p.outOfPlace = readSample(row, "out_of_place");
    p.inPlace = readSample(row, "in_place");
    if (!seen.insert({p.algorithm, p.size}).second) {
      row.fail("size", fmt::format("{} B with algorithm {} appears twice", p.size, printable(p.algorithm)));
    }
    r.rows.push_back(std::move(p));
  }
  r.avgBusbwGBps = top.has("avg_busbw_GBps") ? top.number("avg_busbw_GBps", 0) : 0;
  r.wrongTotal = top.integerOr("wrong_total", 0, 0);
  return r;
}

PerfRun readPerfRun(const std::string& path) { return parsePerfRun(readTextFile(path, "perf file"), path); }

json toJson(const PerfRun& r) {
  json rows = json::array();
  for (const PerfRow& p : r.rows) {
    rows.push_back({{"size", p.size},
                    {"count", p.count},
                    {"type", p.type},
                    {"redop", p.redop},
                    {"root", p.root},
                    {"algorithm", p.algorithm},
                    {"algorithm_reason", p.algorithmReason},
                    {"chunk_bytes", p.chunkBytes},
                    {"channels", p.channels},
                    {"out_of_place", sampleJson(p.outOfPlace)},
                    {"in_place", sampleJson(p.inPlace)}});
  }
  return {{"format", PerfRun::kFormat},
          {"version", PerfRun::kVersion},
          {"collective", r.collective},
          {"config",
           {{"backend", r.backend},
            {"ranks", r.ranks},
            {"topology", r.topology},
            {"algorithm", r.algorithm},
            {"minbytes", r.minBytes},
            {"maxbytes", r.maxBytes},
            {"stepbytes", r.stepBytes},
            {"stepfactor", r.stepFactor},
            {"iters", r.iters},
            {"warmup_iters", r.warmup},
            {"check", r.check},
            {"op", r.op},
            {"datatype", r.datatype},
            {"root", r.root},
            {"average", r.average},
            {"blocking", r.blocking},
            {"channels", r.channels},
            {"chunk_bytes", r.chunkBytes}}},
          {"command_line", r.commandLine},
          {"environment", r.environment},
          {"results", rows},
          {"avg_busbw_GBps", r.avgBusbwGBps},
          {"wrong_total", r.wrongTotal}};
}

}  // namespace collbench
