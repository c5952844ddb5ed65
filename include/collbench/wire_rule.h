#pragma once
/// The wire rule: what one point-to-point transfer of a collbench schedule costs on GPU ranks under NCCL 2.28's
/// protocols, and what a call pays once. One definition for the simulator (simulator/world.cc times each transfer with
/// it) and the cost model (core/models/cost_context.cc prices each flow with it), so the selector ranks algorithms
/// by the terms the simulator charges.
///
/// - Which ranks pay it: a call with a protocol (Schedule::protocol, AlgoParams::protocol) always; without one, ranks
///   that are all GPUs of a known arch (NCCL's point-to-point rule, as the nccl backend runs a schedule); elsewhere
///   (CPU ranks, generic topologies) nothing, and times stay the plain alpha-beta ones.
/// - Protocol of a transfer: the fixed one, else LL up to kNcclP2pLLThresholdBytes and Simple above.
/// - Bytes on the wire: data bytes / the protocol's payload efficiency (ncclProtocolEfficiency), rounded up.
/// - Latency of a transfer: NCCL's per-step latency of its route's path class (ncclStepLatencyUs, Ring row) or the
///   route's own latency (sum of its links' latency_us), whichever is larger. NCCL's tuning.cc models a call as
///   baseLat + steps x hwLat + bytes / bw with no separate wire term anywhere: its hwLat is the end-to-end latency of
///   one step, wire included (the NVLink LL figure, 0.6 us, is the GPU -> NVSwitch -> GPU crossing the shipped
///   topologies' NVLink links are built from, 2 x 0.3 us), so adding the links' latency on top would count the wire
///   twice. The larger of the two keeps a topology whose wire is slower than NCCL's figure (a long-haul what-if)
///   honest.
/// - Latency a network path adds: the system's network hop latency beyond NCCL's step latency
///   (NcclModelParams::netHopExtraUs of its NIC kind: EFA, RoCE and TCPXO; InfiniBand 0), once per transfer that
///   crosses the network, as NCCL's own calls pay it per network hop in the time model (ncclPredictUs); and, for a
///   transfer of GPU memory (LL128, Simple) longer than one packet (kEfaEagerBytes), the receiver's read where the
///   network reads such messages (NcclModelParams::netReadUs: EFA on p4d/p4de).
/// - Switch ops through an NVSwitch inside a host (NVLS) move their bytes at the share of the link rate NCCL's NVLS
///   reaches (NcclModelParams::nvlsFraction, 0.686: 8 x H100 480 GB/s busbw of 450 x 2(n-1)/(n+1)), as NCCL's time
///   model rates NVLS, so a schedule of switch ops runs as NCCL's NVLS does; a fabric switch's (SHARP) keep the line
///   rate.
/// - Once per call: NCCL's base latency of the protocol (the fixed one, else the slowest-to-launch one the transfers
///   used, LL when none), or NCCL's NVLS latency when the call performs switch ops and that is larger.
#include <cstdint>
#include <optional>
#include <string_view>

#include "collbench/nccl_model.h"
#include "collbench/schedule.h"
#include "collbench/topology.h"

namespace collbench {

/// The IR's protocol and NCCL's (the same three, in the same order).
NcclProtocol ncclProtocol(Protocol p);
Protocol irProtocol(NcclProtocol p);

/// What a transfer across a GPU system's network pays beyond NCCL's step latency (networkLatency).
struct NetworkLatency {
  double hopUs = 0;   ///< every transfer (NcclModelParams::netHopExtraUs)
  double readUs = 0;  ///< a transfer of GPU memory longer than one packet (NcclModelParams::netReadUs)
};

/// How a call's transfers choose their protocol.
struct WireRule {
  bool active = false;            ///< false: no protocol cost (wireBytes is the identity, latency the route's)
  std::optional<Protocol> fixed;  ///< when active: this protocol; nullopt: NCCL's point-to-point rule
  NetworkLatency net;             ///< when active: added to the latency of a transfer on a network path

  /// The rule of a call with `protocol` (nullopt: the call sets none) on ranks that are GPUs of a known arch or not
  /// (gpuRanks), across a network that adds `net` (networkLatency; counted on GPU ranks only).
  static WireRule of(bool onGpuRanks, std::optional<Protocol> protocol, NetworkLatency net = {});
  /// The protocol of a transfer of `bytes` data bytes (meaningful when active).
  Protocol protocolOf(double bytes) const;
  /// Bytes on the wire for `bytes` data bytes: ceil(bytes / efficiency) when active, else `bytes`.
  double wireBytes(double bytes) const;
  /// Latency of a transfer of `bytes` on a route of path class `path` whose links add up to `routeLatencyUs`:
  /// max(NCCL's step latency, routeLatencyUs), plus what a network path adds (net), when active; else
  /// routeLatencyUs.
  double latencyUs(double bytes, NcclPath path, double routeLatencyUs) const;
  /// The share of its links' rates a switch op's leg gets through switch node `sw`: NcclModelParams::nvlsFraction when
  /// active and `sw` is an NVSwitch inside a host (NVLS), else 1 (a fabric switch: SHARP).
  double switchShare(const TopoNode& sw) const;
  /// Microseconds the call pays once; `usedSimple`: some transfer chose Simple under the point-to-point rule;
  /// `switchOps`: the call performs switch ops (NVLS, SHARP). 0 when not active.
  double launchFloorUs(bool usedSimple, bool switchOps) const;
};

/// Whether every one of the first `nranks` ranks of `topology` is a GPU of a known architecture (a GPU system NCCL
/// tunes for: the shipped dgx/hgx/cloud systems).
bool gpuRanks(const Topology& topology, int nranks);
/// What a transfer across the network of the first `nranks` ranks of `topology` (GPU ranks: gpuRanks) pays beyond
/// NCCL's step latency: NcclModelParams::netHopExtraUs and netReadUs of the system's NIC kind (ncclSystemOf); none on
/// one host.
NetworkLatency networkLatency(const Topology& topology, int nranks);
/// The path class of a topology link class: "nvlink" NVLink, "pcie" PCIe (NcclPath::Pxb), anything else the network.
/// A route's class is the worst (largest) of its links'.
NcclPath wirePathOf(std::string_view linkClass);

}  // namespace collbench
