// collbench-nccl-calibration: `collbench calibrate --model nccl -o` (nccl_calibration.h,
// docs/calibration-nccl.schema.json).
#include <fmt/format.h>

#include <set>

#include "collbench/error.h"
#include "collbench/nccl_calibration.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

namespace {

NicKind parseNicKind(const std::string& s) {
  std::string names;
  for (NicKind k : kNicKinds) {
    if (s == toString(k)) return k;
    names += (names.empty() ? "" : ", ") + std::string(toString(k));
  }
  throw Error(Errc::InvalidArgument, fmt::format("unknown NIC kind '{}' (available: {})", printable(s), names));
}

}  // namespace

NcclCalibration parseNcclCalibration(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, NcclCalibration::kFormat, NcclCalibration::kVersion);
  // An overlay may be edited by hand: a misspelt key is refused rather than leaving the model's default in its place.
  top.allowOnly({"format", "version", "tool", "command_line", "system", "params", "prior_fit", "fit", "held_out",
                 "iterations", "notes", "rows"});
  NcclCalibration c;
  c.tool = top.stringOr("tool", "");
  c.commandLine = top.stringOr("command_line", "");
  const JsonFields sys = top.object("system");
  sys.allowOnly({"topology", "topology_fingerprint", "arch", "nic_kind", "gpus_per_node"});
  c.topology = sys.stringOr("topology", "");
  c.topologyFingerprint = sys.stringOr("topology_fingerprint", "");
  c.arch = sys.parsed("arch", [](const std::string& s) { return parseGpuArch(s); });
  c.nicKind = sys.parsed("nic_kind", parseNicKind);
  c.gpusPerNode = static_cast<int>(sys.integer("gpus_per_node", 1, INT32_MAX));
  const JsonFields params = top.object("params");
  std::set<std::string> paramNames;
  for (NcclParam p : kNcclParams) paramNames.insert(std::string(toString(p)));
  params.allowOnly(paramNames);
  for (NcclParam p : kNcclParams) {
    // Records written before the LL proxy queue, P2P read's fill or the network's read was fitted lack it; the
    // model's default stands.
    if ((p == NcclParam::NetChannelUs || p == NcclParam::P2pReadFillSlices || p == NcclParam::NetReadUs) &&
        !params.has(std::string(toString(p)).c_str())) {
      continue;
    }
    const JsonFields f = params.object(std::string(toString(p)).c_str());
    f.allowOnly({"value", "prior", "lower", "upper", "identified", "note"});
    NcclParamFit pf;
    pf.param = p;
    pf.value = f.number("value", 0);
    pf.prior = f.number("prior", 0);
    pf.bounds.lower = f.number("lower", 0);
    pf.bounds.upper = f.number("upper", pf.bounds.lower);
    if (pf.value < pf.bounds.lower || pf.value > pf.bounds.upper) {
      f.fail("value", fmt::format("{} is outside the bounds [{}, {}]", pf.value, pf.bounds.lower, pf.bounds.upper));
    }
    pf.identified = f.boolean("identified");
    pf.note = f.stringOr("note", "");
    c.params.push_back(std::move(pf));
  }
  c.priorFit = records_detail::readErrors(top.object("prior_fit"));
  c.fit = records_detail::readErrors(top.object("fit"));
  c.heldOut = records_detail::readErrors(top.object("held_out"));
  c.iterations = static_cast<int>(top.integerOr("iterations", 0, 0, INT32_MAX));
  if (top.has("notes")) {
    const json& notes = top.array("notes");
    for (std::size_t i = 0; i < notes.size(); ++i) {
      if (!notes[i].is_string()) {
        top.fail(fmt::format("notes[{}]", i), fmt::format("expected a string, got {}", echoJson(notes[i])));
      }
      c.notes.push_back(notes[i].get<std::string>());
    }
  }
  if (top.has("rows")) {
    for (std::size_t i = 0; i < top.array("rows").size(); ++i) {
      const JsonFields r = top.element("rows", i);
      r.allowOnly(
          {"log", "line", "ranks", "nodes", "bytes", "measured_us", "prior_us", "fitted_us", "choice", "held_out"});
      NcclCalibrationRow row;
      row.log = r.string("log");
      row.line = static_cast<int>(r.integer("line", 0, INT32_MAX));
      row.ranks = static_cast<int>(r.integer("ranks", 1, INT32_MAX));
      row.nodes = static_cast<int>(r.integer("nodes", 1, INT32_MAX));
      row.bytes = static_cast<std::size_t>(r.integer("bytes", 0));
      row.measuredUs = r.number("measured_us", 0);
      row.priorUs = r.number("prior_us", 0);
      row.fittedUs = r.number("fitted_us", 0);
      row.choice = r.stringOr("choice", "");
      row.heldOut = r.boolean("held_out");
      c.rows.push_back(std::move(row));
    }
  }
  return c;
}

json toJson(const NcclCalibration& c) {
  json params = json::object();
  for (const NcclParamFit& p : c.params) {
    params[std::string(toString(p.param))] = {{"value", p.value},           {"prior", p.prior},
                                              {"lower", p.bounds.lower},    {"upper", p.bounds.upper},
                                              {"identified", p.identified}, {"note", p.note}};
  }
  json rows = json::array();
  for (const NcclCalibrationRow& r : c.rows) {
    rows.push_back({{"log", r.log},
                    {"line", r.line},
                    {"ranks", r.ranks},
                    {"nodes", r.nodes},
                    {"bytes", r.bytes},
                    {"measured_us", r.measuredUs},
                    {"prior_us", r.priorUs},
                    {"fitted_us", r.fittedUs},
                    {"choice", r.choice},
                    {"held_out", r.heldOut}});
  }
  return {{"format", NcclCalibration::kFormat},
          {"version", NcclCalibration::kVersion},
          {"tool", c.tool},
          {"command_line", c.commandLine},
          {"system",
           {{"topology", c.topology},
            {"topology_fingerprint", c.topologyFingerprint},
            {"arch", toString(c.arch)},
            {"nic_kind", toString(c.nicKind)},
            {"gpus_per_node", c.gpusPerNode}}},
          {"params", params},
          {"prior_fit", records_detail::errorsJson(c.priorFit)},
          {"fit", records_detail::errorsJson(c.fit)},
          {"held_out", records_detail::errorsJson(c.heldOut)},
          {"iterations", c.iterations},
          {"notes", c.notes},
          {"rows", rows}};
}

NcclCalibration readNcclCalibration(const std::string& path) {
  return parseNcclCalibration(readTextFile(path, "calibration"), path);
}

}  // namespace collbench
