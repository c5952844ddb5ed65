// Perf-run parsing and the regression gate (collbench/gate.h).
#include "collbench/gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "collbench/error.h"

namespace collbench {

namespace {

/// How a deliberate change of simulated timings is accepted (the project's baselines; a user's are rewritten by the
/// perf command that made them).
constexpr std::string_view kUpdateBaselineHint =
    "the project's: scripts/gate-baselines.sh --update; others: rerun the perf command that wrote it";

std::string rowKey(const std::string& collective, const std::string& algorithm, std::size_t size, bool inPlace) {
  return fmt::format("{} {} {} B {}", collective, algorithm, size, inPlace ? "in-place" : "out-of-place");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// current / baseline - 1, with a zero baseline meaning "no cost before": any cost now is an unbounded change.
double relativeChange(double base, double cur) {
  if (base <= 0) return cur <= 0 ? 0.0 : HUGE_VAL;
  return cur / base - 1;
}

/// FNV-1a 64 of the row key: each row's bootstrap stream depends on the row, not on its position.
std::uint64_t hashKey(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

/// Percentile bootstrap of the change of medians.
void bootstrap(GateRow& r, const GateOptions& o) {
  std::mt19937_64 rng(o.seed ^ hashKey(r.key));
  std::vector<double> changes;
  changes.reserve(static_cast<std::size_t>(o.resamples));
  std::vector<double> b(r.baselineUs.size()), c(r.currentUs.size());
  std::uniform_int_distribution<std::size_t> pickB(0, b.size() - 1), pickC(0, c.size() - 1);
  for (int i = 0; i < o.resamples; ++i) {
    for (double& x : b) x = r.baselineUs[pickB(rng)];
    for (double& x : c) x = r.currentUs[pickC(rng)];
    changes.push_back(relativeChange(median(b), median(c)));
  }
  std::sort(changes.begin(), changes.end());
  const double alpha = (1 - o.confidence) / 2;
  const auto at = [&](double q) {
    const auto k = static_cast<std::size_t>(
        std::clamp(q * static_cast<double>(changes.size() - 1), 0.0, static_cast<double>(changes.size() - 1)));
    return changes[k];
  };
  r.ciLow = at(alpha);
  r.ciHigh = at(1 - alpha);
  r.hasInterval = true;
}

struct Side {
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, long long> wrong;
  std::vector<std::string> order;  // keys in first-seen order
};

/// `baseline`: the rows are what the current runs are measured against, so each needs a time.
Side collect(const std::vector<PerfRun>& runs, bool baseline) {
  Side s;
  for (const PerfRun& run : runs) {
    std::set<std::string> inThisRun;
    for (std::size_t i = 0; i < run.rows.size(); ++i) {
      const PerfRow& row = run.rows[i];
      for (int inPlace = 0; inPlace < 2; ++inPlace) {
        const std::string key = rowKey(run.collective, row.algorithm, row.size, inPlace == 1);
        if (!inThisRun.insert(key).second) {
          throw Error(Errc::InvalidArgument, fmt::format("{}: row '{}' appears twice", printable(run.source), key));
        }
        const PerfSample& h = inPlace ? row.inPlace : row.outOfPlace;
        if (baseline && row.size > 0 && !(h.timeUs > 0)) {
          // A change relative to no time at all is unbounded: the baseline is broken, not the current run slower.
          throw Error(
              Errc::InvalidArgument,
              fmt::format("{}: results[{}].{}.time_us: {} at size {} B (row '{}'); a baseline row needs a time "
                          "> 0",
                          printable(run.source), i, inPlace ? "in_place" : "out_of_place", h.timeUs, row.size, key));
        }
        auto [it, fresh] = s.times.try_emplace(key);
        if (fresh) s.order.push_back(key);
        it->second.push_back(h.timeUs);
        if (h.wrong && *h.wrong > 0) s.wrong[key] += *h.wrong;
      }
    }
  }
  return s;
}

std::string describeSetup(const PerfRun& r) {
  std::string s = fmt::format("{}, {} rank{}", r.backend, r.ranks, r.ranks == 1 ? "" : "s");
  if (!r.topology.empty()) s += ", topology " + r.topology;
  return s + ", " + r.datatype + " " + r.op;
}

void checkCompatible(const std::vector<PerfRun>& runs, const PerfRun& ref, std::string_view side) {
  for (const PerfRun& r : runs) {
    const auto mismatch = [&](std::string_view field, const std::string& a, const std::string& b) {
      if (a != b) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("{} run {}: config.{} is {} but {} has {}; runs of different setups cannot be compared",
                                side, printable(r.source), field, printable(a.empty() ? "(none)" : a),
                                printable(ref.source), printable(b.empty() ? "(none)" : b)));
      }
    };
    mismatch("backend", r.backend, ref.backend);
    mismatch("ranks", std::to_string(r.ranks), std::to_string(ref.ranks));
    mismatch("topology", r.topology, ref.topology);
    mismatch("datatype", r.datatype, ref.datatype);
    mismatch("op", r.op, ref.op);
  }
}

std::string percent(double x) {
  if (std::isinf(x)) return x > 0 ? "+inf" : "-inf";
  return fmt::format("{:+.2f}%", 100 * x);
}

std::string micro(double us) { return fmt::format("{:.3f}", us); }

}  // namespace

std::string_view toString(Verdict v) {
  switch (v) {
    case Verdict::Pass:
      return "pass";
    case Verdict::Improvement:
      return "improvement";
    case Verdict::Regression:
      return "regression";
    case Verdict::Inconclusive:
      return "inconclusive";
  }
  return "?";
}

double parseTolerance(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  bool pct = false;
  if (!s.empty() && s.back() == '%') {
    pct = true;
    s.pop_back();
  }
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(x)) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("--tolerance: expected a percentage like 3% or a fraction like 0.03, got '{}'", printable(text)));
  }
  if (pct) x /= 100;
  if (x < 0 || x >= 1) {
    throw Error(Errc::InvalidArgument, fmt::format("--tolerance must be in [0%, 100%), got '{}'", printable(text)));
  }
  return x;
}

int GateReport::count(Verdict v) const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [v](const GateRow& r) { return r.verdict == v; }));
}

int GateReport::exitCode(bool failInconclusive) const {
  if (count(Verdict::Regression) > 0) return 1;
  // A simulator repeats itself exactly: a faster row is a change nobody has reviewed yet, as much as a slower one.
  if (deterministic && count(Verdict::Improvement) > 0) return 1;
  if (failInconclusive && count(Verdict::Inconclusive) > 0) return 1;
  return 0;
}

GateReport gate(const std::vector<PerfRun>& baseline, const std::vector<PerfRun>& current, const GateOptions& o) {
  if (baseline.empty() || current.empty()) {
    throw Error(Errc::InvalidArgument, "gate needs at least one baseline and one current run");
  }
  if (!(o.tolerance >= 0 && o.tolerance < 1) || !(o.confidence > 0 && o.confidence < 1) || o.resamples < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("bad gate options: tolerance {}, confidence {}, resamples {}",
                                                   o.tolerance, o.confidence, o.resamples));
  }
  const PerfRun& ref = baseline.front();
  checkCompatible(baseline, ref, "baseline");
  checkCompatible(current, ref, "current");
  GateReport rep;
  rep.options = o;
  rep.setup = describeSetup(ref);
  for (const PerfRun& r : baseline) rep.baselineSources.push_back(r.source);
  for (const PerfRun& r : current) rep.currentSources.push_back(r.source);
  rep.deterministic =
      std::all_of(baseline.begin(), baseline.end(), [](const PerfRun& r) { return r.deterministic(); }) &&
      std::all_of(current.begin(), current.end(), [](const PerfRun& r) { return r.deterministic(); });
  const Side b = collect(baseline, true), c = collect(current, false);
  for (const std::string& key : b.order) {
    const auto it = c.times.find(key);
    if (it == c.times.end()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("current runs lack row '{}' of the baseline ({}); rerun with the baseline's sizes and "
                              "algorithms",
                              key, printable(ref.source)));
    }
    GateRow row;
    row.key = key;
    row.baselineUs = b.times.at(key);
    row.currentUs = it->second;
    row.baselineMedian = median(row.baselineUs);
    row.currentMedian = median(row.currentUs);
    row.change = relativeChange(row.baselineMedian, row.currentMedian);
    row.ciLow = row.ciHigh = row.change;
    const double tol = o.tolerance;
    if (rep.deterministic) {
      row.verdict = row.change > tol ? Verdict::Regression : row.change < -tol ? Verdict::Improvement : Verdict::Pass;
      if (row.verdict == Verdict::Improvement) {
        row.note = fmt::format("changed: faster by {:.2f}%; if intended, update the baseline ({})", -100 * row.change,
                               kUpdateBaselineHint);
      }
    } else if (row.baselineUs.size() >= 2 && row.currentUs.size() >= 2) {
      bootstrap(row, o);
      if (row.ciLow > tol) {
        row.verdict = Verdict::Regression;
      } else if (row.ciHigh < -tol) {
        row.verdict = Verdict::Improvement;
      } else if (row.ciLow >= -tol && row.ciHigh <= tol) {
        row.verdict = Verdict::Pass;
      } else {
        row.verdict = Verdict::Inconclusive;
        row.note = "interval straddles the tolerance: more repeats needed";
      }
    } else if (std::abs(row.change) <= tol) {
      row.verdict = Verdict::Pass;
    } else {
      row.verdict = Verdict::Inconclusive;
      row.note = fmt::format("{} baseline / {} current sample{}: repeat the runs (--repeat N) for an interval",
                             row.baselineUs.size(), row.currentUs.size(), row.currentUs.size() == 1 ? "" : "s");
    }
    if (const auto w = c.wrong.find(key); w != c.wrong.end()) {
      row.verdict = Verdict::Regression;
      row.note = fmt::format("{} wrong element{} in the current results", w->second, w->second == 1 ? "" : "s");
    }
    rep.rows.push_back(std::move(row));
  }
  for (const std::string& key : c.order) {
    if (!b.times.count(key)) rep.notes.push_back(fmt::format("row '{}' is new (not in the baseline)", key));
  }
  if (rep.count(Verdict::Regression)) {
    rep.overall = Verdict::Regression;
  } else if (rep.count(Verdict::Inconclusive)) {
    rep.overall = Verdict::Inconclusive;
  } else if (rep.count(Verdict::Improvement)) {
    rep.overall = Verdict::Improvement;
  } else {
    rep.overall = Verdict::Pass;
  }
  return rep;
}

std::string toMarkdown(const GateReport& r, bool allRows) {
  std::string verdict(toString(r.overall));
  std::transform(verdict.begin(), verdict.end(), verdict.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (r.deterministic && r.overall == Verdict::Improvement) verdict += " (fails: simulated timings changed)";
  std::string out = fmt::format("## collbench gate: {}\n\n", verdict);
  const auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "`" : ", `") + printable(x) + "`";
    return s;
  };
  out += fmt::format("- setup: {}\n- baseline: {}\n- current: {}\n", printable(r.setup), list(r.baselineSources),
                     list(r.currentSources));
  if (r.deterministic) {
    out += fmt::format("- simulated runs are deterministic: any change beyond {:.2f}% fails, slower or faster\n\n",
                       100 * r.options.tolerance);
  } else {
    out += fmt::format(
        "- measured runs: medians of repeats, {:.0f}% bootstrap interval of the change, tolerance {:.2f}%\n\n",
        100 * r.options.confidence, 100 * r.options.tolerance);
  }
  std::vector<const GateRow*> shown;
  for (const GateRow& row : r.rows) {
    if (allRows || row.verdict != Verdict::Pass) shown.push_back(&row);
  }
  if (!shown.empty()) {
    out += "| row | baseline (us) | current (us) | change | interval | n | verdict |\n";
    out += "|---|---:|---:|---:|---|---:|---|\n";
    for (const GateRow* row : shown) {
      const std::string ci = row->hasInterval ? fmt::format("[{}, {}]", percent(row->ciLow), percent(row->ciHigh)) : "";
      const std::string v(toString(row->verdict));
      out += fmt::format("| {} | {} | {} | {} | {} | {}/{} | {}{} |\n", row->key, micro(row->baselineMedian),
                         micro(row->currentMedian), percent(row->change), ci, row->baselineUs.size(),
                         row->currentUs.size(), row->verdict == Verdict::Pass ? v : "**" + v + "**",
                         row->note.empty() ? "" : " (" + row->note + ")");
    }
    out += "\n";
  }
  out += fmt::format("{} rows: {} regression, {} improvement, {} inconclusive, {} pass.\n", r.rows.size(),
                     r.count(Verdict::Regression), r.count(Verdict::Improvement), r.count(Verdict::Inconclusive),
                     r.count(Verdict::Pass));
  if (r.deterministic && r.count(Verdict::Improvement) > 0) {
    out += fmt::format(
        "\nSimulated timings changed (faster). If the change is intended, update the baseline ({}) and commit it.\n",
        kUpdateBaselineHint);
  }
  for (const std::string& n : r.notes) out += "\n- note: " + printable(n);
  if (!r.notes.empty()) out += "\n";
  return out;
}

}  // namespace collbench
