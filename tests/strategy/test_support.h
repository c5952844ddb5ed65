#pragma once
// Shared helpers of the strategy tests: backend registration, log capture, resolvers, expected errors.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "collbench/backend.h"
#include "collbench/error.h"
#include "collbench/strategy/cluster_resolver.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "host_backend.h"

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
    registerBackend("fake_sim", "test stand-in for the simulator: no data, 1 ns per byte",
                    [](int n, const BackendOptions&) { return std::make_unique<FakeSimBackend>(n); });
    spdlog::set_level(spdlog::level::warn);
  });
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
