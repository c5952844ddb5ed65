#pragma once
/// Subcommands of the `collbench` CLI, one file each. Each add* function registers its subcommand on `app`;
/// the callback stores the process exit code in `exitCode` (0 ok, 1 result failure, 2 bad input).
#include <CLI/CLI.hpp>

namespace collbench::cli {

void addPerfCommand(CLI::App& app, int& exitCode);
void addPlanCommand(CLI::App& app, int& exitCode);
void addTopoCommand(CLI::App& app, int& exitCode);
void addSimCommand(CLI::App& app, int& exitCode);
void addSweepCommand(CLI::App& app, int& exitCode);
/// `collbench launch -n N -- cmd...`: N local processes with TF_CONFIG, output prefixed by rank (cmd_launch.cc).
void addLaunchCommand(CLI::App& app, int& exitCode);
/// `collbench workload`: the trace of training a known model (cmd_workload.cc).
void addWorkloadCommand(CLI::App& app, int& exitCode);
/// `collbench replay TRACE --backend B`: a trace's collectives and compute gaps on a backend (cmd_replay.cc).
void addReplayCommand(CLI::App& app, int& exitCode);
/// `collbench gate`: perf runs against a baseline; exit 0 pass, 1 regression, 2 bad input (cmd_gate.cc).
void addGateCommand(CLI::App& app, int& exitCode);
/// `collbench report RUNS... -o report.html`: HTML (inline SVG) or Markdown report (cmd_report.cc).
void addReportCommand(CLI::App& app, int& exitCode);
/// `collbench tune`: algorithm x chunk x channels x sizes x ranks sweep -> tuning table, NCCL tuner CSV (cmd_tune.cc).
void addTuneCommand(CLI::App& app, int& exitCode);
/// `collbench calibrate RUNS... -o topo.json`: alpha/beta/gamma least-squares fit (cmd_calibrate.cc).
void addCalibrateCommand(CLI::App& app, int& exitCode);
/// `collbench regret --tuning T`: chosen / best measured time on a held-out grid (cmd_regret.cc).
void addRegretCommand(CLI::App& app, int& exitCode);
/// `collbench merge SHARD... -o FILE`: the outputs of --shard K/N runs joined (cmd_merge.cc).
void addMergeCommand(CLI::App& app, int& exitCode);
/// `collbench fidelity LOG... --topology T`: measured nccl-tests tables vs the simulator (cmd_fidelity.cc).
void addFidelityCommand(CLI::App& app, int& exitCode);

/// `collbench train`: the MultiWorkerMirroredStrategy example on N replicas, with a trace (cmd_train.cc).
void addTrainCommand(CLI::App& app, int& exitCode);

/// Registers every backend linked into this binary (the composition root; see DESIGN.md "registry").
void registerLinkedBackends();

}  // namespace collbench::cli
