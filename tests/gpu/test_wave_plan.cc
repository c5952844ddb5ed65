// What the GPU executors rely on, checked without a device: the wave plan of every algorithm (each op once, deps
// in earlier waves, the same per-peer order on both sides, disjoint staging), the plan executed on host memory the
// way each executor issues it (against the reference), option parsing, and the CUDA/NCCL error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "backend_options.h"
#include "collbench/algorithms.h"
#include "collbench/backends/nccl.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"
#include "cuda_util.h"
#include "device_rank.h"
#include "wave_plan.h"

namespace collbench::nccl {
namespace {

/// Host memory standing in for one rank's device buffers.
struct HostRank {
  std::byte* in;
  std::byte* out;
  std::vector<std::byte> scratch, staging;
  std::byte* resolve(const BufRef& r) {
    switch (r.buffer) {
      case BufferKind::Input:
        return in + r.offset;
      case BufferKind::Output:
        return out + r.offset;
      case BufferKind::Scratch:
        return scratch.data() + r.offset;
    }
    return nullptr;
  }
};

enum class Flow { Staged, Direct };

/// Runs `plan` on host buffers in wave order. Staged is the NCCL executor: every receive of a wave lands first
/// (Recv into dst, RecvReduce into its staging range, all reading the senders' sources as they were when the wave
/// began), then the RecvReduce reductions and the local ops. Direct is the single-GPU executor: receives read the
/// sender's buffer while the rank's other work of the wave runs.
void emulate(const Schedule& s, const WavePlan& plan, const Buffers& views, Flow flow) {
  const auto n = s.ranks.size();
  std::vector<HostRank> ranks(n);
  for (std::size_t r = 0; r < n; ++r) {
    ranks[r].in = static_cast<std::byte*>(const_cast<void*>(views[r].input));
    ranks[r].out = static_cast<std::byte*>(views[r].output);
    ranks[r].scratch.assign(s.ranks[r].scratchBytes, std::byte{0x5a});
    ranks[r].staging.assign(plan.stagingBytes[r], std::byte{0xa5});
  }
  const std::size_t es = s.spec.elementSize();
  const auto& matches = plan.matching.matches;
  for (const Wave& w : plan.waves) {
    // Snapshot of every source a receive of this wave reads, taken before the wave writes anything.
    std::map<std::pair<std::size_t, int>, std::vector<std::byte>> incoming;
    for (std::size_t r = 0; r < n; ++r) {
      for (int k : w.ranks[r].comm) {
        const Op& op = s.ranks[r].ops[static_cast<std::size_t>(k)];
        if (op.kind == OpKind::Send) continue;
        const Match& m = matches[static_cast<std::size_t>(plan.matching.opMatch[r][static_cast<std::size_t>(k)])];
        const Op& sop = s.ranks[static_cast<std::size_t>(m.srcRank)].ops[static_cast<std::size_t>(m.srcOp)];
        const std::byte* src = ranks[static_cast<std::size_t>(m.srcRank)].resolve(sop.src);
        incoming[{r, k}] = std::vector<std::byte>(src, src + op.bytes);
      }
    }
    for (std::size_t r = 0; r < n; ++r) {
      HostRank& hr = ranks[r];
      const auto& ops = s.ranks[r].ops;
      for (int k : w.ranks[r].comm) {
        const Op& op = ops[static_cast<std::size_t>(k)];
        if (op.kind == OpKind::Send) continue;
        const auto& data = incoming.at({r, k});
        if (op.kind == OpKind::Recv) {
          if (op.bytes) std::memcpy(hr.resolve(op.dst), data.data(), op.bytes);
        } else if (flow == Flow::Staged) {
          const std::size_t off = plan.stagingOffset[r][static_cast<std::size_t>(k)];
          ASSERT_LE(off + op.bytes, hr.staging.size());
          if (op.bytes) std::memcpy(hr.staging.data() + off, data.data(), op.bytes);
        } else {
          reduceElements(s.spec.dtype, s.spec.op, hr.resolve(op.dst), hr.resolve(op.src), data.data(), op.bytes / es);
        }
      }
    }
    for (std::size_t r = 0; r < n; ++r) {
      HostRank& hr = ranks[r];
      const auto& ops = s.ranks[r].ops;
      if (flow == Flow::Staged) {
        for (int k : w.ranks[r].comm) {
          const Op& op = ops[static_cast<std::size_t>(k)];
          if (op.kind != OpKind::RecvReduce) continue;
          reduceElements(s.spec.dtype, s.spec.op, hr.resolve(op.dst), hr.resolve(op.src),
                         hr.staging.data() + plan.stagingOffset[r][static_cast<std::size_t>(k)], op.bytes / es);
        }
      }
      for (int k : w.ranks[r].local) {
        const Op& op = ops[static_cast<std::size_t>(k)];
        std::byte* dst = hr.resolve(op.dst);
        const std::byte* src = hr.resolve(op.src);
        if (op.kind == OpKind::Copy) {
          if (dst != src && op.bytes) std::memmove(dst, src, op.bytes);
        } else {
          reduceElements(s.spec.dtype, s.spec.op, dst, dst, src, op.bytes / es);
        }
      }
    }
  }
  if (s.needsAvgScale()) {
    for (std::size_t r = 0; r < n; ++r) {
      divideElements(s.spec.dtype, ranks[r].out, s.resultBytes(static_cast<int>(r)) / es, static_cast<int>(n));
    }
  }
}

/// Structural properties every executor depends on.
void checkPlan(const Schedule& s, const WavePlan& plan) {
  const auto n = s.ranks.size();
  std::vector<std::vector<int>> waveOf(n);
  for (std::size_t r = 0; r < n; ++r) waveOf[r].assign(s.ranks[r].ops.size(), -1);
  for (std::size_t wi = 0; wi < plan.waves.size(); ++wi) {
    const Wave& w = plan.waves[wi];
    ASSERT_EQ(w.ranks.size(), n);
    for (std::size_t r = 0; r < n; ++r) {
      for (const auto* list : {&w.ranks[r].comm, &w.ranks[r].local}) {
        for (int k : *list) {
          ASSERT_EQ(waveOf[r][static_cast<std::size_t>(k)], -1) << "rank " << r << " op " << k << " issued twice";
          waveOf[r][static_cast<std::size_t>(k)] = static_cast<int>(wi);
        }
      }
      // Staging ranges of one wave are disjoint and inside the rank's staging buffer.
      std::vector<std::pair<std::size_t, std::size_t>> ranges;
      for (int k : w.ranks[r].comm) {
        const Op& op = s.ranks[r].ops[static_cast<std::size_t>(k)];
        if (op.kind != OpKind::RecvReduce) continue;
        const std::size_t off = plan.stagingOffset[r][static_cast<std::size_t>(k)];
        EXPECT_EQ(off % kStagingAlignBytes, 0u);
        EXPECT_LE(off + op.bytes, plan.stagingBytes[r]);
        ranges.emplace_back(off, off + op.bytes);
      }
      std::sort(ranges.begin(), ranges.end());
      for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
    }
    // Ops of one wave run concurrently on the GPU (the single-GPU executor reads a sender's buffer from the
    // receiver's stream while the sender's stream runs its local ops): no op may write what another op of the same
    // rank and wave reads or writes, out of place or in place (input and output then share one allocation).
    for (bool inPlace : {false, true}) {
      for (std::size_t r = 0; r < n; ++r) {
        struct Access {
          int op;
          int region;  // 0 input, 1 output (0 too in place), 2 scratch
          std::size_t begin, end;
          bool write;
        };
        auto access = [&](int k, const BufRef& ref, std::size_t bytes, bool write) {
          const int rank = static_cast<int>(r);
          std::size_t base = 0;
          int region = ref.buffer == BufferKind::Scratch ? 2 : ref.buffer == BufferKind::Input ? 0 : 1;
          if (inPlace && region != 2) {
            base = region == 0 ? s.spec.inPlaceInputOffset(rank) : s.spec.inPlaceOutputOffset(rank);
            region = 0;
          }
          return Access{k, region, base + ref.offset, base + ref.offset + bytes, write};
        };
        std::vector<Access> acc;
        for (const auto* list : {&w.ranks[r].comm, &w.ranks[r].local}) {
          for (int k : *list) {
            const Op& op = s.ranks[r].ops[static_cast<std::size_t>(k)];
            if (!op.bytes) continue;
            const Access src = access(k, op.src, op.bytes, false), dst = access(k, op.dst, op.bytes, true);
            // A copy onto itself (in place: input and output block coincide) is skipped by every executor.
            if (op.kind == OpKind::Copy && src.region == dst.region && src.begin == dst.begin) continue;
            if (op.reads()) acc.push_back(src);
            if (op.writes()) acc.push_back(dst);
          }
        }
        for (const Access& x : acc) {
          if (!x.write) continue;
          for (const Access& y : acc) {
            if (y.op == x.op || y.region != x.region) continue;
            EXPECT_FALSE(x.begin < y.end && y.begin < x.end)
                << "wave " << wi << " rank " << r << (inPlace ? " (in place)" : "") << ": op " << x.op << " writes ["
                << x.begin << "," << x.end << ") of region " << x.region << " while op " << y.op
                << (y.write ? " writes " : " reads ") << "[" << y.begin << "," << y.end << ")";
          }
        }
      }
    }
    // Per ordered pair of ranks, the sender's sends and the receiver's receives of this wave list the same matches
    // in the same order (that is how NCCL pairs the p2p calls of a group).
    std::map<std::pair<int, int>, std::vector<int>> sent, received;
    for (std::size_t r = 0; r < n; ++r) {
      for (int k : w.ranks[r].comm) {
        const Op& op = s.ranks[r].ops[static_cast<std::size_t>(k)];
        const int m = plan.matching.opMatch[r][static_cast<std::size_t>(k)];
        if (op.kind == OpKind::Send) {
          sent[{static_cast<int>(r), op.peer}].push_back(m);
        } else {
          received[{op.peer, static_cast<int>(r)}].push_back(m);
        }
      }
    }
    EXPECT_EQ(sent, received) << "wave " << wi;
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < s.ranks[r].ops.size(); ++k) {
      ASSERT_GE(waveOf[r][k], 0) << "rank " << r << " op " << k << " never issued";
      for (int d : s.ranks[r].ops[k].deps) EXPECT_LT(waveOf[r][static_cast<std::size_t>(d)], waveOf[r][k]);
    }
  }
}

struct PlanCase {
  const AlgorithmInfo* algo;
  int nranks;
  std::size_t count;
  DType dtype;
  ReduceOp op;
  AlgoParams params;
};

std::vector<PlanCase> planCases() {
  std::vector<PlanCase> cases;
  for (const auto& a : algorithms()) {
    if (a.native || a.traits.needsSwitchReduction) continue;
    const bool reduces = a.collective == Collective::AllReduce || a.collective == Collective::ReduceScatter ||
                         a.collective == Collective::Reduce;
    for (int n : {1, 2, 3, 4, 5, 8, 9}) {
      for (std::size_t count : {0u, 1u, 7u, 1000u, 4099u}) {
        if (a.collective == Collective::Barrier && count != 0) continue;
        cases.push_back({&a, n, count, DType::F32, ReduceOp::Sum, {}});
        if (count == 1000 && reduces) {
          for (DType t : kAllDTypes) {
            for (ReduceOp op : kAllReduceOps) {
              if (t != DType::F32 || op != ReduceOp::Sum) cases.push_back({&a, n, count, t, op, {}});
            }
          }
        }
        if (count == 4099) {
          AlgoParams pipelined;
          pipelined.chunkBytes = 256;
          pipelined.channels = 4;
          cases.push_back({&a, n, count, DType::BF16, reduces ? ReduceOp::Max : ReduceOp::Sum, pipelined});
        }
      }
    }
  }
  return cases;
}

class WavePlanAlgorithms : public ::testing::TestWithParam<PlanCase> {};

TEST_P(WavePlanAlgorithms, EmulatedExecutorsMatchReference) {
  const PlanCase& c = GetParam();
  const CollectiveSpec spec{c.algo->collective, c.nranks, c.count, c.dtype, c.op, c.nranks / 2};
  AlgoParams params = c.params;
  // Hierarchical all-reduce wants equal hosts: two or three ranks per host where n allows, else one host.
  const int perHost = c.nranks % 2 == 0 ? 2 : c.nranks % 3 == 0 ? 3 : c.nranks;
  for (int r = 0; r < c.nranks; ++r) params.rankHost.push_back(r / perHost);
  const Schedule s = c.algo->build(spec, params);
  const WavePlan plan = planWaves(s);
  checkPlan(s, plan);
  for (Flow flow : {Flow::Staged, Flow::Direct}) {
    for (bool inPlace : {false, true}) {
      RankBufferSet bufs(spec, inPlace);
      bufs.fill();
      emulate(s, plan, bufs.views(), flow);
      EXPECT_EQ(bufs.countWrong(), 0u) << (flow == Flow::Staged ? "staged (nccl)" : "direct (cuda-1gpu)") << ", "
                                       << (inPlace ? "in place" : "out of place");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, WavePlanAlgorithms, ::testing::ValuesIn(planCases()), [](const auto& paramInfo) {
  const PlanCase& c = paramInfo.param;
  return fmt::format("{}_{}_n{}_c{}_{}_{}{}", toString(c.algo->collective), c.algo->name, c.nranks, c.count,
                     toString(c.dtype), toString(c.op), c.params.channels > 1 ? "_pipelined" : "");
});

Op commOp(OpKind kind, int peer, std::size_t bytes, std::vector<int> deps = {}) {
  Op op;
  op.kind = kind;
  op.peer = peer;
  op.bytes = bytes;
  op.src = {BufferKind::Input, 0};
  op.dst = {BufferKind::Output, 0};
  op.deps = std::move(deps);
  return op;
}

TEST(WavePlan, DeadlockNamesRankOpAndPeer) {
  // Each rank receives before it sends: matched, but no wave can start either receive.
  Schedule s;
  s.spec = {Collective::AllReduce, 2, 4, DType::F32};
  s.algorithm = "deadlock";
  s.ranks.resize(2);
  s.ranks[0].ops = {commOp(OpKind::Recv, 1, 16), commOp(OpKind::Send, 1, 16, {0})};
  s.ranks[1].ops = {commOp(OpKind::Recv, 0, 16), commOp(OpKind::Send, 0, 16, {0})};
  try {
    planWaves(s);
    FAIL() << "expected InvalidSchedule";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    EXPECT_EQ(e.rank(), 0);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_STREQ(e.what(),
                 "schedule deadlock deadlocks: rank 0 op 0 (recv with rank 1) waits for rank 1 op 1, which "
                 "can never start");
  }
}

TEST(WavePlan, PairsWaitForBothSides) {
  // Rank 1 must copy before it receives; rank 0's send waits in the pool for one wave.
  Schedule s;
  s.spec = {Collective::AllReduce, 2, 4, DType::F32};
  s.ranks.resize(2);
  Op copy;
  copy.kind = OpKind::Copy;
  copy.bytes = 16;
  s.ranks[0].ops = {commOp(OpKind::Send, 1, 16)};
  s.ranks[1].ops = {copy, commOp(OpKind::Recv, 0, 16, {0})};
  const WavePlan plan = planWaves(s);
  ASSERT_EQ(plan.waves.size(), 2u);
  EXPECT_TRUE(plan.waves[0].ranks[0].empty());
  EXPECT_EQ(plan.waves[0].ranks[1].local, std::vector<int>{0});
  EXPECT_EQ(plan.waves[1].ranks[0].comm, std::vector<int>{0});
  EXPECT_EQ(plan.waves[1].ranks[1].comm, std::vector<int>{1});
  EXPECT_EQ(plan.commOps, 2u);
  EXPECT_EQ(plan.localOps, 1u);
}

TEST(WavePlan, RejectsForwardDeps) {
  Schedule s;
  s.spec = {Collective::AllReduce, 1, 4, DType::F32};
  s.ranks.resize(1);
  Op copy;
  copy.kind = OpKind::Copy;
  copy.deps = {0};
  s.ranks[0].ops = {copy};
  EXPECT_THROW(planWaves(s), Error);
}

TEST(WavePlanOptions, UniqueIdHexRoundTrip) {
  std::string raw(kUniqueIdBytes, '\0');
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 37 + 5);
  const std::string hex = hexEncode(raw);
  EXPECT_EQ(hex.size(), 2 * kUniqueIdBytes);
  EXPECT_EQ(hex.substr(0, 6), "052a4f");
  EXPECT_EQ(decodeUniqueIdHex(hex), raw);
  std::string upper = hex;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(decodeUniqueIdHex(upper), raw);
}

TEST(WavePlanOptions, BadUniqueIdNamesTheOption) {
  try {
    decodeUniqueIdHex("abc");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_STREQ(e.what(), "nccl backend option nccl_id must be 256 hex digits (an ncclUniqueId), got 3 characters");
  }
  EXPECT_THROW(decodeUniqueIdHex(std::string(2 * kUniqueIdBytes, 'g')), Error);
}

TEST(WavePlanOptions, IntsSecondsAndDeviceLists) {
  const BackendOptions o{{"rank", "3"}, {"world", "x"}, {"timeout", "2.5"}, {"bad", "-1"}};
  EXPECT_EQ(intOption(o, "rank", -1), 3);
  EXPECT_EQ(intOption(o, "missing", 7), 7);
  EXPECT_THROW(intOption(o, "world", 0), Error);
  EXPECT_DOUBLE_EQ(secondsOption(o, "timeout", 1), 2.5);
  EXPECT_THROW(secondsOption(o, "bad", 1), Error);
  EXPECT_EQ(parseDeviceList("0,2,3"), (std::vector<int>{0, 2, 3}));
  EXPECT_THROW(parseDeviceList("0,,1"), Error);
  EXPECT_THROW(parseDeviceList("-1"), Error);
}

TEST(WavePlanErrors, CudaErrorsNameCallRankAndFileLine) {
  try {
    COLLBENCH_CUDA_RANK(2, cudaErrorInvalidValue);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::BackendError);
    EXPECT_EQ(e.rank(), 2);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("rank 2: cudaErrorInvalidValue failed: invalid argument (cudaErrorInvalidValue) at "
                        "tests/gpu/test_wave_plan.cc:",
                        0),
              0u)
        << msg;
  }
}

TEST(WavePlanErrors, NcclRemoteErrorIsPeerFailure) {
  try {
    COLLBENCH_NCCL_RANK(1, nullptr, ncclRemoteError);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::PeerFailure);
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("at tests/gpu/test_wave_plan.cc:"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(COLLBENCH_NCCL_RANK(1, nullptr, ncclInProgress));  // nonblocking communicators: not an error
}

TEST(WavePlanBackends, FactoriesExplainMissingDevices) {
  // Runs on every machine: without a device the factories refuse with the probe's reason; with one, cuda-1gpu
  // comes up and nccl refuses only rank counts above the device count.
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    EXPECT_NE(probe.reason.find("no CUDA device"), std::string::npos) << probe.reason;
    for (const char* name : {"nccl", "cuda-1gpu"}) {
      try {
        registerNcclBackends();
        makeBackend(name, 2);
        FAIL() << name;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::Unsupported) << name;
        EXPECT_NE(std::string(e.what()).find(probe.reason), std::string::npos) << e.what();
      }
    }
  } else {
    EXPECT_TRUE(probe.reason.empty());
    EXPECT_NO_THROW(makeSingleGpuBackend(2));
    try {
      makeNcclBackend(probe.count + 1);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::Unsupported);
    }
  }
  bool sawNccl = false;
  for (const auto& [key, value] : describeGpuEnvironment()) sawNccl = sawNccl || key == "nccl_version";
  EXPECT_TRUE(sawNccl);
}

// The executors record a progress event only every progressStride() iterations and after the last; the watchdog
// walks from one recorded event to the next. Every mark it queries must be an iteration that recorded one.
TEST(WavePlanProgress, StrideCoversSixtyFourMiBAndTheWatchdogQueriesOnlyRecordedEvents) {
  const auto spec = [](Collective c, std::size_t count) {
    return CollectiveSpec{c, 4, count, DType::F32, ReduceOp::Sum, 0};
  };
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  EXPECT_EQ(progressStride(spec(Collective::AllReduce, 16 * kMiB / 4)), 4U);
  EXPECT_EQ(progressStride(spec(Collective::AllReduce, 64 * kMiB / 4)), 1U);
  EXPECT_EQ(progressStride(spec(Collective::AllReduce, 256 * kMiB / 4)), 1U);
  EXPECT_EQ(progressStride(spec(Collective::AllReduce, kMiB / 4)), kMaxProgressStride);
  EXPECT_EQ(progressStride(spec(Collective::Barrier, 0)), kMaxProgressStride);
  // All-gather's payload is its output: 4 ranks x 4 MiB.
  EXPECT_EQ(progressStride(spec(Collective::AllGather, 4 * kMiB / 4)), 4U);

  for (const std::size_t stride : {std::size_t{1}, std::size_t{16}, std::size_t{64}}) {
    for (const std::size_t total : {std::size_t{1}, std::size_t{16}, std::size_t{105}}) {
      std::vector<std::size_t> events;
      for (std::size_t it = 0; it < total; ++it) {
        if (recordsProgress(it, total, stride)) events.push_back(it);
      }
      ASSERT_FALSE(events.empty());
      EXPECT_EQ(events.back(), total - 1) << "the last iteration always records";
      EXPECT_LE(events.size(), (total + stride - 1) / stride + 1);
      // The watchdog at any point of the issue: events up to some recorded one, walked from nothing finished.
      for (const std::size_t last : events) {
        std::size_t done = 0;
        std::vector<std::size_t> queried;
        while (done < last + 1) {
          const std::size_t mark = nextProgressMark(done, last + 1, stride);
          ASSERT_GT(mark, done);
          queried.push_back(mark - 1);
          done = mark;
        }
        const std::vector<std::size_t> expected(events.begin(), std::find(events.begin(), events.end(), last) + 1);
        EXPECT_EQ(queried, expected) << "stride " << stride << ", total " << total << ", last " << last;
      }
    }
  }
}

}  // namespace
}  // namespace collbench::nccl
