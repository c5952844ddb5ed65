// Switch ops (SwitchReduce, Multicast): the validator's group checks, the topology capability check, the nvls
// generator, and their schedule-file round trip.
#include <gtest/gtest.h>

#include <string>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/schedule_file.h"
#include "collbench/topology.h"
#include "collbench/validator.h"

namespace collbench {
namespace {

constexpr std::size_t kCount = 64;  // floats: 256 bytes, two chunks of 128
constexpr std::size_t kHalf = kCount * 4 / 2;

Op switchOp(OpKind kind, int group, int root, BufRef src, BufRef dst, std::size_t bytes, std::vector<int> deps = {}) {
  Op op;
  op.kind = kind;
  op.group = group;
  op.peer = root;
  op.src = src;
  op.dst = dst;
  op.bytes = bytes;
  op.deps = std::move(deps);
  return op;
}

/// The all-reduce of schedule.h's example on `n` ranks in one group: chunk c (of 2) owned by rank c.
Schedule twoChunkAllReduce(int n) {
  Schedule s;
  s.spec = {Collective::AllReduce, n, kCount, DType::F32};
  s.algorithm = "example";
  s.ranks.resize(static_cast<std::size_t>(n));
  s.switchGroups.push_back({});
  for (int r = 0; r < n; ++r) s.switchGroups[0].push_back(r);
  for (auto& prog : s.ranks) {
    for (int c = 0; c < 2; ++c) {
      const std::size_t at = static_cast<std::size_t>(c) * kHalf;
      prog.ops.push_back(
          switchOp(OpKind::SwitchReduce, 0, c, {BufferKind::Input, at}, {BufferKind::Output, at}, kHalf));
    }
    for (int c = 0; c < 2; ++c) {
      const std::size_t at = static_cast<std::size_t>(c) * kHalf;
      prog.ops.push_back(
          switchOp(OpKind::Multicast, 0, c, {BufferKind::Output, at}, {BufferKind::Output, at}, kHalf, {c}));
    }
  }
  return s;
}

std::string validationError(const Schedule& s) {
  try {
    validate(s, {true});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    return e.what();
  }
  return "";
}

TEST(SwitchOps, HandWrittenAllReduceValidates) {
  const Schedule s = twoChunkAllReduce(3);
  EXPECT_NO_THROW(validate(s, {false}));
  EXPECT_NO_THROW(validate(s, {true}));
  const Matching m = matchSchedule(s);
  ASSERT_EQ(m.switchMatches.size(), 4u);  // two reductions, two multicasts, each once for the group
  EXPECT_EQ(m.switchMatches[0].ops, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(m.switchMatches[3].ops, (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(m.opMatch[1][2], 2);
}

TEST(SwitchOps, NvlsSchedulesValidate) {
  for (int n : {1, 2, 3, 8}) {
    for (const AlgoParams& p : {AlgoParams{}, AlgoParams{64, 3, {}}}) {
      const Schedule s = buildSchedule({Collective::AllReduce, n, 4099, DType::F32}, "nvls", p);
      EXPECT_NO_THROW(validate(s, {false})) << n;
      EXPECT_NO_THROW(validate(s, {true})) << n;
      EXPECT_EQ(s.usesSwitch(), n > 1);
    }
  }
}

TEST(SwitchOps, NvlsChunksAsNccl) {
  // 8 ranks, 1 channel, 1 GiB: 128 KiB per (channel, owner) and loop (NCCL_NVLS_CHUNKSIZE), 1024 loops.
  const std::size_t count = std::size_t{1} << 28;
  const Schedule big = buildSchedule({Collective::AllReduce, 8, count, DType::F32}, "nvls");
  EXPECT_EQ(big.ranks[0].ops.size(), 1024u * 8 * 2);
  EXPECT_EQ(big.ranks[0].ops[0].bytes, 128u * 1024);
  // Under 64 chunks per concurrent op (8 MiB here) the chunk drops to 64 KiB.
  const Schedule small = buildSchedule({Collective::AllReduce, 8, std::size_t{1} << 20, DType::F32}, "nvls");
  EXPECT_EQ(small.ranks[0].ops[0].bytes, 64u * 1024);
  EXPECT_EQ(small.ranks[0].ops.size(), 8u * 8 * 2);
}

TEST(SwitchOps, NonMemberIsRejected) {
  Schedule s = twoChunkAllReduce(3);
  s.switchGroups[0] = {0, 1};
  EXPECT_EQ(validationError(s),
            "rank 2 op 0 (switch_reduce, group 0, channel 0): rank 2 is not a member of the group (ranks 0, 1)");
}

TEST(SwitchOps, RootOutsideTheGroupIsRejected) {
  Schedule s = twoChunkAllReduce(3);
  for (auto& prog : s.ranks) prog.ops[1].peer = 5;
  EXPECT_EQ(validationError(s), "rank 0 op 1 (switch_reduce, group 0, channel 0): root 5 is not a member of the group");
}

TEST(SwitchOps, UnknownGroupIsRejected) {
  Schedule s = twoChunkAllReduce(2);
  s.ranks[1].ops[3].group = 4;
  EXPECT_EQ(validationError(s), "rank 1 op 3 (multicast, group 4, channel 0): not a switch group (0..0)");
}

TEST(SwitchOps, SizesMustAgree) {
  Schedule s = twoChunkAllReduce(3);
  s.ranks[2].ops[0].bytes = 64;
  EXPECT_EQ(validationError(s),
            "rank 2 op 0 (switch_reduce, group 0, channel 0): matches rank 0 op 0 (switch_reduce root 0, 128 bytes) "
            "but is a switch_reduce with root 0 of 64 bytes");
}

TEST(SwitchOps, RootsMustComeInTheSameOrder) {
  Schedule s = twoChunkAllReduce(2);
  std::swap(s.ranks[1].ops[0], s.ranks[1].ops[1]);
  s.ranks[1].ops[2].deps = {1};
  s.ranks[1].ops[3].deps = {0};
  const std::string what = validationError(s);
  EXPECT_NE(what.find("rank 1 op 0 (switch_reduce, group 0, channel 0): matches rank 0 op 0 (switch_reduce root 0"),
            std::string::npos)
      << what;
}

TEST(SwitchOps, MissingMemberOpIsRejected) {
  Schedule s = twoChunkAllReduce(3);
  s.ranks[1].ops.pop_back();
  EXPECT_EQ(validationError(s),
            "rank 0 op 3 (multicast, group 0, channel 0): rank 1 of the group has no matching op (it issues 3 ops of "
            "this group and channel)");
}

TEST(SwitchOps, RootRangeOutOfBounds) {
  Schedule s = twoChunkAllReduce(2);
  for (auto& prog : s.ranks) prog.ops[1].dst.offset = 200;  // only the root (rank 1) writes it
  EXPECT_EQ(validationError(s),
            "rank 1 op 1 (switch_reduce, group 0, root 1): dst out+[200, 328) is out of bounds of the out (256 bytes)");
}

TEST(SwitchOps, DeadlockThroughTheSwitchIsFound) {
  // Rank 0 joins the reduction only after receiving from rank 1, which sends only after the reduction.
  Schedule s;
  s.spec = {Collective::AllReduce, 2, kCount, DType::F32};
  s.ranks.resize(2);
  s.switchGroups = {{0, 1}};
  Op recv;
  recv.kind = OpKind::Recv;
  recv.peer = 1;
  recv.dst = {BufferKind::Scratch, 0};
  recv.bytes = 4;
  s.ranks[0].scratchBytes = 4;
  s.ranks[0].ops = {recv,
                    switchOp(OpKind::SwitchReduce, 0, 0, {BufferKind::Input, 0}, {BufferKind::Output, 0}, 256, {0})};
  Op send;
  send.kind = OpKind::Send;
  send.peer = 0;
  send.src = {BufferKind::Output, 0};
  send.bytes = 4;
  send.deps = {0};
  s.ranks[1].ops = {switchOp(OpKind::SwitchReduce, 0, 0, {BufferKind::Input, 0}, {BufferKind::Output, 0}, 256), send};
  const std::string what = validationError(s);
  EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
}

TEST(SwitchOps, TopologyWithoutInSwitchReductionIsRefused) {
  const Schedule s = buildSchedule({Collective::AllReduce, 8, 1024, DType::F32}, "nvls");
  try {
    validateOnTopology(s, loadTopology("dgx-a100-8x1"));
    FAIL() << "dgx-a100-8x1 has no NVLS";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    EXPECT_EQ(std::string(e.what()),
              "rank 0 op 0 (switch_reduce, group 0, root 0): switch n0.nvsw of group 0 cannot reduce (reduce_GBps 0): "
              "in-network reduction needs a switch with reduce_GBps > 0 (NVLS, SHARP)");
  }
  const Topology h100 = loadTopology("dgx-h100-8x1");
  EXPECT_EQ(validateOnTopology(s, h100), std::vector<int>{h100.nodeIndex("n0.nvsw")});
}

TEST(SwitchOps, GroupSwitchIsTheNearestCommonSwitch) {
  // Two servers of 8 GPUs: a server's GPUs hang off its NVSwitch; GPUs of both servers meet in the fabric.
  const Topology t = generateTopology("multi_node", R"({"nodes": 2, "nvls_GBps": 450, "sharp_GBps": 100})");
  Schedule s;
  s.spec = {Collective::AllReduce, 16, 16, DType::F32};
  s.ranks.resize(16);
  s.switchGroups = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 8}};
  const std::vector<int> sw = groupSwitches(s, t);
  EXPECT_EQ(t.nodes[static_cast<std::size_t>(sw[0])].id, "n0.nvsw");
  EXPECT_TRUE(t.nodes[static_cast<std::size_t>(sw[1])].host.empty());  // a fabric switch
  EXPECT_TRUE(t.nodes[static_cast<std::size_t>(sw[1])].reducesInNetwork());
}

TEST(SwitchOps, RequireNoSwitchOpsNamesTheWayOut) {
  const Schedule s = buildSchedule({Collective::AllReduce, 4, 1024, DType::F32}, "nvls");
  try {
    requireNoSwitchOps(s, "host");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_EQ(std::string(e.what()),
              "algorithm 'nvls' needs a switch that reduces (NVLS/SHARP), which backend 'host' does not have; run it "
              "on --backend sim or nccl");
  }
  EXPECT_NO_THROW(requireNoSwitchOps(buildSchedule({Collective::AllReduce, 4, 1024, DType::F32}, "ring"), "host"));
}

TEST(SwitchOps, ScheduleFileRoundTrip) {
  const Schedule s = buildSchedule({Collective::AllReduce, 3, 1000, DType::F32}, "nvls", AlgoParams{256, 2, {}});
  const std::string text = toJson(toScheduleFile(s, "test"));
  EXPECT_NE(text.find("\"switch_groups\": [[0,1,2]]"), std::string::npos) << text;
  const ScheduleFile back = parseScheduleFile(text, "nvls.json");
  ASSERT_EQ(back.schedule.switchGroups, s.switchGroups);
  ASSERT_EQ(back.schedule.ranks.size(), s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    ASSERT_EQ(back.schedule.ranks[r].ops.size(), s.ranks[r].ops.size());
    for (std::size_t i = 0; i < s.ranks[r].ops.size(); ++i) {
      const Op &a = s.ranks[r].ops[i], &b = back.schedule.ranks[r].ops[i];
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.group, b.group);
      EXPECT_EQ(a.peer, b.peer);
      EXPECT_EQ(a.bytes, b.bytes);
      EXPECT_EQ(a.deps, b.deps);
      EXPECT_EQ(a.channel, b.channel);
      if (a.readsOn(static_cast<int>(r))) {
        EXPECT_EQ(a.src, b.src);
      }
      if (a.writesOn(static_cast<int>(r))) {
        EXPECT_EQ(a.dst, b.dst);
      }
    }
  }
  EXPECT_EQ(toJson(back), toJson(toScheduleFile(back.schedule, "test")));
}

TEST(SwitchOps, ScheduleFileErrors) {
  const std::string head =
      R"({"format": "collbench-schedule", "version": 1, "algorithm": "x",
          "collective": {"kind": "all_reduce", "nranks": 2, "count": 4, "dtype": "f32", "op": "sum"},)";
  auto error = [&](const std::string& rest) {
    try {
      parseScheduleFile(head + rest, "f.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string op = R"({"kind": "switch_reduce", "group": 0, "root": 0, "src": {"buffer": "input", "offset": 0},
                             "dst": {"buffer": "output", "offset": 0}, "bytes": 16})";
  EXPECT_EQ(error(R"("ranks": [{"ops": [)" + op + R"(]}, {"ops": []}]})"),
            "f.json: ranks[0].ops[0].group: a switch_reduce needs the top-level switch_groups");
  EXPECT_EQ(error(R"("switch_groups": [[0, 1]], "ranks": [{"ops": [)" + op + "]}, {\"ops\": [" + op + "]}]}"),
            "f.json: ranks[1].ops[0].dst: a switch_reduce writes nothing local off its root and has no dst");
  EXPECT_EQ(error(R"("switch_groups": [[1, 0]], "ranks": [{"ops": []}, {"ops": []}]})"),
            "f.json: switch_groups[0]: ranks must be distinct and ascending, got [1,0]");
}

}  // namespace
}  // namespace collbench
