#pragma once
/// Performance gate: compares `collbench perf -J` runs (format "collbench-perf", docs/gate.md) against a baseline.
///
/// Simulated runs are deterministic, so any change beyond the tolerance is a regression or an improvement, and both
/// fail (exit 1): a faster simulated row is an unreviewed change too, to be accepted by updating the baseline.
/// Hardware runs are noisy: each side holds repeated runs (several files, or `collbench gate --repeat`), the gate
/// compares their medians and bootstraps a confidence interval of the relative change:
///   CI above +tolerance -> regression; below -tolerance -> improvement; inside [-tol, +tol] -> pass;
///   otherwise (or a single sample on a side with a change beyond tolerance) -> inconclusive.
/// A current row with wrong results (#wrong > 0) is a regression whatever its time.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/records.h"

namespace collbench {

// PerfRun, its rows and parsePerfRun/readPerfRun: records.h (the collbench-perf format's owner).

enum class Verdict { Pass, Improvement, Regression, Inconclusive };
/// "pass", "improvement", "regression", "inconclusive".
std::string_view toString(Verdict v);

struct GateOptions {
  double tolerance = kDefaultTolerance;  ///< relative change allowed either way
  double confidence = 0.95;              ///< of the bootstrap interval (hardware runs)
  int resamples = 2000;                  ///< bootstrap resamples per row
  std::uint64_t seed = 20261202;         ///< the bootstrap is seeded: the same inputs give the same report
  /// 3%: the run-to-run spread of bus bandwidth nccl-tests users commonly accept on one machine; simulator runs
  /// never move at all, so any tolerance catches their changes.
  static constexpr double kDefaultTolerance = 0.03;
};

/// "3%", "0.03" or "3 %" -> 0.03. Throws Error{InvalidArgument} for negative, non-numeric or >= 100% values.
double parseTolerance(std::string_view text);

struct GateRow {
  /// "all_reduce ring 1048576 B out-of-place" (collective, algorithm, size, placement): what a user greps for.
  std::string key;
  std::vector<double> baselineUs, currentUs;  ///< one time per repeat
  double baselineMedian = 0, currentMedian = 0;
  double change = 0;             ///< currentMedian / baselineMedian - 1
  double ciLow = 0, ciHigh = 0;  ///< bootstrap interval of `change` (equal to it for deterministic rows)
  bool hasInterval = false;
  Verdict verdict = Verdict::Pass;
  std::string note;
};

struct GateReport {
  bool deterministic = false;
  std::string setup;  ///< "sim, 8 ranks, topology dgx-h100-8x1"
  std::vector<std::string> baselineSources, currentSources;
  GateOptions options;
  std::vector<GateRow> rows;
  std::vector<std::string> notes;   ///< rows only in the current runs, and similar remarks
  Verdict overall = Verdict::Pass;  ///< regression if any row regressed, else inconclusive if any, else improvement
                                    ///< if any, else pass

  int count(Verdict v) const;
  /// 1 if a row regressed, or (deterministic runs) improved; inconclusive counts as a failure only when
  /// `failInconclusive`; else 0.
  int exitCode(bool failInconclusive = false) const;
};

/// Compares the runs. Rows are matched by (collective, algorithm, size, placement); every side's runs must agree on
/// backend, ranks, topology, dtype and op, every baseline row must be in the current runs, and every baseline row of
/// a non-zero size must have a time > 0: otherwise Error{InvalidArgument} naming the files and the field (these are
/// inputs that cannot be compared).
GateReport gate(const std::vector<PerfRun>& baseline, const std::vector<PerfRun>& current,
                const GateOptions& options = {});

/// Markdown for CI logs and PR comments: a verdict heading, the setup, a table of the rows that did not pass (all
/// rows when `allRows`) and the counts.
std::string toMarkdown(const GateReport& report, bool allRows = false);

}  // namespace collbench
