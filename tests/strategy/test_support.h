#pragma once
// Shared helpers of the strategy tests: backend registration, log capture, resolvers, expected errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/strategy/cluster_resolver.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"

namespace collbench::strategy::testing {

/// A backend that moves no data and reports a fixed cost per byte: stands in for the simulator ("sim", built in
/// simulator/ and not linked into this test binary) in what-if runs.
class FakeSimBackend final : public Backend {
 public:
  static constexpr double kSecondsPerByte = 1e-9;
  static constexpr double kSecondsPerCall = 1e-6;
  explicit FakeSimBackend(int nranks) : nranks_(nranks) {}
  std::string_view name() const override { return "fake_sim"; }
  int nranks() const override { return nranks_; }
  bool movesData() const override { return false; }
  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions&) override {
    for (const RankBuffers& b : bufs) EXPECT_EQ(b.input, nullptr) << "a simulator gets no buffers";
    RunResult r;
    r.algorithm = s.algorithm;
    r.seconds = kSecondsPerCall + kSecondsPerByte * static_cast<double>(s.spec.inputBytes());
    return r;
  }

 private:
  int nranks_;
};

/// Registers the host backends and the fake simulator once per test binary; quiets info logs.
inline void registerBackendsOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    host::registerHostBackends();
    BackendCapabilities simulated;
    simulated.device = DeviceKind::Simulated;
    simulated.movesData = false;
    registerBackend(
        "fake_sim", "test stand-in for the simulator: no data, 1 ns per byte",
        [](int n, const BackendOptions&) { return std::make_unique<FakeSimBackend>(n); }, simulated);
    spdlog::set_level(spdlog::level::warn);
  });
}

// -----------------------------------------------------------------------------------------------------------------
// Processes mode: real `collbench launch` clusters on the gloo backend.

/// Why process-mode tests cannot run here ("" when they can): they need the collbench CLI (a dependency of
/// test_strategy) with the gloo backend. Use COLLBENCH_REQUIRE_PROCESS_MODE().
inline std::string processModeUnavailable() {
  static const std::string reason = [] {
    if (!std::filesystem::exists(COLLBENCH_CLI))
      return std::string("the collbench CLI is not built (") + COLLBENCH_CLI + ")";
    // Zero steps still create the strategy, hence the gloo backend and its rendezvous.
    const collbench::testing::CliResult r =
        collbench::testing::runCli(fmt::format("launch -n 2 -- {} train --mode processes --steps 0", COLLBENCH_CLI));
    if (r.err.find("unknown backend 'gloo'") != std::string::npos) {
      return std::string("this collbench has no gloo backend (COLLBENCH_WITH_GLOO=OFF)");
    }
    if (r.exitCode != 0) return "`collbench launch -n 2 -- collbench train --mode processes` fails: " + r.err;
    return std::string();
  }();
  return reason;
}

/// Skips a process-mode test when this build has no gloo backend; with gloo (COLLBENCH_HAVE_GLOO) a missing CLI or
/// a failing cluster is a failure, not a skip.
#ifdef COLLBENCH_HAVE_GLOO
#define COLLBENCH_REQUIRE_PROCESS_MODE()                                                              \
  if (const std::string why = ::collbench::strategy::testing::processModeUnavailable(); !why.empty()) \
  GTEST_FAIL() << why
#else
#define COLLBENCH_REQUIRE_PROCESS_MODE() GTEST_SKIP() << "this build has no gloo backend (COLLBENCH_WITH_GLOO=OFF)"
#endif

/// Where a worker process of runWorkers() writes what it saw (a directory), set in its environment.
inline constexpr const char* kWorkerOutEnv = "COLLBENCH_TEST_WORKER_OUT";

struct WorkerRun {
  collbench::testing::CliResult cli;    ///< `collbench launch`'s exit code and (rank-prefixed) output
  std::vector<nlohmann::json> results;  ///< per rank: what the worker wrote with writeWorkerResult (null if none)
};

/// Runs test ProcessWorker.DISABLED_<testCase> of this binary in `workers` processes under `collbench launch`
/// (TF_CONFIG per process), with `env` added to their environment; returns what each wrote.
inline WorkerRun runWorkers(const std::string& testCase, int workers,
                            const std::map<std::string, std::string>& env = {}) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("collbench_workers_{}_{}_{}", ::getpid(), testCase, counter++);
  std::filesystem::create_directories(dir);
  std::map<std::string, std::string> vars = env;
  vars[kWorkerOutEnv] = dir.string();
  for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  WorkerRun run;
  run.cli = collbench::testing::runCli(fmt::format(
      "launch -n {} --grace 5 -- {} --gtest_also_run_disabled_tests --gtest_filter=ProcessWorker.DISABLED_{}", workers,
      self, testCase));
  for (const auto& [k, v] : vars) ::unsetenv(k.c_str());
  for (int r = 0; r < workers; ++r) {
    const auto path = dir / fmt::format("{}.json", r);
    run.results.push_back(std::filesystem::exists(path) ? nlohmann::json::parse(collbench::testing::slurp(path))
                                                        : nlohmann::json());
  }
  std::filesystem::remove_all(dir);
  return run;
}

/// Inside a worker of runWorkers(): a processes-mode strategy on gloo from TF_CONFIG, with a timeout that keeps a
/// broken test from hanging. nullptr when not run by runWorkers() (the DISABLED_ test then skips).
inline std::unique_ptr<MultiWorkerMirroredStrategy> workerStrategy(int localReplicas) {
  if (!std::getenv(kWorkerOutEnv)) return nullptr;
  registerBackendsOnce();
#ifdef COLLBENCH_HAVE_GLOO
  static std::once_flag gloo;
  std::call_once(gloo, [] { host::registerGlooBackend(); });
#endif
  StrategyOptions options;
  options.mode = ExecutionMode::Processes;
  options.localReplicas = localReplicas;
  CommunicationOptions comm;
  comm.timeoutSeconds = 30;
  return std::make_unique<MultiWorkerMirroredStrategy>(comm, nullptr, options);
}

/// Writes a worker's observations for the parent test.
inline void writeWorkerResult(const MultiWorkerMirroredStrategy& s, const nlohmann::json& j) {
  std::ofstream(std::filesystem::path(std::getenv(kWorkerOutEnv)) / fmt::format("{}.json", s.workerRank())) << j.dump();
}

/// Captures what the default spdlog logger prints while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("[%l] %v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return out_.str(); }
  /// Number of warning lines holding `part`.
  int countWarnings(const std::string& part) const {
    std::istringstream in(out_.str());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("[warning]", 0) == 0 && line.find(part) != std::string::npos) ++n;
    }
    return n;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

/// A worker-only cluster of `workers` tasks on localhost, seen from task `rank`; empty (single-worker mode) for 1.
inline std::shared_ptr<const ClusterResolver> workerCluster(int workers, int rank = 0) {
  if (workers == 1) return std::make_shared<SimpleClusterResolver>(SimpleClusterResolver::singleWorker());
  ClusterSpec spec;
  for (int w = 0; w < workers; ++w) spec.jobs["worker"].push_back("localhost:" + std::to_string(20000 + w));
  return std::make_shared<SimpleClusterResolver>(spec, "worker", rank);
}

/// A threads-mode strategy of `workers` (simulated) workers x `local` replicas.
inline std::unique_ptr<MultiWorkerMirroredStrategy> makeStrategy(int workers, int local, CommunicationOptions comm = {},
                                                                 StrategyOptions options = {}, int rank = 0) {
  registerBackendsOnce();
  options.localReplicas = local;
  return std::make_unique<MultiWorkerMirroredStrategy>(comm, workerCluster(workers, rank), options);
}

/// Runs `fn`, expects collbench::Error with `code` and a one-line message holding every part.
inline void expectError(const std::function<void()>& fn, Errc code, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(toString(e.code()), toString(code)) << e.what();
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message spans lines: " << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << message << "\n  lacks: " << part;
    }
    return;
  }
  ADD_FAILURE() << "no collbench::Error thrown";
}

inline void expectInvalid(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  expectError(fn, Errc::InvalidArgument, parts);
}

}  // namespace collbench::strategy::testing
