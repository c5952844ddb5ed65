// collbench-replay: `collbench replay -J`, read by report (records.h, docs/replay.schema.json).
#include <fmt/format.h>

#include "collbench/error.h"
#include "collbench/records.h"
#include "record_io.h"

namespace collbench {

using nlohmann::json;

namespace {

/// World sizes beyond this are typos, not worlds (the topology loader's bound).
constexpr std::int64_t kMaxRanks = 1 << 24;

json stepsJson(const std::vector<ReplayStepRecord>& v) {
  json a = json::array();
  for (const ReplayStepRecord& s : v) {
    a.push_back({{"step", s.step},
                 {"seconds", s.seconds},
                 {"compute_s", s.computeSeconds},
                 {"comm_s", s.commSeconds},
                 {"exposed_comm_s", s.exposedSeconds}});
  }
  return a;
}

std::vector<ReplayStepRecord> readSteps(const JsonFields& top, const char* field) {
  std::vector<ReplayStepRecord> out;
  if (!top.has(field)) return out;
  for (std::size_t i = 0; i < top.array(field).size(); ++i) {
    const JsonFields f = top.element(field, i);
    out.push_back({f.integer("step", INT64_MIN), f.number("seconds", 0), f.number("compute_s", 0),
                   f.number("comm_s", 0), f.number("exposed_comm_s", 0)});
  }
  return out;
}

ReplayEventRecord readEvent(const JsonFields& f) {
  ReplayEventRecord e;
  e.index = static_cast<std::size_t>(f.integer("index", 0));
  e.kind = f.string("kind");
  e.bytes = static_cast<std::size_t>(f.integer("bytes", 0));
  e.dtype = f.string("dtype");
  e.op = f.stringOr("op", "");
  e.group = f.string("group");
  e.nranks = static_cast<int>(f.integer("nranks", 1, kMaxRanks));
  e.algorithm = f.stringOr("algorithm", "");
  e.step = f.integerOr("step", -1, INT64_MIN);
  e.pack = f.integerOr("pack", 0, INT64_MIN);
  e.computeGapSeconds = f.number("compute_gap_s", 0);
  e.after = f.string("after");
  e.issueSeconds = f.number("issue_s", 0);
  e.startSeconds = f.number("start_s", 0);
  e.endSeconds = f.number("end_s", 0);
  e.recordedStartSeconds = f.number("recorded_start_s", 0);
  e.recordedEndSeconds = f.number("recorded_end_s", 0);
  e.recordedIssueSeconds = f.optionalNumber("recorded_issue_s", 0);
  return e;
}

json eventJson(const ReplayEventRecord& e) {
  json j = {{"index", e.index},
            {"kind", e.kind},
            {"bytes", e.bytes},
            {"dtype", e.dtype},
            {"group", e.group},
            {"nranks", e.nranks},
            {"algorithm", e.algorithm},
            {"step", e.step},
            {"pack", e.pack},
            {"compute_gap_s", e.computeGapSeconds},
            {"after", e.after},
            {"issue_s", e.issueSeconds},
            {"start_s", e.startSeconds},
            {"end_s", e.endSeconds},
            {"recorded_start_s", e.recordedStartSeconds},
            {"recorded_end_s", e.recordedEndSeconds}};
  if (!e.op.empty()) j["op"] = e.op;
  if (e.recordedIssueSeconds) j["recorded_issue_s"] = *e.recordedIssueSeconds;
  return j;
}

}  // namespace

ReplayRun parseReplayRun(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top = records_detail::header(doc, source, ReplayRun::kFormat, ReplayRun::kVersion);
  ReplayRun r;
  r.source = std::string(source);
  r.tool = top.stringOr("tool", "");
  r.commandLine = top.stringOr("command_line", "");
  const JsonFields tr = top.object("trace");
  r.tracePath = tr.string("path");
  r.traceBackend = tr.stringOr("backend", "");
  r.traceWorldSize = static_cast<int>(tr.integer("world_size", 1, kMaxRanks));
  r.traceTopology = tr.stringOr("topology", "");
  r.traceSimulated = tr.booleanOr("simulated", false);
  r.traceCommand = tr.stringOr("command", "");
  const JsonFields cfg = top.object("config");
  r.backend = cfg.string("backend");
  r.topology = cfg.stringOr("topology", "");
  r.worldSize = static_cast<int>(cfg.integer("world_size", 1, kMaxRanks));
  r.workers = static_cast<int>(cfg.integerOr("workers", 1, 1, kMaxRanks));
  r.localReplicas = static_cast<int>(cfg.integerOr("local_replicas", 1, 1, kMaxRanks));
  r.scaling = cfg.string("scaling");
  if (r.scaling != "weak" && r.scaling != "strong") cfg.fail("scaling", "expected \"weak\" or \"strong\"");
  r.overlap = cfg.stringOr("overlap", "none");
  r.algo = cfg.stringOr("algo", "");
  r.warmup = static_cast<int>(cfg.integerOr("warmup", 0, 0, INT32_MAX));
  const JsonFields s = top.object("summary");
  r.recordedStepSeconds = s.number("recorded_step_s", 0);
  r.stepSeconds = s.number("replayed_step_s", 0);
  r.recordedMeanStepSeconds = s.has("recorded_mean_step_s") ? s.number("recorded_mean_step_s", 0) : 0;
  r.meanStepSeconds = s.has("replayed_mean_step_s") ? s.number("replayed_mean_step_s", 0) : 0;
  r.computeSeconds = s.number("compute_s", 0);
  r.commSeconds = s.number("comm_s", 0);
  r.exposedSeconds = s.number("exposed_comm_s", 0);
  r.oneReplicaStepSeconds = s.number("one_replica_step_s", 0);
  r.efficiency = s.number("scaling_efficiency", 0);
  r.speedup = s.number("speedup", 0);
  r.wrong = static_cast<std::size_t>(s.integerOr("wrong", 0, 0));
  r.recordedSteps = readSteps(top, "recorded_steps");
  r.steps = readSteps(top, "steps");
  if (top.has("events")) {
    for (std::size_t i = 0; i < top.array("events").size(); ++i)
      r.events.push_back(readEvent(top.element("events", i)));
  }
  return r;
}

json toJson(const ReplayRun& r) {
  json events = json::array();
  for (const ReplayEventRecord& e : r.events) events.push_back(eventJson(e));
  return {{"format", ReplayRun::kFormat},
          {"version", ReplayRun::kVersion},
          {"tool", r.tool},
          {"command_line", r.commandLine},
          {"trace",
           {{"path", r.tracePath},
            {"world_size", r.traceWorldSize},
            {"backend", r.traceBackend},
            {"topology", r.traceTopology},
            {"simulated", r.traceSimulated},
            {"command", r.traceCommand}}},
          {"config",
           {{"backend", r.backend},
            {"topology", r.topology},
            {"world_size", r.worldSize},
            {"workers", r.workers},
            {"local_replicas", r.localReplicas},
            {"scaling", r.scaling},
            {"overlap", r.overlap},
            {"algo", r.algo},
            {"warmup", r.warmup}}},
          {"summary",
           {{"statistic", "median_step"},
            {"recorded_step_s", r.recordedStepSeconds},
            {"replayed_step_s", r.stepSeconds},
            {"recorded_mean_step_s", r.recordedMeanStepSeconds},
            {"replayed_mean_step_s", r.meanStepSeconds},
            {"compute_s", r.computeSeconds},
            {"comm_s", r.commSeconds},
            {"exposed_comm_s", r.exposedSeconds},
            {"one_replica_step_s", r.oneReplicaStepSeconds},
            {"scaling_efficiency", r.efficiency},
            {"speedup", r.speedup},
            {"wrong", r.wrong}}},
          {"recorded_steps", stepsJson(r.recordedSteps)},
          {"steps", stepsJson(r.steps)},
          {"events", events}};
}

}  // namespace collbench
