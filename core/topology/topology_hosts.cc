// Per-server profiles (GPUs, architecture, NICs, in-switch reduction) and the GPU-NIC PCIe paths: the facts NCCL's
// topology search reads from a machine, derived from the graph by the conventions of topologies/README.md.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "collbench/topology.h"
#include "topology_internal.h"

namespace collbench {
namespace {

constexpr const char* kPcieClass = "pcie";

}  // namespace

std::vector<HostProfile> hostProfiles(const Topology& t) {
  const auto index = topo_detail::indexById(t);
  std::vector<HostProfile> out;
  std::map<std::string, std::size_t> slot;  // host -> index in out
  std::vector<bool> mixedArch;
  for (const std::string& id : t.ranks) {
    const TopoNode& n = t.nodes[static_cast<std::size_t>(index.at(id))];
    const std::string host = n.host.empty() ? n.id : n.host;  // a rank without a host is its own machine
    if (slot.emplace(host, out.size()).second) {
      out.emplace_back().host = host;
      mixedArch.push_back(false);
    }
  }
  for (const TopoNode& n : t.nodes) {
    const auto it = slot.find(n.host.empty() ? n.id : n.host);
    if (it == slot.end()) continue;
    HostProfile& h = out[it->second];
    if (n.kind == NodeKind::Gpu) {
      if (h.gpus > 0 && h.arch != n.arch) mixedArch[it->second] = true;
      h.arch = n.arch;
      ++h.gpus;
    } else if (n.kind == NodeKind::Nic) {
      ++h.nics;
    } else if (n.kind == NodeKind::Switch && !n.host.empty()) {
      h.nvlsGBps = std::max(h.nvlsGBps, n.reduceGBps);
      h.multicast = h.multicast || n.multicasts();
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (mixedArch[i]) out[i].arch.clear();
  }
  // A NIC's speed is its port to the fabric: its fastest link to a node outside its host.
  for (const TopoLink& k : t.links) {
    const TopoNode& a = t.nodes[static_cast<std::size_t>(index.at(k.a))];
    const TopoNode& b = t.nodes[static_cast<std::size_t>(index.at(k.b))];
    for (const auto& [nic, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      if (nic->kind != NodeKind::Nic || nic->host.empty() || other->host == nic->host) continue;
      if (const auto it = slot.find(nic->host); it != slot.end()) {
        out[it->second].nicGBps = std::max(out[it->second].nicGBps, k.bandwidthGBps);
      }
    }
  }
  return out;
}

double fabricReduceGBps(const Topology& t) {
  double best = 0;
  for (const TopoNode& n : t.nodes) {
    if (n.kind == NodeKind::Switch && n.host.empty()) best = std::max(best, n.reduceGBps);
  }
  return best;
}

std::map<std::string, std::vector<std::string>> gpuNics(const Topology& t) {
  const auto index = topo_detail::indexById(t);
  const topo_detail::Adjacency adj = topo_detail::buildAdjacency(t, index);
  std::map<std::string, std::vector<std::string>> out;
  std::vector<int> hops(t.nodes.size(), -1);
  for (std::size_t g = 0; g < t.nodes.size(); ++g) {
    const TopoNode& gpu = t.nodes[g];
    if (gpu.kind != NodeKind::Gpu) continue;
    // BFS over pcie links; only PCIe switches of the gpu's host pass traffic on (a NIC or GPU ends the path).
    std::vector<int> queue{static_cast<int>(g)};
    hops[g] = 0;
    std::vector<std::pair<int, int>> found;  // (hops, node)
    for (std::size_t head = 0; head < queue.size(); ++head) {
      const int u = queue[head];
      const TopoNode& un = t.nodes[static_cast<std::size_t>(u)];
      if (u != static_cast<int>(g) && (un.kind != NodeKind::Switch || un.host != gpu.host)) continue;
      for (int e = adj.start[static_cast<std::size_t>(u)]; e < adj.start[static_cast<std::size_t>(u) + 1]; ++e) {
        const int v = adj.nbr[static_cast<std::size_t>(e)];
        if (t.links[static_cast<std::size_t>(adj.link[static_cast<std::size_t>(e)])].linkClass != kPcieClass) continue;
        if (hops[static_cast<std::size_t>(v)] >= 0) continue;
        hops[static_cast<std::size_t>(v)] = hops[static_cast<std::size_t>(u)] + 1;
        queue.push_back(v);
        if (t.nodes[static_cast<std::size_t>(v)].kind == NodeKind::Nic) {
          found.emplace_back(hops[static_cast<std::size_t>(v)], v);
        }
      }
    }
    for (int v : queue) hops[static_cast<std::size_t>(v)] = -1;
    if (found.empty()) continue;
    std::sort(found.begin(), found.end());
    std::vector<std::string>& nics = out[gpu.id];
    for (const auto& [h, v] : found) nics.push_back(t.nodes[static_cast<std::size_t>(v)].id);
  }
  return out;
}

}  // namespace collbench
