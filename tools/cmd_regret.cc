// `collbench regret`: flags, the table and the file. The held-out grid and each point's oracle are the regret library
// (include/collbench/regret.h): chosen / best measured time on sizes and rank counts that are not table points.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/parallel.h"
#include "collbench/records.h"
#include "collbench/regret.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"

namespace collbench::cli {

namespace {

struct RegretArgs {
  std::string backend = "sim", topology, tuning, ranks, json, minBytes, maxBytes, collective = "all_reduce";
  std::string dtype = "float", chunks = "0,128K,2M", channels = "1,2,4", shard;
  double factor = 0;
  int iters = 5, warmup = 1, repeats = 7, jobs = 0;
  double maxWorst = 0, maxGeomean = 0;
  bool force = false;
};

using Row = RegretRow;
/// The flag that names the JSON output, in messages.
constexpr std::string_view kOutputFlag = "-J/--output_file";

std::string describeCfg(const RegretChoice& c) {
  std::string s = c.algorithm;
  if (c.chunkBytes) s += " c" + formatBytes(c.chunkBytes);
  if (c.channels != 1) s += fmt::format(" x{}", c.channels);
  return s;
}

/// The request the flags describe: the table found as `perf --algo auto` finds it, explicit held-out ranks and sizes.
RegretRequest requestFrom(const RegretArgs& a) {
  RegretRequest r;
  r.backend = a.backend;
  r.collective = parseCollective(a.collective);
  r.dtype = parseDType(a.dtype);
  r.topologyPath = a.topology;
  if (!a.topology.empty()) r.topology = loadTopology(a.topology);
  FoundTuningTable found = findTuningTable(a.tuning, r.topology ? &*r.topology : nullptr, a.backend);
  if (!found.table) {
    throw Error(Errc::InvalidArgument, fmt::format("regret needs a tuning table: --tuning FILE ({})", found.note));
  }
  r.tablePath = found.path;
  r.table = std::move(*found.table);
  if (!a.ranks.empty()) r.ranks = parseIntList("-g/--ranks", a.ranks, 1);
  if (!a.minBytes.empty() || !a.maxBytes.empty() || a.factor != 0) {
    // -f alone keeps -b and -e at 1 KiB; -b alone is one size; no -f steps by 2.
    r.sizes = factorSizes(
        parseBytes(a.minBytes.empty() ? "1K" : a.minBytes, "-b/--minbytes"),
        parseBytes(a.maxBytes.empty() ? a.minBytes.empty() ? "1K" : a.minBytes : a.maxBytes, "-e/--maxbytes"),
        a.factor == 0 ? 2 : a.factor);
  }
  // The oracle's configuration space: every algorithm at every (chunk, channels) it reads, as `tune` sweeps them,
  // plus whatever configuration the selector picks.
  r.chunks = parseBytesList("--chunks", a.chunks);
  r.channels = parseChannelList("--channels", a.channels);
  r.measure = measureOptions(a.iters, a.warmup, a.repeats, kDefaultTimeoutSeconds);
  return r;
}

void printRows(const RegretSweep& sweep, const std::vector<Row>& rows, const RegretSummary& s) {
  const RegretRequest& q = sweep.request();
  const bool measured = sweep.measured();
  fmt::print("# collbench regret: {} on backend {}, topology {}, table {}\n", toString(q.collective), q.backend,
             q.topology ? q.topology->name : "(none)", q.tablePath);
  if (!sweep.grid().note.empty()) fmt::print("# note: {}\n", sweep.grid().note);
  if (const int tp = sweep.tablePoints(rows)) fmt::print("# warning: {} of the points are table points\n", tp);
  if (measured) {
    fmt::print(
        "# chosen: what --algo auto runs here, the table's choice after a trial of its near-tied runner-ups "
        "(source 'trial'); table: the table's choice alone\n"
        "# where the sweep's best beat the chosen or the table's choice, they were timed again together: chosen_us, "
        "best_us, regret and table_regret are from that run, sweep_regret from the sweep\n");
  }
  fmt::print("# {:>6}  {:>12}  {:<26} {:<13} {:>12}  {:>12}  {:<26} {:>12}  {:>7}  {:>12}", "nranks", "bytes", "chosen",
             "source", "predicted_us", "chosen_us", "best measured", "best_us", "regret", "sweep_regret");
  if (measured) fmt::print("  {:<26} {:>12}", "table", "table_regret");
  fmt::print("\n");
  for (const Row& r : rows) {
    fmt::print("  {:>6}  {:>12}  {:<26} {:<13} {:>12.3f}  {:>12.3f}  {:<26} {:>12.3f}  {:>7.4f}  {:>12.4f}", r.nranks,
               r.bytes, describeCfg(r.chosen), r.chosenSource, r.predictedUs, r.chosen.timeUs, describeCfg(r.best),
               r.best.timeUs, r.regret(), r.sweepRegret());
    if (measured) fmt::print("  {:<26} {:>12.4f}", describeCfg(r.tableChoice), r.tableRegret());
    fmt::print("\n");
  }
  const Row* worstRow = s.worstRow ? &rows[*s.worstRow] : nullptr;
  fmt::print("# points {}  worst {:.4f}{}  geomean {:.4f}\n", rows.size(), s.worst,
             worstRow ? fmt::format(" (n={}, {})", worstRow->nranks, formatBytes(worstRow->bytes)) : "", s.geomean);
  if (measured) {
    fmt::print("# the table's choices alone: worst {:.4f}  geomean {:.4f}{}\n", s.tableWorst, s.tableGeomean,
               s.trialled ? "" : " (the trial kept every one)");
  }
}

}  // namespace

void addRegretCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<RegretArgs>();
  CLI::App* cmd = app.add_subcommand("regret", "chosen / best measured time on sizes and rank counts not in the table");
  cmd->add_option("--backend", a->backend, "sim, host, ...")->default_val("sim");
  cmd->add_option("--topology", a->topology, "topology (the table section is looked up by its fingerprint)");
  cmd->add_option("--tuning", a->tuning,
                  "tuning table (default $COLLBENCH_TUNING_FILE, else the topology's shipped table)");
  cmd->add_option("collective", a->collective, "collective")->default_val("all_reduce");
  cmd->add_option("-g,--ranks", a->ranks, "rank counts (default: those between the table's that it lacks)");
  cmd->add_option("-b,--minbytes", a->minBytes, "with -e and -f: explicit held-out sizes (default: table midpoints)");
  cmd->add_option("-e,--maxbytes", a->maxBytes, "largest held-out size");
  cmd->add_option("-f,--stepfactor", a->factor, "factor between held-out sizes");
  cmd->add_option("-d,--datatype", a->dtype, "element type")->default_val("float");
  cmd->add_option("--chunks", a->chunks, "chunk_bytes values every pipelining algorithm is measured at (the oracle)")
      ->default_val("0,128K,2M");
  cmd->add_option("--channels", a->channels, "channel counts every multi-channel algorithm is measured at")
      ->default_val("1,2,4");
  cmd->add_option("-n,--iters", a->iters, "timed iterations per repetition (real backends)")->default_val(5);
  cmd->add_option("-w,--warmup_iters", a->warmup, "untimed iterations first")->default_val(1);
  cmd->add_option("--repeats", a->repeats,
                  "repetitions, round-robin over a point's configurations; each one's fastest is kept")
      ->default_val(7);
  cmd->add_option("-J,--output_file", a->json, "write rows and summary as JSON ({shard} is replaced by --shard's K)");
  cmd->add_flag("--force", a->force, "overwrite an existing -J file");
  cmd->add_option("--max-worst", a->maxWorst, "exit 1 when the worst regret exceeds this (0 = no check)");
  cmd->add_option("--max-geomean", a->maxGeomean, "exit 1 when the geometric-mean regret exceeds this");
  CLI::Option* jobs = cmd->add_option(
      "-j,--jobs", a->jobs, "worker processes on backends that move no data (sim, model); default: the cores");
  cmd->add_option("--shard", a->shard, "K/N: part K of N of the held-out grid, or auto (docs/sweeps.md)");
  cmd->callback([a, jobs, &exitCode] {
    RegretControl control;
    if (!a->shard.empty()) {
      control.shard = parseShard(a->shard);
      a->json = shardPath(a->json, control.shard);
    }
    // 0 turns a bound off; a bound must otherwise be a finite ratio (regret is >= 1).
    for (const auto& [flag, bound] :
         {std::pair{"--max-worst", a->maxWorst}, std::pair{"--max-geomean", a->maxGeomean}}) {
      if (!(bound >= 0) || !std::isfinite(bound)) {
        throw Error(Errc::InvalidArgument, fmt::format("{} must be 0 (off) or a finite ratio, got {}", flag, bound));
      }
    }
    control.jobs = resolveJobs(jobs->count() > 0 ? std::optional<int>(a->jobs) : std::nullopt, a->backend);
    checkOutputFile(a->json, a->force, kOutputFlag);
    RegretSweep sweep(requestFrom(*a));
    const std::vector<Row> rows = sweepRegret(sweep, control);
    const RegretSummary s = summarizeRegret(rows);
    printRows(sweep, rows, s);
    if (!a->json.empty()) {
      const RegretRequest& q = sweep.request();
      RegretRecord doc{std::string(toString(q.collective)),
                       q.backend,
                       q.topology ? q.topology->name : "",
                       q.topology ? fingerprint(*q.topology) : "",
                       q.tablePath,
                       commandLine(),
                       describeEnvironment(),
                       rows,
                       s.worst,
                       s.geomean,
                       s.tableWorst,
                       s.tableGeomean,
                       control.shard.whole() ? "" : control.shard.toString()};
      writeTextFile(a->json, toJson(doc).dump(2), kOutputFlag);
    }
    exitCode = 0;
    if ((a->maxWorst > 0 && s.worst > a->maxWorst) || (a->maxGeomean > 0 && s.geomean > a->maxGeomean)) {
      std::fprintf(stderr, "collbench: regret worst %.4f / geomean %.4f exceeds the bound (worst %g, geomean %g)\n",
                   s.worst, s.geomean, a->maxWorst, a->maxGeomean);
      exitCode = 1;
    }
  });
}

}  // namespace collbench::cli
