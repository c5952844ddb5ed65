// `collbench sweep`: what-if grids on the simulator: topologies x override sets x rank counts x sizes x algorithms.
// A table on stdout, optionally CSV and JSON files; progress on stderr only when it is a terminal.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/selector.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"
#include "sim_backend.h"

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
  if (!(factor > 1)) throw Error(Errc::InvalidArgument, fmt::format("-f/--stepfactor must be > 1, got {}", factor));
  for (std::size_t s = lo; s <= hi;) {
    out.push_back(s);
    const auto next = static_cast<std::size_t>(static_cast<double>(s) * factor);
    if (next <= s) break;
    s = next;
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
    bool crossTraffic = false, force = false, bench = false;
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
                  "an override variant: k=v[;k=v...], e.g. link.nic.bandwidth_GBps=50; each --set is one more row "
                  "set, next to the unmodified topology only when '' is given too");
  cmd->add_option("-d,--datatype", a->dtype, "element type")->default_str("float");
  cmd->add_option("-o,--op", a->op, "reduction")->default_str("sum");
  cmd->add_option("-r,--root", a->root, "root rank for broadcast and reduce")->default_str("0");
  cmd->add_option("--channels", a->channels, "parallel channels")->default_str("1");
  cmd->add_option("--chunk-bytes", a->chunk, "pipeline chunk size (0 = algorithm default)")->default_str("0");
  cmd->add_option("--model", a->model, "network model: CM02 | LV08")->default_str("CM02");
  cmd->add_flag("--crosstraffic", a->crossTraffic, "add SimGrid's reverse acknowledgement flows");
  cmd->add_option("--mode", a->mode, "auto | exact | aggregated")->default_str("auto");
  cmd->add_option("--csv", a->csv, "also write the rows as CSV");
  cmd->add_option("--json", a->json, "also write the rows as JSON (with command line and fingerprints)");
  cmd->add_flag("--force", a->force, "overwrite existing --csv/--json files");
  cmd->add_flag("--bench", a->bench, "add host wall time and ops simulated per second to the table");
  cmd->callback([a, &exitCode] {
    if (!a->csv.empty() && a->csv == a->json) {
      throw Error(Errc::InvalidArgument, fmt::format("--csv and --json name the same file '{}'", a->csv));
    }
    checkOutputFile(a->csv, a->force, "--csv");
    checkOutputFile(a->json, a->force, "--json");
    const Collective kind = parseCollective(a->collective);
    if (kind == Collective::Barrier) throw Error(Errc::InvalidArgument, "sweep does not time barrier (no bytes)");
    const DType dtype = parseDType(a->dtype);
    const ReduceOp op = parseReduceOp(a->op);
    const std::vector<std::size_t> sizes = sizesFrom(a->sizes, a->minBytes, a->maxBytes, a->factor);
    sim::SimConfig cfg;
    cfg.model = sim::parseNetworkModel(a->model);
    cfg.crossTraffic = a->crossTraffic;
    cfg.mode = sim::parseSimMode(a->mode);
    for (const std::string& algo : a->algos) {
      if (algo != "auto") findAlgorithm(kind, algo);
    }
    const std::vector<std::string> sets = a->sets.empty() ? std::vector<std::string>{""} : a->sets;

    // Every topology and rank count is checked before the first simulation.
    struct Variant {
      std::string name, overrides;
      Topology topo;
      std::vector<int> ranks;
    };
    std::vector<Variant> variants;
    for (const std::string& name : a->topologies) {
      for (const std::string& set : sets) {
        Variant v{name, set, sim::loadTopologyWithOverrides(name, set), {}};
        const int available = static_cast<int>(v.topo.ranks.size());
        for (const std::string& rs : a->ranks) {
          const int n = rs == "all" ? available : parseIntItem("-g/--ranks", rs, 1, " or 'all'");
          if (n < 1 || n > available) {
            throw Error(Errc::InvalidArgument,
                        fmt::format("-g/--ranks {}: topology '{}' has {} ranks (use 1..{} or all)", rs, name, available,
                                    available));
          }
          v.ranks.push_back(n);
        }
        variants.push_back(std::move(v));
      }
    }

    std::size_t total = 0;
    for (const Variant& v : variants) total += v.ranks.size() * sizes.size() * a->algos.size();
    const bool progress = isatty(STDERR_FILENO) != 0;
    std::vector<Row> rows;
    std::size_t done = 0;
    for (const Variant& v : variants) {
      const std::string fp = fingerprint(v.topo);
      for (int n : v.ranks) {
        const sim::Simulator simulator(v.topo, n, cfg);
        AlgoParams params;
        params.chunkBytes = parseBytes(a->chunk, "--chunk-bytes");
        params.channels = a->channels;
        params.rankHost = rankHosts(v.topo, n);
        for (std::size_t bytes : sizes) {
          CollectiveSpec spec{kind, n, countForBytes(kind, n, bytes, dtype), dtype, op, a->root};
          checkSpec(spec, params);
          for (const std::string& algo : a->algos) {
            const std::string chosen = algo == "auto" ? chooseAlgorithm(spec).algorithm : algo;
            if (progress) {
              fmt::print(stderr, "\r[{}/{}] {} {} ranks {} {}\x1b[K", ++done, total, v.name, n, formatBytes(bytes),
                         chosen);
              std::fflush(stderr);
            }
            const sim::SimResult r = simulator.runAlgorithm(spec, chosen, params);
            Row row;
            row.topology = v.name;
            row.fingerprint = fp;
            row.overrides = v.overrides;
            row.algorithm = chosen;
            row.ranks = n;
            row.bytes = std::max(spec.inputBytes(), spec.outputBytes());
            row.count = spec.count;
            row.timeUs = r.seconds * 1e6;
            row.algbw = r.seconds > 0 ? static_cast<double>(row.bytes) / r.seconds / 1e9 : 0;
            row.busbw = row.algbw * busBandwidthFactor(kind, n);
            row.method = r.method;
            row.exact = r.exact;
            row.note = r.note;
            row.ops = r.ops;
            row.transfers = r.transfers;
            row.activities = r.simulatedActivities;
            row.wall = r.wallSeconds;
            row.cpu = r.cpuSeconds;
            rows.push_back(std::move(row));
          }
        }
      }
    }
    if (progress) fmt::print(stderr, "\r\x1b[K");

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
                         r.algorithm, r.bytes, r.count, toString(dtype), r.timeUs, r.algbw, r.busbw, r.method,
                         r.exact ? 1 : 0, r.ops, r.transfers, r.activities, r.wall, r.cpu);
      }
    }
    if (!a->json.empty()) {
      const SweepRecord doc{toolName(),
                            commandLine(),
                            std::string(toString(kind)),
                            std::string(toString(dtype)),
                            std::string(toString(op)),
                            std::string(sim::toString(cfg.model)),
                            cfg.crossTraffic,
                            rows};
      writeTextFile(a->json, toJson(doc).dump(2), "--json");
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
