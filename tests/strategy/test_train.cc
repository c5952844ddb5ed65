// Synchronous data parallelism is exact: N replicas with global batch B end with the weights of one replica with
// batch B, up to float summation order.
//
// Tolerance: the model trains in float32. A replica sums the gradients of its B/N examples and the all-reduce adds
// the N partial sums, so the order of the B additions per gradient element differs from the single replica's
// (and between algorithms). Each step's gradient may differ by a few ulps (~1e-7 relative), and SGD carries such
// differences forward; after 50 steps at learning rate 0.5 the weights (max |w| about 1.2 to 1.9) were seen to differ
// by at most 1.8e-7, one or two float ulps. The test allows kRelativeTolerance = 5e-6 of max(1, max |w|), about 25x
// that, while a real error (a missing replica's gradient, a wrong MEAN divisor, a shifted batch) moves weights by
// 1e-2 or more.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/cli_runner.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "collbench/strategy/train_example.h"
#include "collbench/trace.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using testing::expectInvalid;
using testing::makeStrategy;
using CI = CommunicationImplementation;

constexpr double kRelativeTolerance = 5e-6;
constexpr int kSteps = 50;
/// Divisible by every replica count tested (1, 2, 3, 4 and 2 workers x 2).
constexpr std::int64_t kGlobalBatch = 60;

TrainConfig config(std::int64_t hidden) {
  TrainConfig c;
  c.examples = 600;
  c.features = 16;
  c.classes = 4;
  c.hidden = hidden;
  c.globalBatch = kGlobalBatch;
  c.steps = kSteps;
  c.learningRate = 0.5;
  c.seed = 7;
  return c;
}

/// max |a - b| over all weights, and max |a|.
std::pair<double, double> maxDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double diff = 0, scale = 0;
  EXPECT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size() && k < b.size(); ++k) {
    EXPECT_EQ(a[k].shape(), b[k].shape());
    for (std::size_t i = 0; i < a[k].numElements(); ++i) {
      diff = std::max(diff, std::abs(a[k].at(i) - b[k].at(i)));
      scale = std::max(scale, std::abs(a[k].at(i)));
    }
  }
  return {diff, scale};
}

/// How a case runs. Threads: in this process. Processes: one `collbench train --mode processes` per worker under
/// `collbench launch` (gloo backend), the chief's --weights-out compared here.
enum class Mode { Threads, Processes };

/// The flags of `collbench train` that reproduce config(hidden).
std::string trainFlags(std::int64_t hidden) {
  const TrainConfig c = config(hidden);
  return fmt::format(
      "--examples {} --features {} --classes {} --hidden {} --global-batch {} --steps {} --lr {} --seed {}", c.examples,
      c.features, c.classes, c.hidden, c.globalBatch, c.steps, c.learningRate, c.seed);
}

/// Weights written by `collbench train --weights-out`. `replicasInSync` > 0: the run must have trained on that many
/// replicas (a process that fell back to single-worker mode would match the single-replica reference trivially).
std::vector<Tensor> readWeights(const std::string& path, int replicasInSync = 0) {
  const nlohmann::json j = nlohmann::json::parse(collbench::testing::slurp(path));
  EXPECT_EQ(j.at("format"), "collbench-weights");
  if (replicasInSync > 0) {
    EXPECT_EQ(j.at("replicas_in_sync"), replicasInSync) << path;
  }
  EXPECT_EQ(j.at("steps"), kSteps) << path;
  std::vector<Tensor> out;
  for (const auto& name : j.at("names")) {
    const auto& w = j.at("weights").at(name.get<std::string>());
    out.push_back(
        Tensor::fromDoubles(DType::F32, w.at("values").get<std::vector<double>>(), w.at("shape").get<Shape>()));
  }
  return out;
}

struct TrainCase {
  Mode mode;
  int workers;
  int local;
  std::int64_t hidden;
  std::int64_t bytesPerPack;
  CI implementation;
  HierarchyMode hierarchy = HierarchyMode::Auto;
};

std::string caseName(const ::testing::TestParamInfo<TrainCase>& info) {
  const TrainCase& c = info.param;
  return fmt::format("{}_{}x{}_{}_pack{}_{}{}", c.mode == Mode::Threads ? "threads" : "processes", c.workers, c.local,
                     c.hidden ? "mlp" : "softmax", c.bytesPerPack, toString(c.implementation),
                     c.hierarchy == HierarchyMode::Hierarchical ? "_staged" : "");
}

/// The single-replica reference, computed once per model.
const TrainResult& reference(std::int64_t hidden) {
  static std::map<std::int64_t, TrainResult> cache;
  auto it = cache.find(hidden);
  if (it == cache.end()) {
    auto single = makeStrategy(1, 1);
    it = cache.emplace(hidden, trainExample(*single, config(hidden))).first;
  }
  return it->second;
}

class SyncTraining : public ::testing::TestWithParam<TrainCase> {};

TEST_P(SyncTraining, SameWeightsAsOneReplica) {
  const TrainCase& c = GetParam();
  const TrainResult& ref = reference(c.hidden);
  ASSERT_EQ(ref.log.size(), static_cast<std::size_t>(kSteps));
  EXPECT_LT(ref.log.back().loss, 0.8 * ref.log.front().loss) << "the model learns";
  if (c.mode == Mode::Processes) {
    COLLBENCH_REQUIRE_PROCESS_MODE();
    const auto path = (std::filesystem::temp_directory_path() /
                       fmt::format("collbench_train_w_{}_{}.json", ::getpid(), caseName({c, 0})))
                          .string();
    const collbench::testing::CliResult r = collbench::testing::runCli(fmt::format(
        "launch -n {} -- {} train --mode processes -n {} {} --bytes-per-pack {} --implementation {} --hierarchy auto "
        "--log-every 1000 --weights-out {} --trace {}.trace --force",
        c.workers, COLLBENCH_CLI, c.local, trainFlags(c.hidden), c.bytesPerPack, toString(c.implementation), path,
        path));
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    const std::vector<Tensor> got = readWeights(path, c.workers * c.local);
    std::filesystem::remove(path);
    // The gradients crossed processes: every step all-reduced on the process backend over all workers.
    const Trace t = readTrace(path + ".trace");
    std::filesystem::remove(path + ".trace");
    EXPECT_EQ(t.worldSize, c.workers * c.local);
    EXPECT_EQ(t.backend, "gloo");
    std::set<std::int64_t> crossSteps;
    for (const TraceEvent& e : t.events) {
      if (e.group == "workers" && e.kind == Collective::AllReduce && e.nranks == c.workers) crossSteps.insert(e.step);
    }
    EXPECT_EQ(crossSteps.size(), static_cast<std::size_t>(kSteps));
    const auto [diff, scale] = maxDifference(got, ref.weights);
    EXPECT_LE(diff, kRelativeTolerance * std::max(1.0, scale)) << "max |w| " << scale;
    return;
  }

  StrategyOptions options;
  options.hierarchy = c.hierarchy;
  auto s = makeStrategy(c.workers, c.local, {c.bytesPerPack, std::nullopt, c.implementation}, options);
  const TrainResult got = trainExample(*s, config(c.hidden));
  const auto [diff, scale] = maxDifference(got.weights, ref.weights);
  EXPECT_LE(diff, kRelativeTolerance * std::max(1.0, scale)) << "max |w| " << scale;
  for (int step : {0, kSteps - 1}) {
    EXPECT_NEAR(got.log[step].loss, ref.log[step].loss, 1e-4) << "step " << step;
  }
  // Mirrored: every replica holds the same weights.
  for (const Variable& v : got.variables) {
    for (int h = 1; h < v.numCopies(); ++h) {
      const auto [d, _] = maxDifference({v.copy(h)}, {v.copy(0)});
      EXPECT_EQ(d, 0.0) << v.name() << " copy " << h;
    }
  }
  // Every step issued its gradient all-reduce (in packs) and the loss reduce, in order.
  const Trace t = s->trace();
  std::int64_t lastStep = -1;
  int packsInStep0 = 0;
  for (const TraceEvent& e : t.events) {
    EXPECT_GE(e.step, lastStep);
    lastStep = e.step;
    if (e.step == 0 && e.group != "local" && e.pack > packsInStep0) packsInStep0 = e.pack;
  }
  EXPECT_EQ(lastStep, kSteps - 1);
  if (c.bytesPerPack > 0) {
    EXPECT_GT(packsInStep0, 0) << "small bytes_per_pack splits the gradients";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategy, SyncTraining,
    ::testing::Values(TrainCase{Mode::Threads, 1, 1, 0, 0, CI::Auto}, TrainCase{Mode::Threads, 1, 2, 0, 0, CI::Auto},
                      TrainCase{Mode::Threads, 1, 3, 0, 0, CI::Ring}, TrainCase{Mode::Threads, 1, 4, 0, 0, CI::Auto},
                      TrainCase{Mode::Threads, 1, 4, 8, 64, CI::Auto}, TrainCase{Mode::Threads, 2, 2, 0, 0, CI::Auto},
                      TrainCase{Mode::Threads, 3, 1, 8, 128, CI::Ring}, TrainCase{Mode::Threads, 2, 2, 8, 0, CI::Ring},
                      TrainCase{Mode::Threads, 2, 2, 0, 8, CI::Auto, HierarchyMode::Hierarchical},
                      TrainCase{Mode::Processes, 2, 1, 0, 0, CI::Auto},
                      TrainCase{Mode::Processes, 2, 2, 8, 64, CI::Auto},
                      TrainCase{Mode::Processes, 3, 1, 0, 0, CI::Ring}),
    caseName);

TEST(SyncTraining, DefaultStrategyMatchesOneReplicaExactly) {
  // One replica has nothing to sum: the strategy's 1-rank all-reduce is a copy, so the bits agree.
  const TrainResult plain = trainExample(defaultStrategy(), config(0));
  const auto [diff, scale] = maxDifference(plain.weights, reference(0).weights);
  EXPECT_EQ(diff, 0.0);
  EXPECT_GT(scale, 0.0);
  EXPECT_FALSE(plain.variables.front().isMirrored());
}

TEST(WeightsFile, TrainedWeightsRoundTrip) {
  const TrainResult trained = trainExample(defaultStrategy(), config(8));
  WeightsFile w;
  w.tool = "collbench 0.0-test";
  w.command = "collbench train --hidden 8";
  w.replicasInSync = 1;
  w.steps = kSteps;
  w.finalLoss = trained.log.back().loss;
  w.names = trained.names;
  w.weights = trained.weights;
  const std::string text = toJson(w);
  ASSERT_EQ(text.back(), '\n');
  const WeightsFile back = parseWeightsFile(text, "weights.json");
  EXPECT_EQ(back.tool, w.tool);
  EXPECT_EQ(back.command, w.command);
  EXPECT_EQ(back.replicasInSync, 1);
  EXPECT_EQ(back.steps, kSteps);
  EXPECT_EQ(back.finalLoss, w.finalLoss);
  EXPECT_EQ(back.names, (std::vector<std::string>{"W1", "b1", "W2", "b2"}));
  ASSERT_EQ(back.weights.size(), w.weights.size());
  // F32 values pass through double exactly, so the tensors come back bit for bit.
  for (std::size_t k = 0; k < w.weights.size(); ++k) EXPECT_EQ(back.weights[k], w.weights[k]) << w.names[k];
  EXPECT_EQ(toJson(back), text);
}

TEST(WeightsFile, ReaderNamesTheBadField) {
  const std::string head = R"({"format": "collbench-weights", "version": 1, "tool": "t", "command": "c",
                               "replicas_in_sync": 2, "steps": 3, "final_loss": 0.5, "names": ["b"], )";
  expectInvalid([] { parseWeightsFile(R"({"format": "collbench-perf", "version": 1})", "w.json"); },
                {"w.json", "format", "collbench-perf"});
  expectInvalid([&] { parseWeightsFile(head + R"("weights": {}})", "w.json"); }, {"w.json", "weights.b"});
  expectInvalid([&] { parseWeightsFile(head + R"("weights": {"b": {"shape": [3], "values": [1, 2]}}})", "w.json"); },
                {"w.json", "weights.b.values", "2 values do not fill shape"});
  expectInvalid([&] { parseWeightsFile(head + R"("weights": {"b": {"shape": [2], "values": [1, "x"]}}})", "w.json"); },
                {"w.json", "weights.b.values[1]", "expected a number"});
  const WeightsFile ok = parseWeightsFile(head + R"("weights": {"b": {"shape": [2], "values": [1, 2.5]}}})", "w.json");
  ASSERT_EQ(ok.weights.size(), 1u);
  EXPECT_EQ(ok.weights[0].shape(), (Shape{2}));
  EXPECT_EQ(ok.weights[0].toDoubles(), (std::vector<double>{1.0, 2.5}));
}

TEST(SyncTraining, AccuracyImproves) {
  TrainConfig c = config(8);
  c.steps = 150;
  std::vector<TrainStepLog> logs;
  const TrainResult r = trainExample(defaultStrategy(), c, [&](const TrainStepLog& l) { logs.push_back(l); });
  ASSERT_EQ(logs.size(), 150u);
  double early = 0, late = 0;
  for (int i = 0; i < 10; ++i) {
    early += logs[static_cast<std::size_t>(i)].accuracy / 10;
    late += logs[logs.size() - 1 - static_cast<std::size_t>(i)].accuracy / 10;
  }
  EXPECT_GT(late, early + 0.2) << "early " << early << " late " << late;
  EXPECT_EQ(r.names, (std::vector<std::string>{"W1", "b1", "W2", "b2"}));
}

TEST(SyncTraining, SyntheticDataIsDeterministic) {
  const SyntheticData a = makeSyntheticData(config(0)), b = makeSyntheticData(config(0));
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.features.shape(), (Shape{600, 16}));
  EXPECT_EQ(a.labels.dtype(), DType::I32);
  TrainConfig other = config(0);
  other.seed = 8;
  EXPECT_FALSE(makeSyntheticData(other).features == a.features);
  // Every class occurs.
  std::vector<int> counts(4);
  for (std::int32_t y : a.labels.toVector<std::int32_t>()) ++counts.at(static_cast<std::size_t>(y));
  for (int n : counts) EXPECT_GT(n, 30);
}

TEST(SyncTraining, ConfigErrors) {
  auto bad = [](auto edit) {
    TrainConfig c = config(0);
    edit(c);
    return c;
  };
  expectInvalid([&] { bad([](TrainConfig& c) { c.globalBatch = 0; }).validate(); }, {"global_batch must be >= 1"});
  expectInvalid([&] { bad([](TrainConfig& c) { c.hidden = -1; }).validate(); }, {"hidden must be >= 0"});
  expectInvalid([&] { bad([](TrainConfig& c) { c.learningRate = 0; }).validate(); }, {"learning_rate must be > 0"});
  expectInvalid([&] { bad([](TrainConfig& c) { c.steps = -1; }).validate(); }, {"steps must be >= 0"});
  // FILE sharding of in-memory data on two workers fails at the first step, as in TF.
  auto s = makeStrategy(2, 1);
  expectInvalid([&] { trainExample(*s, bad([](TrainConfig& c) { c.shardPolicy = AutoShardPolicy::File; })); },
                {"AutoShardPolicy FILE cannot shard", "from_tensor_slices"});
}

TEST(TrainCli, ThreadsModeMatchesTheLibraryAndWritesATrace) {
  if (!std::filesystem::exists(COLLBENCH_CLI))
    GTEST_SKIP() << "the collbench CLI is not built (" << COLLBENCH_CLI << ")";
  const auto dir = std::filesystem::temp_directory_path();
  const std::string weights = (dir / fmt::format("collbench_cli_w_{}.json", ::getpid())).string();
  const std::string tracePath = (dir / fmt::format("collbench_cli_t_{}.json", ::getpid())).string();
  const std::string args = fmt::format("train --workers 2 -n 2 {} --bytes-per-pack 8 --weights-out {} --trace {}",
                                       trainFlags(0), weights, tracePath);
  collbench::testing::CliResult r = collbench::testing::runCli(args + " --force");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 worker(s) x 2 local replica(s) = 4 replicas in sync"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("      49 "), std::string::npos) << "the last step is logged\n" << r.out;
  const auto [diff, scale] = maxDifference(readWeights(weights, 4), reference(0).weights);
  EXPECT_LE(diff, kRelativeTolerance * std::max(1.0, scale));
  const Trace t = readTrace(tracePath);
  EXPECT_EQ(t.worldSize, 4);
  EXPECT_EQ(t.topology, (TraceTopology{"threads", 2, 2}));
  EXPECT_NE(t.command.find("collbench"), std::string::npos);
  EXPECT_EQ(t.events.back().step, kSteps - 1);
  // Existing outputs need --force; bad flags are input errors (exit 2) with one-line messages.
  r = collbench::testing::runCli(args);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("exists; pass --force"), std::string::npos) << r.err;
  std::filesystem::remove(weights);
  std::filesystem::remove(tracePath);
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--mode fast", "execution mode \"fast\""},
           {"--shard-policy file --workers 2", "AutoShardPolicy FILE cannot shard"},
           {"--implementation mpi", "\"mpi\" is not one of AUTO, RING, NCCL"},
           {"--bytes-per-pack -1", "bytes_per_pack must be >= 0"},
           {"--global-batch 0", "global_batch must be >= 1"},
           {"--hierarchy tree", "--hierarchy \"tree\""},
           {"--timeout 0", "timeout_seconds must be a positive number of seconds"},
           {"--fault-signal hup", "--fault-signal \"hup\" is not one of kill, stop"},
           {"--simulate", "simulate needs a topology"},
           {"--mode processes --workers 2", "--workers is for threads mode"}}) {
    r = collbench::testing::runCli("train --steps 2 " + flags);
    EXPECT_EQ(r.exitCode, 2) << flags << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\n" << r.err;
  }
}

TEST(TrainProcesses, KilledWorkerStopsOthersWithPeerFailure) {
  // Three workers; worker 1 SIGKILLs itself after step 5 (as `kill -9` would). The others are blocked in the next
  // gradient all-reduce and must stop on their own with the backend's PeerFailure naming worker 1, well before
  // `collbench launch` would stop them (--grace 30).
  COLLBENCH_REQUIRE_PROCESS_MODE();
  const auto t0 = std::chrono::steady_clock::now();
  const collbench::testing::CliResult r = collbench::testing::runCli(fmt::format(
      "launch -n 3 --grace 30 -- {} train --mode processes --steps 1000000 --log-every 1000000 --fault-rank 1 "
      "--fault-step 5",
      COLLBENCH_CLI));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exitCode, 0);
  EXPECT_LT(seconds, 20.0) << "the surviving workers hung until the launcher stopped them";
  EXPECT_NE(r.err.find("[rank 1] collbench train: fault injection: worker 1 kills itself after step 5"),
            std::string::npos)
      << r.err;
  for (int survivor : {0, 2}) {
    const std::string line = fmt::format("[rank {}] collbench: error: worker[1] (rank 1,", survivor);
    const std::size_t at = r.err.find(line);
    ASSERT_NE(at, std::string::npos) << "worker " << survivor << " did not report the peer failure:\n" << r.err;
    const std::string rest = r.err.substr(at, r.err.find('\n', at) - at);
    EXPECT_NE(rest.find("failed: its connection to"), std::string::npos) << rest;
    // The error class is PeerFailure (not Timeout: no --timeout is set, and not a hang), in the step after the kill
    // or in step 5 itself: worker 1 has finished step 5 when it dies, but bytes it sent that a survivor had not yet
    // read are discarded when the kernel answers the dead socket with a reset, so a slow survivor can fail in step 5.
    const bool step5 = r.err.find(fmt::format("[rank {}] collbench train: worker {} stopped after step 5 with peer "
                                              "failure (Errc::PeerFailure)",
                                              survivor, survivor)) != std::string::npos;
    const bool step4 = r.err.find(fmt::format("[rank {}] collbench train: worker {} stopped after step 4 with peer "
                                              "failure (Errc::PeerFailure)",
                                              survivor, survivor)) != std::string::npos;
    EXPECT_TRUE(step4 || step5) << r.err;
  }
  EXPECT_EQ(r.err.find("Errc::Timeout"), std::string::npos) << r.err;
}

/// A line of a command's output (stdout and stderr together) and when it arrived.
struct TimedLine {
  double seconds;
  std::string text;
};

/// Runs `collbench <args>` and timestamps each output line as it arrives.
std::vector<TimedLine> runTimed(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(fmt::format("{} {} 2>&1 </dev/null", COLLBENCH_CLI, args).c_str(), "r");
  std::vector<TimedLine> lines;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string text(buf);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    lines.push_back({at, text});
  }
  ::pclose(p);
  return lines;
}

TEST(TrainProcesses, StalledWorkerTimesOutNamingThePeer) {
  // Worker 1 SIGSTOPs itself after step 5: alive, its sockets open, silent. With --timeout 2 the others must stop
  // with a Timeout naming worker 1 within timeout + 5 s and keep the trace recorded so far. (The launcher then
  // kills the stopped worker: SIGTERM waits while it is stopped, so it takes 2 x --grace.)
  COLLBENCH_REQUIRE_PROCESS_MODE();
  constexpr double kTimeout = 2;
  const std::string trace =
      (std::filesystem::temp_directory_path() / fmt::format("collbench_stall_{}_{{rank}}.json", ::getpid())).string();
  const std::vector<TimedLine> lines = runTimed(fmt::format(
      "launch -n 3 --grace 4 -- {} train --mode processes --steps 1000000 --log-every 1000000 --fault-rank 1 "
      "--fault-step 5 --fault-signal stop --timeout {} --trace {} --force",
      COLLBENCH_CLI, kTimeout, trace));
  std::string all;
  for (const TimedLine& l : lines) all += fmt::format("{:8.3f} {}\n", l.seconds, l.text);
  auto find = [&](const std::string& part) -> const TimedLine* {
    for (const TimedLine& l : lines) {
      if (l.text.find(part) != std::string::npos) return &l;
    }
    return nullptr;
  };
  const TimedLine* stopped = find("[rank 1] collbench train: fault injection: worker 1 stops itself after step 5");
  ASSERT_NE(stopped, nullptr) << all;
  for (int survivor : {0, 2}) {
    const TimedLine* report = find(fmt::format(
        "[rank {0}] collbench train: worker {0} stopped after step 5 with timeout (Errc::Timeout)", survivor));
    ASSERT_NE(report, nullptr) << "worker " << survivor << " did not time out\n" << all;
    const TimedLine* error = find(fmt::format("[rank {}] collbench: error: ", survivor));
    ASSERT_NE(error, nullptr) << all;
    EXPECT_NE(error->text.find(fmt::format("timed out after {} s waiting for worker[1] (rank 1,", kTimeout)),
              std::string::npos)
        << error->text;
    EXPECT_LE(error->seconds - stopped->seconds, kTimeout + 5) << all;
    EXPECT_GE(report->seconds - stopped->seconds, kTimeout * 0.9) << "the timeout is the option's\n" << all;
    // The trace of the steps before the failure is written, not lost.
    std::string path = trace;
    path.replace(path.find("{rank}"), 6, std::to_string(survivor));
    ASSERT_TRUE(std::filesystem::exists(path)) << all;
    const Trace t = readTrace(path);
    std::filesystem::remove(path);
    ASSERT_FALSE(t.events.empty());
    EXPECT_GE(t.events.back().step, 5);
  }
  EXPECT_EQ(all.find("Errc::PeerFailure"), std::string::npos) << all;
}

TEST(TrainCli, DataFilesShardByFile) {
  // --data-files makes FILE sharding possible: the synthetic examples ("features..., label" per line) in 4 files on
  // 2 workers, under FILE and AUTO (which must pick FILE for files). FILE changes which replica sees which example,
  // so the weights are not those of one replica; the run must succeed and learn.
  if (!std::filesystem::exists(COLLBENCH_CLI))
    GTEST_SKIP() << "the collbench CLI is not built (" << COLLBENCH_CLI << ")";
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("collbench_data_files_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const SyntheticData data = makeSyntheticData(config(0));
  std::vector<std::string> files;
  for (int k = 0; k < 4; ++k) files.push_back((dir / fmt::format("part{}.csv", k)).string());
  std::vector<std::ofstream> outs;
  for (const auto& f : files) outs.emplace_back(f);
  for (std::int64_t i = 0; i < data.features.dim(0); ++i) {
    std::ofstream& out = outs[static_cast<std::size_t>(i % 4)];
    for (std::int64_t j = 0; j < data.features.dim(1); ++j) {
      out << data.features.at(static_cast<std::size_t>(i * data.features.dim(1) + j)) << ",";
    }
    out << data.labels.at(static_cast<std::size_t>(i)) << "\n";
  }
  for (auto& o : outs) o.close();
  std::string list;
  for (const auto& f : files) list += " " + f;
  for (const char* policy : {"file", "auto"}) {
    const collbench::testing::CliResult r = collbench::testing::runCli(fmt::format(
        "train --workers 2 -n 2 --steps 40 --global-batch 20 --shard-policy {} --data-files{}", policy, list));
    EXPECT_EQ(r.exitCode, 0) << policy << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("is applying DATA sharding"), std::string::npos) << r.out;
    // The loss falls: the rows were parsed into features and labels.
    std::vector<double> losses;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      int step = 0;
      double loss = 0;
      if (fields >> step >> loss) losses.push_back(loss);
    }
    ASSERT_GE(losses.size(), 2u) << r.out;
    EXPECT_LT(losses.back(), 0.9 * losses.front()) << r.out;
  }
  // Rows of the wrong width are an input error naming the file, the line and the widths, before any worker starts.
  { std::ofstream(files[0]) << "1,2,3\n4,5,6\n"; }
  const collbench::testing::CliResult bad = collbench::testing::runCli(
      fmt::format("train --workers 2 --steps 2 --global-batch 2 --shard-policy file --data-files{}", list));
  EXPECT_EQ(bad.exitCode, 2) << bad.err;
  EXPECT_EQ(bad.err, fmt::format("collbench: error: --data-files: file '{}' line 1: 3 numbers, but 16 features and a "
                                 "label need 17\n",
                                 files[0]));
  EXPECT_EQ(bad.out, "");
  std::filesystem::remove_all(dir);
}

TEST(TrainCli, GpusWithoutADeviceFailCleanly) {
  // No GPU here (and perhaps no CUDA in this build): one line, exit 2, naming the flag.
  if (!std::filesystem::exists(COLLBENCH_CLI))
    GTEST_SKIP() << "the collbench CLI is not built (" << COLLBENCH_CLI << ")";
  const collbench::testing::CliResult probe = collbench::testing::runCli("train --gpus 1 --steps 1");
  if (probe.exitCode == 0) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(probe.exitCode, 2) << probe.err;
  EXPECT_EQ(collbench::testing::countLines(probe.err), 1) << probe.err;
  EXPECT_NE(probe.err.find("--gpus 1: "), std::string::npos) << probe.err;
  const collbench::testing::CliResult both = collbench::testing::runCli("train --gpus 1 -n 2 --steps 1");
  EXPECT_EQ(both.exitCode, 2);
  EXPECT_NE(both.err.find("--gpus 1 and --local-replicas 2"), std::string::npos) << both.err;
}

TEST(TrainCli, SimulatedWhatIfRunTimesOnTheSimulator) {
  // `collbench train --simulate --topology T`: the values are reduced in this process (same weights as one
  // replica), the collectives are timed by the "sim" backend on T, and the trace says so.
  if (!std::filesystem::exists(COLLBENCH_CLI))
    GTEST_SKIP() << "the collbench CLI is not built (" << COLLBENCH_CLI << ")";
  const auto dir = std::filesystem::temp_directory_path();
  const std::string weights = (dir / fmt::format("collbench_sim_w_{}.json", ::getpid())).string();
  const std::string tracePath = (dir / fmt::format("collbench_sim_t_{}.json", ::getpid())).string();
  const collbench::testing::CliResult r = collbench::testing::runCli(
      fmt::format("train -n 4 --simulate --topology dgx-h100-8x1 {} --weights-out {} --trace {} --force", trainFlags(0),
                  weights, tracePath));
  if (r.err.find("unknown backend 'sim'") != std::string::npos)
    GTEST_SKIP() << "this collbench has no simulator backend (COLLBENCH_WITH_SIMGRID=OFF)";
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(simulated timing)"), std::string::npos) << r.out;
  // 4 of the topology's 8 GPUs: said (a warning, on stderr), not silent.
  EXPECT_NE(r.err.find("simulate: 4 replicas in sync use ranks 0..3 of topology 'dgx-h100-8x1', which has 8 ranks"),
            std::string::npos)
      << r.err;
  // Microseconds of simulated time are printed with their digits (it used to say "0.000 s"), and what AUTO chose.
  const std::size_t at = r.out.find(" s in collectives (simulated time)");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double printed = std::stod(r.out.substr(r.out.rfind(' ', at - 1) + 1));
  EXPECT_GT(printed, 0.0) << r.out;
  EXPECT_LT(printed, 1e-2) << r.out;
  EXPECT_NE(r.out.find("# all_reduce over 4 replicas: "), std::string::npos) << r.out;
  const auto [diff, scale] = maxDifference(readWeights(weights, 4), reference(0).weights);
  EXPECT_LE(diff, kRelativeTolerance * std::max(1.0, scale));
  const Trace t = readTrace(tracePath);
  EXPECT_TRUE(t.simulated);
  EXPECT_EQ(t.backend, "sim");
  EXPECT_EQ(t.topology.name, "dgx-h100-8x1");
  EXPECT_EQ(t.worldSize, 4);
  ASSERT_FALSE(t.events.empty());
  for (const TraceEvent& e : t.events) {
    // A 4-rank all-reduce of a few hundred bytes on NVLink takes microseconds of simulated time, not the
    // milliseconds a thread rendezvous on this (shared) machine would.
    EXPECT_GT(e.endSeconds - e.startSeconds, 0.0);
    EXPECT_LT(e.endSeconds - e.startSeconds, 1e-3) << "event at step " << e.step;
  }
  std::filesystem::remove(weights);
  std::filesystem::remove(tracePath);
}

}  // namespace
}  // namespace collbench::strategy
