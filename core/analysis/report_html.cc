// The HTML report: inline SVG plots drawn here (no plotting library: a page that needs no network or scripts must
// carry its own drawing), one <svg data-plot="KIND"> per plot with its data in data-* attributes.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "collbench/error.h"
#include "collbench/topology.h"
#include "collbench/units.h"
#include "report_data.h"

namespace collbench {
namespace {

using detail::PlotPoint;
using detail::PlotSeries;

/// Tableau 10 (Tableau's default categorical palette): distinguishable, and readable in print.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr std::size_t kPaletteSize = std::size(kPalette);

// Plot geometry in SVG user units (pixels at 100% zoom).
constexpr double kPlotWidth = 880, kPlotHeight = 380;
constexpr double kMarginLeft = 72, kMarginRight = 24, kMarginTop = 16, kMarginBottom = 52;
constexpr int kMaxTicks = 10;

std::string esc(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control bytes are not allowed in HTML text; invalid UTF-8 would garble the page.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string num(double x) { return fmt::format("{:.6g}", x); }
std::string px(double x) { return fmt::format("{:.2f}", x); }

enum class AxisFormat { Bytes, Plain, Micros };

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double base = 10;
  AxisFormat format = AxisFormat::Plain;

  double frac(double v) const {
    if (log) {
      const double l = std::log(lo), h = std::log(hi);
      return h > l ? (std::log(std::max(v, lo * 1e-3)) - l) / (h - l) : 0.5;
    }
    return hi > lo ? (v - lo) / (hi - lo) : 0.5;
  }

  std::string label(double v) const {
    switch (format) {
      case AxisFormat::Bytes:
        return detail::shortBytes(v);
      case AxisFormat::Micros:
        return v >= 1000 ? fmt::format("{:.4g} ms", v / 1000) : fmt::format("{:.4g} us", v);
      default:
        return fmt::format("{:.4g}", v);
    }
  }

  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      const double e0 = std::floor(std::log(lo) / std::log(base) + 1e-9);
      const double e1 = std::ceil(std::log(hi) / std::log(base) - 1e-9);
      const double step = std::max(1.0, std::ceil((e1 - e0 + 1) / kMaxTicks));
      for (int k = 0; k <= 2 * kMaxTicks; ++k) {
        const double e = e0 + k * step;
        if (!(e <= e1 + 1e-9)) break;
        const double v = std::pow(base, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
      }
      if (t.empty()) t = {lo, hi};
      return t;
    }
    const double span = hi - lo;
    const double raw = span / kMaxTicks;
    const double mag = std::pow(10, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (m * mag >= raw) {
        step = m * mag;
        break;
      }
    }
    // Indexed, not accumulated: where step is below the spacing of doubles near lo, v += step would never move.
    const double first = std::ceil(lo / step) * step;
    for (int k = 0; k <= 2 * kMaxTicks; ++k) {
      const double v = first + k * step;
      if (!(v <= hi + step * 1e-9)) break;
      t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    }
    if (t.empty()) t = {lo, hi};
    return t;
  }
};

/// An axis spanning `values` (padded so that single points are not on the frame).
Axis fitAxis(std::vector<double> values, bool log, double base, AxisFormat f, bool fromZero) {
  Axis a;
  a.log = log;
  a.base = base;
  a.format = f;
  if (log) values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !(v > 0); }), values.end());
  if (values.empty()) values = {log ? 1.0 : 0.0, log ? base : 1.0};
  a.lo = *std::min_element(values.begin(), values.end());
  a.hi = *std::max_element(values.begin(), values.end());
  if (log) {
    if (a.hi <= a.lo * 1.0001) {
      a.lo /= base;
      a.hi *= base;
    } else {
      a.lo /= std::sqrt(base) > 1.5 ? 1.5 : std::sqrt(base);
      a.hi *= std::sqrt(base) > 1.5 ? 1.5 : std::sqrt(base);
    }
  } else {
    if (fromZero) a.lo = std::min(0.0, a.lo);
    if (a.hi <= a.lo) a.hi = a.lo + (a.lo == 0 ? 1 : std::abs(a.lo));
    a.hi += 0.05 * (a.hi - a.lo);
  }
  return a;
}

struct PlotConfig {
  std::string kind;  ///< data-plot
  std::string title, xLabel, yLabel;
  bool logX = false, logY = false;
  double xBase = 2, yBase = 10;
  AxisFormat xFormat = AxisFormat::Plain, yFormat = AxisFormat::Plain;
  bool yFromZero = true;
  bool lines = true;
  /// Colour per series label, so that a setup keeps its colour from plot to plot.
  const std::map<std::string, std::size_t>* colours = nullptr;
};

std::string colourOf(const PlotConfig& c, const std::string& label, std::size_t i) {
  if (c.colours) {
    const auto it = c.colours->find(label);
    if (it != c.colours->end()) return kPalette[it->second % kPaletteSize];
  }
  return kPalette[i % kPaletteSize];
}

std::string legend(const PlotConfig& c, const std::vector<PlotSeries>& series) {
  std::string out = "<ul class=\"legend\">";
  for (std::size_t i = 0; i < series.size(); ++i) {
    out += fmt::format(R"~(<li><span class="swatch" style="background:{}"></span>{}</li>)~",
                       colourOf(c, series[i].label, i), esc(series[i].label));
  }
  return out + "</ul>";
}

std::string svgPlot(const PlotConfig& c, const std::vector<PlotSeries>& series) {
  std::vector<double> xs, ys;
  std::size_t points = 0;
  for (const PlotSeries& s : series) {
    for (const PlotPoint& p : s.points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
      if (!std::isnan(p.lo)) ys.push_back(p.lo);
      if (!std::isnan(p.hi)) ys.push_back(p.hi);
      ++points;
    }
  }
  const Axis ax = fitAxis(xs, c.logX, c.xBase, c.xFormat, false);
  const Axis ay = fitAxis(ys, c.logY, c.yBase, c.yFormat, c.yFromZero && !c.logY);
  const double w = kPlotWidth - kMarginLeft - kMarginRight, h = kPlotHeight - kMarginTop - kMarginBottom;
  const auto X = [&](double v) { return kMarginLeft + ax.frac(v) * w; };
  const auto Y = [&](double v) { return kMarginTop + (1 - ay.frac(v)) * h; };
  std::string s = fmt::format(
      R"~(<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{}" data-points="{}" data-series="{}" )~"
      R"~(data-y-scale="{}" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)~",
      esc(c.kind), points, series.size(), c.logY ? "log" : "linear", num(kPlotWidth), num(kPlotHeight), num(kPlotWidth),
      num(kPlotHeight), esc(c.title));
  s += fmt::format(R"~(<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>)~", px(kMarginLeft), px(kMarginTop),
                   px(w), px(h));
  for (double t : ax.ticks()) {
    s += fmt::format(R"~(<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/><text class="tick" x="{0}" y="{3}" )~"
                     R"~(text-anchor="middle">{4}</text>)~",
                     px(X(t)), px(kMarginTop), px(kMarginTop + h), px(kMarginTop + h + 16), esc(ax.label(t)));
  }
  for (double t : ay.ticks()) {
    s += fmt::format(R"~(<line class="grid" x1="{0}" x2="{1}" y1="{2}" y2="{2}"/><text class="tick" x="{3}" y="{4}" )~"
                     R"~(text-anchor="end">{5}</text>)~",
                     px(kMarginLeft), px(kMarginLeft + w), px(Y(t)), px(kMarginLeft - 6), px(Y(t) + 4),
                     esc(ay.label(t)));
  }
  s += fmt::format(R"~(<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>)~", px(kMarginLeft + w / 2),
                   px(kPlotHeight - 8), esc(c.xLabel));
  s += fmt::format(R"~(<text class="axis" transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>)~",
                   px(kMarginTop + h / 2), esc(c.yLabel));
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& se = series[i];
    const std::string col = colourOf(c, se.label, i);
    s += fmt::format(R"~(<g class="series" data-label="{}">)~", esc(se.label));
    if (c.lines && se.points.size() > 1) {
      std::string pts;
      for (const PlotPoint& p : se.points) pts += px(X(p.x)) + "," + px(Y(p.y)) + " ";
      s += fmt::format(R"~(<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>)~", col, pts);
    }
    for (const PlotPoint& p : se.points) {
      if (!std::isnan(p.lo) && !std::isnan(p.hi)) {
        const double x = X(p.x);
        s += fmt::format(
            R"~(<path class="errbar" data-lo="{}" data-hi="{}" stroke="{}" d="M{} {}V{}M{} {}H{}M{} {}H{}"/>)~",
            num(p.lo), num(p.hi), col, px(x), px(Y(p.lo)), px(Y(p.hi)), px(x - 4), px(Y(p.lo)), px(x + 4), px(x - 4),
            px(Y(p.hi)), px(x + 4));
      }
      s += fmt::format(
          R"~(<circle class="pt" data-x="{}" data-y="{}" cx="{}" cy="{}" r="3.2" fill="{}"><title>{}</title></circle>)~",
          num(p.x), num(p.y), px(X(p.x)), px(Y(p.y)), col, esc(p.tip));
    }
    s += "</g>";
  }
  return s + "</svg>";
}

std::string figure(const PlotConfig& c, const std::vector<PlotSeries>& series) {
  return fmt::format(R"~(<figure><figcaption>{}</figcaption>{}{}</figure>)~", esc(c.title), svgPlot(c, series),
                     legend(c, series));
}

std::string svgTimeline(const std::string& kind, const OpTimeline& t) {
  constexpr double kWidth = 1100, kLabelWidth = 150, kAxisHeight = 28;
  const double laneHeight = t.lanes.size() > 96 ? 6 : t.lanes.size() > 32 ? 10 : 16;
  const double height = kAxisHeight + laneHeight * static_cast<double>(std::max<std::size_t>(t.lanes.size(), 1)) + 8;
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (const auto& s : t.spans) {
    lo = std::min(lo, s.startUs);
    hi = std::max(hi, s.endUs);
  }
  if (t.spans.empty()) lo = 0, hi = 1;
  Axis a;
  a.lo = lo;
  a.hi = hi > lo ? hi : lo + 1;
  a.format = AxisFormat::Micros;
  const double w = kWidth - kLabelWidth - 16;
  const auto X = [&](double v) { return kLabelWidth + a.frac(v) * w; };
  std::map<std::string, std::size_t> kinds;
  for (const auto& s : t.spans) kinds.try_emplace(s.kind, kinds.size());
  std::string out = fmt::format(
      R"~(<svg xmlns="http://www.w3.org/2000/svg" class="timeline" data-plot="{}" data-points="{}" data-lanes="{}" )~"
      R"~(viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)~",
      esc(kind), t.spans.size(), t.lanes.size(), num(kWidth), num(height), num(kWidth), num(height), esc(t.title));
  for (double tick : a.ticks()) {
    out += fmt::format(R"~(<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/><text class="tick" x="{0}" y="14" )~"
                       R"~(text-anchor="middle">{3}</text>)~",
                       px(X(tick)), px(kAxisHeight - 6), px(height - 8), esc(a.label(tick - lo)));
  }
  if (laneHeight >= 10) {
    for (std::size_t i = 0; i < t.lanes.size(); ++i) {
      out += fmt::format(R"~(<text class="lane" x="{}" y="{}" text-anchor="end">{}</text>)~", px(kLabelWidth - 6),
                         px(kAxisHeight + laneHeight * (static_cast<double>(i) + 0.75)), esc(t.lanes[i]));
    }
  }
  for (const auto& s : t.spans) {
    const double x0 = X(s.startUs), x1 = X(s.endUs);
    out += fmt::format(R"~(<rect class="span" data-x="{}" data-end="{}" data-lane="{}" data-kind="{}" x="{}" y="{}" )~"
                       R"~(width="{}" height="{}" fill="{}"><title>{}</title></rect>)~",
                       num(s.startUs), num(s.endUs), s.lane, esc(s.kind), px(x0),
                       px(kAxisHeight + laneHeight * s.lane + 1), px(std::max(0.6, x1 - x0)), px(laneHeight - 2),
                       kPalette[kinds.at(s.kind) % kPaletteSize],
                       esc(fmt::format("{} ({}): {:.3f}..{:.3f} us", s.label,
                                       t.lanes.at(static_cast<std::size_t>(s.lane)), s.startUs - lo, s.endUs - lo)));
  }
  out += "</svg><ul class=\"legend\">";
  for (const auto& [k, i] : kinds) {
    out += fmt::format(R"~(<li><span class="swatch" style="background:{}"></span>{}</li>)~", kPalette[i % kPaletteSize],
                       esc(k));
  }
  return out + "</ul>";
}

std::string svgSelector(const std::vector<detail::SelectorRun>& runs, std::map<std::string, std::size_t>& algoColour) {
  constexpr double kWidth = 1100, kLabelWidth = 330, kRow = 26, kAxis = 30;
  constexpr std::size_t kMaxLabelChars = 52;  // about what fits in kLabelWidth at the 11 px lane font
  std::vector<double> sizes;
  for (const auto& r : runs) {
    for (const auto& row : r.rows) {
      if (row.size > 0) sizes.push_back(static_cast<double>(row.size));
      algoColour.try_emplace(row.algorithm, algoColour.size());
    }
  }
  const Axis a = fitAxis(sizes, true, 2, AxisFormat::Bytes, false);
  const double w = kWidth - kLabelWidth - 16;
  const double height = kAxis + kRow * static_cast<double>(runs.size()) + 8;
  const auto X = [&](double v) { return kLabelWidth + a.frac(v) * w; };
  std::size_t points = 0;
  for (const auto& r : runs) points += r.rows.size();
  std::string out =
      fmt::format(R"~(<svg xmlns="http://www.w3.org/2000/svg" class="selector" data-plot="selector" data-points="{}" )~"
                  R"~(viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="selector choices">)~",
                  points, num(kWidth), num(height), num(kWidth), num(height));
  for (double tick : a.ticks()) {
    out += fmt::format(R"~(<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/><text class="tick" x="{0}" y="14" )~"
                       R"~(text-anchor="middle">{3}</text>)~",
                       px(X(tick)), px(kAxis - 6), px(height - 8), esc(a.label(tick)));
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double y = kAxis + kRow * static_cast<double>(i);
    // Long labels are cut (the table below has them whole) so that they stay inside the drawing.
    std::string label = runs[i].label;
    if (label.size() > kMaxLabelChars) label = label.substr(0, kMaxLabelChars - 3) + "...";
    out += fmt::format(R"~(<text class="lane" x="4" y="{}"><title>{}</title>{}</text>)~", px(y + kRow * 0.65),
                       esc(runs[i].label), esc(label));
    const auto& rows = runs[i].rows;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const double size = std::max<double>(1, static_cast<double>(rows[k].size));
      // Each choice covers the sizes up to halfway (geometrically) to its neighbours.
      const double left =
          k > 0 ? std::sqrt(size * std::max<double>(1, static_cast<double>(rows[k - 1].size))) : size / 1.4;
      const double right = k + 1 < rows.size()
                               ? std::sqrt(size * std::max<double>(1, static_cast<double>(rows[k + 1].size)))
                               : size * 1.4;
      out +=
          fmt::format(R"~(<rect class="choice" data-x="{}" data-algorithm="{}" x="{}" y="{}" width="{}" height="{}" )~"
                      R"~(fill="{}"><title>{}</title></rect>)~",
                      num(size), esc(rows[k].algorithm), px(X(left)), px(y + 3), px(std::max(1.0, X(right) - X(left))),
                      px(kRow - 6), kPalette[algoColour.at(rows[k].algorithm) % kPaletteSize],
                      esc(fmt::format("{} B: {} ({})", rows[k].size, rows[k].algorithm, rows[k].reason)));
    }
  }
  return out + "</svg>";
}

constexpr const char* kStyle = R"~(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1140px;color:#222;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 4px}.meta{color:#666}
figure{margin:8px 0 20px}figcaption{font-weight:600;margin-bottom:4px}
svg{display:block;background:#fff}.frame{fill:none;stroke:#999}.grid{stroke:#e6e6e6}
.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}.lane{font-size:11px;fill:#444}
.errbar{stroke-width:1.3;fill:none}
.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-2px;border-radius:2px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0 14px}th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}td.n{text-align:right;font-variant-numeric:tabular-nums}.empty{color:#777;font-style:italic}
code{font-size:12px;background:#f4f4f4;padding:1px 4px;border-radius:3px;word-break:break-all}
)~";

/// The topology's fingerprint as a table cell ("" without a topology): runs on a renamed copy of the same network
/// show the same value.
std::string fingerprintCell(const std::string& topology) {
  if (topology.empty()) return "";
  try {
    return "<code>" + fingerprint(loadTopology(topology)) + "</code>";
  } catch (const Error&) {
    return "not found here";
  }
}

/// Peak bus bandwidths this far apart put the slower series flat on the axis of a linear plot (under 1/20 of its
/// height): then the y axis is logarithmic.
constexpr double kLogYPeakRatio = 20;

bool spansDecades(const std::vector<PlotSeries>& series) {
  double lo = INFINITY, hi = 0;
  for (const PlotSeries& s : series) {
    double peak = 0;
    for (const PlotPoint& p : s.points) peak = std::max(peak, p.y);
    if (peak <= 0) continue;
    lo = std::min(lo, peak);
    hi = std::max(hi, peak);
  }
  return hi > 0 && hi >= kLogYPeakRatio * lo;
}

/// Bus bandwidth against size on a log x axis; a log y axis when the series' peaks are decades apart.
PlotConfig busbwVsSize(std::string kind, std::string title, const std::vector<PlotSeries>& series) {
  PlotConfig c;
  c.kind = std::move(kind);
  c.title = std::move(title);
  c.xLabel = "size (bytes)";
  c.logX = true;
  c.logY = spansDecades(series);
  c.yLabel = c.logY ? "busbw (GB/s, log scale)" : "busbw (GB/s)";
  c.xFormat = AxisFormat::Bytes;
  return c;
}

}  // namespace

std::string renderReportHtml(const ReportInputs& in, const ReportOptions& o) {
  using namespace detail;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  h += fmt::format("<meta name=\"generator\" content=\"collbench {}\"><title>{}</title><style>{}</style></head><body>",
                   COLLBENCH_VERSION, esc(o.title), kStyle);
  h += fmt::format(
      "<h1>{}</h1><p class=\"meta\">collbench {}{} &middot; {} perf run{}, {} replay{}, {} trace{}, {} "
      "timeline{}</p>",
      esc(o.title), COLLBENCH_VERSION, o.commandLine.empty() ? "" : " &middot; <code>" + esc(o.commandLine) + "</code>",
      in.perf.size(), in.perf.size() == 1 ? "" : "s", in.replays.size(), in.replays.size() == 1 ? "" : "s",
      in.traces.size(), in.traces.size() == 1 ? "" : "s", in.timelines.size(), in.timelines.size() == 1 ? "" : "s");

  // One colour per setup label across plots.
  std::map<std::string, std::size_t> colours;
  for (const PerfRun& r : in.perf) colours.try_emplace(seriesLabel(r), colours.size());

  h += "<section id=\"busbw\"><h2>Bus bandwidth vs size</h2>";
  const auto plots = busbwPlots(in);
  if (plots.empty()) h += "<p class=\"empty\">No perf runs (<code>collbench perf -J</code>) among the inputs.</p>";
  for (const BusbwPlot& p : plots) {
    PlotConfig c =
        busbwVsSize("busbw", p.collective + ": bus bandwidth (out-of-place) per algorithm and backend", p.series);
    c.colours = &colours;
    h += figure(c, p.series);
  }
  h += "</section><section id=\"scaling\"><h2>Scaling vs GPU count</h2>";
  const auto ranks = rankScaling(in);
  const auto replays = replayScaling(in);
  if (ranks.empty() && replays.empty()) {
    h += "<p class=\"empty\">Needs perf runs of one setup at two or more rank counts, or replays "
         "(<code>collbench replay -J</code>).</p>";
  } else if (ranks.empty()) {
    h += "<p class=\"empty\" id=\"rank-scaling-missing\">" + esc(kRankScalingNeeds) + "</p>";
  }
  if (!ranks.empty()) {
    PlotConfig c;
    c.kind = "scaling";
    c.title = "bus bandwidth at each run's largest size vs ranks";
    c.xLabel = "ranks (GPUs)";
    c.yLabel = "busbw (GB/s)";
    c.logX = true;
    h += figure(c, ranks);
  }
  if (!replays.empty()) {
    PlotConfig c;
    c.kind = "scaling-efficiency";
    c.title = "replayed training step: scaling efficiency vs 1 replica";
    c.xLabel = "replicas";
    c.yLabel = "efficiency";
    c.logX = true;
    h += figure(c, replays);
    h +=
        "<p>" + esc(kReplayStatistic) +
        "</p><table><tr><th>replay</th><th>world size</th><th>step (ms)</th><th>recorded (ms)</th><th>compute (ms)</th>"
        "<th>exposed comm (ms)</th><th>efficiency</th></tr>";
    for (const ReplayRun& r : in.replays) {
      h += fmt::format(
          "<tr><td>{} on {} ({})</td><td class=n>{}</td><td class=n>{:.3f}</td><td class=n>{:.3f}</td>"
          "<td class=n>{:.3f}</td><td class=n>{:.3f}</td><td class=n>{:.3f}</td></tr>",
          esc(r.tracePath), esc(r.backend), esc(r.scaling), r.worldSize, r.stepSeconds * 1e3,
          r.recordedStepSeconds * 1e3, r.computeSeconds * 1e3, r.exposedSeconds * 1e3, r.efficiency);
    }
    h += "</table>";
  }

  h += "</section><section id=\"sim-vs-measured\"><h2>Simulated vs measured</h2>";
  const auto svm = simVsMeasured(in);
  if (svm.empty()) {
    h += "<p class=\"empty\">Needs a simulated (<code>--backend sim</code>) and a measured perf run of the same "
         "collective, algorithm, ranks and sizes.</p>";
  } else {
    std::map<std::string, PlotSeries> bySeries;
    for (const SimMeasuredRow& r : svm) {
      const std::string base = fmt::format("{} {} n={}", r.collective, r.algorithm, r.ranks);
      auto& sim = bySeries["simulated: " + base];
      sim.label = "simulated: " + base;
      sim.points.push_back(PlotPoint{static_cast<double>(r.size), r.simUs, NAN, NAN,
                                     fmt::format("simulated {} at {} B: {:.2f} us", base, r.size, r.simUs)});
      auto& meas = bySeries["measured (" + r.measuredBackend + "): " + base];
      meas.label = "measured (" + r.measuredBackend + "): " + base;
      meas.points.push_back(PlotPoint{static_cast<double>(r.size), r.medianUs, r.repeats > 1 ? r.minUs : NAN,
                                      r.repeats > 1 ? r.maxUs : NAN,
                                      fmt::format("measured {} at {} B: median {:.2f} us, {:.2f}..{:.2f} over {} runs",
                                                  base, r.size, r.medianUs, r.minUs, r.maxUs, r.repeats)});
    }
    std::vector<PlotSeries> series;
    for (auto& [k, s] : bySeries) series.push_back(std::move(s));
    PlotConfig c;
    c.kind = "sim-vs-measured";
    c.title = "time per collective: simulated vs measured (median, min..max bars over repeats)";
    c.xLabel = "size (bytes)";
    c.yLabel = "time";
    c.logX = true;
    c.logY = true;
    c.xFormat = AxisFormat::Bytes;
    c.yFormat = AxisFormat::Micros;
    h += figure(c, series);
    h += "<table><tr><th>collective</th><th>algorithm</th><th>ranks</th><th>size</th><th>simulated (us)</th>"
         "<th>measured median (us)</th><th>min..max</th><th>repeats</th><th>error</th></tr>";
    for (const SimMeasuredRow& r : svm) {
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.2f}</td>"
          "<td class=n>{:.2f}</td><td class=n>{:.2f}..{:.2f}</td><td class=n>{}</td>"
          "<td class=n>{:+.1f}%</td></tr>",
          esc(r.collective), esc(r.algorithm), r.ranks, esc(shortBytes(static_cast<double>(r.size))), r.simUs,
          r.medianUs, r.minUs, r.maxUs, r.repeats, 100 * r.error());
    }
    h += "</table>";
  }

  h += "</section><section id=\"fidelity\"><h2>Fidelity of real nccl-tests tables</h2>";
  const auto fid = fidelityPlots(in);
  if (fid.empty()) {
    h += "<p class=\"empty\">Needs <code>collbench fidelity LOG --topology T -J out.json</code> output.</p>";
  }
  for (const FidelityPlot& p : fid) {
    h += figure(
        busbwVsSize("fidelity-busbw", p.title + ": bus bandwidth (out-of-place), measured vs simulated", p.series),
        p.series);
    h += "<table><tr><th>sizes</th><th>rows</th><th>median |error|</th><th>p90</th><th>worst</th></tr>";
    const auto row = [&h](std::string_view sizes, const ErrorStats& st) {
      h += fmt::format("<tr><td>{}</td><td class=n>{}</td>", esc(sizes), st.rows);
      h += st.rows == 0 ? std::string("<td></td><td></td><td></td></tr>")
                        : fmt::format("<td class=n>{:.1f}%</td><td class=n>{:.1f}%</td><td class=n>{:.1f}%</td></tr>",
                                      100 * st.median, 100 * st.p90, 100 * st.worst);
    };
    row("all", p.log->all);
    for (SizeClass sc : kSizeClasses) row(describe(sc), p.log->byClass[static_cast<int>(sc)]);
    h += "</table>";
  }

  h += "</section><section id=\"selector\"><h2>Selector choices</h2>";
  const auto sel = selectorChoices(in);
  if (sel.empty()) {
    h += "<p class=\"empty\">Needs perf runs with <code>--algo auto</code>.</p>";
  } else {
    std::map<std::string, std::size_t> algoColour;
    h += "<figure><figcaption>algorithm chosen per size (--algo auto)</figcaption>" + svgSelector(sel, algoColour);
    h += "<ul class=\"legend\">";
    for (const auto& [a, i] : algoColour) {
      h += fmt::format(R"~(<li><span class="swatch" style="background:{}"></span>{}</li>)~", kPalette[i % kPaletteSize],
                       esc(a));
    }
    h += "</ul></figure><table><tr><th>run</th><th>size</th><th>algorithm</th><th>reason</th></tr>";
    for (const SelectorRun& s : sel) {
      for (const SelectorRow& r : s.rows) {
        h += fmt::format("<tr><td>{}</td><td class=n>{}</td><td>{}</td><td>{}</td></tr>", esc(s.label),
                         esc(shortBytes(static_cast<double>(r.size))), esc(r.algorithm), esc(r.reason));
      }
    }
    h += "</table>";
  }

  h += "</section><section id=\"timeline\"><h2>Op timeline</h2>";
  if (in.timelines.empty() && in.traces.empty()) {
    h += "<p class=\"empty\">Needs a timeline (<code>collbench sim --timeline out.json</code>) or a trace.</p>";
  }
  for (const OpTimeline& t : in.timelines) {
    h += fmt::format(
        "<figure><figcaption>{}{}</figcaption>{}</figure>", esc(t.title),
        t.droppedSpans ? fmt::format(" (first {} ops; {} more not drawn)", t.spans.size(), t.droppedSpans) : "",
        svgTimeline("timeline", t));
  }
  for (const auto& [src, t] : in.traces) {
    const OpTimeline tl = traceTimeline(src, t);
    h += fmt::format("<figure><figcaption>{}: compute gaps and collectives</figcaption>{}</figure>", esc(tl.title),
                     svgTimeline("trace-timeline", tl));
  }

  h += "</section><section id=\"inputs\"><h2>Inputs</h2><table><tr><th>file</th><th>kind</th><th>setup</th>"
       "<th>topology fingerprint</th><th>produced by</th></tr>";
  for (const PerfRun& r : in.perf) {
    h += fmt::format(
        "<tr><td><code>{}</code></td><td>perf {}</td><td>{}</td><td>{}</td><td><code>{}</code>"
        "{}</td></tr>",
        esc(r.source), esc(r.collective), esc(seriesLabel(r)), fingerprintCell(r.topology), esc(r.commandLine),
        r.toolVersion.empty() ? "" : " (collbench " + esc(r.toolVersion) + ")");
  }
  for (const ReplayRun& r : in.replays) {
    h += fmt::format(
        "<tr><td><code>{}</code></td><td>replay</td><td>{} {} replicas</td><td>{}</td>"
        "<td><code>{}</code></td></tr>",
        esc(r.source), esc(r.backend), r.worldSize, fingerprintCell(r.topology), esc(r.commandLine));
  }
  for (const auto& [src, t] : in.traces) {
    h += fmt::format(
        "<tr><td><code>{}</code></td><td>trace</td><td>{} replicas on {}</td><td></td>"
        "<td><code>{}</code></td></tr>",
        esc(src), t.worldSize, esc(t.backend), esc(t.command));
  }
  for (const OpTimeline& t : in.timelines) {
    h += fmt::format("<tr><td><code>{}</code></td><td>timeline</td><td>{} lanes</td><td></td><td>{}</td></tr>",
                     esc(t.source), t.lanes.size(), esc(t.title));
  }
  for (const auto& [src, doc] : in.fidelity) {
    h += fmt::format(
        "<tr><td><code>{}</code></td><td>fidelity</td><td>{} log{}</td><td></td><td><code>{}</code></td></tr>",
        esc(src), doc.logs.size(), doc.logs.size() == 1 ? "" : "s", esc(doc.commandLine));
  }
  h += "</table></section></body></html>\n";
  return h;
}

}  // namespace collbench
