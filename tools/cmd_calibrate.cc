// `collbench calibrate`: fits alpha, beta per link class and gamma to measured runs (collbench-perf JSON from any
// backend, nccl-tests or `collbench perf` stdout tables), writes the calibrated topology and prints the fit quality,
// on held-out sizes too; --verify-sim also simulates the held-out samples on the calibrated topology.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/calibrate.h"
#include "collbench/error.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "collbench/units.h"
#include "commands.h"
#include "environment.h"

namespace collbench::cli {

namespace {

struct CalibrateArgs {
  std::vector<std::string> inputs;
  std::string output, json, collective, assumeAlgorithm = "ring", rankKind = "cpu", name = "calibrated", loss = "l2";
  int hosts = 1, holdOutEvery = 2;
  std::string minBytes = "0", maxBytes = "0", memoryTiers = "auto";
  bool force = false, verifySim = false, keepAll = false;
};

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(Errc::InvalidArgument, fmt::format("cannot read '{}'", printable(path)));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double medianAbs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) x = std::abs(x);
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double worstAbs(const std::vector<double>& v) {
  double w = 0;
  for (double x : v) w = std::max(w, std::abs(x));
  return w;
}

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }

}  // namespace

void addCalibrateCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "fit alpha/beta per link class and gamma to measured runs; write a calibrated topology");
  cmd->add_option("inputs", a->inputs, "collbench perf -J files, nccl-tests logs or collbench perf tables")->required();
  cmd->add_option("-o,--output", a->output, "calibrated topology to write (JSON)")->required();
  cmd->add_flag("--force", a->force, "overwrite existing output files");
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
  cmd->add_option("--loss", a->loss, "l2 (least squares of relative errors) or l1 (sum of |relative error|, robust)")
      ->default_val("l2");
  cmd->add_flag("--keep-all", a->keepAll,
                "fit every repeated measurement of a point (default: keep the fastest of the runs given)");
  cmd->add_option("-J,--output_file", a->json, "write the fit and every sample as JSON");
  cmd->callback([a, &exitCode] {
    checkOutputFile(a->output, a->force, "-o/--output");
    checkOutputFile(a->json, a->force, "-J/--output_file");
    if (a->holdOutEvery < 0 || a->holdOutEvery == 1) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--holdout-every: {} is not a hold-out (k >= 2 holds out every k-th size, 0 none)",
                              a->holdOutEvery));
    }
    const NodeKind kind = parseNodeKind(a->rankKind);
    if (kind != NodeKind::Cpu && kind != NodeKind::Gpu) {
      throw Error(Errc::InvalidArgument, "--rank-kind must be cpu or gpu");
    }
    std::optional<Collective> coll;
    if (!a->collective.empty()) coll = parseCollective(a->collective);
    std::vector<CalibrationSample> samples;
    for (const std::string& in : a->inputs) {
      const std::string text = readAll(in);
      const auto first = text.find_first_not_of(" \t\r\n");
      std::vector<CalibrationSample> got;
      if (first != std::string::npos && text[first] == '{') {
        got = samplesFromPerfJson(text, in, a->hosts);
      } else {
        got = samplesFromNcclTestsLog(parseNcclTestsLog(text, in), in, a->assumeAlgorithm, coll);
      }
      samples.insert(samples.end(), got.begin(), got.end());
    }
    {
      const std::size_t lo = parseBytes(a->minBytes, "--min-bytes"), hi = parseBytes(a->maxBytes, "--max-bytes");
      std::erase_if(samples, [&](const CalibrationSample& s) { return s.bytes < lo || (hi > 0 && s.bytes > hi); });
    }
    if (!a->keepAll) {
      // Repeated runs of one point (several files): keep the fastest. Interference from other work on the machine
      // only ever adds time, so the minimum is the measurement least disturbed by it.
      std::map<std::tuple<int, std::string, int, int, std::size_t, int, std::size_t, int>, std::size_t> best;
      std::vector<CalibrationSample> kept;
      for (const CalibrationSample& s : samples) {
        const auto key = std::make_tuple(static_cast<int>(s.collective), s.algorithm, s.nranks, s.hosts, s.bytes,
                                         static_cast<int>(s.dtype), s.chunkBytes, s.channels);
        auto it = best.find(key);
        if (it == best.end()) {
          best.emplace(key, kept.size());
          kept.push_back(s);
        } else if (s.timeUs < kept[it->second].timeUs) {
          kept[it->second] = s;
        }
      }
      samples = std::move(kept);
    }
    CalibrationOptions opt;
    if (a->loss != "l1" && a->loss != "l2") {
      throw Error(Errc::InvalidArgument, fmt::format("--loss: '{}' is not l1 or l2", printable(a->loss)));
    }
    opt.loss = a->loss == "l1" ? CalibrationLoss::L1 : CalibrationLoss::L2;
    opt.holdOutEvery = a->holdOutEvery;
    if (a->memoryTiers != "auto") {
      int k = 0;
      const auto [end, ec] = std::from_chars(a->memoryTiers.data(), a->memoryTiers.data() + a->memoryTiers.size(), k);
      if (ec != std::errc() || end != a->memoryTiers.data() + a->memoryTiers.size() || k < 1) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("--memory-tiers: '{}' is not auto or a number >= 1", printable(a->memoryTiers)));
      }
      opt.memoryTiers = k;
    }
    opt.topologyName = a->name;
    opt.rankKind = kind;
    const CalibrationResult r = calibrate(samples, opt);
    {
      Topology out = r.topology;  // provenance rides in the description (the format has no other free field)
      out.description += fmt::format("; collbench {}: {}", COLLBENCH_VERSION, commandLine());
      writeTextFile(a->output, toJson(out), "-o/--output");
    }
    // The calibrated simulator on every sample (the topology just written, by path).
    std::vector<double> simUs(r.fits.size(), -1);
    if (a->verifySim) {
      std::string simulator;  // the first simulated backend linked in
      for (const auto& [name, summary] : backendNames()) {
        if (simulator.empty() && backendCapabilities(name).device == DeviceKind::Simulated) simulator = name;
      }
      if (simulator.empty()) {
        throw Error(Errc::Unsupported, "--verify-sim: this collbench was built without the simulator");
      }
      std::map<int, std::unique_ptr<Backend>> sims;
      for (std::size_t i = 0; i < r.fits.size(); ++i) {
        const CalibrationSample& s = r.fits[i].sample;
        auto& b = sims[s.nranks];
        if (!b) b = makeBackend(simulator, s.nranks, {{"topology", a->output}});
        const std::size_t es = dtypeSize(s.dtype);
        const bool perRank = s.collective == Collective::ReduceScatter || s.collective == Collective::AllGather;
        CollectiveSpec spec{s.collective, s.nranks,
                            perRank ? s.bytes / es / static_cast<std::size_t>(s.nranks) : s.bytes / es, s.dtype};
        AlgoParams p{s.chunkBytes, s.channels, rankHosts(r.topology, s.nranks)};
        Buffers none(static_cast<std::size_t>(s.nranks));
        // Topologies carry no per-call overhead: the calibrated simulator is simulated time + the fitted overhead.
        simUs[i] =
            b->run(buildSchedule(spec, s.algorithm, p), none, RunOptions{}).seconds * 1e6 + r.params.callOverheadUs;
      }
    }
    const CalibrationParams& p = r.params;
    auto cls = [&](const LinkClassCost& c, bool alphaId, bool betaId) {
      return fmt::format("alpha {:.4g} us{}, beta {:.4g} GB/s{}", c.alphaUs, alphaId ? "" : " (not identified)",
                         c.betaGBps, betaId ? "" : " (not identified)");
    };
    fmt::print("# collbench calibrate: {} samples from {} file(s), {} held out; {} iterations\n", r.fits.size(),
               a->inputs.size(), r.heldOutCount, r.iterations);
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
    fmt::print("# wrote {}\n", a->output);
    fmt::print("# {:<14} {:<20} {:>6} {:>5} {:>12}  {:>12}  {:>12}  {:>8}{}  {}\n", "collective", "algorithm", "nranks",
               "hosts", "bytes", "measured_us", "model_us", "model", a->verifySim ? "       sim_us       sim" : "",
               "set");
    std::vector<double> simHeld, simFit;
    for (std::size_t i = 0; i < r.fits.size(); ++i) {
      const SampleFit& f = r.fits[i];
      std::string simCols;
      if (a->verifySim) {
        const double e = simUs[i] / f.sample.timeUs - 1;
        (f.heldOut ? simHeld : simFit).push_back(e);
        simCols = fmt::format("  {:>12.3f}  {:>8}", simUs[i], pct(e));
      }
      fmt::print("  {:<14} {:<20} {:>6} {:>5} {:>12}  {:>12.3f}  {:>12.3f}  {:>8}{}  {}\n",
                 toString(f.sample.collective), f.sample.algorithm, f.sample.nranks, f.sample.hosts, f.sample.bytes,
                 f.sample.timeUs, f.predictedUs, pct(f.relError), simCols, f.heldOut ? "held-out" : "fit");
    }
    fmt::print("# model fit: median {:.1f}%, worst {:.1f}% ({} samples)\n", 100 * r.fitMedian, 100 * r.fitWorst,
               r.fits.size() - static_cast<std::size_t>(r.heldOutCount));
    if (r.heldOutCount > 0) {
      fmt::print("# model held-out: median {:.1f}%, worst {:.1f}% ({} samples)\n", 100 * r.heldOutMedian,
                 100 * r.heldOutWorst, r.heldOutCount);
    } else {
      fmt::print("# model held-out: n/a (nothing held out)\n");
    }
    if (a->verifySim) {
      if (!simHeld.empty()) {
        fmt::print("# calibrated simulator held-out: median {:.1f}%, worst {:.1f}% ({} samples)\n",
                   100 * medianAbs(simHeld), 100 * worstAbs(simHeld), simHeld.size());
      } else {
        fmt::print("# calibrated simulator held-out: n/a (nothing held out)\n");
      }
    }
    if (!a->json.empty()) {
      CalibrationRecord doc = toRecord(r);
      doc.tool = toolName();
      doc.commandLine = commandLine();
      doc.environment = describeEnvironment();
      doc.topologyFile = a->output;
      for (std::size_t i = 0; i < doc.samples.size(); ++i) {
        if (simUs[i] >= 0) doc.samples[i].simUs = simUs[i];
      }
      if (!simHeld.empty()) doc.simHeldOut = CalibrationErrors{medianAbs(simHeld), worstAbs(simHeld), simHeld.size()};
      writeTextFile(a->json, toJson(doc).dump(2), "-J/--output_file");
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
