// NVLSTree all-reduce (NCCL's NCCL_ALGO_NVLS_TREE, NCCL 2.28 src/device/all_reduce.h and src/graph/connect.cc
// connectNvls): every GPU of a host is a head (nvls.nHeads = the local GPUs, each with its NIC). The data is cut per
// channel (contiguous, as ncclCollCbdPart), then in loops of heads x chunk; chunk j of a loop belongs to local rank j.
// Inside each host the NVSwitch reduces chunk j into head j (SwitchReduce, NVLS multimem.ld_reduce). Across hosts the
// heads j of every host (one rail: same local index, same NIC) reduce the chunk up and broadcast it down NCCL's double
// binary tree of hosts (ncclGetDtree; channel c runs tree c mod 2): a head folds its children's partials into its own
// (RecvReduce), sends up, receives the result and sends it to its children. Then the NVSwitch multicasts the result
// from head j into every GPU of the host (Multicast, multimem.st), after the head's sends to its children have read
// it. Each head keeps up to NCCL_STEPS chunks of a lane in flight (in_network.h SwitchSlots), as nvls.cc does.
// Per loop and channel a GPU's NVLink carries (heads + 1) chunks each way, its NIC at most three chunks each way on
// the tree where its host is interior, one where it is a leaf.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "builder.h"
#include "collbench/error.h"
#include "generators.h"
#include "in_network.h"

namespace collbench::algo {
namespace {

/// NCCL_NVLS_CHUNKSIZE's default (NCCL 2.28 src/transport/nvls.cc, NvlsChunkSize 128 KiB).
constexpr std::size_t kNvlsTreeChunkBytes = 128 * 1024;
/// NVLSTree's largest chunk from 4 hosts on, on sm90 (src/transport/nvls.cc ncclNvlsTuning: treeMaxChunkSize is
/// 64 KiB when nNodes >= 4, else the NVLS chunk).
constexpr std::size_t kNvlsTreeManyHostsChunkBytes = 64 * 1024;
constexpr std::size_t kNvlsTreeManyHosts = 4;
/// Two trees (NCCL's double binary tree); channel c runs tree c mod 2 (connect.cc connectNvls: treeUp[c % 2]).
constexpr int kTrees = 2;

/// The chunk of one (channel, head) per loop, in elements: src/enqueue.cc halves it while the call has fewer than
/// 32 / 16 / 4 / 1 chunks per concurrent op (channels x heads), down to 256 / 128 / 64 / 32 KiB.
std::size_t nvlsTreeChunkElems(const CollectiveSpec& spec, const AlgoParams& p, std::size_t hosts, std::size_t local) {
  if (p.chunkBytes > 0) return std::max<std::size_t>(1, p.chunkBytes / spec.elementSize());
  const std::size_t start = hosts >= kNvlsTreeManyHosts ? kNvlsTreeManyHostsChunkBytes : kNvlsTreeChunkBytes;
  return cascadeChunkElems(start, spec.inputBytes(), static_cast<std::size_t>(p.channels) * local, spec.elementSize(),
                           {{32, 256 * 1024}, {16, 128 * 1024}, {4, 64 * 1024}, {1, 32 * 1024}});
}

/// Parent host of each host in tree t, and its children.
struct HostTree {
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
  HostTree(int hosts, int t) : parent(static_cast<std::size_t>(hosts)), children(static_cast<std::size_t>(hosts)) {
    for (int x = 0; x < hosts; ++x) {
      parent[static_cast<std::size_t>(x)] = dtreeParent(hosts, x, t);
      if (parent[static_cast<std::size_t>(x)] >= 0)
        children[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])].push_back(x);
    }
  }
  /// Levels below the root (the longest path from a leaf).
  int depth() const { return treeDepth(parent); }
};

}  // namespace

Schedule nvlsTreeAllReduce(const CollectiveSpec& spec, const AlgoParams& p) {
  const std::vector<std::vector<int>> hosts = ranksByHost(spec, p, "nvls_tree");
  ScheduleBuilder b(spec, "nvls_tree");
  const int nh = static_cast<int>(hosts.size());
  const std::size_t local = hosts.front().size();
  std::vector<int> groups;
  if (local > 1) {
    for (const auto& h : hosts) groups.push_back(b.switchGroup(h));
  }
  const std::size_t chunk = nvlsTreeChunkElems(spec, p, hosts.size(), local);
  const HostTree trees[kTrees] = {HostTree(nh, 0), HostTree(nh, 1)};
  // Lanes: (channel, host, head); the root of a lane's switch ops is its head.
  SwitchSlots slots(static_cast<std::size_t>(p.channels) * hosts.size() * local);
  const Partition byChannel{spec.count, static_cast<std::size_t>(p.channels)};
  for (int c = 0; c < p.channels; ++c) {
    const HostTree& tree = trees[c % kTrees];
    const std::size_t off = byChannel.offset(static_cast<std::size_t>(c)),
                      len = byChannel.size(static_cast<std::size_t>(c));
    std::size_t loop = 0;
    for (std::size_t base = 0; base < len; base += local * chunk, ++loop) {
      const Partition heads{std::min(local * chunk, len - base), local};
      for (std::size_t j = 0; j < local; ++j) {
        const std::size_t at = off + base + heads.offset(j), n = heads.size(j);
        auto lane = [&](std::size_t x) { return (static_cast<std::size_t>(c) * hosts.size() + x) * local + j; };
        // The host's sum of the chunk in its head's output.
        std::vector<std::vector<OpId>> loads(hosts.size());
        for (std::size_t x = 0; x < hosts.size(); ++x) {
          const int head = hosts[x][j];
          if (local == 1) {
            loads[x] = {b.copy(head, in(at), out(at), n, {})};
          } else {
            loads[x] = switchLoads(b, slots, lane(x), loop, groups[x], hosts[x], head, in(at), at, n,
                                   std::vector<OpId>(local, kNoOp), c);
          }
        }
        // The tree among the heads j: reduce up, broadcast down.
        std::vector<OpId> treeDone(hosts.size());
        for (std::size_t x = 0; x < hosts.size(); ++x) {
          const int head = hosts[x][j];
          OpId acc = loads[x][local == 1 ? 0 : j];
          for (int y : tree.children[x])
            acc = b.recvReduce(head, hosts[static_cast<std::size_t>(y)][j], out(at), out(at), n, {acc}, c);
          OpId result = acc;
          if (const int up = tree.parent[x]; up >= 0) {
            const int upHead = hosts[static_cast<std::size_t>(up)][j];
            const OpId sent = b.send(head, upHead, out(at), n, {acc}, c);
            result = b.recv(head, upHead, out(at), n, {sent}, c);
          }
          std::vector<OpId> done{result};
          for (int y : tree.children[x])
            done.push_back(b.send(head, hosts[static_cast<std::size_t>(y)][j], out(at), n, {result}, c));
          treeDone[x] = b.join(head, done);
        }
        if (local == 1) continue;
        for (std::size_t x = 0; x < hosts.size(); ++x) {
          std::vector<OpId> after = loads[x];
          after[j] = treeDone[x];
          switchStores(b, slots, lane(x), loop, groups[x], hosts[x], hosts[x][j], at, n, after, c);
        }
      }
    }
  }
  return b.finish();
}

namespace {

/// The first loop's stages, then one period per further loop. Fill: the NVLS reduction of every head's chunk (heads
/// chunks up each GPU's NVLink per channel, the reduced one down at min(link, reduce_GBps)), the tree's depth in
/// hops up (each with the head's reduction) and down over the NICs, and the multicast (heads chunks down per
/// channel). Period: the busier of a GPU's NVLink ((heads + 1) chunks each way per channel, or a head's load after
/// the last) and its NIC (per channel, one chunk for the parent and one per child of its host in that channel's
/// tree, after one step latency: the simulator runs a connection's transfers one after another, each paying the wire
/// rule's latency), or a kNcclSteps-th of the fill where the pipeline is latency bound.
Estimate nvlsTreeCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  AlgoParams hp = p;
  hp.rankHost = ctx.host;
  std::vector<std::vector<int>> hosts;
  try {
    hosts = ranksByHost(s, hp, "nvls_tree");
  } catch (const Error& e) {
    return unsupportedEstimate(e.what());
  }
  const std::size_t local = hosts.front().size(), nh = hosts.size();
  const auto ch = static_cast<std::size_t>(p.channels);
  const std::size_t es = s.elementSize();
  const std::size_t chunk = std::min(nvlsTreeChunkElems(s, p, nh, local), ceilDiv(ceilDiv(s.count, ch), local));
  const std::size_t loops = std::max<std::size_t>(1, ceilDiv(ceilDiv(s.count, ch), local * chunk));
  const double bytes = static_cast<double>(chunk * es), c = static_cast<double>(ch), l = static_cast<double>(local);
  CostTerms load, store, period;
  if (local > 1) {
    std::string why;
    std::optional<SwitchPath> nv;
    for (const auto& h : hosts) {
      nv = reducingSwitch(ctx, h, "in-host (NVLS)", why);
      if (!nv) return unsupportedEstimate("nvls_tree needs an NVSwitch that reduces in each host: " + why);
    }
    const int cls = ctx.classOf(hosts[0][0], hosts[0][1]);
    const double reduced = std::min(nv->linkBytesPerUs, nv->reduceBytesPerUs);
    auto leg = [&](double lat, double b, double rate) {
      CostTerms t;
      t.us = lat + b / rate;
      t.alphaCount[cls] = lat > 0 ? 1 : 0;
      t.betaBytes[cls] = b;
      return t;
    };
    load =
        CostTerms::max(leg(nv->latencyUs, c * l * bytes, nv->linkBytesPerUs), leg(nv->latencyUs, c * bytes, reduced));
    store = leg(nv->latencyUs, c * l * bytes, nv->linkBytesPerUs);
    // Both directions of a GPU's link carry (heads + 1) chunks per channel and loop; a head's loads go one after
    // the other, each sharing the link with every lane's.
    period = CostTerms::max(leg(0, c * (l + 1) * bytes, nv->linkBytesPerUs),
                            leg(nv->latencyUs, c * l * bytes, nv->linkBytesPerUs));
  } else {
    load = ctx.gammaCost(c * bytes, 0);
  }
  CostTerms fill = load + store;
  if (nh > 1) {
    // A tree hop is one transfer between two heads of a rail (their NICs), under the call's wire rule as the
    // simulator times it: NCCL's step latency for the network, then every channel's chunk through the one NIC.
    // Every rail's heads move at once, sharing whatever their routes share (NICs behind one PCIe switch).
    auto rails = [&](int mult) {
      std::vector<CostContext::Flow> flows;
      for (std::size_t j = 0; j < local; ++j) flows.push_back({hosts[0][j], hosts[1][j], bytes, mult});
      return ctx.phaseMax(flows);
    };
    const int a = hosts[0][0];
    const CostTerms hop = rails(p.channels);
    const HostTree trees[kTrees] = {HostTree(static_cast<int>(nh), 0), HostTree(static_cast<int>(nh), 1)};
    const int depth = std::max(trees[0].depth(), trees[1].depth());
    fill += (hop * 2.0 + ctx.gammaCost(c * bytes, a)) * static_cast<double>(depth);
    int busiest = 0;
    for (std::size_t x = 0; x < nh; ++x) {
      int chunks = 0;
      for (std::size_t k = 0; k < ch; ++k) {
        const HostTree& t = trees[k % kTrees];
        chunks += static_cast<int>(t.children[x].size()) + (t.parent[x] >= 0 ? 1 : 0);
      }
      busiest = std::max(busiest, chunks);
    }
    // The busiest NIC's chunks of a loop go out together, and a connection's next transfer starts when its last has
    // ended: one step latency per loop on top of their bytes.
    period = CostTerms::max(period, rails(busiest));
  }
  period = CostTerms::max(period, fill * (1.0 / static_cast<double>(kNcclSteps)));
  return estimateOf(fill + period * static_cast<double>(loops - 1));
}

/// Per chunk (loop, channel, head): the switch flows of both stages on every host (2 (local + 1) each), and two
/// transfers per tree edge.
std::size_t nvlsTreeTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  std::vector<int> distinct = p.rankHost;
  std::sort(distinct.begin(), distinct.end());
  const std::size_t nh = std::max<std::size_t>(
      1, static_cast<std::size_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin()));
  const std::size_t local = std::max<std::size_t>(1, static_cast<std::size_t>(spec.nranks) / nh);
  const std::size_t chunks =
      ceilDiv(spec.count, nvlsTreeChunkElems(spec, p, nh, local)) + static_cast<std::size_t>(p.channels) * local;
  return chunks * (nh * 2 * (local + 1) + 2 * (nh - 1));
}

}  // namespace

AlgorithmInfo nvlsTreeAlgorithm() {
  return {.name = "nvls_tree",
          .collective = Collective::AllReduce,
          .summary =
              "NCCL NVLSTree: NVSwitch reduction in each host, double binary tree of hosts per rail, NVSwitch "
              "multicast",
          .build = nvlsTreeAllReduce,
          .cost = nvlsTreeCost,
          .traits = {.usesChunkBytes = true,
                     .usesChannels = true,
                     .needsHosts = true,
                     .needsSwitchReduction = true,
                     .defaultModel = false,
                     .transfers = nvlsTreeTransfers}};
}

}  // namespace collbench::algo
