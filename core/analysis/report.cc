// Report inputs (perf, replay, trace and Chrome-trace files), the data of each section, and the Markdown rendering.
#include "collbench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"
#include "collbench/topology.h"
#include "collbench/units.h"
#include "report_data.h"

namespace collbench {

using nlohmann::json;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Points from samples per x: the median with a min/max bar when there are several.
std::vector<detail::PlotPoint> reduceSamples(const std::map<double, std::vector<double>>& byX,
                                             const std::function<std::string(double, double, std::size_t)>& tip) {
  std::vector<detail::PlotPoint> pts;
  for (const auto& [x, ys] : byX) {
    detail::PlotPoint p;
    p.x = x;
    p.y = median(ys);
    if (ys.size() > 1) {
      p.lo = *std::min_element(ys.begin(), ys.end());
      p.hi = *std::max_element(ys.begin(), ys.end());
    }
    p.tip = tip(x, p.y, ys.size());
    pts.push_back(std::move(p));
  }
  return pts;
}

/// Id of a Chrome-trace pid/tid, which may be a number or a string.
std::string idOf(const json& v) {
  if (v.is_number_integer() || v.is_string()) return v.dump();
  return "?";
}

/// A Markdown table cell: pipes escaped, control bytes (a newline would end the row) as spaces. Not cut short:
/// command lines are provenance.
std::string mdCell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

OpTimeline parseChromeTrace(std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top(source, "", doc);
  const json& events = top.array("traceEvents");
  OpTimeline t;
  t.source = std::string(source);
  t.title = std::string(source);
  if (top.has("otherData")) {
    const JsonFields other = top.object("otherData");
    t.title = other.stringOr("title", t.title);
  }
  std::map<std::string, std::string> processNames;
  std::map<std::pair<std::string, std::string>, std::string> threadNames;
  struct Raw {
    std::pair<std::string, std::string> lane;
    double ts, dur;
    std::string kind, label;
  };
  std::vector<Raw> raw;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const JsonFields e(source, fmt::format("traceEvents[{}]", i), events[i]);
    const std::string ph = e.stringOr("ph", "");
    const std::string pid = e.has("pid") ? idOf(e.need("pid")) : "0";
    const std::string tid = e.has("tid") ? idOf(e.need("tid")) : "0";
    if (ph == "M") {
      const std::string name = e.stringOr("name", "");
      if (!e.has("args")) continue;
      const JsonFields args = e.object("args");
      if (name == "process_name") processNames[pid] = args.stringOr("name", pid);
      if (name == "thread_name") threadNames[{pid, tid}] = args.stringOr("name", tid);
    } else if (ph == "X") {
      Raw r{{pid, tid}, e.number("ts"), e.number("dur", 0), e.stringOr("cat", ""), e.stringOr("name", "")};
      if (r.kind.empty()) r.kind = r.label;
      raw.push_back(std::move(r));
    }
  }
  std::stable_sort(raw.begin(), raw.end(), [](const Raw& a, const Raw& b) { return a.ts < b.ts; });
  if (raw.size() > kMaxTimelineSpans) {
    t.droppedSpans = raw.size() - kMaxTimelineSpans;
    raw.resize(kMaxTimelineSpans);
  }
  std::set<std::pair<std::string, std::string>> laneSet;
  for (const Raw& r : raw) laneSet.insert(r.lane);
  // Lanes in (pid, tid) order, numeric ids numerically (a rank 10 after rank 9).
  std::vector<std::pair<std::string, std::string>> lanes(laneSet.begin(), laneSet.end());
  const auto numericLess = [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  };
  std::sort(lanes.begin(), lanes.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return numericLess(a.first, b.first);
    return numericLess(a.second, b.second);
  });
  std::map<std::pair<std::string, std::string>, int> laneIndex;
  for (const auto& l : lanes) {
    laneIndex[l] = static_cast<int>(t.lanes.size());
    const auto pn = processNames.find(l.first);
    const auto tn = threadNames.find(l);
    t.lanes.push_back(fmt::format("{} {}", pn != processNames.end() ? pn->second : "pid " + l.first,
                                  tn != threadNames.end() ? tn->second : "tid " + l.second));
  }
  for (Raw& r : raw) {
    t.spans.push_back(TimelineSpan{laneIndex.at(r.lane), r.ts, r.ts + r.dur, std::move(r.kind), std::move(r.label)});
  }
  return t;
}

void addReportInput(ReportInputs& in, std::string_view text, std::string_view source) {
  const json doc = parseJsonDocument(text, source);
  if (!doc.is_object()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: not a collbench file (expected a JSON object)", printable(source)));
  }
  if (doc.contains("format") && doc["format"].is_string()) {
    const std::string f = doc["format"].get<std::string>();
    if (f == PerfRun::kFormat) {
      in.perf.push_back(parsePerfRun(text, source));
      return;
    }
    if (f == ReplayRun::kFormat) {
      in.replays.push_back(parseReplayRun(text, source));
      return;
    }
    if (f == Trace::kFormat) {
      in.traces.emplace_back(std::string(source), parseTrace(text, source));
      return;
    }
    if (f == FidelityDocument::kFormat) {
      in.fidelity.emplace_back(std::string(source), parseFidelityDocument(text, source));
      return;
    }
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: format \"{}\" is not one the report reads (collbench-perf, collbench-replay, "
                            "collbench-trace, collbench-fidelity, Chrome trace)",
                            printable(source), printable(f)));
  }
  if (doc.contains("traceEvents")) {
    in.timelines.push_back(parseChromeTrace(text, source));
    return;
  }
  throw Error(Errc::InvalidArgument,
              fmt::format("{}: no \"format\" field and no \"traceEvents\": not a collbench perf, replay, trace or "
                          "timeline file",
                          printable(source)));
}

ReportInputs loadReportInputs(const std::vector<std::string>& paths) {
  ReportInputs in;
  for (const std::string& p : paths) addReportInput(in, readTextFile(p, "report input"), p);
  return in;
}

namespace detail {

std::string shortBytes(double b) {
  static const char* kUnits[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return b == std::floor(b) ? fmt::format("{}{}", static_cast<long long>(b), kUnits[u])
                            : fmt::format("{:.3g}{}", b, kUnits[u]);
}

std::string seriesLabel(const PerfRun& r) {
  std::string s = fmt::format("{} {} n={}", r.backend, r.algorithm, r.ranks);
  if (!r.topology.empty()) s += " " + r.topology;
  return s;
}

std::vector<BusbwPlot> busbwPlots(const ReportInputs& in) {
  // collective -> label -> size -> samples
  std::map<std::string, std::map<std::string, std::map<double, std::vector<double>>>> data;
  for (const PerfRun& r : in.perf) {
    auto& series = data[r.collective][seriesLabel(r)];
    for (const PerfRow& row : r.rows) {
      if (row.size > 0) series[static_cast<double>(row.size)].push_back(row.outOfPlace.busbwGBps);
    }
  }
  std::vector<BusbwPlot> plots;
  for (const auto& [coll, bySeries] : data) {
    BusbwPlot p{coll, {}};
    for (const auto& [label, bySize] : bySeries) {
      if (bySize.empty()) continue;
      p.series.push_back(PlotSeries{label, reduceSamples(bySize, [label = label](double x, double y, std::size_t n) {
                                      return fmt::format("{}: {} B, busbw {:.3f} GB/s{}", label, shortBytes(x), y,
                                                         n > 1 ? fmt::format(" (median of {})", n) : "");
                                    })});
    }
    if (!p.series.empty()) plots.push_back(std::move(p));
  }
  return plots;
}

std::vector<PlotSeries> rankScaling(const ReportInputs& in) {
  std::map<std::string, std::map<double, std::vector<double>>> data;
  for (const PerfRun& r : in.perf) {
    if (r.rows.empty()) continue;
    const PerfRow& last = *std::max_element(r.rows.begin(), r.rows.end(),
                                            [](const PerfRow& a, const PerfRow& b) { return a.size < b.size; });
    // Runs of one setup compare only at one size: the largest size is part of the series.
    std::string label = fmt::format("{} {} {}", r.collective, r.backend, r.algorithm);
    if (!r.topology.empty()) label += " " + r.topology;
    label += " at " + shortBytes(static_cast<double>(last.size));
    data[label][r.ranks].push_back(last.outOfPlace.busbwGBps);
  }
  std::vector<PlotSeries> out;
  for (const auto& [label, byRanks] : data) {
    if (byRanks.size() < 2) continue;
    out.push_back(PlotSeries{label, reduceSamples(byRanks, [label = label](double x, double y, std::size_t) {
                               return fmt::format("{}: {} ranks, busbw {:.3f} GB/s", label, x, y);
                             })});
  }
  return out;
}

/// A topology as the report groups it: (identity, name to show). Its fingerprint and its own name when it loads
/// here, so that a shipped name and the path of its file (or a renamed copy) are one network; else the string given.
std::pair<std::string, std::string> topologyIdentity(const std::string& topology) {
  if (topology.empty()) return {"", ""};
  try {
    const Topology t = loadTopology(topology);
    return {fingerprint(t), t.name.empty() ? topology : t.name};
  } catch (const Error&) {
    return {topology, topology};
  }
}

std::vector<PlotSeries> replayScaling(const ReportInputs& in) {
  // (trace, backend, scaling, topology identity) -> label, world size -> efficiencies
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  std::map<Key, std::pair<std::string, std::map<double, std::vector<double>>>> data;
  std::map<std::string, std::pair<std::string, std::string>> identities;  // loaded once per topology string
  for (const ReplayRun& r : in.replays) {
    auto id = identities.find(r.topology);
    if (id == identities.end()) id = identities.emplace(r.topology, topologyIdentity(r.topology)).first;
    auto& [label, byWorld] = data[Key{r.tracePath, r.backend, r.scaling, id->second.first}];
    if (label.empty()) {
      label = fmt::format("{} on {} ({} scaling)", r.tracePath, r.backend, r.scaling);
      if (!id->second.second.empty()) label += " " + id->second.second;
    }
    byWorld[r.worldSize].push_back(r.efficiency);
  }
  std::vector<PlotSeries> out;
  for (const auto& [key, series] : data) {
    const auto& [label, byWorld] = series;
    out.push_back(PlotSeries{label, reduceSamples(byWorld, [label = label](double x, double y, std::size_t) {
                               return fmt::format("{}: {} replicas, efficiency {:.3f}", label, x, y);
                             })});
  }
  return out;
}

std::vector<FidelityPlot> fidelityPlots(const ReportInputs& in) {
  std::vector<FidelityPlot> plots;
  for (const auto& [source, doc] : in.fidelity) {
    for (const FidelityLog& f : doc.logs) {
      FidelityPlot p;
      p.title = fmt::format("{}: {} on {} ranks, simulated on {} ({})", f.log, toString(f.collective), f.ranks,
                            f.topology, f.algorithm);
      p.log = &f;
      PlotSeries measured{"measured", {}};
      PlotSeries simulated{fmt::format("simulated on {} ({})", f.topology, f.algorithm), {}};
      for (const FidelityRow& r : f.rows) {
        const auto x = static_cast<double>(r.bytes);
        measured.points.push_back({x, r.measuredBusbwGBps, NAN, NAN,
                                   fmt::format("measured {} B: {:.2f} us, busbw {:.2f} GB/s", shortBytes(x),
                                               r.measuredUs, r.measuredBusbwGBps)});
        simulated.points.push_back(
            {x, r.simulatedBusbwGBps, NAN, NAN,
             fmt::format("simulated {} B ({}): {:.2f} us, busbw {:.2f} GB/s, error {:+.1f}%", shortBytes(x),
                         r.algorithm, r.simulatedUs, r.simulatedBusbwGBps, 100 * r.error())});
      }
      p.series = {std::move(measured), std::move(simulated)};
      plots.push_back(std::move(p));
    }
  }
  return plots;
}

std::vector<SimMeasuredRow> simVsMeasured(const ReportInputs& in) {
  using Key = std::tuple<std::string, std::string, int, std::size_t>;
  std::map<Key, double> sim;
  std::map<Key, std::pair<std::string, std::vector<double>>> measured;
  for (const PerfRun& r : in.perf) {
    for (const PerfRow& row : r.rows) {
      const Key k{r.collective, row.algorithm, r.ranks, row.size};
      if (r.deterministic()) {
        sim[k] = row.outOfPlace.timeUs;
      } else {
        auto& m = measured[k];
        if (m.first.empty()) m.first = r.backend;
        m.second.push_back(row.outOfPlace.timeUs);
      }
    }
  }
  std::vector<SimMeasuredRow> out;
  for (const auto& [k, m] : measured) {
    const auto s = sim.find(k);
    if (s == sim.end()) continue;
    SimMeasuredRow row;
    std::tie(row.collective, row.algorithm, row.ranks, row.size) = k;
    row.measuredBackend = m.first;
    row.simUs = s->second;
    row.medianUs = median(m.second);
    row.minUs = *std::min_element(m.second.begin(), m.second.end());
    row.maxUs = *std::max_element(m.second.begin(), m.second.end());
    row.repeats = m.second.size();
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<SelectorRun> selectorChoices(const ReportInputs& in) {
  std::vector<SelectorRun> out;
  for (const PerfRun& r : in.perf) {
    if (r.algorithm != "auto") continue;
    SelectorRun s{fmt::format("{} ({})", seriesLabel(r), std::filesystem::path(r.source).filename().string()), {}};
    for (const PerfRow& row : r.rows) s.rows.push_back(SelectorRow{row.size, row.algorithm, row.algorithmReason});
    out.push_back(std::move(s));
  }
  return out;
}

OpTimeline traceTimeline(const std::string& source, const Trace& t) {
  OpTimeline tl;
  tl.source = source;
  tl.lanes = {"compute", "collectives"};
  if (t.events.empty()) return tl;
  std::int64_t step = -1;
  for (const TraceEvent& e : t.events) {
    if (e.step >= 0) {
      step = e.step;
      break;
    }
  }
  tl.title =
      fmt::format("{}: step {} ({} replicas, {})", source, step, t.worldSize, t.backend.empty() ? "?" : t.backend);
  double origin = -1;
  for (const TraceEvent& e : t.events) {
    if (e.step != step) continue;
    // The compute before a collective ends when the program issued it, which may be before the collective started
    // (it queued behind an earlier one).
    const double issue = e.issueSeconds.value_or(e.startSeconds);
    const double computeStart = std::max(0.0, issue - e.computeGapSeconds);
    if (origin < 0) origin = computeStart;
    if (tl.spans.size() + 2 > kMaxTimelineSpans) {
      tl.droppedSpans += 2;
      continue;
    }
    constexpr double kUs = 1e6;
    if (e.computeGapSeconds > 0) {
      tl.spans.push_back(TimelineSpan{0, (computeStart - origin) * kUs, (issue - origin) * kUs, "compute",
                                      fmt::format("compute {:.3f} ms", e.computeGapSeconds * 1e3)});
    }
    tl.spans.push_back(TimelineSpan{1, (e.startSeconds - origin) * kUs, (e.endSeconds - origin) * kUs,
                                    std::string(toString(e.kind)),
                                    fmt::format("{} {} pack {} ({:.3f} ms)", toString(e.kind), formatBytes(e.bytes),
                                                e.pack, (e.endSeconds - e.startSeconds) * 1e3)});
  }
  return tl;
}

}  // namespace detail

namespace {

std::string fidelityMarkdownRow(std::string_view sizes, const ErrorStats& s) {
  if (s.rows == 0) return fmt::format("| {} | 0 | | | |\n", sizes);
  return fmt::format("| {} | {} | {:.1f}% | {:.1f}% | {:.1f}% |\n", sizes, s.rows, 100 * s.median, 100 * s.p90,
                     100 * s.worst);
}

}  // namespace

std::string renderReportMarkdown(const ReportInputs& in, const ReportOptions& o) {
  using namespace detail;
  std::string md = fmt::format("# {}\n\n", mdCell(o.title));
  md += fmt::format("Generated by collbench {}{}.\n\n", COLLBENCH_VERSION,
                    o.commandLine.empty() ? "" : fmt::format(" (`{}`)", mdCell(o.commandLine)));
  md += "## Bus bandwidth\n\n";
  const auto plots = busbwPlots(in);
  if (plots.empty()) md += "_No perf runs (`collbench perf -J`) among the inputs._\n\n";
  for (const BusbwPlot& p : plots) {
    md += fmt::format(
        "### {}\n\n| setup | sizes | peak busbw (GB/s) | at size | busbw at largest (GB/s) |\n"
        "|---|---|---:|---:|---:|\n",
        mdCell(p.collective));
    for (const PlotSeries& s : p.series) {
      const auto peak = std::max_element(s.points.begin(), s.points.end(),
                                         [](const PlotPoint& a, const PlotPoint& b) { return a.y < b.y; });
      md += fmt::format("| {} | {}..{} | {:.3f} | {} | {:.3f} |\n", mdCell(s.label), shortBytes(s.points.front().x),
                        shortBytes(s.points.back().x), peak->y, shortBytes(peak->x), s.points.back().y);
    }
    md += "\n";
  }
  md += "## Scaling\n\n";
  const auto ranks = rankScaling(in);
  const auto replays = replayScaling(in);
  if (ranks.empty() && replays.empty()) {
    md += "_Needs perf runs at two or more rank counts, or replays (`collbench replay -J`)._\n\n";
  } else if (ranks.empty()) {
    md += fmt::format("_{}_\n\n", kRankScalingNeeds);
  }
  if (!ranks.empty()) {
    md += "| setup | ranks | busbw at largest size (GB/s) |\n|---|---:|---:|\n";
    for (const PlotSeries& s : ranks) {
      for (const PlotPoint& p : s.points) md += fmt::format("| {} | {} | {:.3f} |\n", mdCell(s.label), p.x, p.y);
    }
    md += "\n";
  }
  if (!in.replays.empty()) {
    md += std::string(kReplayStatistic) +
          "\n\n| replay | world size | step (ms) | recorded (ms) | compute (ms) | exposed comm (ms) | efficiency |\n"
          "|---|---:|---:|---:|---:|---:|---:|\n";
    for (const ReplayRun& r : in.replays) {
      md += fmt::format("| {} on {} ({}) | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", mdCell(r.tracePath),
                        mdCell(r.backend), mdCell(r.scaling), r.worldSize, r.stepSeconds * 1e3,
                        r.recordedStepSeconds * 1e3, r.computeSeconds * 1e3, r.exposedSeconds * 1e3, r.efficiency);
    }
    md += "\n";
  }
  md += "## Simulated vs measured\n\n";
  const auto svm = simVsMeasured(in);
  if (svm.empty()) {
    md +=
        "_Needs a simulated (`--backend sim`) and a measured perf run of the same collective, algorithm, ranks and "
        "sizes._\n\n";
  } else {
    md +=
        "| collective | algorithm | ranks | size | simulated (us) | measured median (us) | min..max | repeats | "
        "error |\n|---|---|---:|---:|---:|---:|---|---:|---:|\n";
    for (const SimMeasuredRow& r : svm) {
      md += fmt::format("| {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f}..{:.2f} | {} | {:+.1f}% |\n",
                        mdCell(r.collective), mdCell(r.algorithm), r.ranks, shortBytes(static_cast<double>(r.size)),
                        r.simUs, r.medianUs, r.minUs, r.maxUs, r.repeats, 100 * r.error());
    }
    md += "\n";
  }
  md += "## Fidelity of real tables\n\n";
  const auto fid = fidelityPlots(in);
  if (fid.empty()) md += "_Needs `collbench fidelity -J` output._\n\n";
  for (const FidelityPlot& p : fid) {
    md += fmt::format("### {}\n\n| sizes | rows | median \\|error\\| | p90 | worst |\n|---|---:|---:|---:|---:|\n",
                      mdCell(p.title));
    md += fidelityMarkdownRow("all", p.log->all);
    for (SizeClass c : kSizeClasses) md += fidelityMarkdownRow(describe(c), p.log->byClass[static_cast<int>(c)]);
    md += "\n";
  }
  md += "## Selector choices\n\n";
  const auto sel = selectorChoices(in);
  if (sel.empty()) md += "_Needs perf runs with `--algo auto`._\n\n";
  for (const SelectorRun& s : sel) {
    md += fmt::format("### {}\n\n| size | algorithm | reason |\n|---:|---|---|\n", mdCell(s.label));
    for (const SelectorRow& r : s.rows) {
      md += fmt::format("| {} | {} | {} |\n", shortBytes(static_cast<double>(r.size)), mdCell(r.algorithm),
                        mdCell(r.reason));
    }
    md += "\n";
  }
  md += "## Timelines\n\n";
  if (in.timelines.empty() && in.traces.empty()) md += "_Needs `collbench sim --timeline` output or a trace._\n\n";
  for (const OpTimeline& t : in.timelines) {
    double end = 0;
    for (const TimelineSpan& s : t.spans) end = std::max(end, s.endUs);
    md += fmt::format("- {}: {} ops on {} lanes, {:.3f} us{}\n", mdCell(t.title), t.spans.size(), t.lanes.size(), end,
                      t.droppedSpans ? fmt::format(" ({} more not shown)", t.droppedSpans) : "");
  }
  for (const auto& [src, t] : in.traces) {
    md += fmt::format("- trace {}: {} collectives, {} replicas, recorded on {}\n", mdCell(src), t.events.size(),
                      t.worldSize, mdCell(t.backend.empty() ? "?" : t.backend));
  }
  md += "\n## Inputs\n\n| file | kind | produced by |\n|---|---|---|\n";
  for (const PerfRun& r : in.perf) {
    md += fmt::format("| {} | perf {} | {} |\n", mdCell(r.source), mdCell(seriesLabel(r)), mdCell(r.commandLine));
  }
  for (const ReplayRun& r : in.replays) {
    md += fmt::format("| {} | replay | {} |\n", mdCell(r.source), mdCell(r.commandLine));
  }
  for (const auto& [src, t] : in.traces) md += fmt::format("| {} | trace | {} |\n", mdCell(src), mdCell(t.command));
  for (const OpTimeline& t : in.timelines)
    md += fmt::format("| {} | timeline | {} |\n", mdCell(t.source), mdCell(t.title));
  for (const auto& [src, doc] : in.fidelity) {
    md += fmt::format("| {} | fidelity | {} |\n", mdCell(src), mdCell(doc.commandLine));
  }
  return md;
}

}  // namespace collbench
