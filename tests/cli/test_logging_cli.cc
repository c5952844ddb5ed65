// The CLI's logger (tools/main.cc): level from COLLBENCH_LOG_LEVEL, log lines on stderr only, a bad level is one
// error line and exit 2.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "cli_runner.h"

namespace collbench::testing {
namespace {

/// COLLBENCH_LOG_LEVEL for the children started in one scope.
struct LogLevel {
  explicit LogLevel(const char* value) { ::setenv("COLLBENCH_LOG_LEVEL", value, 1); }
  LogLevel(const LogLevel&) = delete;
  LogLevel& operator=(const LogLevel&) = delete;
  ~LogLevel() { ::unsetenv("COLLBENCH_LOG_LEVEL"); }
};

TEST(LoggingCli, UnknownLevelIsOneErrorLine) {
  LogLevel level("loud");
  const CliResult r = runCli("--version");
  EXPECT_EQ(r.exitCode, 2) << r.out;
  EXPECT_EQ(r.err,
            "collbench: error: COLLBENCH_LOG_LEVEL=\"loud\" is not a log level (trace, debug, info, warn, "
            "error, critical, off)\n");
  EXPECT_EQ(r.out, "");
}

TEST(LoggingCli, KnownLevelsAreAccepted) {
  for (const char* name : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    LogLevel level(name);
    const CliResult r = runCli("--version");
    EXPECT_EQ(r.exitCode, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("collbench "), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace collbench::testing
