#pragma once
// What the report shows, computed once from the inputs and rendered by report_html.cc and report.cc (Markdown).
#include <cmath>
#include <string>
#include <vector>

#include "collbench/report.h"

namespace collbench::detail {

struct PlotPoint {
  double x = 0, y = 0;
  double lo = NAN, hi = NAN;  ///< error bar (NaN: none)
  std::string tip;
};
struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> points;  ///< sorted by x
};

/// Bus bandwidth (GB/s, out-of-place) vs size, one plot per collective, one series per setup
/// (backend, requested algorithm, ranks, topology); repeated runs of a setup give medians with min/max bars.
struct BusbwPlot {
  std::string collective;
  std::vector<PlotSeries> series;
};
std::vector<BusbwPlot> busbwPlots(const ReportInputs& in);

/// Bus bandwidth at each run's largest size vs rank count, for setups measured at two or more rank counts.
std::vector<PlotSeries> rankScaling(const ReportInputs& in);
/// Scaling efficiency vs world size of the replays, one series per (trace, backend, scaling, topology), topologies
/// told apart by fingerprint (a shipped name and its file's path are one series).
std::vector<PlotSeries> replayScaling(const ReportInputs& in);
/// What fills the bus-bandwidth-vs-ranks plot when replays alone are given.
inline constexpr std::string_view kRankScalingNeeds =
    "Bus bandwidth vs ranks needs perf runs of one setup at two or more rank counts (collbench perf -g N -J, for "
    "two or more N); the replays below show the training step's scaling.";
/// How each replay's figures were taken (`collbench replay`'s summary).
inline constexpr std::string_view kReplayStatistic =
    "Each replay's figures are those of its median step after the first (compute + exposed communication = step).";

struct SimMeasuredRow {
  std::string collective, algorithm, measuredBackend;
  int ranks = 0;
  std::size_t size = 0;
  double simUs = 0;
  double medianUs = 0, minUs = 0, maxUs = 0;
  std::size_t repeats = 0;
  double error() const { return medianUs > 0 ? simUs / medianUs - 1 : 0; }  ///< simulated / measured - 1
};
/// Rows where a simulated run and measured runs share (collective, algorithm, ranks, size).
std::vector<SimMeasuredRow> simVsMeasured(const ReportInputs& in);

/// Measured and simulated bus bandwidth vs size of one log of a fidelity file (`collbench fidelity -J`).
struct FidelityPlot {
  std::string title;  ///< the log, its ranks and the topology
  const FidelityLog* log = nullptr;
  std::vector<PlotSeries> series;  ///< "measured", "simulated on <topology> (<algorithm>)"
};
std::vector<FidelityPlot> fidelityPlots(const ReportInputs& in);

struct SelectorRow {
  std::size_t size = 0;
  std::string algorithm, reason;
};
struct SelectorRun {
  std::string label;  ///< the run's setup and file
  std::vector<SelectorRow> rows;
};
/// The selector's choices in runs with --algo auto.
std::vector<SelectorRun> selectorChoices(const ReportInputs& in);

/// The first step of a trace (or its first events when it has no steps) as compute and collective spans.
OpTimeline traceTimeline(const std::string& source, const Trace& t);

/// "4K", "1M", "1.5G": short binary sizes for axes and tables.
std::string shortBytes(double bytes);
std::string seriesLabel(const PerfRun& r);

}  // namespace collbench::detail
