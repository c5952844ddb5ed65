// The wire rule (collbench/wire_rule.h): NCCL's point-to-point protocol terms, shared by the simulator and the cost
// model.
#include "collbench/wire_rule.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

namespace collbench {
namespace {

static_assert(static_cast<int>(Protocol::LL) == static_cast<int>(NcclProtocol::LL) &&
                  static_cast<int>(Protocol::LL128) == static_cast<int>(NcclProtocol::LL128) &&
                  static_cast<int>(Protocol::Simple) == static_cast<int>(NcclProtocol::Simple),
              "Protocol follows NCCL's protocol order");

// Protocol timing rows of NCCL's tables: a transfer of a collbench schedule is one step of a point-to-point
// connection, which NCCL's tuning models as a ring step (tuning.cc's Ring row of baseLatencies and hwLatencies).
constexpr NcclAlgorithm kWireAlgorithm = NcclAlgorithm::Ring;

}  // namespace

NcclProtocol ncclProtocol(Protocol p) { return static_cast<NcclProtocol>(static_cast<int>(p)); }
Protocol irProtocol(NcclProtocol p) { return static_cast<Protocol>(static_cast<int>(p)); }

bool gpuRanks(const Topology& topology, int nranks) {
  std::unordered_map<std::string, const TopoNode*> byId;
  for (const TopoNode& n : topology.nodes) byId.emplace(n.id, &n);
  for (int r = 0; r < nranks; ++r) {
    const TopoNode* n = byId.at(topology.ranks[static_cast<std::size_t>(r)]);
    if (n->kind != NodeKind::Gpu || n->arch.empty()) return false;
  }
  return true;
}

NcclPath wirePathOf(std::string_view linkClass) {
  return linkClass == "nvlink" ? NcclPath::Nvl : linkClass == "pcie" ? NcclPath::Pxb : NcclPath::Net;
}

NetworkLatency networkLatency(const Topology& topology, int nranks) {
  const NcclSystem s = ncclSystemOf(topology, nranks);
  if (s.nodes <= 1) return {};
  const auto kind = static_cast<std::size_t>(s.nicKind);
  return {s.model.netHopExtraUs[kind], s.model.netReadUs[kind]};
}

WireRule WireRule::of(bool onGpuRanks, std::optional<Protocol> protocol, NetworkLatency net) {
  if (protocol) return {true, protocol, net};
  return {onGpuRanks, std::nullopt, onGpuRanks ? net : NetworkLatency{}};
}

Protocol WireRule::protocolOf(double bytes) const {
  if (fixed) return *fixed;
  return bytes <= static_cast<double>(kNcclP2pLLThresholdBytes) ? Protocol::LL : Protocol::Simple;
}

double WireRule::wireBytes(double bytes) const {
  if (!active) return bytes;
  return std::ceil(bytes / ncclProtocolEfficiency(ncclProtocol(protocolOf(bytes))));
}

double WireRule::latencyUs(double bytes, NcclPath path, double routeLatencyUs) const {
  if (!active) return routeLatencyUs;
  // NCCL's step latency already includes the wire (collbench/wire_rule.h): the larger of the two, not their sum.
  const Protocol p = protocolOf(bytes);
  double us = std::max(ncclStepLatencyUs(path, kWireAlgorithm, ncclProtocol(p)), routeLatencyUs);
  if (path == NcclPath::Net) us += net.hopUs + (p != Protocol::LL && bytes > kEfaEagerBytes ? net.readUs : 0);
  return us;
}

double WireRule::switchShare(const TopoNode& sw) const {
  return active && !sw.host.empty() ? NcclModelParams{}.nvlsFraction : 1.0;
}

double WireRule::launchFloorUs(bool usedSimple, bool switchOps) const {
  if (!active) return 0;
  const Protocol p = fixed ? *fixed : usedSimple ? Protocol::Simple : Protocol::LL;
  double us = ncclBaseLatencyUs(kWireAlgorithm, ncclProtocol(p));
  if (switchOps) {  // NCCL runs NVLS with Simple; its latency is base + one NVLink hwLatency for the whole call
    us = std::max(us, ncclBaseLatencyUs(NcclAlgorithm::Nvls, NcclProtocol::Simple) +
                          ncclStepLatencyUs(NcclPath::Nvl, NcclAlgorithm::Nvls, NcclProtocol::Simple));
  }
  return us;
}

}  // namespace collbench
