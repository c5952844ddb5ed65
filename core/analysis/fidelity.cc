// Simulated vs measured nccl-tests tables (fidelity.h), and the collbench-fidelity JSON format's reader and writer.
#include "collbench/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"
#include "collbench/units.h"

namespace collbench {
namespace {

using nlohmann::json;

/// The quantile of the p90 summary.
constexpr double kP90 = 0.9;
/// Relative tolerance of a stored summary against the one recomputed from the rows: JSON numbers round-trip exactly
/// (nlohmann writes 17 significant digits), so this only absorbs the last bit of a hand-rounded value.
constexpr double kSummaryTolerance = 1e-9;

json statsToJson(const ErrorStats& s) {
  return {{"rows", s.rows}, {"median", s.median}, {"p90", s.p90}, {"worst", s.worst}, {"geomean", s.geomean}};
}

json logToJson(const FidelityLog& f) {
  json rows = json::array();
  for (const FidelityRow& r : f.rows) {
    rows.push_back({{"bytes", r.bytes},
                    {"line", r.line},
                    {"measured_us", r.measuredUs},
                    {"simulated_us", r.simulatedUs},
                    {"measured_busbw_GBps", r.measuredBusbwGBps},
                    {"simulated_busbw_GBps", r.simulatedBusbwGBps},
                    {"algorithm", r.algorithm},
                    {"error", r.error()}});
  }
  json summary = {{"all", statsToJson(f.all)}};
  for (SizeClass c : kSizeClasses) summary[std::string(toString(c))] = statsToJson(f.byClass[static_cast<int>(c)]);
  return {{"log", f.log},
          {"collective", toString(f.collective)},
          {"ranks", f.ranks},
          {"nodes", f.nodes},
          {"nccl_version", f.ncclVersion},
          {"gpus_per_thread", f.gpusPerThread},
          {"topology", f.topology},
          {"topology_fingerprint", f.topologyFingerprint},
          {"algorithm", f.algorithm},
          {"rows", rows},
          {"summary", summary}};
}

/// The shared field reader (json_fields.h) over one object of the document, its unknown fields refused. Numbers are
/// read from -1 up: a signed error is at least -1 (a simulated time of 0), every other number is non-negative.
class Fields : public JsonFields {
 public:
  Fields(std::string_view source, std::string where, const json& obj, const std::set<std::string>& allowed)
      : JsonFields(source, std::move(where), obj) {
    allowOnly(allowed);
  }
  double number(const char* field) const { return JsonFields::number(field, kLowestNumber); }
  /// The path of `field` below this object, for a nested reader.
  std::string where(const char* field) const {
    return JsonFields::where().empty() ? field : JsonFields::where() + "." + field;
  }

 private:
  static constexpr double kLowestNumber = -1;
};

/// A stored summary. "geomean" is optional: files written before it was added (still version 1) lack it, and then
/// it is taken from the rows (`real`) instead of checked.
ErrorStats statsFromJson(std::string_view source, const std::string& where, const json& j, const ErrorStats& real) {
  const Fields f(source, where, j, {"rows", "median", "p90", "worst", "geomean"});
  ErrorStats s;
  s.rows = static_cast<std::size_t>(f.integer("rows", 0));
  s.median = f.number("median");
  s.p90 = f.number("p90");
  s.worst = f.number("worst");
  s.geomean = f.has("geomean") ? f.number("geomean") : real.geomean;
  return s;
}

bool near(double a, double b) {
  return std::abs(a - b) <= kSummaryTolerance * std::max({1.0, std::abs(a), std::abs(b)});
}

void checkStats(std::string_view source, const std::string& where, const ErrorStats& stored, const ErrorStats& real) {
  if (stored.rows != real.rows || !near(stored.median, real.median) || !near(stored.p90, real.p90) ||
      !near(stored.worst, real.worst) || !near(stored.geomean, real.geomean)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {}: does not match its rows (stored median {:.6g}, p90 {:.6g}, worst {:.6g}, geomean "
                            "{:.6g} over {}; the rows give {:.6g}, {:.6g}, {:.6g}, {:.6g} over {})",
                            printable(source), where, stored.median, stored.p90, stored.worst, stored.geomean,
                            stored.rows, real.median, real.p90, real.worst, real.geomean, real.rows));
  }
}

FidelityLog logFromJson(std::string_view source, const std::string& where, const json& j) {
  const Fields f(source, where, j,
                 {"log", "collective", "ranks", "nodes", "nccl_version", "gpus_per_thread", "topology",
                  "topology_fingerprint", "algorithm", "rows", "summary"});
  FidelityLog out;
  out.log = f.string("log");
  try {
    out.collective = parseCollective(f.string("collective"));
  } catch (const Error& e) {
    f.fail("collective", e.what());
  }
  out.ranks = static_cast<int>(f.integer("ranks", 1));
  out.nodes = static_cast<int>(f.integer("nodes", 1));
  out.ncclVersion = f.string("nccl_version");
  // Optional: files written before it existed (still version 1) ran one GPU per thread's timing.
  out.gpusPerThread = static_cast<int>(f.integerOr("gpus_per_thread", 1, 1));
  out.topology = f.string("topology");
  out.topologyFingerprint = f.string("topology_fingerprint");
  out.algorithm = f.string("algorithm");
  const json& rows = f.need("rows");
  if (!rows.is_array()) f.fail("rows", "expected an array");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", f.where("rows"), i);
    const Fields r(source, at, rows[i],
                   {"bytes", "line", "measured_us", "simulated_us", "measured_busbw_GBps", "simulated_busbw_GBps",
                    "algorithm", "error"});
    FidelityRow row;
    row.bytes = static_cast<std::size_t>(r.integer("bytes", 1));
    row.line = static_cast<int>(r.integer("line", 0));
    row.measuredUs = r.number("measured_us");
    if (row.measuredUs <= 0) r.fail("measured_us", "must be > 0");
    row.simulatedUs = r.number("simulated_us");
    row.measuredBusbwGBps = r.number("measured_busbw_GBps");
    row.simulatedBusbwGBps = r.number("simulated_busbw_GBps");
    row.algorithm = r.string("algorithm");
    if (!near(r.number("error"), row.error())) r.fail("error", "is not simulated_us / measured_us - 1");
    out.rows.push_back(std::move(row));
  }
  summarize(out);
  const std::string sw = f.where("summary");
  const Fields s(source, sw, f.need("summary"), {"all", "small", "medium", "large"});
  checkStats(source, sw + ".all", statsFromJson(source, sw + ".all", s.need("all"), out.all), out.all);
  for (SizeClass c : kSizeClasses) {
    const std::string key(toString(c));
    std::string classPath = sw;
    classPath.append(".").append(key);
    const ErrorStats& real = out.byClass[static_cast<int>(c)];
    checkStats(source, classPath, statsFromJson(source, classPath, s.need(key.c_str()), real), real);
  }
  return out;
}

}  // namespace

SizeClass sizeClassOf(std::size_t bytes) {
  if (bytes < kSmallBelowBytes) return SizeClass::Small;
  return bytes > kLargeAboveBytes ? SizeClass::Large : SizeClass::Medium;
}

std::string_view toString(SizeClass c) {
  switch (c) {
    case SizeClass::Small:
      return "small";
    case SizeClass::Medium:
      return "medium";
    case SizeClass::Large:
      return "large";
  }
  return "?";
}

std::string_view describe(SizeClass c) {
  switch (c) {
    case SizeClass::Small:
      return "< 64 KiB";
    case SizeClass::Medium:
      return "64 KiB - 16 MiB";
    case SizeClass::Large:
      return "> 16 MiB";
  }
  return "?";
}

ErrorStats errorStats(std::vector<double> errors) {
  ErrorStats s;
  s.rows = errors.size();
  if (errors.empty()) return s;
  for (double& e : errors) e = std::abs(e);
  std::sort(errors.begin(), errors.end());
  const std::size_t n = errors.size();
  s.median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  const auto rank = static_cast<std::size_t>(std::ceil(kP90 * static_cast<double>(n)));
  s.p90 = errors[std::max<std::size_t>(rank, 1) - 1];
  s.worst = errors.back();
  double logSum = 0;
  for (double e : errors) logSum += std::log(std::max(e, kGeomeanErrorFloor));
  s.geomean = std::exp(logSum / static_cast<double>(n));
  return s;
}

void summarize(FidelityLog& f) {
  std::vector<double> all;
  std::array<std::vector<double>, 3> byClass;
  for (const FidelityRow& r : f.rows) {
    all.push_back(r.error());
    byClass[static_cast<int>(sizeClassOf(r.bytes))].push_back(r.error());
  }
  f.all = errorStats(std::move(all));
  for (SizeClass c : kSizeClasses) {
    f.byClass[static_cast<int>(c)] = errorStats(std::move(byClass[static_cast<int>(c)]));
  }
}

int fidelityRanks(const NcclTestsLog& log, const std::string& source, int ranksFlag) {
  if (log.nranks > 0 && ranksFlag > 0 && log.nranks != ranksFlag) {
    throw Error(Errc::InvalidArgument, fmt::format("-g/--ranks {} differs from the {} ranks that {} states", ranksFlag,
                                                   log.nranks, printable(source)));
  }
  if (log.nranks > 0) return log.nranks;
  if (ranksFlag > 0) return ranksFlag;
  throw Error(Errc::InvalidArgument,
              fmt::format("{}: the log states no rank count (no '# Rank' lines, nGpus or '# gpu_count:'); pass -g N",
                          printable(source)));
}

FidelityLog compareWithSimulation(const NcclTestsLog& log, const std::string& source, const FidelityOptions& options,
                                  const SimulateFn& simulate) {
  FidelityLog f;
  f.log = source;
  f.collective = log.collective.value_or(options.defaultCollective);
  f.ranks = fidelityRanks(log, source, options.ranks);
  f.nodes = log.nnodes();
  f.ncclVersion = log.ncclVersion;
  f.gpusPerThread = log.gpusPerThread();
  f.topology = options.topology;
  f.topologyFingerprint = options.topologyFingerprint;
  f.algorithm = options.algorithm;
  const double busFactor = busBandwidthFactor(f.collective, f.ranks);
  for (const NcclTestsRow& row : log.rows) {
    const auto rowError = [&](const std::string& what) {
      throw Error(Errc::InvalidArgument, fmt::format("{}:{}: {}", printable(source), row.line, what));
    };
    FidelityCall call{f.collective, f.ranks, row.bytes, DType::F32, ReduceOp::Sum};
    try {
      if (!row.type.empty()) call.dtype = parseDType(row.type);
      if (!row.redop.empty() && row.redop != "none") call.op = parseReduceOp(row.redop);
    } catch (const Error& e) {
      rowError(e.what());
    }
    if (row.bytes < dtypeSize(call.dtype)) continue;
    if (row.outOfPlace.timeUs <= 0) rowError("out-of-place time is 0 us: no error can be taken against it");
    const SimulatedCall sim = simulate(call);
    FidelityRow r;
    r.bytes = row.bytes;
    r.line = row.line;
    r.measuredUs = row.outOfPlace.timeUs;
    r.simulatedUs = sim.seconds * 1e6;
    r.measuredBusbwGBps = row.outOfPlace.busbwGBps;
    // algbw as nccl-tests defines it (bytes / time), times the collective's bus factor.
    r.simulatedBusbwGBps = sim.seconds > 0 ? static_cast<double>(row.bytes) / sim.seconds / 1e9 * busFactor : 0;
    r.algorithm = sim.algorithm;
    f.rows.push_back(std::move(r));
  }
  if (f.rows.empty()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: no row of at least one element to simulate", printable(source)));
  }
  summarize(f);
  return f;
}

std::string formatFidelityTable(const FidelityLog& f) {
  std::string s = fmt::format("# fidelity of {}: {} on {} ranks ({} node{}{}{}), simulated on {} ({}), algorithm {}\n",
                              f.log, toString(f.collective), f.ranks, f.nodes, f.nodes == 1 ? "" : "s",
                              f.gpusPerThread > 1 ? fmt::format(", -g {}", f.gpusPerThread) : "",
                              f.ncclVersion.empty() ? "" : ", NCCL " + f.ncclVersion, f.topology, f.topologyFingerprint,
                              f.algorithm);
  s += "# error = simulated / measured - 1 of the out-of-place time\n";
  s += fmt::format("# {:>12}  {:>12}  {:>12}  {:>8}  {:>10}  {:>10}  {}\n", "size", "measured", "simulated", "error",
                   "measured", "simulated", "algorithm");
  s += fmt::format("# {:>12}  {:>12}  {:>12}  {:>8}  {:>10}  {:>10}\n", "(B)", "(us)", "(us)", "(%)", "busbw", "busbw");
  for (const FidelityRow& r : f.rows) {
    s += fmt::format("  {:>12}  {:>12.2f}  {:>12.2f}  {:>+8.1f}  {:>10.2f}  {:>10.2f}  {}\n", r.bytes, r.measuredUs,
                     r.simulatedUs, 100 * r.error(), r.measuredBusbwGBps, r.simulatedBusbwGBps, r.algorithm);
  }
  const auto line = [](std::string_view name, const ErrorStats& st) {
    if (st.rows == 0) return fmt::format("# {:<24} no rows\n", name);
    return fmt::format("# {:<24} median |error| {:6.1f}%  p90 {:6.1f}%  worst {:6.1f}%  geomean {:6.1f}%  ({} row{})\n",
                       name, 100 * st.median, 100 * st.p90, 100 * st.worst, 100 * st.geomean, st.rows,
                       st.rows == 1 ? "" : "s");
  };
  s += line("all sizes", f.all);
  for (SizeClass c : kSizeClasses) s += line(describe(c), f.byClass[static_cast<int>(c)]);
  return s;
}

std::string toJson(const FidelityDocument& doc, int indent) {
  json logs = json::array();
  for (const FidelityLog& f : doc.logs) logs.push_back(logToJson(f));
  const json j = {{"format", FidelityDocument::kFormat},
                  {"version", FidelityDocument::kVersion},
                  {"tool", doc.tool},
                  {"command_line", doc.commandLine},
                  {"logs", logs}};
  return j.dump(indent);
}

FidelityDocument parseFidelityDocument(std::string_view text, std::string_view source) {
  const json j = parseJsonDocument(text, source);
  const Fields f(source, "", j, {"format", "version", "tool", "command_line", "logs"});
  if (f.string("format") != FidelityDocument::kFormat) {
    f.fail("format", fmt::format("expected \"{}\"", FidelityDocument::kFormat));
  }
  if (f.integer("version", 1) != FidelityDocument::kVersion) {
    f.fail("version", fmt::format("this collbench reads version {}", FidelityDocument::kVersion));
  }
  FidelityDocument doc;
  doc.tool = f.string("tool");
  doc.commandLine = f.string("command_line");
  const json& logs = f.need("logs");
  if (!logs.is_array() || logs.empty()) f.fail("logs", "expected a non-empty array");
  for (std::size_t i = 0; i < logs.size(); ++i)
    doc.logs.push_back(logFromJson(source, fmt::format("logs[{}]", i), logs[i]));
  return doc;
}

void writeFidelityDocument(const FidelityDocument& doc, const std::string& path) {
  std::ofstream out(path);
  if (!out || !(out << toJson(doc) << '\n')) {
    throw Error(Errc::InvalidArgument, fmt::format("cannot write fidelity file '{}'", printable(path)));
  }
}

}  // namespace collbench
