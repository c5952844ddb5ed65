#pragma once
/// Subcommands of the `collbench` CLI, one file each. Each add* function registers its subcommand on `app`;
/// the callback stores the process exit code in `exitCode` (0 ok, 1 result failure, 2 bad input).
#include <CLI/CLI.hpp>

namespace collbench::cli {

void addPerfCommand(CLI::App& app, int& exitCode);
void addPlanCommand(CLI::App& app, int& exitCode);
void addTopoCommand(CLI::App& app, int& exitCode);

/// Registers every backend linked into this binary (the composition root; see DESIGN.md "registry").
void registerLinkedBackends();

}  // namespace collbench::cli
