// `sim` and `sweep` in a CLI built without SimGrid (COLLBENCH_WITH_SIMGRID=OFF, as tests/gpu/prepare-device-bundle.sh
// builds it for a GPU machine): the subcommands are listed and say why they cannot run (exit 2), instead of the CLI
// not building. Compiled only when the simulator library is absent (tools/CMakeLists.txt).
#include <fmt/format.h>

#include <string>

#include "collbench/error.h"
#include "commands.h"

namespace collbench::cli {
namespace {

void addUnavailable(CLI::App& app, const std::string& name, const std::string& summary) {
  CLI::App* cmd = app.add_subcommand(name, summary + " (not in this build: it has no SimGrid)");
  cmd->allow_extras();
  cmd->callback([name] {
    throw Error(
        Errc::Unsupported,
        fmt::format("collbench {}: this collbench was built without SimGrid (COLLBENCH_WITH_SIMGRID=OFF)", name));
  });
}

}  // namespace

void addSimCommand(CLI::App& app, int& /*exitCode*/) {
  addUnavailable(app, "sim", "simulate one collective on a topology (SimGrid)");
}

void addSweepCommand(CLI::App& app, int& /*exitCode*/) {
  addUnavailable(app, "sweep", "what-if grids on the simulator (SimGrid)");
}

}  // namespace collbench::cli
