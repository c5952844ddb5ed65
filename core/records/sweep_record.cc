// collbench-sweep: `collbench sweep -J` (records.h, docs/sweep.schema.json).
#include "collbench/error.h"
#include "collbench/records.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

SweepRecord parseSweepRecord(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, SweepRecord::kFormat, SweepRecord::kVersion);
  SweepRecord r;
  r.tool = top.stringOr("tool", "");
  r.commandLine = top.stringOr("command_line", "");
  r.shard = top.stringOr("shard", "");
  r.collective = top.string("collective");
  r.datatype = top.string("datatype");
  r.op = top.string("op");
  r.model = top.string("model");
  r.crossTraffic = top.boolean("crosstraffic");
  for (std::size_t i = 0; i < top.array("rows").size(); ++i) {
    const JsonFields f = top.element("rows", i);
    SweepRow w;
    w.topology = f.string("topology");
    w.fingerprint = f.string("topology_fingerprint");
    w.overrides = f.stringOr("set", "");
    w.ranks = static_cast<int>(f.integer("ranks", 1, INT32_MAX));
    w.algorithm = f.string("algorithm");
    w.bytes = static_cast<std::size_t>(f.integer("bytes", 0));
    w.count = static_cast<std::size_t>(f.integer("count", 0));
    w.timeUs = f.number("time_us", 0);
    w.algbw = f.number("algbw_GBps", 0);
    w.busbw = f.number("busbw_GBps", 0);
    w.method = f.string("method");
    w.exact = f.boolean("exact");
    w.note = f.stringOr("note", "");
    w.ops = static_cast<std::size_t>(f.integer("ops", 0));
    w.transfers = static_cast<std::size_t>(f.integer("transfers", 0));
    w.activities = static_cast<std::size_t>(f.integer("simulated_activities", 0));
    w.wall = f.number("wall_s", 0);
    w.cpu = f.number("cpu_s", 0);
    r.rows.push_back(std::move(w));
  }
  return r;
}

json toJson(const SweepRecord& r) {
  json rows = json::array();
  for (const SweepRow& w : r.rows) {
    rows.push_back({{"topology", w.topology},
                    {"topology_fingerprint", w.fingerprint},
                    {"set", w.overrides},
                    {"ranks", w.ranks},
                    {"algorithm", w.algorithm},
                    {"bytes", w.bytes},
                    {"count", w.count},
                    {"time_us", w.timeUs},
                    {"algbw_GBps", w.algbw},
                    {"busbw_GBps", w.busbw},
                    {"method", w.method},
                    {"exact", w.exact},
                    {"note", w.note},
                    {"ops", w.ops},
                    {"transfers", w.transfers},
                    {"simulated_activities", w.activities},
                    {"wall_s", w.wall},
                    {"cpu_s", w.cpu}});
  }
  json doc = {{"format", SweepRecord::kFormat},
              {"version", SweepRecord::kVersion},
              {"tool", r.tool},
              {"command_line", r.commandLine},
              {"collective", r.collective},
              {"datatype", r.datatype},
              {"op", r.op},
              {"model", r.model},
              {"crosstraffic", r.crossTraffic},
              {"rows", rows}};
  if (!r.shard.empty()) doc["shard"] = r.shard;
  return doc;
}

}  // namespace collbench
