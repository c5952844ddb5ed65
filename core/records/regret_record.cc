// collbench-regret: `collbench regret -J` (records.h, docs/regret.schema.json).
#include <fmt/format.h>

#include "collbench/error.h"
#include "collbench/records.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;
using records_detail::finiteOrNull;
using records_detail::numberOrNaN;

namespace {

RegretChoice readChoice(const JsonFields& row, const char* field) {
  const JsonFields f = row.object(field);
  return {f.string("algorithm"), static_cast<std::size_t>(f.integer("chunk_bytes", 0)),
          static_cast<int>(f.integer("channels", 1, INT32_MAX)), numberOrNaN(f, "time_us")};
}

json choiceJson(const RegretChoice& c) {
  return {{"algorithm", c.algorithm},
          {"chunk_bytes", c.chunkBytes},
          {"channels", c.channels},
          {"time_us", finiteOrNull(c.timeUs)}};
}

}  // namespace

RegretRecord parseRegretRecord(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, RegretRecord::kFormat, RegretRecord::kVersion);
  RegretRecord r;
  r.collective = top.string("collective");
  r.backend = top.string("backend");
  r.topology = top.stringOr("topology", "");
  r.topologyFingerprint = top.stringOr("topology_fingerprint", "");
  r.tuning = top.stringOr("tuning", "");
  r.commandLine = top.stringOr("command_line", "");
  r.shard = top.stringOr("shard", "");
  if (top.has("environment")) {
    top.object("environment");
    r.environment = top.need("environment");
  }
  for (std::size_t i = 0; i < top.array("rows").size(); ++i) {
    const JsonFields f = top.element("rows", i);
    RegretRow w;
    w.nranks = static_cast<int>(f.integer("nranks", 1, INT32_MAX));
    w.bytes = static_cast<std::size_t>(f.integer("bytes", 0));
    w.chosen = readChoice(f, "chosen");
    const JsonFields chosen = f.object("chosen");
    w.chosenSource = chosen.stringOr("source", "");
    w.predictedUs = numberOrNaN(chosen, "predicted_us");
    w.best = readChoice(f, "best");
    // Files from before the trial (table_choice) and the confirmation (sweep): the table chose what ran, and the
    // sweep's times are the final ones.
    w.tableChoice = f.has("table_choice") ? readChoice(f, "table_choice") : w.chosen;
    if (f.has("sweep")) {
      const JsonFields sweep = f.object("sweep");
      w.sweepChosenUs = numberOrNaN(sweep, "chosen_us");
      w.sweepBestUs = numberOrNaN(sweep, "best_us");
      w.sweepTableUs = numberOrNaN(sweep, "table_us");
    } else {
      w.sweepChosenUs = w.chosen.timeUs;
      w.sweepBestUs = w.best.timeUs;
      w.sweepTableUs = w.tableChoice.timeUs;
    }
    r.rows.push_back(std::move(w));
  }
  const JsonFields s = top.object("summary");
  if (const std::int64_t points = s.integer("points", 0); points != static_cast<std::int64_t>(r.rows.size())) {
    s.fail("points", fmt::format("says {} points, the file has {} rows", points, r.rows.size()));
  }
  r.worst = numberOrNaN(s, "worst");
  r.geomean = numberOrNaN(s, "geomean");
  r.tableWorst = s.has("table_worst") || !s.has("worst") ? numberOrNaN(s, "table_worst") : r.worst;
  r.tableGeomean = s.has("table_geomean") || !s.has("geomean") ? numberOrNaN(s, "table_geomean") : r.geomean;
  return r;
}

json toJson(const RegretRecord& r) {
  json rows = json::array();
  for (const RegretRow& w : r.rows) {
    json chosen = choiceJson(w.chosen);
    chosen["source"] = w.chosenSource;
    chosen["predicted_us"] = finiteOrNull(w.predictedUs);
    rows.push_back({{"nranks", w.nranks},
                    {"bytes", w.bytes},
                    {"chosen", chosen},
                    {"best", choiceJson(w.best)},
                    {"table_choice", choiceJson(w.tableChoice)},
                    {"regret", finiteOrNull(w.regret())},
                    {"table_regret", finiteOrNull(w.tableRegret())},
                    {"sweep",
                     {{"chosen_us", finiteOrNull(w.sweepChosenUs)},
                      {"best_us", finiteOrNull(w.sweepBestUs)},
                      {"table_us", finiteOrNull(w.sweepTableUs)},
                      {"regret", finiteOrNull(w.sweepRegret())}}}});
  }
  json doc = {{"format", RegretRecord::kFormat},
              {"version", RegretRecord::kVersion},
              {"collective", r.collective},
              {"backend", r.backend},
              {"topology", r.topology},
              {"topology_fingerprint", r.topologyFingerprint},
              {"tuning", r.tuning},
              {"command_line", r.commandLine},
              {"environment", r.environment},
              {"rows", rows},
              {"summary",
               {{"points", r.rows.size()},
                {"worst", finiteOrNull(r.worst)},
                {"geomean", finiteOrNull(r.geomean)},
                {"table_worst", finiteOrNull(r.tableWorst)},
                {"table_geomean", finiteOrNull(r.tableGeomean)}}}};
  if (!r.shard.empty()) doc["shard"] = r.shard;
  return doc;
}

}  // namespace collbench
