// The in-network all-reduces (nvls_tree, collnet_direct, collnet_chain): their schedules validate, compute the sum
// (a reference evaluator of the IR, switch ops included) on 2 and 4 hosts of dgx-h100-ib400, choose NCCL's chunks,
// and are refused where no switch reduces (the host backends' refusal: tests/host/test_host_in_network.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/reference.h"
#include "collbench/topology.h"
#include "collbench/validator.h"

namespace collbench {
namespace {

const std::vector<std::string> kAlgorithms = {"nvls_tree", "collnet_direct", "collnet_chain"};

/// `hosts` hosts of `local` ranks each, rank r on host r / local.
std::vector<int> blockHosts(int hosts, int local) {
  std::vector<int> h;
  for (int r = 0; r < hosts * local; ++r) h.push_back(r / local);
  return h;
}

/// Runs a schedule's ops on real buffers, one matched op at a time, in any order its deps and matches allow (the
/// validator proves that every such order computes the same): local ops when their deps are done, a send with its
/// receive when both are ready, a switch op when every member's is. F32 sums only. Returns the outputs.
class ReferenceEvaluator {
 public:
  explicit ReferenceEvaluator(const Schedule& s) : s_(s), m_(matchSchedule(s)) {
    const auto n = static_cast<std::size_t>(s.spec.nranks);
    in_.resize(n);
    out_.resize(n);
    scratch_.resize(n);
    done_.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      in_[r].resize(s.spec.inputBytes());
      fillRankInput(s.spec, static_cast<int>(r), in_[r].data());
      out_[r].assign(s.spec.outputBytes(), std::byte{0});
      scratch_[r].assign(s.ranks[r].scratchBytes, std::byte{0});
      done_[r].assign(s.ranks[r].ops.size(), false);
    }
  }

  /// Executes every op; fails the test when some op can never run.
  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < s_.spec.nranks; ++r) {
        const auto& ops = s_.ranks[static_cast<std::size_t>(r)].ops;
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) progress = step(r, i) || progress;
      }
    }
    for (int r = 0; r < s_.spec.nranks; ++r) {
      for (std::size_t i = 0; i < done_[static_cast<std::size_t>(r)].size(); ++i) {
        ASSERT_TRUE(done_[static_cast<std::size_t>(r)][i]) << "rank " << r << " op " << i << " never ran";
      }
    }
  }

  std::size_t wrong() const {
    std::size_t bad = 0;
    for (int r = 0; r < s_.spec.nranks; ++r)
      bad += countWrongOnRank(s_.spec, r, out_[static_cast<std::size_t>(r)].data());
    return bad;
  }

 private:
  std::byte* at(int rank, BufRef ref) {
    const auto r = static_cast<std::size_t>(rank);
    auto& buf = ref.buffer == BufferKind::Input ? in_[r] : ref.buffer == BufferKind::Output ? out_[r] : scratch_[r];
    return buf.data() + ref.offset;
  }
  const Op& op(int rank, int i) const {
    return s_.ranks[static_cast<std::size_t>(rank)].ops[static_cast<std::size_t>(i)];
  }
  bool ready(int rank, int i) const {
    if (done_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(i)]) return false;
    for (int d : op(rank, i).deps) {
      if (!done_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(d)]) return false;
    }
    return true;
  }
  void finish(int rank, int i) { done_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(i)] = true; }

  static std::vector<float> floats(const std::byte* p, std::size_t bytes) {
    std::vector<float> v(bytes / sizeof(float));
    std::memcpy(v.data(), p, bytes);
    return v;
  }
  static void add(std::vector<float>& acc, const std::vector<float>& x) {
    for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += x[k];
  }

  bool step(int r, int i) {
    if (!ready(r, i)) return false;
    const Op& o = op(r, i);
    const int match = m_.opMatch[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
    if (o.isSwitch()) return switchStep(match);
    if (o.isComm()) {
      const Match& x = m_.matches[static_cast<std::size_t>(match)];
      if (!ready(x.srcRank, x.srcOp) || !ready(x.dstRank, x.dstOp)) return false;
      const Op& recv = op(x.dstRank, x.dstOp);
      std::vector<float> data = floats(at(x.srcRank, op(x.srcRank, x.srcOp).src), recv.bytes);
      if (recv.kind == OpKind::RecvReduce) add(data, floats(at(x.dstRank, recv.src), recv.bytes));
      std::memcpy(at(x.dstRank, recv.dst), data.data(), recv.bytes);
      finish(x.srcRank, x.srcOp);
      finish(x.dstRank, x.dstOp);
      return true;
    }
    std::vector<float> data = floats(at(r, o.src), o.bytes);
    if (o.kind == OpKind::Reduce) add(data, floats(at(r, o.dst), o.bytes));
    std::memcpy(at(r, o.dst), data.data(), o.bytes);
    finish(r, i);
    return true;
  }

  bool switchStep(int match) {
    const SwitchMatch& sm = m_.switchMatches[static_cast<std::size_t>(match)];
    const auto& members = s_.switchGroups[static_cast<std::size_t>(sm.group)];
    for (std::size_t k = 0; k < members.size(); ++k) {
      if (!ready(members[k], sm.ops[k])) return false;
    }
    const Op& first = op(members[0], sm.ops[0]);
    const int root = first.peer;
    std::size_t rootIdx = 0;
    while (members[rootIdx] != root) ++rootIdx;
    const Op& rootOp = op(root, sm.ops[rootIdx]);
    if (first.kind == OpKind::SwitchReduce) {
      std::vector<float> sum(first.bytes / sizeof(float), 0.0F);
      for (std::size_t k = 0; k < members.size(); ++k)
        add(sum, floats(at(members[k], op(members[k], sm.ops[k]).src), first.bytes));
      std::memcpy(at(root, rootOp.dst), sum.data(), first.bytes);
    } else {
      const std::vector<float> data = floats(at(root, rootOp.src), first.bytes);
      for (std::size_t k = 0; k < members.size(); ++k)
        std::memcpy(at(members[k], op(members[k], sm.ops[k]).dst), data.data(), first.bytes);
    }
    for (std::size_t k = 0; k < members.size(); ++k) finish(members[k], sm.ops[k]);
    return true;
  }

  const Schedule& s_;
  Matching m_;
  std::vector<std::vector<std::byte>> in_, out_, scratch_;
  std::vector<std::vector<bool>> done_;
};

std::size_t wrongElements(const Schedule& s) {
  ReferenceEvaluator e(s);
  e.run();
  return e.wrong();
}

TEST(InNetwork, EvaluatorComputesNvlsAndCatchesAWrongSchedule) {
  // The evaluator on the already-tested nvls, then on the same schedule with one multicast's root changed.
  Schedule s = buildSchedule({Collective::AllReduce, 4, 1000, DType::F32}, "nvls", AlgoParams{256, 2, {}});
  EXPECT_EQ(wrongElements(s), 0u);
  // Drop rank 3's contribution: its first switch reduction reads rank 3's output (zeros) instead of its input.
  for (Op& o : s.ranks[3].ops) {
    if (o.kind == OpKind::SwitchReduce) {
      o.src.buffer = BufferKind::Output;
      break;
    }
  }
  EXPECT_GT(wrongElements(s), 0u);
}

TEST(InNetwork, SchedulesValidateOnAnyHostShape) {
  struct Shape {
    int hosts, local;
  };
  for (const std::string& a : kAlgorithms) {
    for (const Shape sh : {Shape{2, 8}, Shape{3, 2}, Shape{2, 1}, Shape{1, 4}, Shape{5, 3}}) {
      for (const AlgoParams& base : {AlgoParams{}, AlgoParams{96, 3, {}}}) {
        AlgoParams p = base;
        p.rankHost = blockHosts(sh.hosts, sh.local);
        const CollectiveSpec spec{Collective::AllReduce, sh.hosts * sh.local, 4099, DType::F32};
        const Schedule s = buildSchedule(spec, a, p);
        const std::string what = a + " " + std::to_string(sh.hosts) + "x" + std::to_string(sh.local) + " chunk " +
                                 std::to_string(p.chunkBytes);
        EXPECT_NO_THROW(validate(s, {false})) << what;
        EXPECT_NO_THROW(validate(s, {true})) << what;
        EXPECT_EQ(wrongElements(s), 0u) << what;
      }
    }
  }
}

TEST(InNetwork, SumIsRightOnTwoAndFourHostsOfDgxH100Ib400) {
  const Topology t = loadTopology("dgx-h100-ib400");
  for (int hosts : {2, 4}) {
    const int n = hosts * 8;
    for (const std::string& a : kAlgorithms) {
      for (int channels : {1, 2}) {
        const AlgoParams p{4096, channels, rankHosts(t, n)};
        const Schedule s = buildSchedule({Collective::AllReduce, n, 50000, DType::F32}, a, p);
        ASSERT_NO_THROW(validate(s, {true})) << a;
        const std::vector<int> sw = validateOnTopology(s, t);
        ASSERT_EQ(sw.size(), s.switchGroups.size());
        for (std::size_t g = 0; g < sw.size(); ++g) {
          const TopoNode& node = t.nodes[static_cast<std::size_t>(sw[g])];
          // nvls_tree: each host's NVSwitch; collnet: the rail's leaf (SHARP), outside every host.
          EXPECT_EQ(node.host.empty(), a != "nvls_tree") << a << " group " << g << " on " << node.id;
          EXPECT_TRUE(node.reducesInNetwork()) << node.id;
        }
        EXPECT_EQ(wrongElements(s), 0u) << a << " on " << hosts << " hosts, " << channels << " channels";
      }
    }
  }
}

TEST(InNetwork, GroupsAreHostsForNvlsTreeAndRailsForCollnet) {
  const AlgoParams p{0, 1, blockHosts(2, 4)};
  const CollectiveSpec spec{Collective::AllReduce, 8, 1 << 16, DType::F32};
  EXPECT_EQ(buildSchedule(spec, "nvls_tree", p).switchGroups,
            (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const std::vector<std::vector<int>> rails = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  EXPECT_EQ(buildSchedule(spec, "collnet_direct", p).switchGroups, rails);
  EXPECT_EQ(buildSchedule(spec, "collnet_chain", p).switchGroups, rails);
}

/// The first op's bytes of rank 0 that is a switch op (the chunk of a lane).
std::size_t firstSwitchBytes(const Schedule& s) {
  for (const Op& o : s.ranks[0].ops) {
    if (o.isSwitch()) return o.bytes;
  }
  return 0;
}

TEST(InNetwork, ChunksAsNccl) {
  struct Case {
    const char* algorithm;
    int hosts, channels;
    std::size_t count, chunkBytes;
    const char* why;
  };
  const std::size_t big = std::size_t{1} << 28;  // 1 GiB of floats
  for (const Case& c : {
           Case{"nvls_tree", 2, 1, big, 128 * 1024, "NVLSTree's NVLS chunk under 4 hosts"},
           Case{"nvls_tree", 4, 1, big, 64 * 1024, "nvlsTreeMaxChunkSize from 4 hosts on (sm90)"},
           // 256 KiB on 2 channels x 8 heads: fewer chunks than concurrent ops at 64 KiB, so 32 KiB, which is more
           // than each lane's 16 KiB.
           Case{"nvls_tree", 2, 2, 8 * 8192, 16 * 1024, "small call"},
           Case{"collnet_direct", 2, 1, big, 512 * 1024, "a Simple step"},
           Case{"collnet_chain", 2, 1, big, 256 * 1024, "Chain's largest chunk"},
           // 8 MiB on 8 heads x 1 channel: fewer than depth 2 x 64 chunks down to 128 KiB, fewer than 2 x 8 of
           // 128 KiB, so 64 KiB, where it has 16 (not fewer than 2 x 8: no halving to 32 KiB).
           Case{"collnet_direct", 2, 1, std::size_t{2} << 20, 64 * 1024, "8 MiB"},
       }) {
    const CollectiveSpec spec{Collective::AllReduce, c.hosts * 8, c.count, DType::F32};
    const Schedule s = buildSchedule(spec, c.algorithm, AlgoParams{0, c.channels, blockHosts(c.hosts, 8)});
    EXPECT_EQ(firstSwitchBytes(s), c.chunkBytes) << c.algorithm << ": " << c.why;
  }
}

TEST(InNetwork, NeedsHosts) {
  for (const std::string& a : kAlgorithms) {
    try {
      buildSchedule({Collective::AllReduce, 4, 64, DType::F32}, a);
      FAIL() << a;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                a + " all-reduce needs the host of each of the 4 ranks (give --topology); got 0");
    }
    EXPECT_TRUE(findAlgorithm(Collective::AllReduce, a).traits.needsHosts);
    EXPECT_TRUE(findAlgorithm(Collective::AllReduce, a).traits.needsSwitchReduction);
  }
  try {
    buildSchedule({Collective::AllReduce, 5, 64, DType::F32}, "collnet_chain", AlgoParams{0, 1, {0, 0, 0, 1, 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "collnet_chain all-reduce needs the same number of ranks on every host; host of rank 0 has 3, host of "
              "rank 3 has 2");
  }
}

/// validateOnTopology's message for `algorithm` on the first `n` ranks of `topology`.
std::string topologyError(const std::string& algorithm, const std::string& topology, int n) {
  const Topology t = loadTopology(topology);
  const Schedule s =
      buildSchedule({Collective::AllReduce, n, 1024, DType::F32}, algorithm, AlgoParams{0, 1, rankHosts(t, n)});
  try {
    validateOnTopology(s, t);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    return e.what();
  }
  return "";
}

TEST(InNetwork, RefusedWhereNoSwitchReduces) {
  // aws-p5's EFA fabric has no SHARP: the leaf where two servers' devices meet cannot reduce.
  for (const std::string& a : {std::string("collnet_direct"), std::string("collnet_chain")}) {
    const std::string what = topologyError(a, "aws-p5", 16);
    EXPECT_NE(what.find("cannot reduce (reduce_GBps 0): in-network reduction needs a switch with reduce_GBps > 0"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("switch leaf0 of group 0"), std::string::npos) << what;  // 16 devices: one leaf
    const Estimate e = CostModel(loadTopology("aws-p5"), 16)
                           .estimate({Collective::AllReduce, 16, 1 << 20, DType::F32}, a, AlgoParams{0, 1, {}});
    EXPECT_FALSE(e.supported);
    EXPECT_NE(e.note.find(a + " needs a fabric switch that reduces across hosts: the fabric (SHARP) switch leaf0 of "
                              "ranks 0, 8 does not reduce"),
              std::string::npos)
        << e.note;
  }
  // aws-p4de's A100 NVSwitch has no NVLS.
  const std::string what = topologyError("nvls_tree", "aws-p4de", 16);
  EXPECT_NE(what.find("switch n0.nvsw of group 0 cannot reduce (reduce_GBps 0)"), std::string::npos) << what;
  const Estimate e = CostModel(loadTopology("aws-p4de"), 16)
                         .estimate({Collective::AllReduce, 16, 1 << 20, DType::F32}, "nvls_tree", AlgoParams{0, 1, {}});
  EXPECT_FALSE(e.supported);
  EXPECT_EQ(e.note.rfind("nvls_tree needs an NVSwitch that reduces in each host: the in-host (NVLS) switch n0.nvsw", 0),
            0u)
      << e.note;
  // Where both reduce, the model prices them.
  for (const std::string& a : kAlgorithms) {
    EXPECT_TRUE(CostModel(loadTopology("dgx-h100-ib400"), 16)
                    .estimate({Collective::AllReduce, 16, 1 << 20, DType::F32}, a, AlgoParams{0, 1, {}})
                    .supported)
        << a;
  }
}

}  // namespace
}  // namespace collbench
