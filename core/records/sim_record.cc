// collbench-sim: `collbench sim --json` (records.h, docs/sim.schema.json).
#include "collbench/error.h"
#include "collbench/records.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

SimRecord parseSimRecord(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields f = records_detail::header(doc, source, SimRecord::kFormat, SimRecord::kVersion);
  SimRecord r;
  r.tool = f.stringOr("tool", "");
  r.commandLine = f.stringOr("command_line", "");
  r.topology = f.string("topology");
  r.topologyFingerprint = f.string("topology_fingerprint");
  r.model = f.string("model");
  r.collective = f.string("collective");
  r.algorithm = f.string("algorithm");
  r.ranks = static_cast<int>(f.integer("ranks", 1, INT32_MAX));
  r.bytes = static_cast<std::size_t>(f.integer("bytes", 0));
  r.count = static_cast<std::size_t>(f.integer("count", 0));
  r.datatype = f.string("datatype");
  r.timeUs = f.number("time_us", 0);
  r.algbwGBps = f.number("algbw_GBps", 0);
  r.busbwGBps = f.number("busbw_GBps", 0);
  r.method = f.string("method");
  r.exact = f.boolean("exact");
  r.note = f.stringOr("note", "");
  r.ops = static_cast<std::size_t>(f.integer("ops", 0));
  r.transfers = static_cast<std::size_t>(f.integer("transfers", 0));
  r.simulatedActivities = static_cast<std::size_t>(f.integer("simulated_activities", 0));
  r.wallSeconds = f.number("wall_s", 0);
  r.spansMethod = f.stringOr("timeline_spans_method", "");
  if (!r.spansMethod.empty()) r.spansTimeUs = f.number("timeline_spans_time_us", 0);
  return r;
}

json toJson(const SimRecord& r) {
  json doc = {{"format", SimRecord::kFormat},
              {"version", SimRecord::kVersion},
              {"tool", r.tool},
              {"command_line", r.commandLine},
              {"topology", r.topology},
              {"topology_fingerprint", r.topologyFingerprint},
              {"model", r.model},
              {"collective", r.collective},
              {"algorithm", r.algorithm},
              {"ranks", r.ranks},
              {"bytes", r.bytes},
              {"count", r.count},
              {"datatype", r.datatype},
              {"time_us", r.timeUs},
              {"algbw_GBps", r.algbwGBps},
              {"busbw_GBps", r.busbwGBps},
              {"method", r.method},
              {"exact", r.exact},
              {"note", r.note},
              {"ops", r.ops},
              {"transfers", r.transfers},
              {"simulated_activities", r.simulatedActivities},
              {"wall_s", r.wallSeconds}};
  if (!r.spansMethod.empty()) {
    doc["timeline_spans_method"] = r.spansMethod;
    doc["timeline_spans_time_us"] = r.spansTimeUs;
  }
  return doc;
}

}  // namespace collbench
