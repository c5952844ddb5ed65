// NVLS all-reduce (NCCL's NCCL_ALGO_NVLS inside one NVSwitch domain): the data is cut into loops of channels x n
// chunks; in each loop, chunk (channel c, rank q) is reduced by the switch for its owner q (SwitchReduce with root q:
// NVLS multimem.ld_reduce) and written back into every rank by the switch (Multicast from q: multimem.st). Each
// owner keeps up to NCCL_STEPS chunks of a channel in flight: the load of loop i waits for the store of loop
// i - NCCL_STEPS (its buffer slot), stores go in order, so reductions and multicasts of consecutive loops overlap as
// NCCL's warps pipeline them. Per rank and loop the links carry channels x chunk x (n + 1) bytes each way: n
// contributions up and n multicast chunks down, plus the owner's reduced chunk down and its store up.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "builder.h"
#include "generators.h"
#include "in_network.h"
#include "models/cost_context.h"

namespace collbench::algo {
namespace {

/// NCCL_NVLS_CHUNKSIZE's default, the NVLS chunk (NCCL 2.28 src/transport/nvls.cc, NvlsChunkSize 128 KiB).
constexpr std::size_t kNvlsChunkBytes = 128 * 1024;
/// NCCL 2.28 src/enqueue.cc lowers the NVLS chunk to 64 KiB when the call has fewer than 64 chunks per concurrent op
/// (nBytes < 64 x nChannels x nHeads x chunkSize), so that small calls still spread over every channel.
constexpr std::size_t kNvlsSmallChunkBytes = 64 * 1024;
constexpr std::size_t kNvlsChunksPerOp = 64;
/// Chunks of one channel in flight: NCCL_STEPS (NCCL 2.28 src/include/device.h), the slots of NVLS's buffer
/// (src/transport/nvls.cc: buffSize = nvlsChunkSize x NCCL_STEPS).
constexpr std::size_t kNvlsSteps = 8;

/// The chunk of one (channel, owner) per loop, in elements (at least one).
std::size_t nvlsChunkElems(const CollectiveSpec& spec, const AlgoParams& p) {
  std::size_t bytes = p.chunkBytes;
  if (bytes == 0) {
    const std::size_t concurrentOps = static_cast<std::size_t>(p.channels) * static_cast<std::size_t>(spec.nranks);
    bytes =
        spec.inputBytes() < kNvlsChunksPerOp * concurrentOps * kNvlsChunkBytes ? kNvlsSmallChunkBytes : kNvlsChunkBytes;
  }
  return std::max<std::size_t>(1, bytes / spec.elementSize());
}

std::size_t nvlsLoops(const CollectiveSpec& spec, const AlgoParams& p) {
  const std::size_t perLoop =
      static_cast<std::size_t>(p.channels) * static_cast<std::size_t>(spec.nranks) * nvlsChunkElems(spec, p);
  return std::max<std::size_t>(1, ceilDiv(spec.count, perLoop));
}

}  // namespace

Schedule nvlsAllReduce(const CollectiveSpec& spec, const AlgoParams& p) {
  ScheduleBuilder b(spec, "nvls", p);
  const int n = spec.nranks;
  if (n == 1) {
    b.copy(0, in(0), out(0), spec.count, {});
    return b.finish();
  }
  std::vector<int> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const int group = b.switchGroup(all);
  const std::size_t chunk = nvlsChunkElems(spec, p);
  const std::size_t lanes = static_cast<std::size_t>(p.channels) * static_cast<std::size_t>(n);
  // The owner's stores (Multicast) of each lane (channel, owner), by loop modulo kNvlsSteps: the slot each load
  // reuses, and the previous store.
  std::vector<std::vector<OpId>> stores(lanes, std::vector<OpId>(kNvlsSteps, kNoOp));
  std::size_t loop = 0;
  for (std::size_t base = 0; base < spec.count; base += lanes * chunk, ++loop) {
    const Partition parts{std::min(lanes * chunk, spec.count - base), lanes};
    for (int c = 0; c < p.channels; ++c) {
      for (int q = 0; q < n; ++q) {
        const std::size_t lane =
            static_cast<std::size_t>(c) * static_cast<std::size_t>(n) + static_cast<std::size_t>(q);
        const std::size_t at = base + parts.offset(lane), len = parts.size(lane);
        for (int r = 0; r < n; ++r) {
          const bool owner = r == q;
          // A non-owner only lends its input to the owner's load, then takes the owner's store (after its input has
          // been read: in place they are the same bytes).
          auto& slots = stores[lane];
          const OpId slotFree = owner ? slots[loop % kNvlsSteps] : kNoOp;
          const OpId previous = owner ? slots[(loop + kNvlsSteps - 1) % kNvlsSteps] : kNoOp;
          const OpId load = b.switchOp(OpKind::SwitchReduce, r, group, q, in(at), out(at), len, {slotFree}, c);
          const OpId store = b.switchOp(OpKind::Multicast, r, group, q, out(at), out(at), len, {load, previous}, c);
          if (owner) slots[loop % kNvlsSteps] = store;
        }
      }
    }
  }
  return b.finish();
}

namespace {

/// The first loop's two stages, as the simulator times switch ops (simulator/sim_backend.h: legs of one op stream
/// together): the reduction pulls n chunks per channel up every rank's link while one reduced chunk per channel
/// comes down at min(link, reduce_GBps); the multicast sends one chunk per channel up while n come down. Each further
/// loop adds the busier direction of a link (n + 1 chunks per channel each way, the reduced one at its rate), or a
/// kNvlsSteps-th of the two stages where the pipeline is latency bound.
Estimate nvlsCost(const CostContext& ctx, const CollectiveSpec& s, const AlgoParams& p) {
  const int n = ctx.n;
  if (n == 1) return estimateOf(ctx.gammaCost(static_cast<double>(s.inputBytes()), 0));
  std::vector<int> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const int sw = ctx.switchOf(all);
  if (sw < 0 || !ctx.topo.nodes[static_cast<std::size_t>(sw)].reducesInNetwork()) {
    Estimate e;
    e.supported = false;
    e.note = fmt::format("nvls needs a switch that reduces (reduce_GBps > 0); {}",
                         sw < 0 ? std::string("no switch connects the ranks")
                                : "switch " + ctx.topo.nodes[static_cast<std::size_t>(sw)].id + " does not");
    return e;
  }
  // Every rank's route to the switch: its latency and bottleneck (the slowest rank sets the pace).
  const SwitchPath path = switchPath(ctx, all, sw);
  const double lat = path.latencyUs, link = path.linkBytesPerUs;
  const double reduced = std::min(link, path.reduceBytesPerUs);
  const std::size_t loops = nvlsLoops(s, p);
  // The largest lane of a loop (the last loop's lanes are no larger).
  const double chunk =
      static_cast<double>(std::min(nvlsChunkElems(s, p), ceilDiv(s.count, static_cast<std::size_t>(p.channels) *
                                                                              static_cast<std::size_t>(n))) *
                          s.elementSize());
  const double lanesPerRank = static_cast<double>(p.channels);
  const int cls = ctx.classOf(0, 1);
  auto leg = [&](double bytes, double rate) {
    CostTerms t;
    t.us = lat + bytes / rate;
    t.alphaCount[cls] = 1;
    t.betaBytes[cls] = bytes * link / rate;
    return t;
  };
  const CostTerms load = CostTerms::max(leg(lanesPerRank * n * chunk, link), leg(lanesPerRank * chunk, reduced));
  const CostTerms store = leg(lanesPerRank * n * chunk, link);
  auto bytesOnly = [&](double bytes, double rate) {
    CostTerms t = leg(bytes, rate);
    t.us -= lat;
    t.alphaCount[cls] = 0;
    return t;
  };
  const CostTerms up = bytesOnly(lanesPerRank * (n + 1) * chunk, link);
  const CostTerms down = bytesOnly(lanesPerRank * n * chunk, link) + bytesOnly(lanesPerRank * chunk, reduced);
  const CostTerms period =
      CostTerms::max(CostTerms::max(up, down), (load + store) * (1.0 / static_cast<double>(kNvlsSteps)));
  return estimateOf(load + store + period * static_cast<double>(loops - 1));
}

/// Switch flows: per loop and lane, n + 1 for the reduction and n + 1 for the multicast.
std::size_t nvlsTransfers(const CollectiveSpec& spec, const AlgoParams& p) {
  const auto n = static_cast<std::size_t>(spec.nranks);
  return nvlsLoops(spec, p) * static_cast<std::size_t>(p.channels) * n * 2 * (n + 1);
}

}  // namespace

AlgorithmInfo nvlsAlgorithm() {
  return {.name = "nvls",
          .collective = Collective::AllReduce,
          .summary = "NVLS: reduce-scatter by in-switch reduction + all-gather by switch multicast (NVSwitch SHARP)",
          .build = nvlsAllReduce,
          .cost = nvlsCost,
          .traits = {.usesChunkBytes = true,
                     .usesChannels = true,
                     .needsSwitchReduction = true,
                     .defaultModel = false,
                     .transfers = nvlsTransfers}};
}

}  // namespace collbench::algo
