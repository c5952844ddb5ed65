// collbench-calibration: `collbench calibrate -J` (records.h, docs/calibration.schema.json).
#include <fmt/format.h>

#include "collbench/error.h"
#include "collbench/records.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

CalibrationRecord parseCalibrationRecord(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, CalibrationRecord::kFormat, CalibrationRecord::kVersion);
  CalibrationRecord r;
  r.tool = top.stringOr("tool", "");
  r.commandLine = top.stringOr("command_line", "");
  if (top.has("environment")) {
    top.object("environment");
    r.environment = top.need("environment");
  }
  r.topologyFile = top.stringOr("topology_file", "");
  r.topologyFingerprint = top.string("topology_fingerprint");
  const JsonFields p = top.object("params");
  const JsonFields intra = p.object("intra"), inter = p.object("inter");
  r.intraAlphaUs = intra.number("alpha_us", 0);
  r.intraBetaGBps = intra.number("beta_GBps", 0);
  r.interAlphaUs = inter.number("alpha_us", 0);
  r.interBetaGBps = inter.number("beta_GBps", 0);
  r.gammaGBps = p.number("gamma_GBps", 0);
  r.callOverheadUs = p.number("call_overhead_us", 0);
  for (std::size_t i = 0; i < p.array("memory_tiers").size(); ++i) {
    const JsonFields t = p.element("memory_tiers", i);
    CalibrationRecord::Tier tier;
    if (t.has("max_working_set_bytes")) {
      tier.maxWorkingSetBytes = static_cast<std::size_t>(t.integer("max_working_set_bytes", 1));
    }
    tier.bandwidthScale = t.number("bandwidth_scale", 0);
    r.memoryTiers.push_back(tier);
  }
  const JsonFields id = top.object("identified");
  for (int k = 0; k < CalibrationRecord::kParamCount; ++k)
    r.identified[k] = id.boolean(CalibrationRecord::kParamNames[k]);
  const JsonFields fit = top.object("fit");
  r.fitMedian = fit.number("median", 0);
  r.fitWorst = fit.number("worst", 0);
  r.heldOut = records_detail::readErrors(top.object("held_out"));
  if (top.has("sim_held_out")) r.simHeldOut = records_detail::readErrors(top.object("sim_held_out"));
  if (top.has("notes")) {
    const json& notes = top.array("notes");
    for (std::size_t i = 0; i < notes.size(); ++i) {
      if (!notes[i].is_string()) {
        top.fail(fmt::format("notes[{}]", i).c_str(),
                 fmt::format("expected a string, got {} {}", notes[i].type_name(), echoJson(notes[i])));
      }
      r.notes.push_back(notes[i].get<std::string>());
    }
  }
  for (std::size_t i = 0; i < top.array("samples").size(); ++i) {
    const JsonFields s = top.element("samples", i);
    CalibrationSampleRecord c;
    c.collective = s.string("collective");
    c.algorithm = s.string("algorithm");
    c.nranks = static_cast<int>(s.integer("nranks", 1, INT32_MAX));
    c.hosts = static_cast<int>(s.integer("hosts", 1, INT32_MAX));
    c.bytes = static_cast<std::size_t>(s.integer("bytes", 0));
    c.measuredUs = s.number("measured_us", 0);
    c.modelUs = s.number("model_us", 0);
    c.simUs = s.optionalNumber("sim_us", 0);
    c.heldOut = s.boolean("held_out");
    c.origin = s.stringOr("origin", "");
    r.samples.push_back(std::move(c));
  }
  return r;
}

json toJson(const CalibrationRecord& r) {
  json tiers = json::array();
  for (const CalibrationRecord::Tier& t : r.memoryTiers) {
    tiers.push_back({{"max_working_set_bytes", t.maxWorkingSetBytes ? json(*t.maxWorkingSetBytes) : json(nullptr)},
                     {"bandwidth_scale", t.bandwidthScale}});
  }
  json identified = json::object();
  for (int k = 0; k < CalibrationRecord::kParamCount; ++k)
    identified[CalibrationRecord::kParamNames[k]] = r.identified[k];
  json samples = json::array();
  for (const CalibrationSampleRecord& s : r.samples) {
    samples.push_back({{"collective", s.collective},
                       {"algorithm", s.algorithm},
                       {"nranks", s.nranks},
                       {"hosts", s.hosts},
                       {"bytes", s.bytes},
                       {"measured_us", s.measuredUs},
                       {"model_us", s.modelUs},
                       {"sim_us", s.simUs ? json(*s.simUs) : json(nullptr)},
                       {"held_out", s.heldOut},
                       {"origin", s.origin}});
  }
  return {{"format", CalibrationRecord::kFormat},
          {"version", CalibrationRecord::kVersion},
          {"tool", r.tool},
          {"command_line", r.commandLine},
          {"environment", r.environment},
          {"topology_file", r.topologyFile},
          {"topology_fingerprint", r.topologyFingerprint},
          {"params",
           {{"intra", {{"alpha_us", r.intraAlphaUs}, {"beta_GBps", r.intraBetaGBps}}},
            {"inter", {{"alpha_us", r.interAlphaUs}, {"beta_GBps", r.interBetaGBps}}},
            {"gamma_GBps", r.gammaGBps},
            {"call_overhead_us", r.callOverheadUs},
            {"memory_tiers", tiers}}},
          {"identified", identified},
          {"fit", {{"median", r.fitMedian}, {"worst", r.fitWorst}}},
          {"held_out", records_detail::errorsJson(r.heldOut)},
          {"sim_held_out", r.simHeldOut ? records_detail::errorsJson(*r.simHeldOut) : json(nullptr)},
          {"notes", r.notes},
          {"samples", samples}};
}

}  // namespace collbench
