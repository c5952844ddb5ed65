#include "collbench/trace.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"

namespace collbench {
namespace {

using nlohmann::json;

/// The largest time a trace may hold (start_s, end_s, compute_gap_s, issue_s): 7 days. `collbench replay --gaps wait`
/// sits idle for the compute gaps in wall time, so a value beyond any recording (1e300) would hang it for ever; the
/// longest training runs collbench records or generates span minutes to hours of one trace.
constexpr double kMaxTraceSeconds = 7 * 24 * 3600.0;
/// The most ranks a trace's world, workers, replicas or group may have: the bound of the other records (perf, replay,
/// tuning), far above any machine, and small enough that products of two of them stay within int64.
constexpr std::int64_t kMaxTraceRanks = std::int64_t{1} << 24;

/// The trace's rules on top of the shared field reader: unknown fields, and fields a later version added in a document
/// of an earlier one, are errors; a field set to null is present (and then has the wrong type).
class Reader : public JsonFields {
 public:
  /// `newer`: fields a later version added, which this document's version does not have.
  Reader(std::string_view source, std::string where, const json& obj, const std::set<std::string>& allowed,
         const std::set<std::string>& newer = {}, int version = Trace::kVersion)
      : JsonFields(source, std::move(where), obj) {
    for (const auto& [key, value] : obj.items()) {
      if (newer.count(key)) {
        fail(key, fmt::format("is a version {} field; this trace says version {}", Trace::kVersion, version));
      }
    }
    allowOnly(allowed);
  }

  bool has(const char* field) const { return present(field); }

  double seconds(const char* field) const {
    const json& v = need(field);
    if (!v.is_number()) fail(field, fmt::format("expected a number of seconds, got {} {}", v.type_name(), echoJson(v)));
    const double x = number(field, 0);
    if (x > kMaxTraceSeconds) {
      fail(field,
           fmt::format("{} s is more than {} s (7 days), the most a trace may span", echoJson(v), kMaxTraceSeconds));
    }
    return x;
  }
};

bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

/// Fields version 2 added (the dependency on backward progress, and what was trained).
const std::set<std::string> kVersion2Header = {"model", "dtype"};
const std::set<std::string> kVersion2Event = {"after", "issue_s"};

TraceAfter parseAfter(const std::string& s) {
  for (TraceAfter a : {TraceAfter::PreviousEnd, TraceAfter::PreviousIssue}) {
    if (s == toString(a)) return a;
  }
  throw Error(Errc::InvalidArgument,
              fmt::format("\"{}\" is not one of {}, {}", printable(s), toString(TraceAfter::PreviousEnd),
                          toString(TraceAfter::PreviousIssue)));
}

json eventToJson(const TraceEvent& e) {
  const CollectiveSpec spec{e.kind, e.nranks, 0, e.dtype, e.op, e.root};
  json j = json::object();
  j["kind"] = toString(e.kind);
  j["bytes"] = e.bytes;
  j["dtype"] = toString(e.dtype);
  if (spec.reduces()) j["op"] = toString(e.op);
  if (rooted(e.kind)) j["root"] = e.root;
  j["group"] = e.group;
  j["nranks"] = e.nranks;
  j["algorithm"] = e.algorithm;
  j["start_s"] = e.startSeconds;
  j["end_s"] = e.endSeconds;
  j["compute_gap_s"] = e.computeGapSeconds;
  j["step"] = e.step;
  j["pack"] = e.pack;
  if (e.after) j["after"] = toString(*e.after);
  if (e.issueSeconds) j["issue_s"] = *e.issueSeconds;
  return j;
}

}  // namespace

std::string_view toString(TraceAfter a) { return a == TraceAfter::PreviousEnd ? "previous_end" : "previous_issue"; }

std::string toJson(const Trace& trace, int indent) {
  json j = json::object();
  j["format"] = Trace::kFormat;
  j["version"] = Trace::kVersion;
  j["world_size"] = trace.worldSize;
  j["topology"] = {{"name", trace.topology.name},
                   {"workers", trace.topology.workers},
                   {"local_replicas", trace.topology.localReplicas}};
  j["backend"] = trace.backend;
  j["simulated"] = trace.simulated;
  if (!trace.model.empty()) j["model"] = trace.model;
  if (trace.dtype) j["dtype"] = toString(*trace.dtype);
  if (!trace.tool.empty()) j["tool"] = trace.tool;
  if (!trace.command.empty()) j["command"] = trace.command;
  json events = json::array();
  for (const TraceEvent& e : trace.events) events.push_back(eventToJson(e));
  j["events"] = std::move(events);
  return j.dump(indent);
}

Trace parseTrace(std::string_view text, std::string_view source) {
  const json root = parseJsonDocument(text, source);
  // The version decides which fields exist: read it before checking the field names.
  int version = Trace::kVersion;
  if (root.is_object() && root.contains("version") && root["version"].is_number_integer()) {
    const json& v = root["version"];
    if (v != 1 && v != Trace::kVersion) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{}: version: version {} is not supported (this collbench reads versions 1 and {})",
                              source, v.dump(), Trace::kVersion));
    }
    version = v.get<int>();
  }
  const std::set<std::string> none;
  std::set<std::string> headerFields = {"format",    "version", "world_size", "topology", "backend",
                                        "simulated", "tool",    "command",    "events"};
  std::set<std::string> eventFields = {"kind",          "bytes",  "dtype",     "op",      "root",
                                       "group",         "nranks", "algorithm", "start_s", "end_s",
                                       "compute_gap_s", "step",   "pack"};
  if (version >= 2) {
    headerFields.insert(kVersion2Header.begin(), kVersion2Header.end());
    eventFields.insert(kVersion2Event.begin(), kVersion2Event.end());
  }
  const Reader top(source, "", root, headerFields, version >= 2 ? none : kVersion2Header, version);
  Trace t;
  if (const std::string format = top.string("format"); format != Trace::kFormat) {
    top.fail("format", fmt::format("expected \"{}\", got \"{}\"", Trace::kFormat, format));
  }
  top.integer("version", 1);  // present and an integer (its value was checked above)
  t.worldSize = static_cast<int>(top.integer("world_size", 1, kMaxTraceRanks));
  const Reader topo(source, "topology", top.need("topology"), {"name", "workers", "local_replicas"});
  t.topology.name = topo.string("name");
  t.topology.workers = static_cast<int>(topo.integer("workers", 1, kMaxTraceRanks));
  t.topology.localReplicas = static_cast<int>(topo.integer("local_replicas", 1, kMaxTraceRanks));
  if (static_cast<std::int64_t>(t.topology.workers) * t.topology.localReplicas != t.worldSize) {
    top.fail("world_size", fmt::format("{} is not topology.workers {} x topology.local_replicas {}", t.worldSize,
                                       t.topology.workers, t.topology.localReplicas));
  }
  if (top.has("backend")) t.backend = top.string("backend");
  if (top.has("simulated")) t.simulated = top.boolean("simulated");
  if (top.has("model")) t.model = top.string("model");
  if (top.has("dtype")) t.dtype = top.parsed("dtype", [](const std::string& s) { return parseDType(s); });
  if (top.has("tool")) t.tool = top.string("tool");
  if (top.has("command")) t.command = top.string("command");
  const json& events = top.need("events");
  if (!events.is_array()) top.fail("events", fmt::format("expected an array, got {}", events.type_name()));
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Reader ev(source, fmt::format("events[{}]", i), events[i], eventFields, version >= 2 ? none : kVersion2Event,
                    version);
    TraceEvent e;
    e.kind = ev.parsed("kind", [](const std::string& s) { return parseCollective(s); });
    e.dtype = ev.parsed("dtype", [](const std::string& s) { return parseDType(s); });
    e.bytes = static_cast<std::size_t>(ev.integer("bytes", 0));
    if (e.kind != Collective::Barrier && e.bytes % dtypeSize(e.dtype) != 0) {
      ev.fail("bytes",
              fmt::format("{} is not a multiple of the {} size {}", e.bytes, toString(e.dtype), dtypeSize(e.dtype)));
    }
    e.group = ev.string("group");
    e.nranks = static_cast<int>(ev.integer("nranks", 1, kMaxTraceRanks));
    int groupSize = 0;
    if (e.group == kTraceGroupReplicas) {
      groupSize = t.worldSize;
    } else if (e.group == kTraceGroupWorkers) {
      groupSize = t.topology.workers;
    } else if (e.group == kTraceGroupLocal) {
      groupSize = t.topology.localReplicas;
    } else {
      ev.fail("group", fmt::format("\"{}\" is not one of {}, {}, {}", e.group, kTraceGroupReplicas, kTraceGroupWorkers,
                                   kTraceGroupLocal));
    }
    if (e.nranks != groupSize) {
      ev.fail("nranks", fmt::format("{} does not match group \"{}\" of {} rank{}", e.nranks, e.group, groupSize,
                                    groupSize == 1 ? "" : "s"));
    }
    const CollectiveSpec spec{e.kind, e.nranks, 0, e.dtype, ReduceOp::Sum, 0};
    if (spec.reduces()) {
      e.op = ev.parsed("op", [](const std::string& s) { return parseReduceOp(s); });
    } else if (ev.has("op")) {
      ev.fail("op", fmt::format("{} does not reduce; remove op", toString(e.kind)));
    }
    if (ev.has("root")) {
      if (!rooted(e.kind)) ev.fail("root", fmt::format("{} has no root; remove root", toString(e.kind)));
      e.root = static_cast<int>(ev.integer("root", 0, kMaxTraceRanks));
      if (e.root >= e.nranks) ev.fail("root", fmt::format("{} is out of range for {} ranks", e.root, e.nranks));
    }
    if (ev.has("algorithm")) e.algorithm = ev.string("algorithm");
    e.startSeconds = ev.seconds("start_s");
    e.endSeconds = ev.seconds("end_s");
    if (e.endSeconds < e.startSeconds) {
      ev.fail("end_s", fmt::format("{} is before start_s {}", e.endSeconds, e.startSeconds));
    }
    e.computeGapSeconds = ev.seconds("compute_gap_s");
    if (ev.has("step")) e.step = ev.integer("step", -1);
    if (ev.has("pack")) e.pack = static_cast<int>(ev.integer("pack", 0, INT32_MAX));
    if (ev.has("after")) e.after = ev.parsed("after", parseAfter);
    if (ev.has("issue_s")) {
      e.issueSeconds = ev.seconds("issue_s");
      if (*e.issueSeconds > e.startSeconds) {
        ev.fail("issue_s", fmt::format("{} is after start_s {}: a collective starts once it is issued", *e.issueSeconds,
                                       e.startSeconds));
      }
    }
    // Program order: replay runs the events in file order, and step statistics group consecutive events.
    if (!t.events.empty()) {
      const TraceEvent& prev = t.events.back();
      if (e.step < prev.step) {
        ev.fail("step", fmt::format("{} comes after step {} (events[{}]): events must be in program order", e.step,
                                    prev.step, i - 1));
      }
      if (e.startSeconds < prev.startSeconds) {
        ev.fail("start_s", fmt::format("{} is before events[{}].start_s {}: events must be in program order",
                                       e.startSeconds, i - 1, prev.startSeconds));
      }
      if (e.issueSeconds && prev.issueSeconds && *e.issueSeconds < *prev.issueSeconds) {
        ev.fail("issue_s", fmt::format("{} is before events[{}].issue_s {}: events must be in program order",
                                       *e.issueSeconds, i - 1, *prev.issueSeconds));
      }
    }
    t.events.push_back(std::move(e));
  }
  return t;
}

void writeTrace(const Trace& trace, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(Errc::InvalidArgument, fmt::format("cannot write trace file '{}'", path));
  out << toJson(trace) << '\n';
  if (!out) throw Error(Errc::InvalidArgument, fmt::format("error writing trace file '{}'", path));
}

Trace readTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(Errc::InvalidArgument, fmt::format("cannot read trace file '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parseTrace(ss.str(), path);
}

}  // namespace collbench
