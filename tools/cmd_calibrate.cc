// `collbench calibrate`: flags, printing and output files of the two fits (calibrate.h: alpha, beta per link class
// and gamma for CPU runs, written as a topology; nccl_calibration.h: the NCCL model's open parameters of a GPU system,
// written as an overlay that applies at any node count of it).
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>

#include "cli_common.h"
#include "collbench/calibrate.h"
#include "collbench/error.h"
#include "collbench/fidelity.h"
#include "collbench/nccl_calibration.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "collbench/units.h"
#include "commands.h"

namespace collbench::cli {

namespace {

struct CalibrateArgs {
  std::vector<std::string> inputs, predict, ncclEnv;
  std::string output, json, collective, assumeAlgorithm = "ring", rankKind = "cpu", name = "calibrated", loss = "l2";
  std::string model = "alpha-beta", topology;
  int hosts = 1, holdOutEvery = 2, ranks = 0;
  std::string minBytes = "0", maxBytes = "0", memoryTiers = "auto";
  bool force = false, verifySim = false, keepAll = false;
};

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }

std::string errorsText(const CalibrationErrors& e) {
  if (e.count == 0) return "n/a (no rows)";
  return fmt::format("median {:.1f}%, worst {:.1f}% ({} rows)", 100 * e.median.value_or(0), 100 * e.worst.value_or(0),
                     e.count);
}

CalibrationLoss parseLoss(const std::string& loss) {
  if (loss != "l1" && loss != "l2") {
    throw Error(Errc::InvalidArgument, fmt::format("--loss: '{}' is not l1 or l2", printable(loss)));
  }
  return loss == "l1" ? CalibrationLoss::L1 : CalibrationLoss::L2;
}

void checkHoldOut(int k) {
  if (k < 0 || k == 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--holdout-every: {} is not a hold-out (k >= 2 holds out every k-th size, 0 none)", k));
  }
}

/// The most ranks or hosts --hosts and -g/--ngpus may give: the bound every collbench record puts on ranks
/// (perf, replay, tuning: 2^24), far above any machine, so that a typo is refused rather than modelled.
constexpr int kMaxFlagRanks = 1 << 24;

NodeKind parseRankKind(const std::string& text) {
  NodeKind kind = NodeKind::Cpu;
  try {
    kind = parseNodeKind(text);
  } catch (const Error&) {
    kind = NodeKind::Switch;  // not a rank kind either: refused below with the flag's own message
  }
  if (kind != NodeKind::Cpu && kind != NodeKind::Gpu) {
    throw Error(Errc::InvalidArgument, fmt::format("--rank-kind: '{}' is not cpu or gpu", printable(text)));
  }
  return kind;
}

/// --memory-tiers: 0 for auto, else the count.
int parseMemoryTiers(const std::string& text) {
  if (text == "auto") return 0;
  int k = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (ec != std::errc() || end != text.data() + text.size() || k < 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--memory-tiers: '{}' is not auto or a number >= 1", printable(text)));
  }
  return k;
}

/// Every flag's value, checked the same way whichever model runs and before any file is read or written.
void checkFlags(const CalibrateArgs& a) {
  if (a.model != "nccl" && a.model != "alpha-beta") {
    throw Error(Errc::InvalidArgument, fmt::format("--model: '{}' is not alpha-beta or nccl", printable(a.model)));
  }
  checkHoldOut(a.holdOutEvery);
  parseLoss(a.loss);
  if (!a.collective.empty()) {
    try {
      parseCollective(a.collective);
    } catch (const Error& e) {
      throw Error(Errc::InvalidArgument, fmt::format("--collective: {}", e.what()));
    }
  }
  const std::size_t minBytes = parseBytes(a.minBytes, "--min-bytes"), maxBytes = parseBytes(a.maxBytes, "--max-bytes");
  if (maxBytes > 0 && minBytes > maxBytes) {
    throw Error(Errc::InvalidArgument, fmt::format("--min-bytes {} is more than --max-bytes {}: no size is left to fit",
                                                   printable(a.minBytes), printable(a.maxBytes)));
  }
  parseMemoryTiers(a.memoryTiers);
  parseRankKind(a.rankKind);
  if (a.hosts < 1 || a.hosts > kMaxFlagRanks) {
    throw Error(Errc::InvalidArgument, fmt::format("--hosts must be in [1, {}], got {}", kMaxFlagRanks, a.hosts));
  }
  if (a.ranks < 0 || a.ranks > kMaxFlagRanks) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("-g/--ngpus must be in [1, {}] (or 0: the count the logs state), got {}", kMaxFlagRanks, a.ranks));
  }
}

/// `--model alpha-beta`: the cost model's link classes, written as a topology.
void runAlphaBeta(const CalibrateArgs& a) {
  const NodeKind kind = parseRankKind(a.rankKind);
  CalibrationInput in;
  in.files = a.inputs;
  in.hosts = a.hosts;
  in.assumeAlgorithm = a.assumeAlgorithm;
  if (!a.collective.empty()) in.collective = parseCollective(a.collective);
  in.minBytes = parseBytes(a.minBytes, "--min-bytes");
  in.maxBytes = parseBytes(a.maxBytes, "--max-bytes");
  in.keepAll = a.keepAll;
  CalibrationOptions opt;
  opt.loss = parseLoss(a.loss);
  opt.holdOutEvery = a.holdOutEvery;
  if (const int k = parseMemoryTiers(a.memoryTiers); k > 0) opt.memoryTiers = k;
  opt.topologyName = a.name;
  opt.rankKind = kind;
  const std::vector<CalibrationSample> samples = readCalibrationSamples(in);
  const CalibrationResult r = calibrate(samples, opt);
  const bool ncclTests =
      std::any_of(samples.begin(), samples.end(), [](const CalibrationSample& s) { return s.ncclTests; });
  if (ncclTests && !r.unboundedBandwidths.empty()) {
    std::string names;
    for (const std::string& n : r.unboundedBandwidths) names += (names.empty() ? "" : ", ") + n;
    throw Error(Errc::InvalidArgument,
                fmt::format("calibrate: degenerate fit, nothing written: {} fitted to no cost (an unbounded link); "
                            "link classes cannot explain NCCL's own algorithms in these nccl-tests logs ({}); use "
                            "--model nccl --topology <system>",
                            names, fmt::join(r.notes, "; ")));
  }
  {
    Topology out = r.topology;  // provenance rides in the description (the format has no other free field)
    out.description += fmt::format("; collbench {}: {}", COLLBENCH_VERSION, commandLine());
    writeTextFile(a.output, toJson(out), "-o/--output");
  }
  const std::vector<double> simUs = a.verifySim ? simulateCalibration(r, a.output) : std::vector<double>{};
  const CalibrationParams& p = r.params;
  auto cls = [&](const LinkClassCost& c, bool alphaId, bool betaId) {
    return fmt::format("alpha {:.4g} us{}, beta {:.4g} GB/s{}", c.alphaUs, alphaId ? "" : " (not identified)",
                       c.betaGBps, betaId ? "" : " (not identified)");
  };
  fmt::print("# collbench calibrate: {} samples from {} file(s), {} held out; {} iterations\n", r.fits.size(),
             a.inputs.size(), r.heldOutCount, r.iterations);
  fmt::print("# intra: {}\n# inter: {}\n# gamma: {}\n# call overhead: {:.4g} us{}\n",
             cls(p.intra, r.identified[0], r.identified[2]), cls(p.inter, r.identified[1], r.identified[3]),
             p.gammaGBps > 0 ? fmt::format("{:.4g} GB/s{}", p.gammaGBps, r.identified[4] ? "" : " (not identified)")
                             : std::string("free (0)"),
             p.callOverheadUs, r.identified[5] ? "" : " (not identified)");
  for (const MemoryTier& m : r.memoryTiers) {
    fmt::print("# memory tier: working set {:>14} -> intra-host rates x {:.4g}\n",
               m.maxWorkingSetBytes ? fmt::format("<= {}", formatBytes(m.maxWorkingSetBytes)) : "above",
               m.bandwidthScale);
  }
  for (const std::string& n : r.notes) fmt::print("# note: {}\n", n);
  fmt::print("# wrote {}\n", a.output);
  fmt::print("# {:<14} {:<20} {:>6} {:>5} {:>12}  {:>12}  {:>12}  {:>8}{}  {}\n", "collective", "algorithm", "nranks",
             "hosts", "bytes", "measured_us", "model_us", "model", a.verifySim ? "       sim_us       sim" : "", "set");
  for (std::size_t i = 0; i < r.fits.size(); ++i) {
    const SampleFit& f = r.fits[i];
    const std::string simCols =
        a.verifySim ? fmt::format("  {:>12.3f}  {:>8}", simUs[i], pct(simUs[i] / f.sample.timeUs - 1)) : "";
    fmt::print("  {:<14} {:<20} {:>6} {:>5} {:>12}  {:>12.3f}  {:>12.3f}  {:>8}{}  {}\n", toString(f.sample.collective),
               f.sample.algorithm, f.sample.nranks, f.sample.hosts, f.sample.bytes, f.sample.timeUs, f.predictedUs,
               pct(f.relError), simCols, f.heldOut ? "held-out" : "fit");
  }
  fmt::print("# model fit: median {:.1f}%, worst {:.1f}% ({} samples)\n", 100 * r.fitMedian, 100 * r.fitWorst,
             r.fits.size() - static_cast<std::size_t>(r.heldOutCount));
  if (r.heldOutCount > 0) {
    fmt::print("# model held-out: median {:.1f}%, worst {:.1f}% ({} samples)\n", 100 * r.heldOutMedian,
               100 * r.heldOutWorst, r.heldOutCount);
  } else {
    fmt::print("# model held-out: n/a (nothing held out)\n");
  }
  CalibrationRecord doc = toRecord(r);
  if (a.verifySim) {
    addSimulated(doc, r, simUs);
    fmt::print("# calibrated simulator held-out: {}\n",
               doc.simHeldOut ? errorsText(*doc.simHeldOut) : std::string("n/a (nothing held out)"));
  }
  if (!a.json.empty()) {
    doc.tool = toolName();
    doc.commandLine = commandLine();
    doc.environment = describeEnvironment();
    doc.topologyFile = a.output;
    writeTextFile(a.json, toJson(doc).dump(2), "-J/--output_file");
  }
}

/// `--model nccl`: the NCCL model's open parameters of the topology's system, written as a collbench-nccl-calibration
/// overlay; --predict logs are predicted with it (not fitted) and compared.
void runNccl(const CalibrateArgs& a) {
  if (a.topology.empty()) {
    throw Error(Errc::InvalidArgument,
                "--topology: --model nccl needs the system the logs ran on (e.g. dgx-h100-ib400)");
  }
  if (a.verifySim) throw Error(Errc::InvalidArgument, "--verify-sim: only with --model alpha-beta");
  std::map<std::string, std::string> env;
  for (const std::string& kv : a.ncclEnv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || kv.rfind("NCCL_", 0) != 0) {
      throw Error(Errc::InvalidArgument, fmt::format("--nccl-env: '{}' is not NCCL_<NAME>=<value>", printable(kv)));
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  parseNcclEnv(env);  // a bad value fails here, before any log is read
  NcclCalibrationOptions opt;
  opt.loss = parseLoss(a.loss);
  opt.holdOutEvery = a.holdOutEvery;
  opt.ranks = a.ranks;
  if (!a.collective.empty()) opt.defaultCollective = parseCollective(a.collective);
  opt.topology = a.topology;
  const Topology topo = loadTopology(a.topology);
  const auto readLogs = [&](const std::vector<std::string>& files) {
    std::vector<NcclCalibrationLog> logs;
    for (const std::string& f : files) logs.push_back({readNcclTestsLog(f), f, env});
    return logs;
  };
  const std::vector<NcclCalibrationLog> fitLogs = readLogs(a.inputs), predictLogs = readLogs(a.predict);
  NcclCalibration cal = calibrateNccl(topo, fitLogs, opt);
  cal.tool = toolName();
  cal.commandLine = commandLine();
  writeTextFile(a.output, toJson(cal).dump(2), "-o/--output");

  fmt::print(
      "# collbench calibrate --model nccl: {} ({}, {}, {} GPUs per node); {} rows from {} log(s), {} held out; "
      "{} iterations\n",
      a.topology, toString(cal.arch), toString(cal.nicKind), cal.gpusPerNode, cal.fit.count + cal.heldOut.count,
      fitLogs.size(), cal.heldOut.count, cal.iterations);
  fmt::print("# {:<20} {:>10} {:>10} {:>20}  {}\n", "parameter", "value", "prior", "bounds", "status");
  for (const NcclParamFit& p : cal.params) {
    fmt::print("  {:<20} {:>10.4g} {:>10.4g} {:>20}  {}\n", toString(p.param), p.value, p.prior,
               fmt::format("[{:.4g}, {:.4g}]", p.bounds.lower, p.bounds.upper),
               p.identified ? (p.note.empty() ? "fitted" : "fitted, " + p.note) : p.note);
  }
  fmt::print("# wrote {}\n", a.output);
  fmt::print("# {:<40} {:>6} {:>12}  {:>12}  {:>12}  {:>8}  {:>8}  {:<22} {}\n", "row", "ranks", "bytes", "measured_us",
             "prior_us", "prior", "fitted", "NCCL's choice", "set");
  for (const NcclCalibrationRow& r : cal.rows) {
    fmt::print("  {:<40} {:>6} {:>12}  {:>12.2f}  {:>12.2f}  {:>8}  {:>8}  {:<22} {}\n",
               fmt::format("{}:{}", r.log, r.line), r.ranks, r.bytes, r.measuredUs, r.priorUs,
               pct(r.priorUs / r.measuredUs - 1), pct(r.fittedUs / r.measuredUs - 1), r.choice,
               r.heldOut ? "held-out" : "fit");
  }
  fmt::print("# prior (the model's defaults) on the fitted rows: {}\n", errorsText(cal.priorFit));
  fmt::print("# fit: {}\n", errorsText(cal.fit));
  fmt::print("# held-out: {}\n", cal.heldOut.count ? errorsText(cal.heldOut) : "n/a (nothing held out)");
  const NcclModelParams params = ncclModelParams(cal);
  FidelityDocument doc;
  doc.tool = cal.tool;
  doc.commandLine = cal.commandLine;
  for (const NcclCalibrationLog& log : predictLogs) {
    const FidelityLog f = predictNcclLog(topo, params, log, opt);
    fmt::print("# predicted {} ({} ranks, not fitted): median {:.1f}%, p90 {:.1f}%, worst {:.1f}% ({} rows)\n",
               log.source, f.ranks, 100 * f.all.median, 100 * f.all.p90, 100 * f.all.worst, f.all.rows);
    doc.logs.push_back(f);
  }
  if (!a.json.empty()) writeTextFile(a.json, toJson(doc), "-J/--output_file");
}

}  // namespace

void addCalibrateCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "fit a model to measured runs: alpha/beta per link class and gamma (written as a topology), or with --model nccl "
      "the NCCL model's open parameters of a GPU system (written as an overlay for any node count)");
  cmd->add_option("inputs", a->inputs, "collbench perf -J files, nccl-tests logs or collbench perf tables")->required();
  cmd->add_option("-o,--output", a->output,
                  "calibrated topology (alpha-beta) or collbench-nccl-calibration overlay (nccl) to write (JSON)")
      ->required();
  cmd->add_flag("--force", a->force, "overwrite existing output files");
  cmd->add_option("--model", a->model,
                  "alpha-beta (link classes, CPU runs) or nccl (the NCCL model's open parameters, nccl-tests logs of a "
                  "GPU system)")
      ->default_val("alpha-beta");
  cmd->add_option("--topology", a->topology, "--model nccl: the system the logs ran on (file or shipped name)");
  cmd->add_option("--nccl-env", a->ncclEnv,
                  "--model nccl: NCCL_<NAME>=<value> the logs ran under (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_CTAS, ...); "
                  "repeatable, applies to every log");
  cmd->add_option("--predict", a->predict,
                  "--model nccl: logs to predict with the calibration (not fitted), e.g. another node count");
  cmd->add_option("-g,--ngpus", a->ranks, "--model nccl: rank count of logs that do not state one")->default_val(0);
  cmd->add_option("--collective", a->collective, "collective of logs that do not say");
  cmd->add_option("--assume-algorithm", a->assumeAlgorithm,
                  "collbench algorithm modelling nccl-tests runs (NCCL picks its own; record with NCCL_ALGO)")
      ->default_val("ring");
  cmd->add_option("--hosts", a->hosts, "hosts of perf runs without a topology (ranks split evenly)")->default_val(1);
  cmd->add_option("--holdout-every", a->holdOutEvery, "hold out every k-th size of each series (k >= 2; 0: none)")
      ->default_val(2);
  cmd->add_option("--rank-kind", a->rankKind, "node kind of the ranks written: cpu (host, gloo) or gpu")
      ->default_val("cpu");
  cmd->add_option("--name", a->name, "name of the calibrated topology")->default_val("calibrated");
  cmd->add_flag("--verify-sim", a->verifySim, "also simulate every sample on the calibrated topology");
  cmd->add_option("--min-bytes", a->minBytes, "fit only sizes >= this")->default_val("0");
  cmd->add_option("--max-bytes", a->maxBytes, "fit only sizes <= this (0: no limit)")->default_val("0");
  cmd->add_option("--memory-tiers", a->memoryTiers,
                  "working-set tiers of intra-host rates (cache levels): N >= 1, or auto (1..3 by BIC)")
      ->default_val("auto");
  cmd->add_option("--loss", a->loss,
                  "l2 (least squares of relative errors; of log-time with --model nccl) or l1 (absolute, robust)")
      ->default_val("l2");
  cmd->add_flag("--keep-all", a->keepAll,
                "fit every repeated measurement of a point (default: keep the fastest of the runs given)");
  cmd->add_option("-J,--output_file", a->json,
                  "write the fit and every sample as JSON (--model nccl: the --predict logs' fidelity tables)");
  cmd->callback([a, cmd, &exitCode] {
    checkFlags(*a);
    // Flags of the other model are refused by name rather than silently ignored.
    const auto given = [cmd](std::initializer_list<const char*> names) {
      std::vector<std::string> out;
      for (const char* n : names) {
        if (cmd->count(n) > 0) out.emplace_back(n);
      }
      return out;
    };
    if (a->model == "nccl") {
      const std::vector<std::string> other = given({"--min-bytes", "--max-bytes", "--memory-tiers", "--rank-kind",
                                                    "--hosts", "--assume-algorithm", "--name", "--keep-all"});
      if (!other.empty()) {
        throw Error(
            Errc::InvalidArgument,
            fmt::format("{} appl{} to --model alpha-beta only; remove {} with --model nccl", fmt::join(other, ", "),
                        other.size() == 1 ? "ies" : "y", other.size() == 1 ? "it" : "them"));
      }
    } else {
      if (!a->predict.empty() || !a->topology.empty() || !a->ncclEnv.empty()) {
        throw Error(Errc::InvalidArgument, "--topology, --nccl-env and --predict need --model nccl");
      }
      if (cmd->count("-g") > 0) throw Error(Errc::InvalidArgument, "-g/--ngpus needs --model nccl");
    }
    checkDistinctOutputs({{"-o/--output", a->output}, {"-J/--output_file", a->json}});
    checkOutputFile(a->output, a->force, "-o/--output");
    checkOutputFile(a->json, a->force, "-J/--output_file");
    if (a->model == "nccl") {
      runNccl(*a);
    } else {
      runAlphaBeta(*a);
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
