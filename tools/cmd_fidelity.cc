// `collbench fidelity LOG... --topology T`: every row of measured nccl-tests tables simulated on a topology and
// compared (collbench/fidelity.h). This file parses flags and plugs the simulator into the library.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/fidelity.h"
#include "collbench/nccl_model.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "commands.h"
#include "sim_backend.h"

namespace collbench::cli {

namespace {

struct FidelityArgs {
  std::vector<std::string> logs;
  std::string topology, algo = "auto", json, collective, ncclEnv, ncclCalibration, ncclVersion;
  int ranks = 0;
  bool force = false;
};

/// Times calls as `collbench perf --backend sim` does, through the same run layer: the spec of countForBytes, the
/// runner's plan (with --algo auto the topology's tuning table, else the cost model, with its chunk and channels;
/// other names as they are), simulated by the sim backend's one method. A row's algorithm names what the backend
/// said it runs ("nccl Tree/LL128, 16 channels").
SimulateFn simulateOn(Runner& runner, const std::string& algo) {
  return [&runner, algo](const FidelityCall& call) {
    const CollectiveSpec spec{call.collective, call.nranks,
                              countForBytes(call.collective, call.nranks, call.bytes, call.dtype), call.dtype, call.op};
    const Plan plan = runner.plan(spec, CallConfig{algo});
    const std::string configuration = describedConfiguration(plan.choice);
    return SimulatedCall{runner.simulate(spec, plan.choice.algorithm, plan.params),
                         configuration.empty() ? plan.choice.algorithm : plan.choice.algorithm + " " + configuration};
  };
}

int run(const FidelityArgs& a) {
  if (a.ranks < 0) throw Error(Errc::InvalidArgument, fmt::format("-g/--ranks must be >= 1, got {}", a.ranks));
  checkOutputFile(a.json, a.force, "-J/--output_file");
  ncclEnvWith(a.ncclEnv, "--nccl-env");  // a bad variable is refused before anything is read or simulated
  if (!a.ncclVersion.empty() && ncclVersionCode(a.ncclVersion) == 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--nccl-version: expected MAJOR.MINOR.PATCH, got '{}'", printable(a.ncclVersion)));
  }
  FidelityOptions options;
  options.ranks = a.ranks;
  options.algorithm = a.algo;
  if (!a.collective.empty()) options.defaultCollective = parseCollective(a.collective);
  const Topology topo = loadTopology(a.topology);
  if (!a.ncclCalibration.empty()) {  // checked once against the system before anything is read or simulated
    sim::ncclModelFromCalibration(a.ncclCalibration, topo, static_cast<int>(topo.ranks.size()), "--nccl-calibration");
  }
  options.topology = a.topology;
  options.topologyFingerprint = fingerprint(topo);
  // Every log is read and checked against the topology before the first simulation.
  std::vector<NcclTestsLog> logs;
  for (const std::string& path : a.logs) {
    logs.push_back(readNcclTestsLog(path));
    // --nccl-version names the release of a log that prints none; a log that prints another is refused.
    std::string& version = logs.back().ncclVersion;
    if (!a.ncclVersion.empty() && ncclVersionCode(version) > 0 &&
        ncclVersionCode(version) != ncclVersionCode(a.ncclVersion)) {
      throw Error(Errc::InvalidArgument, fmt::format("--nccl-version {}: {} states NCCL {}", printable(a.ncclVersion),
                                                     printable(path), printable(version)));
    }
    if (!a.ncclVersion.empty()) version = a.ncclVersion;
    const int n = fidelityRanks(logs.back(), path, a.ranks);
    if (n > static_cast<int>(topo.ranks.size())) {
      throw Error(Errc::InvalidArgument, fmt::format("{}: {} ranks, but topology '{}' has {} (pick a larger one)",
                                                     printable(path), n, printable(a.topology), topo.ranks.size()));
    }
  }
  const FoundTuningTable found = a.algo == "auto" ? findTuningTable("", &topo, "sim") : FoundTuningTable{};
  FidelityDocument doc;
  doc.tool = std::string("collbench ") + COLLBENCH_VERSION;
  doc.commandLine = commandLine();
  for (std::size_t i = 0; i < logs.size(); ++i) {
    // The log's launch layout (nccl-tests -g) and NCCL release, where it states them.
    BackendOptions backend{{"topology", a.topology},
                           {"nccl_env", a.ncclEnv},
                           {"nccl_calibration", a.ncclCalibration},
                           {"gpus_per_thread", std::to_string(logs[i].gpusPerThread())}};
    if (ncclVersionCode(logs[i].ncclVersion) > 0) backend["nccl_version"] = logs[i].ncclVersion;
    OwnedRunner sim("sim", fidelityRanks(logs[i], a.logs[i], a.ranks), backend,
                    RunnerOptions{&topo, found.table ? &*found.table : nullptr, found.path});
    doc.logs.push_back(compareWithSimulation(logs[i], a.logs[i], options, simulateOn(*sim.runner, a.algo)));
    fmt::print("{}{}", i ? "\n" : "", formatFidelityTable(doc.logs.back()));
    std::fflush(stdout);
  }
  if (!a.json.empty()) writeFidelityDocument(doc, a.json);
  return 0;
}

}  // namespace

void addFidelityCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<FidelityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fidelity", "simulate every row of measured nccl-tests tables on a topology: per-size error, median, p90, worst");
  cmd->add_option("logs", a->logs, "nccl-tests output (srun/mpirun prefixes allowed) or CSV tables")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--topology", a->topology, "topology file or shipped name")->required();
  cmd->add_option("--algo", a->algo, "algorithm the simulator runs, or auto (as perf --backend sim)")
      ->default_str("auto");
  cmd->add_option("--nccl-env", a->ncclEnv,
                  "NCCL variables of the measurement for --algo nccl, as logs print them: \"NCCL_ALGO=Ring "
                  "NCCL_MIN_CTAS=24\" (over the process environment; every log of the call)");
  cmd->add_option("--nccl-calibration", a->ncclCalibration,
                  "for --algo nccl: the NCCL model's parameters from `collbench calibrate --model nccl -o FILE` "
                  "(any node count of the calibrated system)");
  cmd->add_option("--nccl-version", a->ncclVersion,
                  "for --algo nccl: the NCCL release (MAJOR.MINOR.PATCH) of logs that print none, whose choice is "
                  "emulated (default: the log's, else 2.28)");
  cmd->add_option("-g,--ranks", a->ranks, "rank count of logs that state none (CSV without gpu_count)");
  cmd->add_option("--collective", a->collective, "collective of logs that do not name it")->default_str("all_reduce");
  cmd->add_option("-J,--output_file", a->json, "write the comparison as JSON (docs/fidelity.schema.json)");
  cmd->add_flag("--force", a->force, "overwrite an existing -J file");
  cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

}  // namespace collbench::cli
