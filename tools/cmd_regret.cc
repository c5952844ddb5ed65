// `collbench regret`: on a held-out grid (sizes and rank counts that are not table points) measures every algorithm
// and reports how much slower the selector's choice is than the best one measured (chosen / oracle time).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "commands.h"
#include "environment.h"
#include "perf_runner.h"

namespace collbench::cli {

namespace {

/// Held-out sizes are rounded down to this many bytes so that every element type and 16-byte RS/AG block divides them
/// (nccl-tests rounds per-rank counts to 16 bytes).
constexpr std::size_t kSizeAlignBytes = 16;
/// The confirmation of a point times its two or three configurations for this many rounds per --repeats: a sweep's
/// round holds ~20 configurations, so the confirmation's rounds are ~10x shorter, and 3x as many of them span a few
/// milliseconds of noise as the sweep's do.
constexpr int kConfirmationRoundsPerRepeat = 3;

struct RegretArgs {
  std::string backend = "sim", topology, tuning, ranks, json, minBytes, maxBytes, collective = "all_reduce";
  std::string dtype = "float", chunks = "0,128K,2M", channels = "1,2,4";
  double factor = 0;
  int iters = 5, warmup = 1, repeats = 7;
  double maxWorst = 0, maxGeomean = 0;
  bool force = false;
};

using Row = RegretRow;
/// The flag that names the JSON output, in messages.
constexpr std::string_view kOutputFlag = "-J/--output_file";

std::string describeCfg(const std::string& a, std::size_t chunk, int ch) {
  std::string s = a;
  if (chunk) s += " c" + formatBytes(chunk);
  if (ch != 1) s += fmt::format(" x{}", ch);
  return s;
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
  cmd->add_option("-J,--output_file", a->json, "write rows and summary as JSON");
  cmd->add_flag("--force", a->force, "overwrite an existing -J file");
  cmd->add_option("--max-worst", a->maxWorst, "exit 1 when the worst regret exceeds this (0 = no check)");
  cmd->add_option("--max-geomean", a->maxGeomean, "exit 1 when the geometric-mean regret exceeds this");
  cmd->callback([a, &exitCode] {
    checkOutputFile(a->json, a->force, kOutputFlag);
    const Collective coll = parseCollective(a->collective);
    const DType dtype = parseDType(a->dtype);
    std::optional<Topology> topo;
    if (!a->topology.empty()) topo = loadTopology(a->topology);
    FoundTuningTable found = findTuningTable(a->tuning, topo ? &*topo : nullptr, a->backend);
    if (!found.table) {
      throw Error(Errc::InvalidArgument, fmt::format("regret needs a tuning table: --tuning FILE ({})", found.note));
    }
    a->tuning = found.path;
    const TuningTable table = std::move(*found.table);
    const std::string fp = topo ? fingerprint(*topo) : "";
    const TuningSection* section = table.find(fp, kLibraryCollbench, a->backend);
    if (!section) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{} has no collbench section for {} (fingerprint '{}')", printable(a->tuning),
                              topo ? printable(topo->name) : "runs without a topology", fp));
    }
    // The table's grid.
    std::set<int> tableRanks;
    std::map<int, std::set<std::size_t>> tableSizes;
    for (const TuningEntry& e : section->entries) {
      if (e.collective != coll) continue;
      tableRanks.insert(e.nranks);
      tableSizes[e.nranks].insert(e.bytes);
    }
    if (tableRanks.empty()) {
      throw Error(Errc::InvalidArgument, fmt::format("{} has no {} entries", printable(a->tuning), toString(coll)));
    }
    // Held-out rank counts: those inside the table's range that it lacks (else its own, with a note).
    std::vector<int> ranks;
    std::string note;
    if (!a->ranks.empty()) {
      ranks = parseIntList("-g/--ranks", a->ranks, 1);
    } else {
      const int maxRanks = topo ? static_cast<int>(topo->ranks.size()) : *tableRanks.rbegin();
      for (int n = *tableRanks.begin(); n <= std::min(*tableRanks.rbegin(), maxRanks); ++n) {
        if (!tableRanks.count(n)) ranks.push_back(n);
      }
      if (ranks.empty()) {
        ranks.assign(tableRanks.begin(), tableRanks.end());
        note = "the table holds every rank count in its range: held-out sizes only";
      }
    }
    // Held-out sizes: geometric midpoints of the table's sizes, or -b/-e/-f.
    std::vector<std::size_t> sizes;
    if (!a->minBytes.empty() || !a->maxBytes.empty() || a->factor != 0) {
      PerfConfig pc;
      pc.minBytes = parseBytes(a->minBytes.empty() ? "1K" : a->minBytes, "-b");
      pc.maxBytes = parseBytes(a->maxBytes.empty() ? a->minBytes.empty() ? "1K" : a->minBytes : a->maxBytes, "-e");
      pc.stepFactor = a->factor > 1 ? a->factor : 2;
      sizes = sizeSequence(pc);
    } else {
      const std::set<std::size_t>& ts = tableSizes.begin()->second;
      for (auto it = ts.begin(); std::next(it) != ts.end(); ++it) {
        const double mid = std::sqrt(static_cast<double>(*it) * static_cast<double>(*std::next(it)));
        const std::size_t b = static_cast<std::size_t>(mid) / kSizeAlignBytes * kSizeAlignBytes;
        if (b > *it && b < *std::next(it)) sizes.push_back(b);
      }
    }
    if (sizes.empty()) throw Error(Errc::InvalidArgument, "no held-out sizes (the table needs two sizes at least)");

    // The oracle's configuration space: every algorithm at every (chunk, channels) it reads, as `tune` sweeps them,
    // plus whatever configuration the selector picks.
    const std::vector<std::size_t> chunkList = parseBytesList("--chunks", a->chunks);
    const std::vector<int> channelList = parseIntList("--channels", a->channels, 1);
    const MeasureOptions mo{a->iters, a->warmup, a->repeats, kDefaultTimeoutSeconds};
    const bool tty = isatty(STDERR_FILENO) != 0;
    std::vector<Row> rows;
    int tablePoints = 0;
    bool measured = false;  // on hardware (noisy times), not a simulator
    for (int n : ranks) {
      BackendOptions bo;
      if (!a->topology.empty()) bo["topology"] = a->topology;
      // The runner chooses as `perf --algo auto` does: this table (or the model), then the trial on hardware.
      OwnedRunner timer(a->backend, n, bo, RunnerOptions{topo ? &*topo : nullptr, &table, a->tuning});
      measured = timer.backend->movesData();
      const std::vector<int> hosts = topo ? rankHosts(*topo, n) : std::vector<int>{};
      std::optional<CostModel> model;
      if (topo) model.emplace(*topo, n);
      for (std::size_t b : sizes) {
        CollectiveSpec spec{coll, n, countForBytes(coll, n, b, dtype), dtype};
        if (spec.count == 0) continue;
        const std::size_t key = std::max(spec.inputBytes(), spec.outputBytes());
        if (section->find(coll, n, key)) ++tablePoints;
        const Plan tablePlan = timer.runner->plan(spec, CallConfig{});
        const Choice& tableChoice = tablePlan.choice;
        // What --algo auto runs here: the choice after perf's trial.
        const Choice choice = timer.runner->trial(spec, tablePlan).choice;
        // Every algorithm at the configuration the selector would use for it, and at its defaults.
        std::map<std::string, std::vector<std::pair<std::size_t, int>>> configs;
        for (const auto& alg : algorithms()) {
          if (alg.collective != coll || alg.native) continue;
          const bool needsTopology = alg.traits.needsHosts || alg.traits.needsSwitchReduction;
          if (needsTopology && (!model || !model->estimate(spec, alg.name).supported)) continue;
          for (const AlgoParams& p : sweepConfigs(coll, alg.name, chunkList, channelList)) {
            configs[alg.name].push_back({p.chunkBytes, p.channels});
          }
        }
        for (const Alternative& alt : tableChoice.ranking) {
          configs[alt.algorithm].push_back({alt.chunkBytes, alt.channels});
        }
        configs[choice.algorithm].push_back({choice.chunkBytes, choice.channels});
        configs[tableChoice.algorithm].push_back({tableChoice.chunkBytes, tableChoice.channels});
        Row row;
        row.nranks = n;
        row.bytes = key;
        row.chosen.algorithm = choice.algorithm;
        row.chosenSource = choice.source;
        row.chosen.chunkBytes = choice.chunkBytes;
        row.chosen.channels = choice.channels;
        row.predictedUs = tableChoice.predictedUs;
        row.tableChoice.algorithm = tableChoice.algorithm;
        row.tableChoice.chunkBytes = tableChoice.chunkBytes;
        row.tableChoice.channels = tableChoice.channels;
        std::vector<Plan> timed;
        for (auto& [alg, cfgs] : configs) {
          std::sort(cfgs.begin(), cfgs.end());
          cfgs.erase(std::unique(cfgs.begin(), cfgs.end()), cfgs.end());
          for (const auto& [chunk, ch] : cfgs) timed.push_back(Plan{Choice{alg, ""}, AlgoParams{chunk, ch, hosts}});
        }
        if (tty)
          std::fprintf(stderr, "\r\033[Kregret: n=%d %s: %zu configurations", n, formatBytes(key).c_str(),
                       timed.size());
        const std::vector<double> us = timer.runner->times(spec, timed, mo);
        std::size_t chosenAt = 0, oracleAt = 0, tableAt = 0;
        for (std::size_t i = 0; i < timed.size(); ++i) {
          const std::string& alg = timed[i].choice.algorithm;
          const std::size_t chunk = timed[i].params.chunkBytes;
          const int ch = timed[i].params.channels;
          if (alg == choice.algorithm && chunk == choice.chunkBytes && ch == choice.channels) {
            row.chosen.timeUs = us[i];
            chosenAt = i;
          }
          if (alg == tableChoice.algorithm && chunk == tableChoice.chunkBytes && ch == tableChoice.channels) {
            row.tableChoice.timeUs = us[i];
            tableAt = i;
          }
          if (row.best.timeUs < 0 || us[i] < row.best.timeUs) {
            row.best.algorithm = alg;
            row.best.chunkBytes = chunk;
            row.best.channels = ch;
            row.best.timeUs = us[i];
            oracleAt = i;
          }
        }
        row.sweepChosenUs = row.chosen.timeUs;
        row.sweepBestUs = row.best.timeUs;
        row.sweepTableUs = row.tableChoice.timeUs;
        if (measured && (row.chosen.timeUs > row.best.timeUs || row.tableChoice.timeUs > row.best.timeUs)) {
          // The sweep's best is the minimum of many noisy times, so it is biased low (the winner's curse): the chosen,
          // the table's choice and the best are timed again, together, and the regrets are ratios there. A chosen
          // configuration that is then the fastest one is the best measured. Few configurations make short rounds,
          // which one burst of other work can cover for several in a row: more of them.
          const std::vector<double> again = timer.runner->times(
              spec, {timed[chosenAt], timed[oracleAt], timed[tableAt]}, mo, kConfirmationRoundsPerRepeat * a->repeats);
          row.chosen.timeUs = again[0];
          row.tableChoice.timeUs = again[2];
          row.best.timeUs = again[1];
          for (const std::size_t k : {chosenAt, tableAt}) {  // a faster one of those is the best measured
            const double t = k == chosenAt ? again[0] : again[2];
            if (t < row.best.timeUs) {
              row.best.algorithm = timed[k].choice.algorithm;
              row.best.chunkBytes = timed[k].params.chunkBytes;
              row.best.channels = timed[k].params.channels;
              row.best.timeUs = t;
            }
          }
        }
        rows.push_back(row);
      }
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    double worst = 1, logSum = 0, tableWorst = 1, tableLogSum = 0;
    const Row* worstRow = nullptr;
    bool trialled = false;  // some point's choice differs from the table's
    for (const Row& r : rows) {
      logSum += std::log(r.regret());
      tableLogSum += std::log(r.tableRegret());
      tableWorst = std::max(tableWorst, r.tableRegret());
      trialled = trialled || r.tableChoice.algorithm != r.chosen.algorithm ||
                 r.tableChoice.chunkBytes != r.chosen.chunkBytes || r.tableChoice.channels != r.chosen.channels;
      if (!worstRow || r.regret() > worst) {
        worst = r.regret();
        worstRow = &r;
      }
    }
    const auto points = static_cast<double>(std::max<std::size_t>(rows.size(), 1));
    const double geomean = std::exp(logSum / points);
    const double tableGeomean = std::exp(tableLogSum / points);
    fmt::print("# collbench regret: {} on backend {}, topology {}, table {}\n", toString(coll), a->backend,
               topo ? topo->name : "(none)", a->tuning);
    if (!note.empty()) fmt::print("# note: {}\n", note);
    if (tablePoints) fmt::print("# warning: {} of the points are table points\n", tablePoints);
    if (measured) {
      fmt::print(
          "# chosen: what --algo auto runs here, the table's choice after a trial of its near-tied runner-ups "
          "(source 'trial'); table: the table's choice alone\n"
          "# where the sweep's best beat the chosen or the table's choice, they were timed again together: chosen_us, "
          "best_us, regret and table_regret are from that run, sweep_regret from the sweep\n");
    }
    fmt::print("# {:>6}  {:>12}  {:<26} {:<13} {:>12}  {:>12}  {:<26} {:>12}  {:>7}  {:>12}", "nranks", "bytes",
               "chosen", "source", "predicted_us", "chosen_us", "best measured", "best_us", "regret", "sweep_regret");
    if (measured) fmt::print("  {:<26} {:>12}", "table", "table_regret");
    fmt::print("\n");
    for (const Row& r : rows) {
      fmt::print("  {:>6}  {:>12}  {:<26} {:<13} {:>12.3f}  {:>12.3f}  {:<26} {:>12.3f}  {:>7.4f}  {:>12.4f}", r.nranks,
                 r.bytes, describeCfg(r.chosen.algorithm, r.chosen.chunkBytes, r.chosen.channels), r.chosenSource,
                 r.predictedUs, r.chosen.timeUs, describeCfg(r.best.algorithm, r.best.chunkBytes, r.best.channels),
                 r.best.timeUs, r.regret(), r.sweepRegret());
      if (measured)
        fmt::print("  {:<26} {:>12.4f}",
                   describeCfg(r.tableChoice.algorithm, r.tableChoice.chunkBytes, r.tableChoice.channels),
                   r.tableRegret());
      fmt::print("\n");
    }
    fmt::print("# points {}  worst {:.4f}{}  geomean {:.4f}\n", rows.size(), worst,
               worstRow ? fmt::format(" (n={}, {})", worstRow->nranks, formatBytes(worstRow->bytes)) : "", geomean);
    if (measured) {
      fmt::print("# the table's choices alone: worst {:.4f}  geomean {:.4f}{}\n", tableWorst, tableGeomean,
                 trialled ? "" : " (the trial kept every one)");
    }
    if (!a->json.empty()) {
      const RegretRecord doc{std::string(toString(coll)),
                             a->backend,
                             topo ? topo->name : "",
                             fp,
                             a->tuning,
                             commandLine(),
                             describeEnvironment(),
                             rows,
                             worst,
                             geomean,
                             tableWorst,
                             tableGeomean};
      writeTextFile(a->json, toJson(doc).dump(2), kOutputFlag);
    }
    exitCode = 0;
    if ((a->maxWorst > 0 && worst > a->maxWorst) || (a->maxGeomean > 0 && geomean > a->maxGeomean)) {
      std::fprintf(stderr, "collbench: regret worst %.4f / geomean %.4f exceeds the bound (worst %g, geomean %g)\n",
                   worst, geomean, a->maxWorst, a->maxGeomean);
      exitCode = 1;
    }
  });
}

}  // namespace collbench::cli
