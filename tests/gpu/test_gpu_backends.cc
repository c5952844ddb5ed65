// The GPU backends end to end against the host reference: every schedule on cuda-1gpu (n ranks on one device), the
// nccl backend with one rank (native calls and schedules), native NCCL vs our schedules on several GPUs (results
// equal), and the watchdog's timeout.
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/reference.h"
#include "device_rank.h"
#include "gpu_test_util.h"

namespace collbench::nccl {
namespace {

Backend& cached(const std::string& kind, int n) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<Backend>> cache;
  auto& b = cache[{kind, n}];
  if (!b) b = kind == "nccl" ? makeNcclBackend(n) : makeSingleGpuBackend(n);
  return *b;
}

AlgoParams paramsFor(int n, AlgoParams p = {}) {
  // Hierarchical all-reduce wants equal hosts: two or three ranks per host where n allows, else one host.
  const int perHost = n % 2 == 0 ? 2 : n % 3 == 0 ? 3 : n;
  p.rankHost.clear();
  for (int r = 0; r < n; ++r) p.rankHost.push_back(r / perHost);
  return p;
}

bool reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

/// Runs `s` on `b` once per layout and checks against the reference; returns the outputs of each layout.
std::vector<std::vector<std::byte>> runChecked(Backend& b, const Schedule& s, const std::string& what) {
  std::vector<std::vector<std::byte>> outputs;
  for (bool inPlace : {false, true}) {
    RankBufferSet bufs(s.spec, inPlace);
    bufs.fill();
    b.run(s, bufs.views(), RunOptions{1, 0, 60.0});
    EXPECT_EQ(bufs.countWrong(), 0u) << what << (inPlace ? ", in place" : ", out of place");
    std::vector<std::byte> all;
    for (const auto& v : bufs.views()) {
      const auto* p = static_cast<const std::byte*>(v.output);
      all.insert(all.end(), p, p + s.spec.outputBytes());
    }
    outputs.push_back(std::move(all));
  }
  return outputs;
}

struct Case {
  const AlgorithmInfo* algo;
  int nranks;
  std::size_t count;
  DType dtype;
  ReduceOp op;
};

std::string caseName(const Case& c) {
  return fmt::format("{}_{}_n{}_c{}_{}_{}", toString(c.algo->collective), c.algo->name, c.nranks, c.count,
                     toString(c.dtype), toString(c.op));
}

std::vector<Case> singleGpuCases() {
  std::vector<Case> cases;
  for (const auto& a : algorithms()) {
    if (a.native || a.traits.needsSwitchReduction) continue;
    for (int n : {1, 2, 3, 4, 5, 8}) {
      for (std::size_t count : {0u, 1u, 7u, 1000u, 65537u}) {
        if (a.collective == Collective::Barrier && count != 0) continue;
        cases.push_back({&a, n, count, DType::F32, ReduceOp::Sum});
        if (count == 1000 && reduces(a.collective)) {
          for (DType t : kAllDTypes) {
            for (ReduceOp op : kAllReduceOps) {
              if (t != DType::F32 || op != ReduceOp::Sum) cases.push_back({&a, n, count, t, op});
            }
          }
        }
        if (count == 65537 && reduces(a.collective)) cases.push_back({&a, n, count, DType::BF16, ReduceOp::Avg});
      }
    }
  }
  return cases;
}

class GpuSingle : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSingle, MatchesReference) {
  COLLBENCH_REQUIRE_GPUS(1);
  const Case& c = GetParam();
  const CollectiveSpec spec{c.algo->collective, c.nranks, c.count, c.dtype, c.op, c.nranks / 2};
  runChecked(cached("cuda-1gpu", c.nranks), c.algo->build(spec, paramsFor(c.nranks)), caseName(c));
}

INSTANTIATE_TEST_SUITE_P(All, GpuSingle, ::testing::ValuesIn(singleGpuCases()),
                         [](const auto& paramInfo) { return caseName(paramInfo.param); });

TEST(GpuSingleBackend, PipelinedChannelsAndRepeatedIterations) {
  COLLBENCH_REQUIRE_GPUS(1);
  for (const auto& a : algorithms()) {
    if (a.native || a.collective == Collective::Barrier || a.traits.needsSwitchReduction) continue;
    for (int n : {2, 3, 5, 8}) {
      const CollectiveSpec spec{a.collective, n, 4099, DType::F32, ReduceOp::Sum, 1 % n};
      AlgoParams p;
      p.chunkBytes = 256;
      p.channels = 4;
      const Schedule s = a.build(spec, paramsFor(n, p));
      Backend& b = cached("cuda-1gpu", n);
      RankBufferSet bufs(spec, false);
      bufs.fill();
      const RunResult timed = b.run(s, bufs.views(), RunOptions{3, 1, 60.0});  // events reused across iterations
      EXPECT_GT(timed.seconds, 0.0);
      EXPECT_EQ(timed.rankSeconds.size(), static_cast<std::size_t>(n));
      bufs.fill();
      b.run(s, bufs.views(), {});
      EXPECT_EQ(bufs.countWrong(), 0u) << toString(a.collective) << " " << a.name << " n=" << n;
    }
  }
}

TEST(GpuSingleBackend, RejectsNativeSchedules) {
  COLLBENCH_REQUIRE_GPUS(1);
  const CollectiveSpec spec{Collective::AllReduce, 2, 16, DType::F32};
  RankBufferSet bufs(spec, false);
  try {
    cached("cuda-1gpu", 2).run(buildSchedule(spec, kNativeAlgorithm), bufs.views(), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
  }
}

TEST(GpuMonitor, TimeoutNamesRankAndAborts) {
  COLLBENCH_REQUIRE_GPUS(1);
  // A stream blocked by a host callback for longer than the timeout: the watchdog must give up, name the rank and
  // call the abort hook (ncclCommAbort in the nccl backend), instead of waiting for the stream. With a stride of 4
  // the only progress event is iteration 3's, which covers the four issued iterations.
  for (const std::size_t stride : {std::size_t{1}, std::size_t{4}}) {
    SCOPED_TRACE(fmt::format("stride {}", stride));
    DeviceRank rank(3, 0);
    rank.ensureIterationEvents(stride);
    bool aborted = false;
    RunMonitor monitor(
        {{&rank, nullptr}}, 0.05, [&aborted] { aborted = true; }, stride);
    auto sleeper = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(400)); };
    ASSERT_EQ(cudaLaunchHostFunc(rank.stream(), sleeper, nullptr), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(rank.iterationEvents()[stride - 1], rank.stream()), cudaSuccess);
    monitor.noteRecorded(0, stride - 1);
    ASSERT_EQ(cudaEventRecord(rank.stopEvent(), rank.stream()), cudaSuccess);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      monitor.waitAll();
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::Timeout);
      EXPECT_EQ(e.rank(), 3);
      EXPECT_NE(std::string(e.what()).find("rank 3 timed out after 0.05 s"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fmt::format("(0 of {} issued iterations finished)", stride)),
                std::string::npos)
          << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(350));
    EXPECT_TRUE(aborted);
  }
}

TEST(GpuNcclOneRank, NativeCollectivesMatchReference) {
  COLLBENCH_REQUIRE_GPUS(1);
  Backend& b = cached("nccl", 1);
  for (const auto& a : algorithms()) {
    if (!a.native || a.name != kNativeAlgorithm) continue;
    for (DType t : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        if (!reduces(a.collective) && op != ReduceOp::Sum) continue;
        const CollectiveSpec spec{a.collective, 1, 1000, t, op, 0};
        runChecked(b, buildSchedule(spec, kNativeAlgorithm), fmt::format("native {}", describe(spec)));
      }
    }
  }
}

TEST(GpuNcclOneRank, SchedulesMatchReferenceAndRecordNcclSettings) {
  COLLBENCH_REQUIRE_GPUS(1);
  Backend& b = cached("nccl", 1);
  for (const auto& a : algorithms()) {
    if (a.native || a.traits.needsSwitchReduction) continue;
    const std::size_t count = a.collective == Collective::Barrier ? 0 : 4099;
    const CollectiveSpec spec{a.collective, 1, count, DType::F16, ReduceOp::Sum, 0};
    const auto ours = runChecked(b, a.build(spec, paramsFor(1)), a.name);
    if (a.collective == Collective::Barrier) continue;
    EXPECT_TRUE(ours == runChecked(b, buildSchedule(spec, kNativeAlgorithm), "native")) << a.name;
  }
  const CollectiveSpec spec{Collective::AllReduce, 1, 64, DType::F32};
  RankBufferSet bufs(spec, false);
  bufs.fill();
  const RunResult r = b.run(buildSchedule(spec, kNativeAlgorithm), bufs.views(), RunOptions{2, 1, 60.0});
  EXPECT_NE(r.algorithm.find("NCCL_ALGO="), std::string::npos) << r.algorithm;
  EXPECT_NE(r.algorithm.find("NCCL_PROTO="), std::string::npos) << r.algorithm;
  EXPECT_GT(r.seconds, 0.0);
}

// ---- Two or more GPUs ----

int multiGpuRanks() { return std::min(probeDevices().count, 8); }

TEST(MultiGpuNccl, SchedulesEqualNativeNccl) {
  COLLBENCH_REQUIRE_GPUS(2);
  for (int n : {2, multiGpuRanks()}) {
    Backend& b = cached("nccl", n);
    for (const auto& a : algorithms()) {
      if (a.native || a.traits.needsSwitchReduction) continue;
      for (std::size_t count : {1u, 1000u, 65537u}) {
        if (a.collective == Collective::Barrier) count = 0;
        const CollectiveSpec spec{a.collective, n, count, DType::F32, ReduceOp::Sum, n - 1};
        const auto ours = runChecked(b, a.build(spec, paramsFor(n)), fmt::format("{} n={}", a.name, n));
        if (a.collective == Collective::Barrier) continue;
        const auto theirs = runChecked(b, buildSchedule(spec, kNativeAlgorithm), fmt::format("native n={}", n));
        // The reference inputs make every reduction order exact, so the outputs agree bit for bit.
        for (std::size_t k = 0; k < ours.size(); ++k) {
          if (a.collective == Collective::Reduce) continue;  // non-root outputs are unspecified for native reduce
          EXPECT_TRUE(ours[k] == theirs[k]) << describe(spec) << " " << a.name << (k ? " in place" : " out of place");
        }
      }
    }
  }
}

TEST(MultiGpuNccl, EveryDtypeAndOp) {
  COLLBENCH_REQUIRE_GPUS(2);
  const int n = multiGpuRanks();
  Backend& b = cached("nccl", n);
  for (const char* algo : {"ring", "tree", "rabenseifner"}) {
    for (DType t : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        const CollectiveSpec spec{Collective::AllReduce, n, 1000, t, op};
        runChecked(b, buildSchedule(spec, algo, paramsFor(n)), fmt::format("{} {}", algo, describe(spec)));
        // NCCL averages floats as sum(x * (1/n)): exact only when 1/n is (n a power of two); otherwise its rounding
        // may differ from the reference's sum / n by more than the one ulp the checker allows.
        const bool powerOfTwo = (n & (n - 1)) == 0;
        if (op == ReduceOp::Avg && isFloating(t) && !powerOfTwo) continue;
        runChecked(b, buildSchedule(spec, kNativeAlgorithm), fmt::format("native {}", describe(spec)));
      }
    }
  }
}

TEST(MultiGpuNccl, PipelinedChannels) {
  COLLBENCH_REQUIRE_GPUS(2);
  const int n = multiGpuRanks();
  for (const auto& a : algorithms()) {
    if (a.native || a.collective == Collective::Barrier || a.traits.needsSwitchReduction) continue;
    const CollectiveSpec spec{a.collective, n, 4099, DType::BF16, ReduceOp::Max, 0};
    AlgoParams p;
    p.chunkBytes = 256;
    p.channels = 4;
    runChecked(cached("nccl", n), a.build(spec, paramsFor(n, p)), a.name);
  }
}

}  // namespace
}  // namespace collbench::nccl
