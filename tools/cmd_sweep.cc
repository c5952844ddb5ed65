// `collbench sweep`: what-if grids on the simulator (the grid and its simulations: simulator/sweep.h): topologies x
// override sets x rank counts x sizes x algorithms. A table on stdout, optionally CSV and JSON files.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/parallel.h"
#include "collbench/records.h"
#include "collbench/selector.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"
#include "sim_backend.h"
#include "sweep.h"

namespace collbench::cli {

namespace {

using Row = SweepRow;

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::size_t> sizesFrom(const std::vector<std::string>& list, const std::string& minB,
                                   const std::string& maxB, double factor) {
  std::vector<std::size_t> out;
  if (!list.empty()) {
    for (const std::string& s : list) out.push_back(parseBytes(s, "--sizes"));
    return out;
  }
  const std::size_t lo = parseBytes(minB, "-b/--minbytes"), hi = parseBytes(maxB, "-e/--maxbytes");
  if (lo > hi)
    throw Error(Errc::InvalidArgument, fmt::format("-b/--minbytes {} is larger than -e/--maxbytes {}", lo, hi));
  if (!(factor > 1) || !std::isfinite(factor)) {
    throw Error(Errc::InvalidArgument, fmt::format("-f/--stepfactor must be a finite number > 1, got {}", factor));
  }
  checkFactorGrows(lo, hi, factor);
  for (std::size_t s = lo; s <= hi;) {
    out.push_back(s);
    const double grown = static_cast<double>(s) * factor;
    if (!(grown < static_cast<double>(hi) + 1) || static_cast<std::size_t>(grown) <= s) break;
    s = static_cast<std::size_t>(grown);
  }
  return out;
}

}  // namespace

void addSweepCommand(CLI::App& app, int& exitCode) {
  struct Args {
    std::vector<std::string> topologies{sim::kDefaultTopology}, ranks{"all"}, sizes, algos{"ring"}, sets;
    std::string collective = "all_reduce", minBytes = "1M", maxBytes = "1G", dtype = "float", op = "sum";
    std::string chunk = "0", model = "CM02", mode = "auto", csv, json;
    double factor = 32;
    int channels = 1, root = 0;
    std::string shard;
    bool crossTraffic = false, force = false, bench = false;
    int jobs = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "what-if grid on the simulator: topologies x --set variants x ranks x sizes x algorithms");
  cmd->add_option("--topology", a->topologies, "topology files or names (comma-separated or repeated)")
      ->delimiter(',')
      ->default_str(sim::kDefaultTopology);
  cmd->add_option("-g,--ranks", a->ranks, "rank counts, or 'all' for the topology's (comma-separated)")
      ->delimiter(',')
      ->default_str("all");
  cmd->add_option("--sizes", a->sizes, "message sizes (comma-separated, K/M/G); default -b to -e by -f")
      ->delimiter(',');
  cmd->add_option("-b,--minbytes", a->minBytes, "smallest size when --sizes is not given")->default_str("1M");
  cmd->add_option("-e,--maxbytes", a->maxBytes, "largest size when --sizes is not given")->default_str("1G");
  cmd->add_option("-f,--stepfactor", a->factor, "size factor when --sizes is not given")->default_str("32");
  cmd->add_option("--algo", a->algos, "algorithms (comma-separated; 'auto' asks the selector)")
      ->delimiter(',')
      ->default_str("ring");
  cmd->add_option("--collective", a->collective, "all_reduce | reduce_scatter | all_gather | broadcast | reduce")
      ->default_str("all_reduce");
  cmd->add_option("--set", a->sets,
                  "an override variant: k=v[;k=v...], e.g. link.nic.bandwidth_GBps=50 or (generated topologies) "
                  "params.spine_oversubscription=2; each --set is one more row set, next to the unmodified topology "
                  "only when '' is given too");
  cmd->add_option("-d,--datatype", a->dtype, "element type")->default_str("float");
  cmd->add_option("-o,--op", a->op, "reduction")->default_str("sum");
  cmd->add_option("-r,--root", a->root, "root rank for broadcast and reduce")->default_str("0");
  cmd->add_option("--channels", a->channels, "parallel channels")->default_str("1");
  cmd->add_option("--chunk-bytes", a->chunk, "pipeline chunk size (0 = algorithm default)")->default_str("0");
  cmd->add_option("--model", a->model, "network model: CM02 | LV08")->default_str("CM02");
  cmd->add_flag("--crosstraffic", a->crossTraffic, "add SimGrid's reverse acknowledgement flows");
  cmd->add_option("--mode", a->mode, "auto | exact | aggregated | fluid")->default_str("auto");
  cmd->add_option("--csv", a->csv, "also write the rows as CSV ({shard} is replaced by --shard's K)");
  cmd->add_option(
      "--json", a->json,
      "also write the rows as JSON (with command line and fingerprints; {shard} is replaced by --shard's K)");
  cmd->add_flag("--force", a->force, "overwrite existing --csv/--json files");
  cmd->add_flag("--bench", a->bench, "add host wall time and ops simulated per second to the table");
  CLI::Option* jobs =
      cmd->add_option("-j,--jobs", a->jobs, "simulations in parallel worker processes (default: the cores)");
  cmd->add_option("--shard", a->shard, "K/N: part K of N of the grid, or auto (docs/sweeps.md)");
  cmd->callback([a, jobs, &exitCode] {
    sim::SweepControl control;
    if (!a->shard.empty()) {
      control.shard = parseShard(a->shard);
      a->csv = shardPath(a->csv, control.shard);
      a->json = shardPath(a->json, control.shard);
    }
    control.jobs = resolveJobs(jobs->count() > 0 ? std::optional<int>(a->jobs) : std::nullopt, "sim");
    checkDistinctOutputs({{"--csv", a->csv}, {"--json", a->json}});
    checkOutputFile(a->csv, a->force, "--csv");
    checkOutputFile(a->json, a->force, "--json");
    sim::SweepRequest q;
    q.collective = parseCollective(a->collective);
    if (q.collective == Collective::Barrier)
      throw Error(Errc::InvalidArgument, "sweep does not time barrier (no bytes)");
    q.dtype = parseDType(a->dtype);
    q.op = parseReduceOp(a->op);
    q.sizes = sizesFrom(a->sizes, a->minBytes, a->maxBytes, a->factor);
    q.config.model = sim::parseNetworkModel(a->model);
    q.config.crossTraffic = a->crossTraffic;
    q.config.mode = sim::parseSimMode(a->mode);
    q.topologies = a->topologies;
    q.sets = a->sets.empty() ? std::vector<std::string>{""} : a->sets;
    q.ranks.clear();
    for (const std::string& rs : a->ranks) {
      q.ranks.push_back(rs == "all" ? sim::kAllRanks : parseIntItem("-g/--ranks", rs, 1, " or 'all'"));
    }
    q.algorithms = a->algos;
    q.root = a->root;
    q.chunkBytes = parseBytes(a->chunk, "--chunk-bytes");
    q.channels = a->channels;
    sim::SweepGrid grid(q);  // every topology, rank count and spec is checked before the first simulation
    const std::vector<Row> rows = sim::runSweep(grid, control);
    const Collective kind = q.collective;
    const sim::SimConfig& cfg = q.config;
    const std::vector<std::string>& sets = q.sets;

    // Table.
    fmt::print("# collbench {} sweep: {} on the simulator ({}{})\n", COLLBENCH_VERSION, toString(kind),
               sim::toString(cfg.model), cfg.crossTraffic ? ", cross-traffic" : "");
    std::size_t tw = 8, sw = 3, aw = 9;
    for (const Row& r : rows) {
      tw = std::max(tw, r.topology.size());
      sw = std::max(sw, r.overrides.size());
      aw = std::max(aw, r.algorithm.size());
    }
    const bool showSet = !(sets.size() == 1 && sets[0].empty());
    std::string header = fmt::format("# {:<{}}  ", "topology", tw);
    if (showSet) header += fmt::format("{:<{}}  ", "set", sw);
    header += fmt::format("{:>6}  {:<{}}  {:>12}  {:>12}  {:>9}  {:>9}  {:<12}", "ranks", "algorithm", aw, "size(B)",
                          "time(us)", "algbw", "busbw", "method");
    if (a->bench) header += fmt::format("  {:>8}  {:>8}  {:>12}  {:>10}", "wall(s)", "cpu(s)", "ops/s", "sim_acts");
    fmt::print("{}\n", header);
    for (const Row& r : rows) {
      std::string line = fmt::format("  {:<{}}  ", r.topology, tw);
      if (showSet) line += fmt::format("{:<{}}  ", r.overrides.empty() ? "-" : r.overrides, sw);
      line += fmt::format("{:>6}  {:<{}}  {:>12}  {:>12.3f}  {:>9.2f}  {:>9.2f}  {:<12}", r.ranks, r.algorithm, aw,
                          r.bytes, r.timeUs, r.algbw, r.busbw, r.method + (r.exact ? "" : "~"));
      if (a->bench) {
        line += fmt::format("  {:>8.3f}  {:>8.3f}  {:>12.3g}  {:>10}", r.wall, r.cpu,
                            r.wall > 0 ? static_cast<double>(r.ops) / r.wall : 0, r.activities);
      }
      fmt::print("{}\n", line);
    }
    bool anyApprox = false;
    for (const Row& r : rows) anyApprox = anyApprox || !r.exact;
    if (anyApprox)
      fmt::print("# ~ approximate: the method could not prove equality with op-by-op simulation (see JSON)\n");
    std::fflush(stdout);

    if (!a->csv.empty()) {
      std::ofstream f(a->csv);
      if (!f) throw Error(Errc::InvalidArgument, fmt::format("cannot write CSV file '{}'", a->csv));
      f << "topology,fingerprint,set,ranks,collective,algorithm,bytes,count,datatype,time_us,algbw_GBps,busbw_GBps,"
           "method,exact,ops,transfers,simulated_activities,wall_s,cpu_s\n";
      for (const Row& r : rows) {
        f << fmt::format("{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{},{},{},{},{},{:.6f},{:.6f}\n",
                         csvField(r.topology), r.fingerprint, csvField(r.overrides), r.ranks, toString(kind),
                         r.algorithm, r.bytes, r.count, toString(q.dtype), r.timeUs, r.algbw, r.busbw, r.method,
                         r.exact ? 1 : 0, r.ops, r.transfers, r.activities, r.wall, r.cpu);
      }
    }
    if (!a->json.empty()) {
      SweepRecord doc{toolName(),
                      commandLine(),
                      std::string(toString(kind)),
                      std::string(toString(q.dtype)),
                      std::string(toString(q.op)),
                      std::string(sim::toString(cfg.model)),
                      cfg.crossTraffic,
                      rows,
                      control.shard.whole() ? "" : control.shard.toString()};
      writeTextFile(a->json, toJson(doc).dump(2), "--json");
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
