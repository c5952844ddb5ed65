// The run layer (collbench/run.h): choice, schedule cache, measurement against the reference, one simulation per
// distinct call, admission, and the one bytes->count rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

/// A backend that moves no data and counts how often it is asked to time something: the time it reports is
/// 1 us per byte of the spec's input, so a test can tell which call a time came from.
class CountingSimulator final : public Backend {
 public:
  std::string_view name() const override { return "counting"; }
  int nranks() const override { return n_; }
  bool movesData() const override { return false; }
  RunResult run(const Schedule& s, const Buffers&, const RunOptions&) override {
    ++runs;
    return RunResult{static_cast<double>(s.spec.inputBytes()) * 1e-6, {}, s.algorithm, 0};
  }
  RunResult runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams&,
                         const RunOptions&) override {
    ++algorithmRuns;
    return RunResult{static_cast<double>(spec.inputBytes()) * 1e-6, {}, std::string(algorithm), 0};
  }
  int runs = 0, algorithmRuns = 0;

 private:
  int n_ = 4;
};

CollectiveSpec allReduce(int n, std::size_t bytes) {
  return CollectiveSpec{Collective::AllReduce, n, countForBytes(Collective::AllReduce, n, bytes, DType::F32)};
}

TEST(Runner, MeasuresEveryAlgorithmCorrectlyOnThreads) {
  auto backend = host::makeThreadsBackend(4);
  Runner runner(*backend, RunnerOptions{});
  for (const char* algo : {"ring", "tree", "recursive_doubling", "rabenseifner", "direct"}) {
    for (bool inPlace : {false, true}) {
      const CollectiveSpec spec = allReduce(4, 4096);
      const Plan plan = runner.plan(spec, CallConfig{algo, 0, 1});
      EXPECT_EQ(plan.choice.algorithm, algo);
      const Timing t = runner.measure(spec, plan, MeasureSpec{inPlace, 2, 1, false, true, 1});
      EXPECT_EQ(t.wrong, 0) << algo << (inPlace ? " in place" : " out of place");
      EXPECT_GT(t.seconds, 0) << algo;
    }
  }
}

TEST(Runner, BlockingAndUncheckedMeasurements) {
  auto backend = host::makeThreadsBackend(3);
  Runner runner(*backend, RunnerOptions{});
  const CollectiveSpec spec = allReduce(3, 1024);
  const Plan plan = runner.plan(spec, CallConfig{"ring", 0, 1});
  const Timing blocking = runner.measure(spec, plan, MeasureSpec{false, 3, 0, true, true, 3});
  EXPECT_EQ(blocking.wrong, 0);
  const Timing unchecked = runner.measure(spec, plan, MeasureSpec{false, 1, 0, false, false, 1});
  EXPECT_EQ(unchecked.wrong, -1);
}

TEST(Runner, SchedulesAreBuiltOnceAndDroppedOverTheCap) {
  auto backend = host::makeThreadsBackend(2);
  Runner runner(*backend, RunnerOptions{});
  const CollectiveSpec spec = allReduce(2, 1024);
  const Schedule& a = runner.schedule(spec, "ring", AlgoParams{});
  const Schedule& b = runner.schedule(spec, "ring", AlgoParams{});
  EXPECT_EQ(&a, &b);
  const Schedule& other = runner.schedule(spec, "ring", AlgoParams{0, 2, {}});
  EXPECT_NE(&a, &other);
  EXPECT_EQ(other.algorithm, "ring");
}

TEST(Runner, SimulatesEachDistinctCallOnce) {
  CountingSimulator sim;
  Runner runner(sim, RunnerOptions{});
  const CollectiveSpec spec = allReduce(4, 1 << 20);
  const Plan plan = runner.plan(spec, CallConfig{"ring", 0, 1});
  const Timing outOfPlace = runner.measure(spec, plan, MeasureSpec{false, 20, 1, false, true, 1});
  const Timing inPlace = runner.measure(spec, plan, MeasureSpec{true, 20, 1, false, true, 1});
  EXPECT_EQ(sim.algorithmRuns, 1);  // perf's two halves of a row are one simulation
  EXPECT_EQ(sim.runs, 0);           // through runAlgorithm: the simulator's one method choice
  EXPECT_DOUBLE_EQ(outOfPlace.seconds, static_cast<double>(1 << 20) * 1e-6);
  EXPECT_EQ(inPlace.seconds, outOfPlace.seconds);
  EXPECT_EQ(outOfPlace.wrong, -1);  // nothing to check without data
  // Another configuration is another simulation; times() reuses the cache.
  const std::vector<double> us =
      runner.times(spec, {plan, Plan{Choice{"ring", ""}, AlgoParams{0, 2, {}}}}, MeasureOptions{});
  EXPECT_EQ(sim.algorithmRuns, 2);
  EXPECT_DOUBLE_EQ(us[0], static_cast<double>(1 << 20));
}

TEST(Runner, GivenSchedulesRunInsteadOfTheGenerator) {
  CountingSimulator sim;
  Runner runner(sim, RunnerOptions{});
  const CollectiveSpec spec = allReduce(4, 4096);
  Plan plan{Choice{"mine", "from a file"}, AlgoParams{}};
  plan.schedule = std::make_shared<const Schedule>(buildSchedule(spec, "ring"));
  runner.measure(spec, plan, MeasureSpec{});
  runner.measure(spec, plan, MeasureSpec{true});
  EXPECT_EQ(sim.runs, 1);
  EXPECT_EQ(sim.algorithmRuns, 0);
}

TEST(Runner, AutoTakesTheSelectorsConfigurationUnlessTheUserSetsOne) {
  CountingSimulator sim;
  const Topology topo = flatTopology(4, 50, 1);
  Runner runner(sim, RunnerOptions{&topo});
  const CollectiveSpec spec = allReduce(4, 64 << 20);
  const Plan chosen = runner.plan(spec, CallConfig{});
  EXPECT_FALSE(chosen.choice.algorithm.empty());
  EXPECT_EQ(chosen.params.chunkBytes, chosen.choice.chunkBytes);
  EXPECT_EQ(chosen.params.channels, chosen.choice.channels);
  const Plan pinned = runner.plan(spec, CallConfig{"auto", 0, 3});
  EXPECT_EQ(pinned.params.channels, 3);
  for (const Alternative& a : pinned.choice.ranking) EXPECT_EQ(a.channels, 3);
  // A simulator never runs the trial: the plan is the selector's.
  EXPECT_EQ(runner.choose(spec, CallConfig{}).choice.algorithm, chosen.choice.algorithm);
  EXPECT_EQ(sim.algorithmRuns + sim.runs, 0);
}

TEST(Runner, AdmissionRefusesBuffersLargerThanMemory) {
  const CollectiveSpec huge = allReduce(8, std::size_t{1} << 42);  // 4 TiB per rank
  try {
    admitBuffers(huge, -1, "-e/--maxbytes 4 TiB");
    FAIL() << "admitted 64 TiB of buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("-e/--maxbytes 4 TiB: all_reduce 4 TiB on 8 ranks needs 64 TiB"), std::string::npos) << m;
    EXPECT_NE(m.find("of memory available"), std::string::npos) << m;
  }
  // One rank per process holds its own buffers only.
  EXPECT_NO_THROW(admitBuffers(allReduce(8, 1 << 20), 3, "-e"));
}

TEST(Runner, OneBytesToCountRule) {
  // nccl-tests: the whole buffer for reduce-scatter and all-gather, per-rank blocks rounded down to 16 bytes.
  EXPECT_EQ(countForBytes(Collective::AllReduce, 3, 1000, DType::F32), 250u);
  EXPECT_EQ(countForBytes(Collective::ReduceScatter, 3, 1000, DType::F32), 80u);
  EXPECT_EQ(countForBytes(Collective::AllGather, 4, 1024, DType::F64), 32u);
  EXPECT_EQ(countForBytes(Collective::ReduceScatter, 3, 1000, DType::F32, 1), 83u);
  EXPECT_EQ(countForBytes(Collective::Broadcast, 3, 7, DType::F32), 1u);
}

}  // namespace
}  // namespace collbench
