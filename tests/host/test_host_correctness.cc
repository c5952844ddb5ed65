// Every algorithm on the threads backend, against the reference, for ranks 1..17, counts {0,1,7,1000,65537},
// every dtype and op, out of place and in place, with unique per-element inputs (collbench/reference.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "algo_params_for_tests.h"
#include "collbench/algorithms.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"

namespace collbench {
namespace {

Backend& backendFor(int n) {
  static std::map<int, std::unique_ptr<Backend>> cache;
  auto& b = cache[n];
  if (!b) b = host::makeThreadsBackend(n);
  return *b;
}

struct Case {
  const AlgorithmInfo* algo;
  int nranks;
  std::size_t count;
  DType dtype;
  ReduceOp op;
};

/// The full sweep of issue #2; COLLBENCH_QUICK_SWEEP (set by the asan/tsan presets, whose runs are 5-20x slower)
/// keeps a corner-covering subset: 1, 2, a non-power of two, a power of two; tiny, odd and mid sizes; 4- and
/// 2-byte floats and 8-byte integers.
std::vector<Case> allCases() {
  const bool quick = std::getenv("COLLBENCH_QUICK_SWEEP") != nullptr;
  std::vector<int> ranks;
  for (int n = 1; n <= 17; ++n) ranks.push_back(n);
  std::vector<std::size_t> counts{0, 1, 7, 1000, 65537};
  std::vector<DType> dtypes(std::begin(kAllDTypes), std::end(kAllDTypes));
  if (quick) {
    ranks = {1, 2, 3, 5, 8};
    counts = {0, 7, 1000};
    dtypes = {DType::F32, DType::F16, DType::I64};
  }
  std::vector<Case> cases;
  for (const auto& a : algorithms()) {
    if (a.native || a.traits.needsSwitchReduction) continue;  // switch ops: the host backend has no such switch
    const bool reduces = a.collective == Collective::AllReduce || a.collective == Collective::ReduceScatter ||
                         a.collective == Collective::Reduce;
    for (int n : ranks) {
      for (std::size_t count : counts) {
        if (a.collective == Collective::Barrier && count != 0) continue;
        for (DType t : dtypes) {
          for (ReduceOp op : kAllReduceOps) {
            if (!reduces && op != ReduceOp::Sum) continue;  // the op is irrelevant to data movement
            cases.push_back({&a, n, count, t, op});
          }
        }
      }
    }
  }
  return cases;
}

class HostCorrectness : public ::testing::TestWithParam<Case> {};

TEST_P(HostCorrectness, MatchesReference) {
  const Case& c = GetParam();
  const CollectiveSpec spec{c.algo->collective, c.nranks, c.count, c.dtype, c.op, c.nranks / 2};
  const Schedule s = c.algo->build(spec, testing::paramsFor(c.algo->name, c.nranks));
  for (bool inPlace : {false, true}) {
    RankBufferSet bufs(spec, inPlace);
    bufs.fill();
    backendFor(c.nranks).run(s, bufs.views(), RunOptions{1, 0, 30.0});
    EXPECT_EQ(bufs.countWrong(), 0u) << (inPlace ? "in place" : "out of place");
  }
}

INSTANTIATE_TEST_SUITE_P(All, HostCorrectness, ::testing::ValuesIn(allCases()), [](const auto& paramInfo) {
  const Case& c = paramInfo.param;
  return fmt::format("{}_{}_n{}_c{}_{}_{}", toString(c.algo->collective), c.algo->name, c.nranks, c.count,
                     toString(c.dtype), toString(c.op));
});

TEST(HostBackend, PipelinedAndChanneledSchedules) {
  for (const auto& a : algorithms()) {
    if (a.native || a.traits.needsSwitchReduction) continue;
    if (a.collective == Collective::Barrier) continue;
    for (int n : {2, 3, 5, 8}) {
      const CollectiveSpec spec{a.collective, n, 4099, DType::F32, ReduceOp::Sum, 1 % n};
      const Schedule s = a.build(spec, testing::paramsFor(a.name, n, AlgoParams{256, 4, {}}));
      RankBufferSet bufs(spec, false);
      bufs.fill();
      backendFor(n).run(s, bufs.views(), RunOptions{3, 1, 30.0});  // repeated iterations reuse slots by epoch
      bufs.fill();
      backendFor(n).run(s, bufs.views(), {});
      EXPECT_EQ(bufs.countWrong(), 0u) << toString(a.collective) << " " << a.name << " n=" << n;
    }
  }
}

TEST(HostBackend, TreeOnHostsMatchesReference) {
  // NCCL's host tree (chains inside hosts, a double binary tree over hosts) on equal and unequal hosts.
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 0, 0, 1, 1, 1, 2, 2, 2}, {0, 0, 0, 1, 2, 2}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}};
  for (const std::vector<int>& hosts : layouts) {
    const int n = static_cast<int>(hosts.size());
    for (int channels : {1, 3}) {
      for (std::size_t count : {std::size_t{7}, std::size_t{4099}}) {
        const CollectiveSpec spec{Collective::AllReduce, n, count, DType::F32, ReduceOp::Sum, 0};
        const Schedule s = buildSchedule(spec, "tree", AlgoParams{256, channels, hosts});
        for (bool inPlace : {false, true}) {
          RankBufferSet bufs(spec, inPlace);
          bufs.fill();
          backendFor(n).run(s, bufs.views(), {});
          EXPECT_EQ(bufs.countWrong(), 0u) << "n=" << n << " channels " << channels << " count " << count;
        }
      }
    }
  }
}

TEST(HostBackend, SmallMessagesStayRightOverManyIterations) {
  // Messages this small go eagerly: a sender copies them into one of two buffers per send/recv pair and moves on, up
  // to an epoch ahead of its receiver. Many back-to-back iterations exercise the buffer reuse; out of place, every
  // iteration recomputes the same result, so the last one must still match the reference.
  for (const char* name : {"ring", "recursive_doubling", "direct", "tree"}) {
    for (int n : {2, 3, 5}) {
      const CollectiveSpec spec{Collective::AllReduce, n, 7, DType::F32, ReduceOp::Sum};
      const Schedule s = buildSchedule(spec, name, testing::paramsFor(name, n));
      RankBufferSet bufs(spec, false);
      bufs.fill();
      backendFor(n).run(s, bufs.views(), RunOptions{300, 10, 30.0});
      EXPECT_EQ(bufs.countWrong(), 0u) << name << " n=" << n;
    }
  }
}

TEST(HostBackend, BlockReadOneBlockOffShowsForEveryDtypeAndOp) {
  // 17 ranks, 17 blocks of 60 elements. Rank 3's first ring send reads the block after the one it names, so that
  // rank's contribution to block 3 comes from the wrong place. Inputs folded modulo 15 (what bf16 sums once used
  // at n=17: 256 / 17) or a product pattern of period 3 would be identical one block (60 elements) away, and the
  // bug would pass unseen.
  constexpr int kRanks = 17, kBlock = 60, kRank = 3;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      const CollectiveSpec spec{Collective::AllReduce, kRanks, kRanks * kBlock, t, op};
      Schedule s = buildSchedule(spec, "ring");
      RankBufferSet bufs(spec, false);
      bufs.fill();
      backendFor(kRanks).run(s, bufs.views(), {});
      ASSERT_EQ(bufs.countWrong(), 0u) << describe(spec);
      auto& ops = s.ranks[kRank].ops;
      const auto send = std::find_if(ops.begin(), ops.end(), [](const Op& o) { return o.kind == OpKind::Send; });
      ASSERT_NE(send, ops.end());
      ASSERT_EQ(send->src.buffer, BufferKind::Input);
      ASSERT_EQ(send->bytes, kBlock * dtypeSize(t));
      send->src.offset += send->bytes;  // block kRank + 1 instead of kRank; still inside the input
      bufs.fill();
      backendFor(kRanks).run(s, bufs.views(), {});
      EXPECT_GT(bufs.countWrong(), 0u) << describe(spec);
    }
  }
}

TEST(HostBackend, InputsAreDistinctWhereExactnessAllows) {
  constexpr int n = 17;
  constexpr std::size_t count = 1000;
  for (DType t : {DType::BF16, DType::F16}) {
    // Min/max and data movement: every input of every rank distinct (17000 values, fewer than a 16-bit float has).
    for (const CollectiveSpec spec : {CollectiveSpec{Collective::AllReduce, n, count, t, ReduceOp::Max},
                                      CollectiveSpec{Collective::AllGather, n, count, t, ReduceOp::Sum}}) {
      std::set<double> seen;
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < count; ++i) seen.insert(inputValue(spec, r, i));
      }
      EXPECT_EQ(seen.size(), n * count) << describe(spec);
    }
    // Sum: at each element the ranks' addends are distinct and nonzero (a dropped or doubled one changes the sum),
    // and the expected sums repeat with no period shorter than 500 elements.
    const CollectiveSpec sum{Collective::AllReduce, n, count, t, ReduceOp::Sum};
    std::vector<double> expect(count);
    for (std::size_t i = 0; i < count; ++i) {
      std::set<double> addends;
      for (int r = 0; r < n; ++r) addends.insert(inputValue(sum, r, i));
      EXPECT_EQ(addends.size(), static_cast<std::size_t>(n)) << toString(t) << " element " << i;
      EXPECT_EQ(addends.count(0.0), 0u);
      expect[i] = expectedValue(sum, 0, i);
    }
    for (std::size_t period = 1; period < 500; ++period) {
      bool repeats = true;
      for (std::size_t i = 0; i + period < count && repeats; ++i) repeats = expect[i] == expect[i + period];
      EXPECT_FALSE(repeats) << toString(t) << " sums repeat every " << period << " elements";
    }
  }
}

TEST(HostBackend, BuffersHoldInputValue) {
  // RankBufferSet computes the inputs with running counters; inputValue() (used by the process backends and the
  // MPI driver) from scratch. They must agree, in every pattern.
  for (DType t : {DType::BF16, DType::F32, DType::I32}) {
    for (ReduceOp op : kAllReduceOps) {
      for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather}) {
        const CollectiveSpec spec{c, 5, 777, t, op};
        RankBufferSet bufs(spec, false);
        bufs.fill();
        const std::size_t elems = spec.inputBytes() / spec.elementSize();
        for (int r = 0; r < spec.nranks; ++r) {
          for (std::size_t i = 0; i < elems; ++i) {
            const double want = inputValue(spec, r, i);
            ASSERT_EQ(loadAsDouble(t, bufs.views()[static_cast<std::size_t>(r)].input, i), want)
                << describe(spec) << " rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(HostBackend, OneRankReferenceAgreesWithTheWholeSet) {
  // fillRankInput() and countWrongOnRank() (process backends, the MPI driver) work a block of 2^18 elements at a
  // time: counts past a block, all-gather outputs spanning ranks inside a block, and a corrupted element in the
  // second block must give what RankBufferSet gives.
  constexpr std::size_t kCount = (std::size_t{1} << 18) + 1001;
  for (DType t : {DType::BF16, DType::F32, DType::I32}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Avg}) {
      for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                           Collective::Broadcast, Collective::Reduce}) {
        const CollectiveSpec spec{c, 3, kCount, t, op, 1};
        RankBufferSet bufs(spec, false);
        bufs.fill();
        for (int r = 0; r < spec.nranks; ++r) {
          std::vector<std::byte> mine(spec.inputBytes());
          fillRankInput(spec, r, mine.data());
          ASSERT_EQ(std::memcmp(mine.data(), bufs.views()[static_cast<std::size_t>(r)].input, mine.size()), 0)
              << describe(spec) << " rank " << r;
        }
        backendFor(3).run(buildSchedule(spec, algorithmNames(c).front()), bufs.views(), {});
        ASSERT_EQ(bufs.countWrong(), 0u) << describe(spec);
        for (int r = 0; r < spec.nranks; ++r) {
          EXPECT_EQ(countWrongOnRank(spec, r, bufs.views()[static_cast<std::size_t>(r)].output), 0u)
              << describe(spec) << " rank " << r;
        }
        const int holder = c == Collective::Reduce ? spec.root : 2;
        bufs.corruptOutput(holder, (std::size_t{1} << 18) + 7);
        EXPECT_EQ(countWrongOnRank(spec, holder, bufs.views()[static_cast<std::size_t>(holder)].output), 1u)
            << describe(spec);
        EXPECT_EQ(bufs.countWrong(), 1u) << describe(spec);
      }
    }
  }
}

TEST(HostBackend, RankBuffersStartOnAPage) {
  // Heap neighbours a few bytes apart modulo 4 KiB made out-of-place reductions stall on 4K aliasing (1.3 GB/s vs
  // 9 GB/s in place at 16-256 KiB): every rank's input and output must start on a page, in place and out of place.
  constexpr std::uintptr_t kPage = 4096;
  for (bool inPlace : {false, true}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65536}}) {
      const CollectiveSpec spec{Collective::AllReduce, 3, count, DType::F32, ReduceOp::Sum};
      RankBufferSet bufs(spec, inPlace);
      for (const RankBuffers& b : bufs.views()) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.input) % kPage, 0u) << count << (inPlace ? " in place" : "");
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.output) % kPage, 0u) << count << (inPlace ? " in place" : "");
      }
    }
  }
  const PageAlignedBytes empty = allocatePageAligned(0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(empty.get()) % kPage, 0u);
}

TEST(HostBackend, RanksSharingAThreadMatchTheReference) {
  // More ranks than threads: each thread steps several ranks in turn (rank r on thread r % threads). Whatever the
  // machine's core count, 1 and 2 threads force it; eager and rendezvous sizes, many iterations.
  for (int threads : {1, 2}) {
    for (int n : {3, 5, 8}) {
      const auto b = host::makeThreadsBackend(n, threads);
      for (const char* name : {"ring", "recursive_doubling", "rabenseifner", "direct", "tree"}) {
        for (std::size_t count : {std::size_t{7}, std::size_t{65537}}) {
          const CollectiveSpec spec{Collective::AllReduce, n, count, DType::F32, ReduceOp::Avg};
          const Schedule s = buildSchedule(spec, name, testing::paramsFor(name, n));
          for (bool inPlace : {false, true}) {
            RankBufferSet bufs(spec, inPlace);
            bufs.fill();
            b->run(s, bufs.views(), RunOptions{inPlace ? 1 : 20, 0, 30.0});
            EXPECT_EQ(bufs.countWrong(), 0u)
                << name << " n=" << n << " threads=" << threads << " count=" << count << (inPlace ? " in place" : "");
          }
        }
      }
    }
  }
}

TEST(HostBackend, CheckerSeesCorruption) {
  const CollectiveSpec spec{Collective::AllReduce, 4, 1000, DType::F32, ReduceOp::Sum};
  RankBufferSet bufs(spec, false);
  bufs.fill();
  backendFor(4).run(buildSchedule(spec, "ring"), bufs.views(), {});
  ASSERT_EQ(bufs.countWrong(), 0u);
  bufs.corruptOutput(2, 17);
  EXPECT_EQ(bufs.countWrong(), 1u);
}

TEST(HostBackend, TimesOutNamingRankAndPeer) {
  // A matched but deadlocked schedule (each rank receives before it sends), which the validator would reject:
  // the executor must give up after the timeout, naming the rank and the peer, rather than hang.
  Schedule s;
  s.spec = {Collective::AllReduce, 2, 4, DType::F32};
  s.ranks.resize(2);
  Op snd;
  snd.kind = OpKind::Send;
  snd.peer = 1;
  snd.bytes = 16;
  Op rcv;
  rcv.kind = OpKind::Recv;
  rcv.peer = 0;
  rcv.bytes = 16;
  rcv.dst = {BufferKind::Output, 0};
  // Rank 0: recv from 1 then send to 1; rank 1: recv from 0 then send to 0 -> deadlock, detected by timeout.
  Op r0 = rcv, s0 = snd;
  r0.peer = 1;
  s0.deps = {0};
  Op r1 = rcv, s1 = snd;
  s1.peer = 0;
  s1.deps = {0};
  s.ranks[0].ops = {r0, s0};
  s.ranks[1].ops = {r1, s1};
  RankBufferSet bufs(s.spec, false);
  try {
    backendFor(2).run(s, bufs.views(), RunOptions{1, 0, 0.2});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout);
    EXPECT_NE(std::string(e.what()).find("timed out after 0.2 s waiting for rank"), std::string::npos) << e.what();
  }
  // Both ranks on one thread: the thread waits for neither forever either.
  try {
    host::makeThreadsBackend(2, 1)->run(s, bufs.views(), RunOptions{1, 0, 0.2});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout);
    EXPECT_NE(std::string(e.what()).find("rank 0 timed out after 0.2 s waiting for rank 1"), std::string::npos)
        << e.what();
  }
  // The backend is still usable afterwards.
  const CollectiveSpec spec{Collective::AllReduce, 2, 10, DType::F32, ReduceOp::Sum};
  RankBufferSet ok(spec, false);
  ok.fill();
  backendFor(2).run(buildSchedule(spec, "ring"), ok.views(), {});
  EXPECT_EQ(ok.countWrong(), 0u);
}

}  // namespace
}  // namespace collbench
