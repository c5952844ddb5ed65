// The collbench CLI: composition root. Errors in user input print one line and exit 2.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli_common.h"
#include "collbench/error.h"
#include "commands.h"

namespace {
constexpr int kExitBadInput = 2;
constexpr int kExitInternal = 3;
constexpr const char* kLogLevelEnv = "COLLBENCH_LOG_LEVEL";

/// Log lines (the backends' spdlog calls) go to stderr, so that results on stdout (perf tables, JSON) never mix with
/// them; the level is COLLBENCH_LOG_LEVEL's (spdlog's names; default info). False, after one error line, when the
/// variable names no level.
bool installStderrLogger() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("collbench"));
  const char* value = std::getenv(kLogLevelEnv);
  if (!value || !*value) return true;
  const spdlog::level::level_enum level = spdlog::level::from_str(value);
  if (level == spdlog::level::off && std::string(value) != "off") {  // from_str's answer for unknown names
    std::fprintf(stderr,
                 "collbench: error: %s=\"%s\" is not a log level (trace, debug, info, warn, error, critical, "
                 "off)\n",
                 kLogLevelEnv, value);
    return false;
  }
  spdlog::set_level(level);
  return true;
}
}  // namespace

// A function try block: setting up the commands (CLI11 throws on a clash) and help output may throw too.
int main(int argc, char** argv) try {
  using namespace collbench;
  if (!installStderrLogger()) return kExitBadInput;
  cli::registerLinkedBackends();
  cli::setCommandLine(argc, argv);
  CLI::App app{"collbench: collective communication benchmarks and simulator", "collbench"};
  app.set_version_flag("--version", std::string("collbench ") + COLLBENCH_VERSION);
  app.require_subcommand(1);
  int exitCode = 0;
  cli::addPerfCommand(app, exitCode);
  cli::addPlanCommand(app, exitCode);
  cli::addTopoCommand(app, exitCode);
  cli::addSimCommand(app, exitCode);
  cli::addSweepCommand(app, exitCode);
  cli::addLaunchCommand(app, exitCode);
  cli::addWorkloadCommand(app, exitCode);
  cli::addReplayCommand(app, exitCode);
  cli::addGateCommand(app, exitCode);
  cli::addReportCommand(app, exitCode);
  cli::addTrainCommand(app, exitCode);
  cli::addTuneCommand(app, exitCode);
  cli::addCalibrateCommand(app, exitCode);
  cli::addRegretCommand(app, exitCode);
  cli::addMergeCommand(app, exitCode);
  cli::addFidelityCommand(app, exitCode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "collbench: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const Error& e) {
    std::fprintf(stderr, "collbench: error: %s\n", e.what());
    const bool badInput = e.code() == Errc::InvalidArgument || e.code() == Errc::InvalidTopology ||
                          e.code() == Errc::InvalidSchedule || e.code() == Errc::Unsupported;
    return badInput ? kExitBadInput : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collbench: internal error: %s\n", e.what());
    return kExitInternal;
  }
  return exitCode;
} catch (const std::exception& e) {
  std::fprintf(stderr, "collbench: internal error: %s\n", e.what());
  return kExitInternal;
} catch (...) {
  std::fprintf(stderr, "collbench: internal error: unknown exception\n");
  return kExitInternal;
}
