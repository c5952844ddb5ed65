#pragma once
// The cost model's building blocks over one topology (collbench/cost_model.h describes the model): routes and link
// loads of concurrent flows, reductions, and ring phases. Each algorithm's closed form (AlgorithmInfo::cost, in its
// own file under core/algorithms/) composes them; CostModel adds the per-call overhead and memory tiers.
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/topology.h"
#include "collbench/wire_rule.h"

namespace collbench {

/// Topology bandwidths are GB/s = 1e9 bytes/s = 1e3 bytes/us.
inline constexpr double kBytesPerUsPerGBps = 1e3;

/// ceil(a / b); 0 when b is 0.
inline std::size_t ceilDiv(std::size_t a, std::size_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

/// A supported estimate of `terms`.
inline Estimate estimateOf(const CostTerms& terms) {
  Estimate e;
  e.terms = terms;
  return e;
}

/// Ranks 0..n-1 of a topology as the model sees them. Not movable: `router` points into `topo`.
struct CostContext {
  /// `mult` identical flows between the same pair (channels): each counts on the links it crosses.
  struct Flow {
    int src, dst;
    double bytes;
    int mult = 1;
  };

  /// The rings ring.cc builds for AlgoParams: one per distinct ring order, with the channels that run on it.
  struct ChannelRings {
    std::vector<std::vector<int>> rings;
    std::vector<int> mult;
    int channels = 1;  ///< channels that carry data: every rank reduces that many pieces at once

    /// One more channel on `ring`: a new ring, or one more flow on an equal one.
    void add(std::vector<int> ring);
  };

  /// ring.cc's pieces: the round count of the largest channel slice and its largest piece (elements).
  struct RingPieces {
    std::size_t rounds, pieceElems;
  };

  /// Throws Error{InvalidArgument} when the topology has fewer than `nranks` ranks (<= 0: all of them).
  CostContext(Topology t, int nranks);
  CostContext(const CostContext&) = delete;
  CostContext& operator=(const CostContext&) = delete;

  /// LinkClassKind of the route a -> b, as an index.
  int classOf(int a, int b) const;
  /// Reduction (or copy) of `bytes` at `rank`'s rate.
  CostTerms gammaCost(double bytes, int rank) const;
  /// Reduction of `bytes` at the slowest reducer (symmetric phases: every rank reduces as much).
  CostTerms gammaMax(double bytes) const;
  /// Costs of concurrent flows: each flow's route latency plus its bytes at the rate of its most loaded link
  /// (capacity / concurrent flows), both under the call's wire rule (beginCall; collbench/wire_rule.h): the latency
  /// of the route's path class and the bytes on the wire. Zero-byte flows cost their latency only when `keepEmpty`
  /// (barrier messages); otherwise the generators elide them and they cost nothing.
  std::vector<CostTerms> phase(const std::vector<Flow>& flows, bool keepEmpty = false) const;
  /// The slowest flow of phase().
  CostTerms phaseMax(const std::vector<Flow>& flows, bool keepEmpty = false) const;

  /// A ring phase over one ring of d.size() ranks (transfer i -> i+1 takes d[i], the reduction at i g[i]) of `steps`
  /// steps per round, the first `reduceSteps` received with a reduction, `rounds` rounds sharing the connections.
  /// recvWaitsSend: a rank posts the receive of step s only once its own send of step s-1 is done.
  CostTerms ringRecurrence(const std::vector<CostTerms>& d, const std::vector<CostTerms>& g, int steps, int reduceSteps,
                           std::size_t rounds, bool recvWaitsSend = false) const;
  /// Starts pricing a call with this protocol (AlgoParams::protocol): sets the wire rule phase() applies and forgets
  /// which protocols earlier calls used.
  void beginCall(std::optional<Protocol> protocol) const;
  /// Microseconds the call begun by beginCall pays once (WireRule::launchFloorUs of the protocols its flows used so
  /// far, and of switch ops where its terms priced one: asked switchOf, as the simulator pays NCCL's NVLS latency
  /// only for a schedule that holds switch ops; collnet on one host, nvls_tree with one GPU per host hold none).
  double launchFloorUs() const;
  /// The share of its links' and reduction port's rates a switch op's leg through switch node `sw` gets under the
  /// call's wire rule (WireRule::switchShare: an in-host NVSwitch's NVLS on GPU ranks).
  double switchShare(int sw) const;

  /// The smallest period of a ring's delays (p divides d.size(), d and g repeat every p entries bit for bit).
  static std::size_t ringPeriod(const std::vector<CostTerms>& d, const std::vector<CostTerms>& g);
  /// Delays of one ring step: transfer ring[i] -> ring[i+1] of `bytes` on `mult[r]` identical channels of ring r
  /// (flows of every ring share the links), and the receiver's reduction of `reduceShare` x `bytes`.
  void ringDelays(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult, double bytes,
                  int reduceShare, std::vector<std::vector<CostTerms>>& d,
                  std::vector<std::vector<CostTerms>>& g) const;
  /// Rings run concurrently (their flows share links); the phase ends with the slowest.
  CostTerms ringsPhase(const std::vector<std::vector<int>>& rings, const std::vector<int>& mult, double bytes,
                       int reduceShare, int steps, int reduceSteps, std::size_t rounds,
                       bool recvWaitsSend = false) const;
  /// The switch that performs the switch ops of these ranks (validator.h switchOfRanks), remembered per rank set:
  /// NVLS and CollNet ask for it at every chunk and channel count, and at 32768 GPUs one answer takes a second.
  int switchOf(const std::vector<int>& ranks) const;  // marks the call as performing switch ops
  /// Disjoint rings of one flow each (hierarchical's per-host and per-local-index rings).
  CostTerms ringsPhase(const std::vector<std::vector<int>>& rings, double bytes, int steps, int reduceSteps) const;
  /// Channel c runs on ringOrder(n, p, c); channels whose slice is empty are elided, channels on the same ring are
  /// one ring of `mult` parallel flows (one host: every channel is 0..n-1).
  ChannelRings channelRings(const AlgoParams& p, std::size_t count) const;
  /// The pieces of `count` elements of `es` bytes with `blocksPerRound` blocks of chunkBytes per pipeline round.
  static RingPieces ringPieces(std::size_t count, std::size_t es, const AlgoParams& p, std::size_t blocksPerRound);

  Topology topo;
  int n = 0;
  std::unique_ptr<Router> router;      // points into `topo`
  std::vector<int> node;               // node index per rank
  std::vector<int> host;               // host index per rank
  std::vector<double> gammaUsPerByte;  // per rank; 0 = free
  std::vector<double> capBytesPerUs;   // per link, after switch port limits
  std::vector<NcclPath> linkPath;      // per link, its wire path class (wirePathOf)
  bool onGpuRanks = false;             // every rank is a GPU of a known arch (gpuRanks): NCCL's p2p rule applies
  NetworkLatency netLatency;           // on GPU ranks, the system's network latency beyond NCCL's (wire_rule.h)
  CostSummary summary;

 private:
  void summarize();

  // Scratch for phase(): load per directed link (link * 2 + (forward ? 0 : 1)) and the entries touched.
  mutable std::vector<double> load_;
  mutable std::vector<int> touched_;
  mutable std::vector<const std::vector<Hop>*> routes_;  // phase(): each flow's route, looked up once
  // The call being priced (beginCall): its wire rule, and whether a flow chose Simple under the p2p rule.
  mutable WireRule wire_;
  mutable bool usedSimple_ = false;
  mutable bool usedSwitch_ = false;  // the call's terms priced a switch op (switchOf)
  // ringRecurrence's rounds' ends by their inputs (bytes of the period of d and g, steps, rounds simulated).
  mutable std::unordered_map<std::string, std::array<CostTerms, 3>> ringMemo_;
  mutable std::map<std::vector<int>, int> switchOf_;
};

}  // namespace collbench
