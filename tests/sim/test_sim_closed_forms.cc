// Simulated all-reduce times on flat(n, B, L) under CM02 (no cross-traffic) against closed forms derived from what
// each generator does, never from the simulator. A transfer between two ranks of flat crosses the sender's uplink
// and the receiver's downlink: alpha = 2 L, beta = 1 / B, and with nothing shared it takes alpha + bytes * beta.
// A reduction or a copy of b bytes takes b * gamma with gamma = 1 / reduce_GBps (0 when reduce_GBps is 0).
// Schedule semantics used below (simulator/sim_backend.h): a transfer starts when its send and its receive are both
// ready and the previous transfer on its (src, dst, channel) connection finished; RecvReduce reduces after it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

constexpr double kLinkGBps = 50;      // B
constexpr double kLinkLatencyUs = 1;  // L
constexpr double kReduceGBps = 200;   // when gamma > 0
constexpr double kRelTol = 1e-6;      // the acceptance bound
constexpr std::size_t kElem = 4;      // float

struct Cost {
  double alpha, beta, gamma;
  double xfer(double bytes) const { return alpha + bytes * beta; }
};

Cost costOf(bool withGamma) {
  return Cost{2 * kLinkLatencyUs * 1e-6, 1 / (kLinkGBps * 1e9), withGamma ? 1 / (kReduceGBps * 1e9) : 0};
}

sim::Simulator flatSim(int n, bool withGamma) {
  Topology t = flatTopology(n, kLinkGBps, kLinkLatencyUs);
  if (withGamma) {
    for (TopoNode& node : t.nodes) {
      if (node.kind == NodeKind::Gpu) node.reduceGBps = kReduceGBps;
    }
  }
  return sim::Simulator(std::move(t), n);
}

// Elements of block i when `count` elements are split into `parts` contiguous blocks, larger ones first (the
// generators' even partition).
std::size_t blockElems(std::size_t count, std::size_t parts, std::size_t i) {
  return count / parts + (i < count % parts ? 1 : 0);
}

// ---- Ring: each block travels 2(n-1) hops r -> r+1, reduced on arrival during the first n-1. Connection r -> r+1
// carries blocks r, r-1, ... in order, so a block may also wait for the previous block on the connection; the
// longest chain follows one largest block from its first to its last hop: every node of the dependency graph costs
// at most alpha + ceil(count/n) e beta (+ the reduction), and that block's own chain attains it at every hop.
// Zero-element blocks have no ops (the builder elides them), which only removes edges.
double ringClosedForm(int n, std::size_t count, const Cost& c) {
  if (count == 0) return 0;
  const double S = static_cast<double>(count * kElem);
  if (n == 1) return S * c.gamma;  // one copy in -> out
  const double b = static_cast<double>(((count + n - 1) / n) * kElem);
  return 2.0 * (n - 1) * c.xfer(b) + (n - 1) * b * c.gamma;
}

// ---- Recursive doubling (MPICH): p = 2^floor(log2 n), rem = n - p. Even ranks r < 2 rem send everything to r+1
// at t = 0 and get the result back at the end. Every other rank first copies in -> out (S gamma); ranks absorbing a
// partner receive its buffer meanwhile (alpha + S beta) and fold it in (S gamma). Then log2 p butterfly steps: both
// partners exchange the full buffer once both are ready, then fold (alpha + S beta + S gamma); after log2 p steps
// every rank's time is the latest start plus log2 p step costs. Absorbing ranks finally send the result back.
double recursiveDoublingClosedForm(int n, std::size_t count, const Cost& c) {
  if (count == 0) return 0;
  const double S = static_cast<double>(count * kElem);
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p, steps = std::countr_zero(static_cast<unsigned>(p));
  const double start = rem > 0 ? std::max(c.xfer(S), S * c.gamma) + S * c.gamma : S * c.gamma;
  return start + steps * (c.xfer(S) + S * c.gamma) + (rem > 0 ? c.xfer(S) : 0);
}

// ---- Rabenseifner: the same folding (absorbing ranks receive-and-reduce the full buffer first, alpha + S beta +
// S gamma; the others start at 0). Reduce-scatter by recursive halving over p blocks of the even partition: at step
// k each rank receives-and-reduces the half it keeps (p >> (k+1) blocks) from its partner, both ready. The new rank
// 0 (old rank 1 when rem > 0, an absorbing rank) keeps blocks [0, p >> (k+1)) at every step, the largest ones, so
// its chain is the longest: sum over k of alpha + keep_k (beta + gamma). The all-gather retraces the steps; a pair
// exchanges its two ranges and each waits for both, so rank 0's pair costs alpha + keep_k beta again. Then the
// absorbing ranks send the whole result back (alpha + S beta).
double rabenseifnerClosedForm(int n, std::size_t count, const Cost& c) {
  if (count == 0) return 0;
  const double S = static_cast<double>(count * kElem);
  if (n == 1) return S * c.gamma;
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p, steps = std::countr_zero(static_cast<unsigned>(p));
  double t = rem > 0 ? c.xfer(S) + S * c.gamma : 0;
  for (int k = 0; k < steps; ++k) {
    const std::size_t blocks = static_cast<std::size_t>(p >> (k + 1));
    std::size_t keep = 0;
    for (std::size_t i = 0; i < blocks; ++i) keep += blockElems(count, static_cast<std::size_t>(p), i);
    const double kb = static_cast<double>(keep * kElem);
    t += (c.xfer(kb) + kb * c.gamma) + c.xfer(kb);  // its reduce-scatter step and its all-gather step
  }
  return t + (rem > 0 ? c.xfer(S) : 0);
}

// ---- Double binary tree, one chunk per tree (count * 4 / 2 <= 512 KiB). Tree t (0, 1) holds its half S_t of the
// data (tree 0 the larger) on channel t. Up: a leaf sends at once; a node folds its children one after the other
// (children in rank order: the second receive waits for the first fold), then sends to its parent:
//   A_1 = U(c_1) + alpha + S beta + S gamma,  A_2 = max(U(c_2), A_1) + alpha + S beta + S gamma,  U(r) = A_last.
// Down: the root has the result at U(root); a node sends to all its children at once over its one uplink, so k
// children share it: D(c) = D(parent) + alpha + k S beta. The tree ends at the latest D.
// Assumption (checked, else the case is skipped): the two trees never use one directed link at the same time, and
// never reduce on one rank at the same time; then each tree runs as if alone and the time is max(T_0, T_1).
struct FlowUse {
  int link;  // directed: rank * 2 + 0 uplink, + 1 downlink
  double start, end;
  int tree;
};

int btreeParent(int n, int rank) {  // NCCL's binary tree, as core/algorithms/tree.cc defines it
  if (rank == 0) return -1;
  const int bit = rank & -rank;
  const int up = (rank ^ bit) | (bit << 1);
  return up < n ? up : (rank ^ bit);
}
int dtreeParent(int n, int rank, int tree) {
  if (tree == 0) return btreeParent(n, rank);
  if (n % 2 == 0) {
    const int p = btreeParent(n, n - 1 - rank);
    return p < 0 ? -1 : n - 1 - p;
  }
  const int p = btreeParent(n, ((rank - 1) % n + n) % n);
  return p < 0 ? -1 : (p + 1) % n;
}

double singleTree(int n, int tree, double S, const Cost& c, std::vector<FlowUse>& uses,
                  std::vector<FlowUse>& reductions) {
  std::vector<int> parent(static_cast<std::size_t>(n));
  std::vector<std::vector<int>> children(static_cast<std::size_t>(n));
  int root = -1;
  for (int r = 0; r < n; ++r) {
    parent[static_cast<std::size_t>(r)] = dtreeParent(n, r, tree);
    if (parent[static_cast<std::size_t>(r)] < 0)
      root = r;
    else
      children[static_cast<std::size_t>(parent[static_cast<std::size_t>(r)])].push_back(r);
  }
  const double x = c.xfer(S), g = S * c.gamma;
  std::vector<double> U(static_cast<std::size_t>(n), -1);
  std::function<double(int)> up = [&](int r) {
    double acc = 0;
    bool first = true;
    for (int ch : children[static_cast<std::size_t>(r)]) {
      const double start = first ? up(ch) : std::max(up(ch), acc);
      uses.push_back({ch * 2, start + c.alpha, start + x, tree});
      uses.push_back({r * 2 + 1, start + c.alpha, start + x, tree});
      if (g > 0) reductions.push_back({r, start + x, start + x + g, tree});
      acc = start + x + g;
      first = false;
    }
    return U[static_cast<std::size_t>(r)] = acc;
  };
  up(root);
  double last = 0;
  std::function<void(int, double)> down = [&](int r, double d) {
    last = std::max(last, d);
    const auto& ch = children[static_cast<std::size_t>(r)];
    const double k = static_cast<double>(ch.size());
    for (int cr : ch) {
      const double end = d + c.alpha + k * S * c.beta;
      uses.push_back({r * 2, d + c.alpha, end, tree});
      uses.push_back({cr * 2 + 1, d + c.alpha, end, tree});
      down(cr, end);
    }
  };
  down(root, U[static_cast<std::size_t>(root)]);
  return last;
}

bool overlapAcrossTrees(std::vector<FlowUse> v) {
  std::sort(v.begin(), v.end(),
            [](const FlowUse& a, const FlowUse& b) { return a.link != b.link ? a.link < b.link : a.start < b.start; });
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (std::size_t j = i + 1; j < v.size() && v[j].link == v[i].link && v[j].start < v[i].end; ++j) {
      if (v[j].tree != v[i].tree && v[j].end > v[j].start && v[i].end > v[i].start) return true;
    }
  }
  return false;
}

/// Returns the closed form, or nullopt when the assumption above fails for this n.
std::optional<double> treeClosedForm(int n, std::size_t count, const Cost& c) {
  if (count == 0) return 0.0;
  const double S0 = static_cast<double>(blockElems(count, 2, 0) * kElem);
  const double S1 = static_cast<double>(blockElems(count, 2, 1) * kElem);
  if (n == 1) return static_cast<double>(count * kElem) * c.gamma;
  std::vector<FlowUse> uses, reductions;
  double t = singleTree(n, 0, S0, c, uses, reductions);
  if (S1 > 0) t = std::max(t, singleTree(n, 1, S1, c, uses, reductions));
  if (overlapAcrossTrees(uses) || overlapAcrossTrees(reductions)) return std::nullopt;
  return t;
}

// ---- The sweep.
struct Case {
  std::string algo;
  int n;
  std::size_t bytes;
  bool gamma;
};

const int kRanks[] = {2, 3, 4, 5, 8, 16, 17, 64};
// 1 B (no whole float: nothing to do) to 1 GiB, with counts that do not divide by n. 4 B is one element: tree 1
// is then empty and the tree case is a single tree for every n.
const std::size_t kBytes[] = {1, 4, 12, 1000, 4100, 65540, (1u << 20) + 28, (64u << 20) + 12, 1u << 30};
// The single-chunk tree form is for one chunk per tree (512 KiB halves); larger sizes pipeline (PipelinedTree below).
constexpr std::size_t kTreeMaxBytes = 2 * kDefaultPipelineChunkBytes;

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* algo : {"ring", "recursive_doubling", "rabenseifner", "tree"}) {
    for (int n : kRanks) {
      for (std::size_t bytes : kBytes) {
        if (std::string(algo) == "tree" && bytes > kTreeMaxBytes) continue;
        for (bool gamma : {false, true}) out.push_back({algo, n, bytes, gamma});
      }
    }
  }
  return out;
}

class ClosedForm : public ::testing::TestWithParam<Case> {};

TEST_P(ClosedForm, AllReduceTimeMatches) {
  const Case& k = GetParam();
  const Cost c = costOf(k.gamma);
  const std::size_t count = k.bytes / kElem;
  std::optional<double> want;
  if (k.algo == "ring") want = ringClosedForm(k.n, count, c);
  if (k.algo == "recursive_doubling") want = recursiveDoublingClosedForm(k.n, count, c);
  if (k.algo == "rabenseifner") want = rabenseifnerClosedForm(k.n, count, c);
  if (k.algo == "tree") want = treeClosedForm(k.n, count, c);
  if (!want) GTEST_SKIP() << "the two trees share a link or a rank's reductions at the same time for n=" << k.n;

  const sim::Simulator s = flatSim(k.n, k.gamma);
  const Schedule sched = buildSchedule(CollectiveSpec{Collective::AllReduce, k.n, count, DType::F32}, k.algo);
  const sim::SimResult r = s.run(sched);
  EXPECT_EQ(r.method, "exact");
  if (*want == 0) {
    EXPECT_EQ(r.seconds, 0);
  } else {
    EXPECT_NEAR(r.seconds, *want, kRelTol * *want) << "relative error " << (r.seconds - *want) / *want;
  }
}

INSTANTIATE_TEST_SUITE_P(Flat, ClosedForm, ::testing::ValuesIn(cases()), [](const auto& paramInfo) {
  const Case& k = paramInfo.param;
  return fmt::format("{}_n{}_{}B_{}", k.algo, k.n, k.bytes, k.gamma ? "gamma" : "nogamma");
});

// The tree forms are only worth something if they test most rank counts: count the ones they decide.
TEST(ClosedFormCoverage, TreeDecidesMostRankCounts) {
  int decided = 0;
  for (int n : kRanks) decided += treeClosedForm(n, (1u << 20) / kElem, costOf(true)).has_value() ? 1 : 0;
  EXPECT_GE(decided, 6);
}

// ---- Double binary tree with several chunks per tree (sizes above 1 MiB), on flat(n, B, L).
// Every round (chunk k of both trees) puts on rank r's uplink its send to the parent and its sends to its children in
// each tree, and as many transfers on its downlink: load(r) = sum over the trees of children + (r is not the root).
// With chunks of c bytes the busiest link carries load * c bytes per round, m rounds in all: T >= m load c beta (any
// n, any gamma).
// Exact forms, gamma = 0:
// - n = 2: rank 1 -> rank 0 carries tree 0's ups (FIFO on one connection, all ready at 0) and tree 1's downs (chunk k
//   leaves rank 1 when tree 1's up chunk k arrives there, which by symmetry is when tree 0's up chunk k arrives at
//   rank 0); rank 0 -> rank 1 the mirror image. Up chunk 0 goes alone (alpha + c beta); then every round starts up
//   chunk k+1 and down chunk k together on each direction, same size, same latency: they share the link and end
//   together after alpha + 2 c beta; the last down chunk goes alone:
//     T = 2 (alpha + c beta) + (m - 1) (alpha + 2 c beta).
// - n = 3, 4: after a fill of a few rounds the pipeline is periodic: each round's flows on the busiest link start
//   together when the previous round's end (their connections are FIFO and their other inputs are ready earlier),
//   so per round the link idles one latency and then carries load * c: P = alpha + load c beta. The fill depends on
//   how the first rounds' flows share links and has no closed form, so the test checks T(m) - T(m - d) = d P.
// Why not the other cases: for n >= 5 (and with gamma > 0 for n >= 3) the flows of a round reach the busiest links
// at different offsets (paths of different lengths, reductions in between), the max-min shares change at every
// arrival, and which of two flows ends first is decided by exact ties, so the per-round increments wander instead of
// settling. The makespan is then not even a continuous function of the inputs: changing L by 1e-9 (relative) moves
// T by a tenth of a percent to several percent (Ill-conditioned below), so no closed form can hold to 1e-6. Those
// cases get the lower bound.
struct TreeShape {
  int load = 0;  // transfers per round on the busiest directed link
};

TreeShape treeShape(int n) {
  std::vector<int> perRank(static_cast<std::size_t>(n), 0);
  for (int tree : {0, 1}) {
    for (int r = 0; r < n; ++r) {
      const int p = dtreeParent(n, r, tree);
      if (p < 0) continue;
      ++perRank[static_cast<std::size_t>(r)];  // r's send up (and its receive down)
      ++perRank[static_cast<std::size_t>(p)];  // p's receive from r (and its send down to r)
    }
  }
  return TreeShape{*std::max_element(perRank.begin(), perRank.end())};
}

constexpr std::size_t kChunkElems = kDefaultPipelineChunkBytes / kElem;

// All-reduce of `chunks` chunks per tree (every chunk exactly kDefaultPipelineChunkBytes).
double simulateTree(int n, std::size_t chunks, bool withGamma,
                    std::size_t exactLimit = sim::kDefaultExactTransferLimit) {
  Topology t = flatTopology(n, kLinkGBps, kLinkLatencyUs);
  if (withGamma) applyOverride(t, fmt::format("node.gpu.reduce_GBps={}", kReduceGBps));
  sim::SimConfig cfg;
  cfg.exactTransferLimit = exactLimit;
  return sim::Simulator(std::move(t), n, cfg)
      .runAlgorithm(CollectiveSpec{Collective::AllReduce, n, 2 * chunks * kChunkElems, DType::F32}, "tree")
      .seconds;
}

TEST(PipelinedTree, LoadOfTheBusiestLink) {
  // Hand counts: n = 2, each rank has one peer in each tree; n = 3, rank 2 relays tree 0 (0 <- 2 <- 1) and is a leaf
  // of tree 1; n = 4, rank 2 has two children in tree 0 and is a leaf of tree 1; n = 8, interior ranks have two
  // children in one tree and are leaves of the other.
  EXPECT_EQ(treeShape(2).load, 2);
  EXPECT_EQ(treeShape(3).load, 3);
  EXPECT_EQ(treeShape(4).load, 4);
  EXPECT_EQ(treeShape(8).load, 4);
}

TEST(PipelinedTree, TwoRanksMatchTheClosedFormUpTo1GiB) {
  const Cost c = costOf(false);
  const double cb = static_cast<double>(kDefaultPipelineChunkBytes) * c.beta;
  for (std::size_t m : {2u, 5u, 64u, 1024u}) {  // 2 MiB .. 1 GiB
    const double want = 2 * (c.alpha + cb) + static_cast<double>(m - 1) * (c.alpha + 2 * cb);
    const double got = simulateTree(2, m, false);
    EXPECT_NEAR(got, want, kRelTol * want) << m << " chunks per tree";
    // The data-free method (one 40-chunk window, extrapolated) sees the same period.
    if (m == 1024) {
      EXPECT_NEAR(simulateTree(2, m, false, 0), want, kRelTol * want);
    }
  }
}

TEST(PipelinedTree, ThreeAndFourRanksHaveTheClosedFormPeriodAt1GiB) {
  const Cost c = costOf(false);
  const std::size_t m = 1024, d = 8;  // 1 GiB, and 1 GiB less 8 chunks per tree
  for (int n : {3, 4}) {
    const double period = c.alpha + treeShape(n).load * static_cast<double>(kDefaultPipelineChunkBytes) * c.beta;
    const double full = simulateTree(n, m, false), less = simulateTree(n, m - d, false);
    EXPECT_NEAR(full - less, d * period, kRelTol * full) << "n=" << n;
    EXPECT_NEAR(simulateTree(n, m, false, 0), full, kRelTol * full) << "n=" << n << ", extrapolated";
  }
}

TEST(PipelinedTree, NoRunBeatsTheBusiestLinkAt1GiB) {
  // The data-free method at 1 GiB (what the simulator uses for large trees) for every rank count, with and without
  // reductions.
  const std::size_t m = 1024;
  for (int n : kRanks) {
    for (bool gamma : {false, true}) {
      const Cost c = costOf(gamma);
      const double bound = static_cast<double>(m * treeShape(n).load * kDefaultPipelineChunkBytes) * c.beta;
      const double got = simulateTree(n, m, gamma, 0);
      EXPECT_GE(got, bound * (1 - 1e-12)) << "n=" << n << (gamma ? " gamma" : "");
      // And not absurdly above it: the tree keeps its links busy (a per-round latency is the most it idles in the
      // periodic cases; 2 % covers the wandering ones here).
      EXPECT_LE(got, (bound + static_cast<double>(m) * c.alpha) * 1.02) << "n=" << n << (gamma ? " gamma" : "");
    }
  }
}

// The reason the wandering cases have no closed form: their makespan jumps when a latency moves by 1e-9 relative,
// while a periodic case moves by about that much.
TEST(PipelinedTree, WanderingCasesAreIllConditioned) {
  auto withLatency = [](int n, double latencyUs) {
    const Topology t = flatTopology(n, kLinkGBps, latencyUs);
    sim::SimConfig cfg;
    cfg.mode = sim::SimMode::Exact;
    return sim::Simulator(t, n, cfg)
        .runAlgorithm(CollectiveSpec{Collective::AllReduce, n, 2 * 200 * kChunkElems, DType::F32}, "tree")
        .seconds;
  };
  const double nudge = 1 + 1e-9;
  const double periodic = withLatency(4, kLinkLatencyUs), periodicNudged = withLatency(4, kLinkLatencyUs * nudge);
  EXPECT_NEAR(periodicNudged, periodic, 1e-8 * periodic);
  const double wandering = withLatency(8, kLinkLatencyUs), wanderingNudged = withLatency(8, kLinkLatencyUs * nudge);
  EXPECT_GT(std::abs(wanderingNudged - wandering), 1e-4 * wandering);
}

}  // namespace
}  // namespace collbench
