#pragma once
/// `collbench report RUNS... -o report.html`: one self-contained page (inline SVG and CSS; no scripts, fonts or
/// network) or Markdown for PR comments, from the files collbench writes:
///   collbench-perf   (`perf -J`)        bus bandwidth vs size, scaling vs rank count, simulated vs measured,
///                                         selector choices (runs with --algo auto)
///   collbench-replay (`replay -J`)      step time and scaling efficiency vs world size
///   collbench-trace  (`train --trace`, `workload`)  the collectives and compute gaps of one step
///   Chrome trace     (`sim --timeline`)  the op timeline of one collective
///   collbench-fidelity (`fidelity -J`)   measured vs simulated bus bandwidth of real nccl-tests tables
/// Every plot is an <svg data-plot="KIND"> whose points are <circle data-x data-y> (rectangles for timelines),
/// so tests and scripts can read the data back from the DOM.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collbench/fidelity.h"
#include "collbench/gate.h"
#include "collbench/trace.h"

namespace collbench {

// ReplayRun and parseReplayRun (`collbench replay -J`): records.h.

struct TimelineSpan {
  int lane = 0;
  double startUs = 0, endUs = 0;
  std::string kind;  ///< "send", "recv", "reduce", "copy", "compute", "all_reduce", ...: the colour
  std::string label;
};
struct OpTimeline {
  std::string source;
  std::string title;
  std::vector<std::string> lanes;  ///< "rank 0 send", ...
  std::vector<TimelineSpan> spans;
  std::size_t droppedSpans = 0;  ///< beyond kMaxTimelineSpans (the page stays small)
};
/// Spans drawn per timeline: enough for a 64-rank ring all-reduce (about 8000 ops), and a page that still opens
/// quickly.
inline constexpr std::size_t kMaxTimelineSpans = 10000;
/// A Chrome trace (JSON object format with "traceEvents", as `collbench sim --timeline` writes): complete ("X")
/// events become spans, lanes are (pid, tid) named by the process_name / thread_name metadata.
OpTimeline parseChromeTrace(std::string_view text, std::string_view source = "timeline");

struct ReportInputs {
  std::vector<PerfRun> perf;
  std::vector<ReplayRun> replays;
  std::vector<std::pair<std::string, Trace>> traces;  ///< (source, trace)
  std::vector<OpTimeline> timelines;
  std::vector<std::pair<std::string, FidelityDocument>> fidelity;  ///< (source, document)
};
/// Adds one document, recognised by its "format" (collbench-perf, collbench-replay, collbench-trace,
/// collbench-fidelity) or a
/// "traceEvents" array (Chrome trace). Anything else is Error{InvalidArgument} naming the source.
void addReportInput(ReportInputs& inputs, std::string_view text, std::string_view source);
/// Reads and adds each file (a file that cannot be read is Error{InvalidArgument} naming it).
ReportInputs loadReportInputs(const std::vector<std::string>& paths);

struct ReportOptions {
  std::string title = "collbench report";
  std::string commandLine;  ///< of the report itself (provenance)
};

/// The HTML page. Sections without data say which inputs would fill them.
std::string renderReportHtml(const ReportInputs& inputs, const ReportOptions& options = {});
/// The same content as Markdown tables (GitHub-flavoured), for PR comments.
std::string renderReportMarkdown(const ReportInputs& inputs, const ReportOptions& options = {});

}  // namespace collbench
