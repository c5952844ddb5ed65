// CollNet all-reduce (NCCL's NCCL_ALGO_COLLNET_DIRECT and NCCL_ALGO_COLLNET_CHAIN with IB SHARP; NCCL 2.28
// src/device/all_reduce.h, src/graph/connect.cc connectCollNet and setupChannel): a fabric switch reduces across
// hosts. Each chunk is first reduced inside its host into one head GPU, the heads of that chunk (one per host, the
// same local index, so the same rail and NIC) all-reduce it through the fabric switch that serves them (SwitchReduce
// to a root head, then Multicast back: SHARP's reduction and its result multicast), and each head then hands the
// result to the other GPUs of its host. The two differ inside the host, as NCCL's kernels do:
// - collnet_direct: every GPU is a head (collnetDirect.nHeads = the local GPUs, one per NIC) and talks to the network
//   over its own rail. Data goes in loops of channels x heads x chunk; chunk j of a channel belongs to head j. Every
//   GPU sends its piece of chunk j straight to head j over NVLink (scatter), head j folds them in one by one
//   (RecvReduce; GPU r's first peer is head r + 1, as NCCL's `shift` keeps leaves from hitting one head together),
//   and after the switch head j sends the result straight to every GPU (broadcast, on channels channels..2 channels-1:
//   connections apart from the scatter's).
// - collnet_chain: one head per channel (channel c's chain starts at local GPU c mod local, the GPU of the channel's
//   NIC: the chain graph's channels start at different NICs) and the host's GPUs form a chain from it. Data goes in
//   loops of channels x chunk; the chunk is reduced up the chain (each GPU folds its successor's partial and sends
//   it on), all-reduced by the switch among the channel's heads, and passed back down the chain.
// SHARP reduces and multicasts in the switch with no root; the IR's SwitchReduce has one, whose link carries the
// reduced bytes down and its Multicast's bytes up once more. The root rotates over the hosts by lane and by loop, so
// that this extra traffic spreads evenly: a rail's NIC carries (1 + 1/hosts) of its chunks each way, where SHARP
// carries them once. Each root processes its loops of a lane in order with up to NCCL_STEPS in flight.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "builder.h"
#include "collbench/error.h"
#include "generators.h"
#include "in_network.h"

namespace collbench::algo {
namespace {

/// A Simple-protocol step: NCCL_BUFFSIZE's default 4 MiB / NCCL_STEPS (src/enqueue.cc: stepSize = buffSize /
/// NCCL_STEPS; collnet has chunkSteps 1).
constexpr std::size_t kSimpleStepBytes = 4 * 1024 * 1024 / kNcclSteps;
/// CollNet Chain's chunk is at most 256 KiB (src/enqueue.cc: min(256 KiB, stepSize x chunkSteps)).
constexpr std::size_t kChainMaxChunkBytes = 256 * 1024;

enum class Shape { Direct, Chain };

std::string_view nameOf(Shape shape) { return shape == Shape::Direct ? "collnet_direct" : "collnet_chain"; }

/// The chunk per lane and loop, in elements: src/enqueue.cc halves it while the call has fewer chunks per concurrent
/// op than depth x 64 / 8 / 8 (Direct: channels x heads ops, depth 2 with peers in the host, down to 128 / 64 /
/// 32 KiB) or depth x 64 / 8 / 1 (Chain: channels ops, depth the chain's length).
std::size_t collnetChunkElems(Shape shape, const CollectiveSpec& spec, const AlgoParams& p, std::size_t local) {
  if (p.chunkBytes > 0) return std::max<std::size_t>(1, p.chunkBytes / spec.elementSize());
  const auto ch = static_cast<std::size_t>(p.channels);
  if (shape == Shape::Direct) {
    const double depth = local > 1 ? 2 : 1;
    return cascadeChunkElems(kSimpleStepBytes, spec.inputBytes(), ch * local, spec.elementSize(),
                             {{depth * 64, 128 * 1024}, {depth * 8, 64 * 1024}, {depth * 8, 32 * 1024}});
  }
  const auto depth = static_cast<double>(local);
  return cascadeChunkElems(std::min(kChainMaxChunkBytes, kSimpleStepBytes), spec.inputBytes(), ch, spec.elementSize(),
                           {{depth * 64, 128 * 1024}, {depth * 8, 64 * 1024}, {depth, 32 * 1024}});
}

/// Builds one of the two shapes.
class CollnetBuilder {
 public:
  CollnetBuilder(Shape shape, const CollectiveSpec& spec, const AlgoParams& p)
      : shape_(shape),
        p_(p),
        hosts_(ranksByHost(spec, p, nameOf(shape))),
        local_(hosts_.front().size()),
        b_(spec, std::string(nameOf(shape))),
        slots_(static_cast<std::size_t>(p.channels) * local_ * hosts_.size()) {
    if (hosts_.size() > 1) {
      for (std::size_t j = 0; j < local_; ++j) {
        std::vector<int> members = railOf(hosts_, j);
        std::sort(members.begin(), members.end());
        rails_.push_back(b_.switchGroup(std::move(members)));
      }
    }
  }

  Schedule build() {
    const CollectiveSpec& spec = b_.spec();
    const std::size_t chunk = collnetChunkElems(shape_, spec, p_, local_);
    const std::size_t lanes = static_cast<std::size_t>(p_.channels) * (shape_ == Shape::Direct ? local_ : 1);
    std::size_t loop = 0;
    for (std::size_t base = 0; base < spec.count; base += lanes * chunk, ++loop) {
      const Partition parts{std::min(lanes * chunk, spec.count - base), lanes};
      for (std::size_t lane = 0; lane < lanes; ++lane) {
        const std::size_t at = base + parts.offset(lane), len = parts.size(lane);
        if (shape_ == Shape::Direct) {
          direct(lane, loop, at, len);
        } else {
          chain(lane, loop, at, len);
        }
      }
    }
    return b_.finish();
  }

 private:
  int channelOf(std::size_t lane) const { return static_cast<int>(shape_ == Shape::Direct ? lane / local_ : lane); }

  /// Head j of every host holds its host's partial (after ready[x]): the switch of rail j all-reduces it. Returns
  /// each host's head's result.
  std::vector<OpId> acrossHosts(std::size_t lane, std::size_t loop, std::size_t j, std::size_t at, std::size_t len,
                                const std::vector<OpId>& ready) {
    if (hosts_.size() == 1) return ready;
    const std::vector<int> members = railOf(hosts_, j);
    // The root rotates over the hosts loop by loop; each root orders its own loops of the lane (every H-th).
    const std::size_t nh = hosts_.size(), rootHost = (lane + loop) % nh, slot = lane * nh + rootHost;
    const int root = hosts_[rootHost][j];
    const int c = channelOf(lane), group = rails_[j];
    const std::vector<OpId> loads =
        switchLoads(b_, slots_, slot, loop / nh, group, members, root, out(at), at, len, ready, c);
    return switchStores(b_, slots_, slot, loop / nh, group, members, root, at, len, loads, c);
  }

  void direct(std::size_t lane, std::size_t loop, std::size_t at, std::size_t len) {
    const std::size_t j = lane % local_;
    const int c = channelOf(lane);
    std::vector<OpId> partial(hosts_.size());
    std::vector<std::vector<OpId>> scattered(hosts_.size(), std::vector<OpId>(local_, kNoOp));
    for (std::size_t x = 0; x < hosts_.size(); ++x) {
      const auto& h = hosts_[x];
      const int head = h[j];
      OpId acc = local_ == 1 ? b_.copy(head, in(at), out(at), len, {}) : kNoOp;
      for (std::size_t k = 1; k < local_; ++k) {
        const std::size_t peer = (j + local_ - k) % local_;  // GPU r sends to head r + 1 first (NCCL's shift)
        scattered[x][peer] = b_.send(h[peer], head, in(at), len, {}, c);
        acc = b_.recvReduce(head, h[peer], acc == kNoOp ? in(at) : out(at), out(at), len, {acc}, c);
      }
      partial[x] = acc;
    }
    const std::vector<OpId> result = acrossHosts(lane, loop, j, at, len, partial);
    // The broadcast has connections of its own (NCCL's scatter and broadcast use different ones): on the scatter's,
    // head j's results for its peers would queue behind its pieces for their heads, and the other way round.
    const int down = p_.channels + c;
    for (std::size_t x = 0; x < hosts_.size(); ++x) {
      const auto& h = hosts_[x];
      for (std::size_t k = 1; k < local_; ++k) {
        const std::size_t peer = (j + k) % local_;
        b_.send(h[j], h[peer], out(at), len, {result[x]}, down);
        b_.recv(h[peer], h[j], out(at), len, {scattered[x][peer]}, down);
      }
    }
  }

  void chain(std::size_t lane, std::size_t loop, std::size_t at, std::size_t len) {
    const int c = channelOf(lane);
    const std::size_t j = lane % local_;  // the channel's head
    std::vector<OpId> partial(hosts_.size());
    // Per host, the chain from the head: position k is local rank (j + k) mod local; what each sent up.
    std::vector<std::vector<OpId>> sentUp(hosts_.size(), std::vector<OpId>(local_, kNoOp));
    for (std::size_t x = 0; x < hosts_.size(); ++x) {
      const auto& h = hosts_[x];
      auto at_ = [&](std::size_t k) { return h[(j + k) % local_]; };
      OpId acc = local_ == 1 ? b_.copy(at_(0), in(at), out(at), len, {}) : kNoOp;
      for (std::size_t k = local_ - 1; k >= 1; --k) {
        const bool tail = k == local_ - 1;
        OpId mine = kNoOp;
        if (!tail) mine = b_.recvReduce(at_(k), at_(k + 1), in(at), out(at), len, {}, c);
        sentUp[x][k] = b_.send(at_(k), at_(k - 1), tail ? in(at) : out(at), len, {mine}, c);
      }
      if (local_ > 1) acc = b_.recvReduce(at_(0), at_(1), in(at), out(at), len, {}, c);
      partial[x] = acc;
    }
    const std::vector<OpId> result = acrossHosts(lane, loop, j, at, len, partial);
    for (std::size_t x = 0; x < hosts_.size(); ++x) {
      const auto& h = hosts_[x];
      auto at_ = [&](std::size_t k) { return h[(j + k) % local_]; };
      OpId have = result[x];
      for (std::size_t k = 0; k + 1 < local_; ++k) {
        b_.send(at_(k), at_(k + 1), out(at), len, {have}, c);
        have = b_.recv(at_(k + 1), at_(k), out(at), len, {sentUp[x][k + 1]}, c);
      }
    }
  }

  Shape shape_;
  const AlgoParams& p_;
  std::vector<std::vector<int>> hosts_;
  std::size_t local_;
  ScheduleBuilder b_;
  SwitchSlots slots_;
  std::vector<int> rails_;  ///< switch group of rail j (one per local index), when there are several hosts
};

/// One loop's stages, then one period per further loop. Fill: the in-host reduction into the head (Direct: local - 1
/// rounds of one chunk per channel over NVLink, each GPU sending to a different head; Chain: local - 1 hops), the
/// switch's two stages over the rail (the members' chunks up and the reduced chunk down at min(link, reduce_GBps),
/// then the multicast), and the hand-back (Direct: local - 1 chunks per channel out of each head at once; Chain:
/// local - 1 hops); in-host transfers under the wire rule, as the simulator times them. Period: the busiest NVLink
/// (Direct: one step latency, then 2 (local - 1) chunks per channel each way; Chain: two chunks per channel, or one
/// transfer with its latency and fold per in-host connection), the head's reductions, the busiest NIC (its lanes'
/// chunks, 1 + 1/hosts times: the rotating root's share twice), a root's load after its last (every hosts-th loop),
/// or a kNcclSteps-th of the SHARP stages where their latency bounds a root's slots.
Estimate collnetCost(Shape shape, const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  AlgoParams hp = p;
  hp.rankHost = ctx.host;
  std::vector<std::vector<int>> hosts;
  try {
    hosts = ranksByHost(s, hp, nameOf(shape));
  } catch (const Error& e) {
    return unsupportedEstimate(e.what());
  }
  const std::size_t local = hosts.front().size(), nh = hosts.size();
  const auto ch = static_cast<std::size_t>(p.channels);
  const std::size_t lanes = ch * (shape == Shape::Direct ? local : 1);
  const std::size_t chunk = std::min(collnetChunkElems(shape, s, p, local), ceilDiv(s.count, lanes));
  const std::size_t loops = std::max<std::size_t>(1, ceilDiv(s.count, lanes * chunk));
  const double bytes = static_cast<double>(chunk * s.elementSize()), c = static_cast<double>(ch);
  const double steps = static_cast<double>(local - 1);
  CostTerms fill, period;
  if (local > 1) {
    const int a = hosts[0][0], b = hosts[0][1];
    const double link = routeOf(ctx, a, b).second;
    const int cls = ctx.classOf(a, b);
    // `chunks` chunks out of one GPU at once, as the simulator times transfers: the wire rule's latency (NCCL's step
    // latency on GPUs), then their bytes through the GPU's link.
    auto transfer = [&](std::size_t chunks) { return ctx.phaseMax({{a, b, bytes, static_cast<int>(chunks)}}); };
    auto stream = [&](double n) {
      CostTerms t;
      t.us = n / link;
      t.betaBytes[cls] = n;
      return t;
    };
    const CostTerms hop = transfer(ch) + ctx.gammaCost(c * bytes, a);
    fill = hop * steps + (shape == Shape::Direct ? transfer(ch * (local - 1)) : transfer(ch) * steps);
    // Direct's scatter and hand-back go in lockstep (at each step every head receives from one peer), so a loop
    // pays one step latency, then all its chunks through the GPU's link each way. Chain's hops on different GPUs
    // overlap: the link's stream or one transfer and fold per connection.
    period = shape == Shape::Direct ? transfer(2 * ch * (local - 1))
                                    : CostTerms::max(stream(2 * c * bytes), transfer(1) + ctx.gammaCost(bytes, a));
    period = CostTerms::max(period, ctx.gammaCost((shape == Shape::Direct ? steps : 1) * c * bytes, a));
  } else {
    fill = ctx.gammaCost(c * bytes, hosts[0][0]);
  }
  if (nh > 1) {
    std::string why;
    std::optional<SwitchPath> sw;
    for (std::size_t j = 0; j < local; ++j) {
      sw = reducingSwitch(ctx, railOf(hosts, j), "fabric (SHARP)", why);
      if (!sw) {
        return unsupportedEstimate(
            fmt::format("{} needs a fabric switch that reduces across hosts: {}", nameOf(shape), why));
      }
    }
    const int cls = ctx.classOf(hosts[0][0], hosts[1][0]);
    // Lanes per NIC: Direct gives each GPU the lanes of its head index; Chain gives NIC j the channels c = j mod local.
    const double perNic = shape == Shape::Direct ? c : std::ceil(c / static_cast<double>(local));
    const double rate = std::min(sw->linkBytesPerUs, sw->reduceBytesPerUs);
    CostTerms stages;
    stages.us = 2 * sw->latencyUs + perNic * bytes * (1 / rate + 1 / sw->linkBytesPerUs);
    stages.alphaCount[cls] = 2;
    stages.betaBytes[cls] = 2 * perNic * bytes;
    fill += stages;
    const double share = 1 + 1 / static_cast<double>(nh);
    CostTerms nic;
    nic.us = std::max(perNic * bytes * share / rate, (sw->latencyUs + bytes / rate) / static_cast<double>(nh));
    nic.betaBytes[cls] = perNic * bytes * share;
    period = CostTerms::max(period, nic);
    // A root holds kNcclSteps chunks of a lane between its load and its store (in_network.h SwitchSlots): where the
    // SHARP stages' latency exceeds kNcclSteps periods, it sets the pace.
    period = CostTerms::max(period, stages * (1.0 / static_cast<double>(kNcclSteps)));
  }
  return estimateOf(fill + period * static_cast<double>(loops - 1));
}

/// Per chunk: 2 (local - 1) in-host transfers per host and the switch flows of the rail (2 (hosts + 1)).
std::size_t collnetTransfers(Shape shape, const CollectiveSpec& spec, const AlgoParams& p) {
  std::vector<int> distinct = p.rankHost;
  std::sort(distinct.begin(), distinct.end());
  const std::size_t nh = std::max<std::size_t>(
      1, static_cast<std::size_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin()));
  const std::size_t local = std::max<std::size_t>(1, static_cast<std::size_t>(spec.nranks) / nh);
  const std::size_t lanes = static_cast<std::size_t>(p.channels) * (shape == Shape::Direct ? local : 1);
  const std::size_t chunks = ceilDiv(spec.count, collnetChunkElems(shape, spec, p, local)) + lanes;
  return chunks * (nh * 2 * (local - 1) + 2 * (nh + 1));
}

template <Shape S>
Schedule buildShape(const CollectiveSpec& spec, const AlgoParams& p) {
  return CollnetBuilder(S, spec, p).build();
}

template <Shape S>
Estimate costOfShape(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  return collnetCost(S, ctx, s, p);
}

template <Shape S>
std::size_t transfersOfShape(const CollectiveSpec& s, const AlgoParams& p) {
  return collnetTransfers(S, s, p);
}

template <Shape S>
AlgorithmInfo collnetAlgorithm(const std::string& summary) {
  return {.name = std::string(nameOf(S)),
          .collective = Collective::AllReduce,
          .summary = summary,
          .build = buildShape<S>,
          .cost = costOfShape<S>,
          .traits = {.usesChunkBytes = true,
                     .usesChannels = true,
                     .needsHosts = true,
                     .needsSwitchReduction = true,
                     .defaultModel = false,
                     .transfers = transfersOfShape<S>}};
}

}  // namespace

AlgorithmInfo collnetDirectAlgorithm() {
  return collnetAlgorithm<Shape::Direct>(
      "NCCL CollNet Direct: scatter to a head per GPU over NVLink, fabric switch (SHARP) reduction per rail, "
      "broadcast back");
}

AlgorithmInfo collnetChainAlgorithm() {
  return collnetAlgorithm<Shape::Chain>(
      "NCCL CollNet Chain: reduce up a chain of the host's GPUs, fabric switch (SHARP) reduction among the heads, "
      "back down the chain");
}

}  // namespace collbench::algo
