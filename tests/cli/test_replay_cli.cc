// `collbench workload` and `collbench replay` as users run them: generated traces carry every gradient, replays
// run the same collectives in the same order on the host threads and the simulator, rescaling keeps per-replica
// work or the global batch, and a recorded `collbench train` replays within 15% of its step time.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "cli_runner.h"

namespace collbench {
namespace {

using nlohmann::json;
using testing::CliResult;
using testing::runCli;

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / fmt::format("collbench_replay_{}_{}", ::getpid(), name);
}

json readJson(const std::filesystem::path& p) { return json::parse(testing::slurp(p)); }

bool hasBackend(const std::string& name) {
  // perf --backend X with an unknown X fails listing the available ones.
  const CliResult r = runCli("perf --backend " + name + " -b 8 -e 8 -g 1 -n 0 -w 0 -c 0");
  return r.err.find("unknown backend") == std::string::npos;
}

/// A 4-replica trace (2 workers x 2 local replicas) with every kind and group.
json handTrace() {
  json ev = json::array();
  double t = 0;
  const auto add = [&](json e, double gap, double dur, int step) {
    e["compute_gap_s"] = gap;
    e["start_s"] = t + gap;
    e["end_s"] = t + gap + dur;
    e["step"] = step;
    t += gap + dur;
    ev.push_back(e);
  };
  add({{"kind", "broadcast"},
       {"bytes", 4096},
       {"dtype", "float"},
       {"root", 1},
       {"group", "replicas"},
       {"nranks", 4},
       {"algorithm", "chain"}},
      0.001, 0.0001, -1);
  for (int s = 0; s < 3; ++s) {
    add({{"kind", "all_reduce"},
         {"bytes", 65536},
         {"dtype", "float"},
         {"op", "sum"},
         {"group", "replicas"},
         {"nranks", 4},
         {"algorithm", "ring"},
         {"pack", 0}},
        0.002, 0.0002, s);
    add({{"kind", "all_reduce"},
         {"bytes", 1024},
         {"dtype", "bfloat16"},
         {"op", "max"},
         {"group", "workers"},
         {"nranks", 2},
         {"algorithm", "no_such_algorithm"},
         {"pack", 1}},
        0.0, 0.0001, s);
    add({{"kind", "reduce_scatter"},
         {"bytes", 8192},
         {"dtype", "int32"},
         {"op", "sum"},
         {"group", "local"},
         {"nranks", 2},
         {"algorithm", ""}},
        0.0005, 0.0001, s);
    add({{"kind", "all_gather"}, {"bytes", 512}, {"dtype", "double"}, {"group", "replicas"}, {"nranks", 4}}, 0.0002,
        0.0001, s);
    add({{"kind", "barrier"}, {"bytes", 0}, {"dtype", "float"}, {"group", "replicas"}, {"nranks", 4}}, 0.0001, 0.00005,
        s);
  }
  return {{"format", "collbench-trace"},
          {"version", 1},
          {"world_size", 4},
          {"topology", {{"name", "threads"}, {"workers", 2}, {"local_replicas", 2}}},
          {"backend", "host"},
          {"simulated", false},
          {"events", ev}};
}

std::filesystem::path writeTemp(const std::string& name, const json& doc) {
  const auto p = temp(name);
  std::ofstream(p) << doc.dump(1);
  return p;
}

void expectSameCollectives(const json& trace, const json& replay) {
  ASSERT_EQ(replay["events"].size(), trace["events"].size());
  for (std::size_t i = 0; i < trace["events"].size(); ++i) {
    const json& a = trace["events"][i];
    const json& b = replay["events"][i];
    EXPECT_EQ(a["kind"], b["kind"]) << i;
    EXPECT_EQ(a["bytes"], b["bytes"]) << i;
    EXPECT_EQ(a["dtype"], b["dtype"]) << i;
    EXPECT_EQ(a["nranks"], b["nranks"]) << i;
    EXPECT_EQ(a.value("step", -1), b["step"].get<int>()) << i;
  }
}

TEST(WorkloadCli, ParameterCountsAndTraceBytes) {
  const std::pair<const char*, std::size_t> models[] = {
      {"resnet50", 25'557'032}, {"bert-large", 336'226'108}, {"gpt2-xl", 1'557'611'200}, {"llama-7b", 6'738'415'616}};
  for (const auto& [model, params] : models) {
    const auto path = temp(std::string(model) + ".json");
    std::filesystem::remove(path);
    const CliResult r = runCli(
        fmt::format("workload --model {} --dtype bfloat16 --bytes-per-pack 25M --steps 2 -o {}", model, path.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.out.find(fmt::format("parameters:          {}", params)), std::string::npos) << r.out;
    const json t = readJson(path);
    EXPECT_EQ(t["backend"], "workload");
    std::size_t step0 = 0, step1 = 0;
    for (const json& e : t["events"]) (e["step"] == 0 ? step0 : step1) += e["bytes"].get<std::size_t>();
    EXPECT_EQ(step0, params * 2) << model;
    EXPECT_EQ(step1, params * 2) << model;
    // No --force: the file is kept and the command fails as bad input.
    const CliResult again = runCli(fmt::format("workload --model {} -o {}", model, path.string()));
    EXPECT_EQ(again.exitCode, 2);
    EXPECT_NE(again.err.find("--force"), std::string::npos);
    std::filesystem::remove(path);
  }
  const CliResult bad = runCli("workload --model gpt5");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_EQ(testing::countLines(bad.err), 1) << bad.err;
  // Bad flags: one line naming the flag, exit 2. The --dtype values are those the help lists.
  EXPECT_NE(runCli("workload --help").out.find("float | half | bfloat16 | double"), std::string::npos);
  const std::pair<const char*, const char*> flags[] = {
      {"--tflops 0", "--tflops must be a number > 0"},
      {"--tflops -5", "--tflops must be a number > 0"},
      {"--steps 0", "--steps must be >= 1, got 0"},
      {"--world-size 0", "--world-size must be >= 1, got 0"},
      {"--world-size 6 --local-replicas 4", "--local-replicas 4 must divide --world-size 6"},
      {"--dtype int32", "--dtype int32: gradients are floating point (float | half | bfloat16 | double)"},
      {"--dtype float128", "--dtype: "},
      {"--seq-len -3", "--seq-len must be >= 1"},
  };
  for (const auto& [args, want] : flags) {
    const CliResult r = runCli(fmt::format("workload --model bert-large {}", args));
    EXPECT_EQ(r.exitCode, 2) << args << r.out;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << args << ": " << r.err;
  }
}

TEST(WorkloadCli, TraceLargerThanMemoryIsRefusedUpFront) {
  // 2e9 steps x 291 packs of LLaMA-7B's gradients at 2600 bytes an event: 1376 TiB, more than any machine. Refused
  // in one line before the trace is built, and no file is written.
  const auto path = temp("huge_workload.json");
  std::filesystem::remove(path);
  const CliResult r =
      runCli(fmt::format("workload --model llama-7b --steps 2000000000 --bytes-per-pack 1K -o {}", path.string()));
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("collbench: error: --steps 2000000000 x 291 packs a step (--bytes-per-pack 1K) = "
                        "582000000000 collectives: the trace needs about 1376.25 TiB of memory, more than the ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find(" available; record fewer steps or larger packs\n"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ReplayCli, HostRunsEveryKindAndGroupWithChecks) {
  const json trace = handTrace();
  const auto in = writeTemp("hand.json", trace), out = temp("hand_replay.json");
  std::filesystem::remove(out);
  const CliResult r = runCli(fmt::format("replay {} --backend host --check -J {}", in.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");  // not a terminal: no progress
  EXPECT_NE(r.out.find("overlap none"), std::string::npos);
  const json rep = readJson(out);
  expectSameCollectives(trace, rep);
  EXPECT_EQ(rep["summary"]["wrong"], 0);
  EXPECT_EQ(rep["events"][2]["nranks"], 2);                        // workers group
  EXPECT_EQ(rep["events"][2]["algorithm"], "recursive_doubling");  // unknown recorded name: the selector's choice
  EXPECT_EQ(rep["events"][1]["algorithm"], "ring");                // recorded and known: kept
  // Recorded steps: gaps 2.8 ms, collectives 0.55 ms.
  EXPECT_NEAR(rep["summary"]["recorded_step_s"].get<double>(), 0.00335, 1e-9);
  for (const json& s : rep["steps"]) EXPECT_GE(s["seconds"].get<double>(), s["compute_s"].get<double>() - 1e-12);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(ReplayCli, RescalingWeakAndStrong) {
  const json trace = handTrace();
  const auto in = writeTemp("scale.json", trace), out = temp("scale_replay.json");
  for (const char* scaling : {"weak", "strong"}) {
    std::filesystem::remove(out);
    const CliResult r = runCli(fmt::format("replay {} --backend host --gaps skip --world-size 8 --scaling {} -J {}",
                                           in.string(), scaling, out.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const json rep = readJson(out);
    EXPECT_EQ(rep["config"]["world_size"], 8);
    EXPECT_EQ(rep["config"]["workers"], 4);
    EXPECT_EQ(rep["config"]["local_replicas"], 2);
    const double scale = std::string(scaling) == "weak" ? 1.0 : 0.5;
    for (std::size_t i = 0; i < trace["events"].size(); ++i) {
      const json& a = trace["events"][i];
      const json& b = rep["events"][i];
      const std::string group = a["group"];
      EXPECT_EQ(b["nranks"], group == "replicas" ? 8 : group == "workers" ? 4 : 2) << i;
      EXPECT_NEAR(b["compute_gap_s"].get<double>(), a["compute_gap_s"].get<double>() * scale, 1e-12) << i;
      const std::size_t bytes = a["bytes"];
      EXPECT_EQ(b["bytes"],
                a["kind"] == "all_gather" ? static_cast<std::size_t>(static_cast<double>(bytes) * scale) : bytes)
          << i;
    }
    const double eff = rep["summary"]["scaling_efficiency"];
    EXPECT_GT(eff, 0);
    EXPECT_LE(eff, 1.0 + 1e-9);
  }
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(ReplayCli, BadTracesAreOneLineExitTwo) {
  json t = handTrace();
  t["events"][1]["nranks"] = 3;
  const auto in = writeTemp("bad.json", t);
  CliResult r = runCli(fmt::format("replay {} --backend host", in.string()));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("events[1].nranks"), std::string::npos) << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  r = runCli("replay /nonexistent/trace.json --backend host");
  EXPECT_EQ(r.exitCode, 2);
  const auto good = writeTemp("good.json", handTrace());
  r = runCli(fmt::format("replay {} --backend host --scaling sideways", good.string()));
  EXPECT_EQ(r.exitCode, 2);
  r = runCli(fmt::format("replay {} --backend host --algo no_such_algo", good.string()));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("no_such_algo"), std::string::npos) << r.err;
  r = runCli(fmt::format("replay {} --backend host -J {}", good.string(), in.string()));  // exists, no --force
  EXPECT_EQ(r.exitCode, 2);
  std::filesystem::remove(in);
  std::filesystem::remove(good);
}

TEST(ReplayCli, WorkloadOnSimulatorOverlapsBackward) {
  if (!hasBackend("sim")) GTEST_SKIP() << "this build has no simulator backend (COLLBENCH_WITH_SIMGRID=OFF)";
  const auto tr = temp("wl_sim.json"), out = temp("wl_sim_replay.json");
  std::filesystem::remove(tr);
  std::filesystem::remove(out);
  ASSERT_EQ(
      runCli(fmt::format("workload --model resnet50 --world-size 8 --bytes-per-pack 8M --steps 2 -o {}", tr.string()))
          .exitCode,
      0);
  const CliResult r =
      runCli(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 -J {}", tr.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("overlap trace"), std::string::npos) << r.out;  // each event's `after`
  const json trace = readJson(tr), rep = readJson(out);
  expectSameCollectives(trace, rep);
  const json& s = rep["summary"];
  // Overlap hides part of the communication: exposed < total, and the step is at least the compute.
  EXPECT_LT(s["exposed_comm_s"].get<double>(), s["comm_s"].get<double>());
  EXPECT_GE(s["replayed_step_s"].get<double>(), s["compute_s"].get<double>());
  // The replay follows the trace's dependencies: a pack's compute starts at the previous pack's issue within a step,
  // at the previous pack's end across steps; a collective starts once issued and the previous one has ended.
  const json& ev = rep["events"];
  for (std::size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["after"], trace["events"][i]["after"]) << i;
    const double base = i == 0                               ? 0.0
                        : ev[i]["after"] == "previous_issue" ? ev[i - 1]["issue_s"].get<double>()
                                                             : ev[i - 1]["end_s"].get<double>();
    EXPECT_NEAR(ev[i]["issue_s"].get<double>(), base + ev[i]["compute_gap_s"].get<double>(), 1e-12) << i;
    const double prevEnd = i == 0 ? 0.0 : ev[i - 1]["end_s"].get<double>();
    EXPECT_NEAR(ev[i]["start_s"].get<double>(), std::max(ev[i]["issue_s"].get<double>(), prevEnd), 1e-12) << i;
  }
  // The workload's `after` is what --overlap backward assumes; --overlap none waits for every pack: longer steps.
  const auto backward = temp("wl_sim_backward.json"), none = temp("wl_sim_none.json");
  for (const auto& [p, mode] : {std::pair{backward, "backward"}, std::pair{none, "none"}}) {
    std::filesystem::remove(p);
    ASSERT_EQ(runCli(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 --overlap {} -J {}", tr.string(),
                                 mode, p.string()))
                  .exitCode,
              0);
  }
  EXPECT_EQ(readJson(backward)["summary"]["replayed_step_s"], s["replayed_step_s"]);
  EXPECT_GT(readJson(none)["summary"]["replayed_step_s"].get<double>(), s["replayed_step_s"].get<double>());
  std::filesystem::remove(backward);
  std::filesystem::remove(none);
  // The simulator is deterministic: a second replay gives the same numbers.
  const auto out2 = temp("wl_sim_replay2.json");
  std::filesystem::remove(out2);
  ASSERT_EQ(
      runCli(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 -J {}", tr.string(), out2.string())).exitCode,
      0);
  EXPECT_EQ(readJson(out2)["summary"]["replayed_step_s"], s["replayed_step_s"]);
  for (const auto& p : {tr, out, out2}) std::filesystem::remove(p);
}

/// A 4-replica trace of `steps` steps, each one 64 KiB all-reduce after 2 ms of compute, except step `bigStep`, whose
/// all-reduce is `bigBytes` (recorded as taking `bigSeconds`).
json stepsTrace(int steps, int bigStep, std::size_t bigBytes, double bigSeconds) {
  json ev = json::array();
  double t = 0;
  for (int s = 0; s < steps; ++s) {
    const bool big = s == bigStep;
    const double gap = 0.002, dur = big ? bigSeconds : 0.0001;
    ev.push_back({{"kind", "all_reduce"},
                  {"bytes", big ? bigBytes : 65536},
                  {"dtype", "float"},
                  {"op", "sum"},
                  {"group", "replicas"},
                  {"nranks", 4},
                  {"algorithm", "ring"},
                  {"compute_gap_s", gap},
                  {"start_s", t + gap},
                  {"end_s", t + gap + dur},
                  {"step", s}});
    t += gap + dur;
  }
  return {{"format", "collbench-trace"},
          {"version", 1},
          {"world_size", 4},
          {"topology", {{"name", "threads"}, {"workers", 1}, {"local_replicas", 4}}},
          {"backend", "host"},
          {"simulated", false},
          {"events", ev}};
}

// One statistic throughout: step time, compute, exposed communication and efficiency all come from the median step,
// so that one enormous collective (an audit saw "682521.5% of the step" when a mean exposed time was divided by a
// median step) moves none of them, and compute + exposed = step.
TEST(ReplayCli, SummaryIsOneMedianStep) {
  if (!hasBackend("sim")) GTEST_SKIP() << "this build has no simulator backend (COLLBENCH_WITH_SIMGRID=OFF)";
  const auto in = writeTemp("big_step.json", stepsTrace(6, 3, std::size_t{256} << 30, 50.0)), out = temp("big.json");
  std::filesystem::remove(out);
  const CliResult r =
      runCli(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 -J {}", in.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const json rep = readJson(out);
  const json& s = rep["summary"];
  EXPECT_EQ(s["statistic"], "median_step");
  const double step = s["replayed_step_s"], compute = s["compute_s"], exposed = s["exposed_comm_s"];
  EXPECT_NEAR(compute + exposed, step, 1e-12 * step);
  EXPECT_NEAR(compute, 0.002, 1e-12);  // a normal step's compute
  EXPECT_LT(exposed, 0.001) << "the 256 GiB step moved the summary";
  EXPECT_NEAR(s["scaling_efficiency"].get<double>(), compute / step, 1e-12);
  // The outlier is in the steps and pulls the mean, which is printed beside the median.
  double longest = 0;
  for (const json& st : rep["steps"]) longest = std::max(longest, st["seconds"].get<double>());
  EXPECT_GT(longest, 100 * step);
  EXPECT_GT(s["replayed_mean_step_s"].get<double>(), 10 * step);
  EXPECT_NEAR(s["recorded_step_s"].get<double>(), 0.0021, 1e-12);
  // The printed share of the step is that step's, at most 100%.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"re(exposed communication [0-9.]+ s \(([0-9.]+)% of the step\))re")))
      << r.out;
  EXPECT_LE(std::stod(m[1]), 100.0) << r.out;
  EXPECT_NEAR(std::stod(m[1]), 100 * exposed / step, 0.06) << r.out;
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

// A recording of a program that overlapped its all-reduces with backward (version 2 `after`: previous_issue)
// replays with that overlap without any flag; the same events marked previous_end wait for each collective.
TEST(ReplayCli, RecordedOverlapFollowsAfter) {
  if (!hasBackend("sim")) GTEST_SKIP() << "this build has no simulator backend (COLLBENCH_WITH_SIMGRID=OFF)";
  json t = handTrace();
  t["version"] = 2;
  for (std::size_t i = 0; i < t["events"].size(); ++i) {
    json& e = t["events"][i];
    const bool first = i == 0 || e["step"] != t["events"][i - 1]["step"];
    e["after"] = first ? "previous_end" : "previous_issue";
    e["issue_s"] = e["start_s"];
  }
  json blocking = t;
  for (json& e : blocking["events"]) e["after"] = "previous_end";
  const auto overlapped = writeTemp("after_issue.json", t), waited = writeTemp("after_end.json", blocking);
  const auto o1 = temp("after_issue_replay.json"), o2 = temp("after_end_replay.json");
  std::filesystem::remove(o1);
  std::filesystem::remove(o2);
  ASSERT_EQ(runCli(fmt::format("replay {} --backend sim -J {}", overlapped.string(), o1.string())).exitCode, 0);
  ASSERT_EQ(runCli(fmt::format("replay {} --backend sim -J {}", waited.string(), o2.string())).exitCode, 0);
  const json a = readJson(o1), b = readJson(o2);
  EXPECT_EQ(a["config"]["overlap"], "trace");
  EXPECT_LT(a["summary"]["replayed_step_s"].get<double>(), b["summary"]["replayed_step_s"].get<double>());
  EXPECT_EQ(a["summary"]["compute_s"], b["summary"]["compute_s"]);
  EXPECT_EQ(a["events"][2]["after"], "previous_issue");
  EXPECT_EQ(a["events"][1]["recorded_issue_s"], t["events"][1]["issue_s"]);
  for (const auto& p : {overlapped, waited, o1, o2}) std::filesystem::remove(p);
}

TEST(ReplayCli, InputChecksExitTwoNamingTheProblem) {
  const auto good = writeTemp("checks_good.json", handTrace());
  const auto expectBad = [](const std::string& args, const std::string& want) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << args << "\n" << r.err;
  };
  expectBad(fmt::format("replay {} --backend host -T 0", good.string()), "-T/--timeout must be > 0, got 0");
  expectBad(fmt::format("replay {} --backend host -T -1", good.string()), "-T/--timeout must be > 0");
  expectBad(fmt::format("replay {} --backend host --topology dgx-h100-8x1", good.string()),
            "--topology dgx-h100-8x1 applies to --backend sim only");
  json empty = handTrace();
  empty["events"] = json::array();
  const auto emptyPath = writeTemp("checks_empty.json", empty);
  expectBad(fmt::format("replay {} --backend host", emptyPath.string()), "events: the trace has no collectives");
  json noSteps = handTrace();
  noSteps["events"] = json::array({handTrace()["events"][0]});
  const auto noStepsPath = writeTemp("checks_nosteps.json", noSteps);
  expectBad(fmt::format("replay {} --backend host", noStepsPath.string()), "no event has a step >= 0");
  // Events out of program order are named by index.
  json backwards = handTrace();
  backwards["events"][3]["start_s"] = 0.0;
  backwards["events"][3]["end_s"] = 0.0;
  const auto backwardsPath = writeTemp("checks_backwards.json", backwards);
  expectBad(fmt::format("replay {} --backend host", backwardsPath.string()), "events[3].start_s: 0 is before");
  json stepBack = handTrace();
  stepBack["events"][7]["step"] = 0;
  const auto stepBackPath = writeTemp("checks_stepback.json", stepBack);
  expectBad(fmt::format("replay {} --backend host", stepBackPath.string()), "events[7].step: 0 comes after step 1");
  // A collective too big for this machine's memory is bad input naming the event, before anything is allocated.
  const auto huge = writeTemp("checks_huge.json", stepsTrace(3, 1, std::size_t{1} << 40, 1.0));
  expectBad(fmt::format("replay {} --backend host", huge.string()), "events[1]: a 1 TiB all_reduce on 4 ranks needs");
  // The simulator holds no buffers: the same trace replays there.
  if (hasBackend("sim")) {
    EXPECT_EQ(runCli(fmt::format("replay {} --backend sim", huge.string())).exitCode, 0);
  }
  // A process backend's world must be the trace's, or the rescaling asked for.
  if (hasBackend("gloo")) {
    expectBad(fmt::format("replay {} --backend gloo", good.string()),
              "the trace has 4 replicas but the gloo world has 1 process: launch 4");
  }
  for (const auto& p : {good, emptyPath, noStepsPath, backwardsPath, stepBackPath, huge}) std::filesystem::remove(p);
}

// Worlds beyond the backend's bound, and traces too big for this machine at the world asked for, are refused before
// any backend, schedule or buffer is made (an audit saw --world-size 100000 run for minutes).
TEST(ReplayCli, HugeWorldsAreRefusedBeforeAnythingIsBuilt) {
  const auto good = writeTemp("huge_good.json", handTrace());
  const auto expectLine = [](const std::string& args, const std::string& prefix, const std::string& suffix) {
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("collbench: error: " + prefix, 0), 0u) << args << "\n" << r.err;
    EXPECT_TRUE(r.err.size() >= suffix.size() &&
                r.err.compare(r.err.size() - suffix.size(), suffix.size(), suffix) == 0)
        << args << "\n"
        << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
  };
  const std::string bound = "; use --backend sim for larger worlds\n";
  expectLine(fmt::format("replay {} --backend host --world-size 100000", good.string()),
             "--world-size 100000: backend 'host' runs at most 4096 ranks (", bound);
  expectLine(fmt::format("replay {} --backend host --world-size 4097", good.string()),
             "--world-size 4097: backend 'host' runs at most 4096 ranks (", bound);
  json wide = stepsTrace(2, 0, 1024, 0.001);
  wide["world_size"] = 5000;
  wide["topology"]["local_replicas"] = 5000;
  for (json& e : wide["events"]) e["nranks"] = 5000;
  const auto widePath = writeTemp("huge_wide.json", wide);
  expectLine(fmt::format("replay {} --backend host", widePath.string()),
             fmt::format("{}: world_size 5000: backend 'host' runs at most 4096 ranks (", widePath.string()), bound);
  // Within the bound, the buffers of the whole trace at that world are checked before the first is made.
  const auto big = writeTemp("huge_big.json", stepsTrace(3, 1, std::size_t{1} << 30, 1.0));
  expectLine(fmt::format("replay {} --backend host --world-size 4096", big.string()),
             fmt::format("{}: events[1]: a 1 GiB all_reduce on 4096 ranks needs 8 TiB of host buffers (besides 512 "
                         "MiB for earlier collectives), more than the ",
                         big.string()),
             " available here; replay it on --backend sim\n");
  for (const auto& p : {good, widePath, big}) std::filesystem::remove(p);
}

/// Runs `args`, expecting exit 2 and exactly `message` as the one error line.
void expectExactly(const std::string& args, const std::string& message) {
  const CliResult r = runCli(args);
  EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
  EXPECT_EQ(r.err, "collbench: error: " + message + "\n") << args;
  EXPECT_EQ(r.out, "") << args;
}

// Times beyond any recording are refused by the trace reader naming the field and value (a compute gap of 1e300 s
// slept for ever under --gaps wait), and so are rank counts beyond the records' bound.
TEST(ReplayCli, TraceTimesAndRanksAreBounded) {
  json gap = handTrace();
  gap["events"][2]["compute_gap_s"] = 1e300;
  const auto gapPath = writeTemp("huge_gap.json", gap);
  expectExactly(fmt::format("replay {} --backend host", gapPath.string()),
                fmt::format("{}: events[2].compute_gap_s: 1e+300 s is more than 604800 s (7 days), the most a trace "
                            "may span",
                            gapPath.string()));
  json late = handTrace();
  late["events"][15]["end_s"] = 1e7;
  const auto latePath = writeTemp("huge_late.json", late);
  expectExactly(fmt::format("replay {} --backend host", latePath.string()),
                fmt::format("{}: events[15].end_s: 10000000.0 s is more than 604800 s (7 days), the most a trace may "
                            "span",
                            latePath.string()));
  json many = handTrace();
  many["world_size"] = 100000000000LL;
  const auto manyPath = writeTemp("huge_many.json", many);
  expectExactly(fmt::format("replay {} --backend host", manyPath.string()),
                fmt::format("{}: world_size: must be in [1, 16777216], got 100000000000", manyPath.string()));
  json root = handTrace();
  root["events"][0]["root"] = 4294967297LL;  // 2^32 + 1: was read as int 1
  const auto rootPath = writeTemp("huge_root.json", root);
  expectExactly(fmt::format("replay {} --backend host", rootPath.string()),
                fmt::format("{}: events[0].root: must be in [0, 16777216], got 4294967297", rootPath.string()));
  for (const auto& p : {gapPath, latePath, manyPath, rootPath}) std::filesystem::remove(p);
}

// docs/trace.schema.json describes what the reader accepts: traces the tools write validate against it, and a
// broken one does not. Uses Python's jsonschema where it is installed (Debian: python3-jsonschema).
TEST(TraceSchema, ToolOutputValidates) {
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with jsonschema is not installed (apt-get install python3-jsonschema)";
  }
  const auto wl = temp("schema_wl.json"), hand = writeTemp("schema_hand.json", handTrace());
  std::filesystem::remove(wl);
  ASSERT_EQ(
      runCli(fmt::format("workload --model gpt2-xl --dtype half --bytes-per-pack 64M --steps 1 -o {}", wl.string()))
          .exitCode,
      0);
  json bad = handTrace();
  bad["events"][1]["bytes"] = 6;  // not a multiple of the float size
  bad["events"][2].erase("op");   // a reducing kind without op
  const auto broken = writeTemp("schema_bad.json", bad);
  // Version 2 fields in a version 1 document.
  json oldWithNew = handTrace();
  oldWithNew["model"] = "mlp";
  oldWithNew["events"][1]["after"] = "previous_issue";
  const auto mixed = writeTemp("schema_mixed.json", oldWithNew);
  json v2 = handTrace();
  v2["version"] = 2;
  v2["model"] = "mlp";
  v2["dtype"] = "float";
  for (json& e : v2["events"]) {
    e["after"] = "previous_end";
    e["issue_s"] = e["start_s"];
  }
  const auto hand2 = writeTemp("schema_hand2.json", v2);
  const std::string schema = (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "docs" / "trace.schema.json").string();
  const auto validate = [&](const std::filesystem::path& doc) {
    const std::string cmd = fmt::format(
        "python3 -c \"import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
        "jsonschema.Draft202012Validator.check_schema(s); "
        "errs = list(jsonschema.Draft202012Validator(s).iter_errors(json.load(open(sys.argv[2])))); "
        "sys.exit(1 if errs else 0)\" {} {}",
        schema, doc.string());
    return std::system(cmd.c_str());
  };
  EXPECT_EQ(validate(wl), 0);
  EXPECT_EQ(validate(hand), 0);
  EXPECT_EQ(validate(hand2), 0);
  EXPECT_NE(validate(broken), 0);
  EXPECT_NE(validate(mixed), 0);
  // The workload trace is version 2 with the dependency on backward progress.
  const json w = readJson(wl);
  EXPECT_EQ(w["version"], 2);
  EXPECT_EQ(w["model"], "gpt2-xl");
  EXPECT_EQ(w["dtype"], "half");
  EXPECT_EQ(w["events"][0]["after"], "previous_end");
  // The reader agrees on each.
  EXPECT_EQ(runCli(fmt::format("replay {} --backend host", broken.string())).exitCode, 2);
  EXPECT_EQ(runCli(fmt::format("replay {} --backend host", mixed.string())).exitCode, 2);
  EXPECT_EQ(runCli(fmt::format("replay {} --backend host --gaps skip", hand2.string())).exitCode, 0);
  for (const auto& p : {wl, hand, broken, mixed, hand2}) std::filesystem::remove(p);
}

bool hasTrain() { return runCli("train --help").exitCode == 0; }

// Acceptance (issue #9): record `collbench train` on 4 replicas, replay on host threads and on the simulator: the
// same collectives in the same order and sizes, and the host replay's step time within 15% of the recording's.
TEST(ReplayCli, RecordedTrainReplaysWithin15Percent) {
  if (!hasTrain()) GTEST_SKIP() << "this build has no `collbench train` (strategy library absent)";
  const auto tr = temp("train.json"), out = temp("train_replay.json");
  // A model whose step is mostly compute (a 256-wide hidden layer, 512 examples per step): the replay reproduces
  // the compute gaps exactly and times the collectives anew.
  const std::string train =
      "train -n 4 --steps 20 --hidden 256 --features 256 -b 512 --examples 8192 --log-every 100 --force --trace ";
  // Shared CI machines preempt: a recording and a replay taken at different moments can each lose their CPU for a
  // while. Steps are medians; a pair that still disagrees is retaken (at most 3 times).
  double best = 1e9;
  std::string lines;
  for (int attempt = 0; attempt < 3 && best > 0.15; ++attempt) {
    std::filesystem::remove(out);
    const CliResult rec = runCli(train + tr.string());
    ASSERT_EQ(rec.exitCode, 0) << rec.err;
    const CliResult rep = runCli(fmt::format("replay {} --backend host -J {}", tr.string(), out.string()));
    ASSERT_EQ(rep.exitCode, 0) << rep.err;
    const json trace = readJson(tr), r = readJson(out);
    expectSameCollectives(trace, r);
    EXPECT_EQ(trace["world_size"], 4);
    const double recorded = r["summary"]["recorded_step_s"], replayed = r["summary"]["replayed_step_s"];
    best = std::min(best, std::abs(replayed / recorded - 1));
    lines += fmt::format("attempt {}: recorded {:.6f} s, replayed {:.6f} s\n", attempt, recorded, replayed);
  }
  EXPECT_LE(best, 0.15) << lines;
  std::fprintf(stderr, "%s", lines.c_str());
  if (hasBackend("sim")) {
    std::filesystem::remove(out);
    const CliResult sim = runCli(fmt::format("replay {} --backend sim -J {}", tr.string(), out.string()));
    ASSERT_EQ(sim.exitCode, 0) << sim.err;
    expectSameCollectives(readJson(tr), readJson(out));
  }
  std::filesystem::remove(tr);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace collbench
