#pragma once
/// A network graph: endpoints (gpu, nic, cpu) and switches joined by full-duplex links; ranks bind to gpus (or cpus).
/// Units are in the names: GBps = 1e9 bytes/s per direction, us = microseconds.
///
/// Typical use:
///   Topology t = loadTopology("dgx-h100-8x1");      // or parseTopology(text, "file.json"), generateTopology(...)
///   applyOverride(t, "link.nvlink.bandwidth_GBps=300");
///   Router r(t);                                     // t must outlive r
///   for (Hop h : r.route(0, 5)) use(t.links[h.link], h.forward);
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collbench/types.h"

namespace collbench {

enum class NodeKind { Gpu, Nic, Cpu, Switch };

/// "gpu", "nic", "cpu", "switch" (the JSON spelling).
std::string_view toString(NodeKind k);
/// Inverse of toString; throws Error{InvalidArgument} naming the value and the accepted names.
NodeKind parseNodeKind(std::string_view s);

/// The GPU architectures a gpu node may name ("volta", "ampere", "hopper", "blackwell"), oldest first. NCCL indexes
/// its latency and bandwidth tables by the architecture (compute capability 7.x, 8.x, 9.x, 10.x).
const std::vector<std::string>& gpuArchitectures();

struct TopoNode {
  std::string id;
  NodeKind kind = NodeKind::Gpu;
  /// Server the node sits in: groups the GPUs of one machine for hierarchical algorithms ("" for fabric switches).
  std::string host;
  /// gpu/cpu: reduction throughput (output bytes/s); 0 = unknown (treated as infinite).
  /// switch: in-network reduction throughput per port (reduced bytes/s the switch delivers on each of its links:
  /// NVLink SHARP / NVLS on an NVSwitch inside a host, IB SHARP on a fabric switch); 0 = the switch cannot reduce.
  double reduceGBps = 0;
  /// Switches: per-port forwarding limit; 0 = non-blocking (no contention inside the switch).
  double switchGBps = 0;
  /// gpu nodes: one of gpuArchitectures(); "" = unknown.
  std::string arch{};
  /// Switches: whether the switch replicates one write to several ports (NVLS multicast); unset = reduceGBps > 0.
  std::optional<bool> multicast{};

  /// A switch that reduces in the network (reduceGBps > 0).
  bool reducesInNetwork() const { return kind == NodeKind::Switch && reduceGBps > 0; }
  /// A switch that multicasts: `multicast` when given, else reducesInNetwork().
  bool multicasts() const { return kind == NodeKind::Switch && multicast.value_or(reduceGBps > 0); }
};

struct TopoLink {
  std::string a, b;  ///< node ids
  double bandwidthGBps = 0;
  double latencyUs = 0;
  std::string linkClass;  ///< "nvlink", "pcie", "nic", "fabric"... used by cost model and --set overrides
};

/// How fast memory is for a call whose working set on a host (hostWorkingSetBytes) is at most maxWorkingSetBytes:
/// a cache level, then DRAM. Moving bytes inside a host is a memory copy (shared-memory threads, loopback TCP, a
/// GPU's own copies), so its speed depends on whether the call's buffers fit in a cache; an alpha-beta network has no
/// such levels, and `collbench calibrate` fits them where measurements show them (SimGrid's SMPI calibration fits
/// piecewise factors by message size for the same reason).
struct MemoryTier {
  std::size_t maxWorkingSetBytes = 0;  ///< inclusive bound; 0 on the last tier (no bound)
  double bandwidthScale = 1;           ///< multiplies the host's memory-bound rates (applyMemoryTier)
};

struct Topology {
  std::string name;
  std::string description;
  std::vector<TopoNode> nodes;
  std::vector<TopoLink> links;
  std::vector<std::string> ranks;  ///< rank i runs on node ranks[i]
  /// Optional explicit routes: (from node id, to node id) -> node ids along the path, endpoints included.
  /// A route also serves the reverse direction (reversed) unless that direction has its own entry.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> routes;
  /// Optional, by increasing bound; the last one unbounded. Empty: rates do not depend on the working set.
  std::vector<MemoryTier> memoryTiers;
  /// Optional "nccl_env": NCCL variables the system's own software sets where the user does not (a network plugin's
  /// setenv, a vendor's recommended profile), name -> value, as NCCL reads them. Only the NCCL model reads them.
  std::map<std::string, std::string> ncclEnv;
  /// Optional "cpu_vendor": the maker of the hosts' CPUs, one of cpuVendors() ("" = not stated: NCCL's Intel rows).
  /// NCCL's estimate across nodes takes its LL bandwidth cap and its per-step network overhead by it (tuning.cc);
  /// only the NCCL model reads it. Not part of the fingerprint, as nccl_env.
  std::string cpuVendor;

  int nodeIndex(const std::string& id) const;  ///< -1 if absent (linear scan: build a map for many look-ups)
};

/// The CPU makers a topology's "cpu_vendor" may name ("intel", "amd"): NCCL's x86 vendors (topo.cc kvDictCpuVendor)
/// whose tuning differs.
const std::vector<std::string>& cpuVendors();

/// Parses the collbench-topology JSON (explicit or {"generator": ..., "params": ...}). `source` names the file in
/// errors. Throws Error{InvalidTopology} with a one-line message "<source>: <field path>: <problem> (got <value>)"
/// for unknown fields, dangling ids, non-positive bandwidth, negative latency, disconnected ranks, wrong
/// format/version, bad types, and "<source>: malformed JSON at line L, column C (byte B): ..." for syntax errors.
Topology parseTopology(const std::string& jsonText, const std::string& source);
/// Reads a file; a bare name ("dgx-h100-8x1") is looked up as <dir>/<name>.json in each directory of the
/// colon-separated env COLLBENCH_TOPOLOGY_PATH, then in the shipped topologies/ directory.
Topology loadTopology(const std::string& pathOrName);
/// loadTopology of a generator document ({"generator": ..., "params": ...}) with some of its parameters replaced:
/// `params` are (name, value) pairs as generatorParamsJson reads them ("spine_oversubscription", "2"), a later one
/// winning. A what-if varies a fabric without writing a file per variant. Throws Error{InvalidArgument} when the file
/// is an explicit topology (no generator), and as the generator does for a bad parameter (naming params.<key>).
Topology loadTopology(const std::string& pathOrName, const std::vector<std::pair<std::string, std::string>>& params);
/// The file loadTopology would read for `pathOrName`; throws Error{InvalidTopology} listing the places searched.
std::string resolveTopologyPath(const std::string& pathOrName);
/// Names of the topologies found on the search path (COLLBENCH_TOPOLOGY_PATH, then topologies/), sorted, unique.
std::vector<std::string> availableTopologies();

/// Parametric generators by name: nvswitch_node, multi_node, fat_tree, torus, dragonfly, ring, flat.
/// `paramsJson` is the JSON object of parameters ("" or "{}" = all defaults); unknown or invalid parameters throw
/// Error{InvalidTopology} naming params.<key> and the value. Parameters and defaults: topologies/README.md.
Topology generateTopology(const std::string& generator, const std::string& paramsJson);
/// The generator names accepted by generateTopology.
std::vector<std::string> topologyGenerators();
/// The params JSON for generateTopology from (name, value) pairs as a user writes them (`topo generate --param
/// k=v`): a value that parses as JSON (numbers, true/false, [4,4,4]) is that value, anything else a string
/// ("fat" -> "fat"). Compact, keys sorted; a later pair of the same name replaces an earlier one.
std::string generatorParamsJson(const std::vector<std::pair<std::string, std::string>>& assignments);
/// flat(n, bw, lat): n gpus, each with one link of (bw, lat) to a non-blocking switch; the closed-form test bed.
/// Node ids "n<i>.gpu0" (host "n<i>") and "sw0"; link class "fabric"; reduce_GBps 0 (infinite).
Topology flatTopology(int n, double bandwidthGBps, double latencyUs);
/// flat's largest n: the generators' 2^20 nodes, less the switch.
inline constexpr int kMaxFlatRanks = (1 << 20) - 1;

/// Checks the invariants parseTopology enforces (unique ids, links between existing distinct nodes, positive finite
/// bandwidth, non-negative latency, ranks on gpu/cpu nodes, every rank reachable from rank 0, routes along links).
/// For topologies built in code; throws Error{InvalidTopology} with messages prefixed by `source`.
void validateTopology(const Topology& t, const std::string& source = "topology");

/// Serialises to the explicit JSON form (round-trips through parseTopology); one node/link per line.
std::string toJson(const Topology& t);
/// Applies an override: "link.<class|*>.<bandwidth_GBps|latency_us>=<value>",
/// "node.<gpu|nic|cpu|switch|*>.<reduce_GBps|switch_GBps>=<value>" (node.*.reduce_GBps leaves switches alone: their
/// reduce_GBps is in-network reduction, set it with node.switch.reduce_GBps), "node.switch.multicast=<true|false>"
/// or "node.gpu.arch=<architecture>". Throws Error{InvalidArgument} naming the bad key or value, also when the
/// selector matches nothing (a typo must not silently change nothing).
void applyOverride(Topology& t, const std::string& assignment);
/// Stable hash of the network content (FNV-1a 64 over the canonical JSON of nodes, links, ranks and routes, as 16
/// hex digits). Name, description and nccl_env are excluded: a renamed copy of the same network keeps its tuning
/// entries, and the network a system runs NCCL over does not change with the variables set for it. A node's arch enters
/// the hash only when set, multicast only when it differs from its default, so files written without them keep their
/// fingerprints.
std::string fingerprint(const Topology& t);
/// Host index (0, 1, ... in order of first appearance) of each of the first `nranks` ranks, for hierarchical
/// algorithms (AlgoParams::rankHost). Throws Error{InvalidArgument} when the topology has fewer ranks.
std::vector<int> rankHosts(const Topology& t, int nranks);

/// Bytes the busiest host keeps live during a call of `spec` on the first spec.nranks ranks of `t`: its ranks x
/// (input + output bytes of one rank). Throws Error{InvalidArgument} when the topology has fewer ranks.
std::size_t hostWorkingSetBytes(const Topology& t, const CollectiveSpec& spec);
/// Index of the memory tier a working set falls in (0 when the topology has none).
std::size_t memoryTierIndex(const Topology& t, std::size_t workingSetBytes);
/// The topology a call in tier `tier` runs on: bandwidths of links inside one host (both ends on the same host) and
/// reduce_GBps of the gpu and cpu nodes times the tier's bandwidthScale, memoryTiers cleared (a copy of `t` when it
/// has no tiers).
Topology applyMemoryTier(const Topology& t, std::size_t tier);
/// applyMemoryTier for the tier of `spec`'s working set.
Topology topologyForCall(const Topology& t, const CollectiveSpec& spec);

/// One directed hop of a route: link index and direction (true = a->b).
struct Hop {
  int link;
  bool forward;
};

/// Shortest-path routes (hop count, then total latency); among equal-cost next hops the choice is deterministic and
/// spread over pairs by a hash of (src node, dst node), so different pairs use different spines (ECMP). Explicit
/// routes in the topology win. Routes are computed by one BFS per source node on first use; the most recent BFS
/// results and every route returned are cached, so large topologies (8192 ranks) never compute all pairs.
/// Not thread-safe (the caches are mutated by const calls): use one Router per thread.
class Router {
 public:
  /// Keeps a pointer to `t`: the topology must outlive the router and stay unchanged while it is used.
  explicit Router(const Topology& t);
  explicit Router(Topology&&) = delete;
  /// Route between the nodes of two ranks (empty when both ranks sit on one node). The reference stays valid for
  /// the router's lifetime. Throws Error{InvalidArgument} for ranks out of range, Error{InvalidTopology} when no
  /// path exists.
  const std::vector<Hop>& route(int srcRank, int dstRank) const;
  /// Route between two node indices into `out` (cleared first); returns the number of hops, -1 if unreachable.
  int nodeRoute(int srcNode, int dstNode, std::vector<Hop>& out) const;
  /// Hop count of the shortest path between two nodes (explicit routes ignored); -1 if unreachable.
  int distance(int srcNode, int dstNode) const;
  int rankNode(int rank) const { return rankNode_.at(static_cast<std::size_t>(rank)); }
  /// The node index a hop of a route leads to.
  int hopEnd(const Hop& h) const {
    const auto& [a, b] = linkEnds_.at(static_cast<std::size_t>(h.link));
    return h.forward ? b : a;
  }
  const Topology& topology() const { return *topo_; }

 private:
  struct Tree {  // BFS from one source node, advanced only as far as the destinations asked so far need
    std::vector<int> hops;
    std::vector<double> latency;
    std::vector<int> queue;
    std::size_t head = 0;
    std::uint64_t lastUse = 0;
  };
  /// The BFS tree of srcNode, advanced until hops and latency of dstNode (and of every node closer) are final.
  const Tree& tree(int srcNode, int dstNode) const;
  void walk(int srcNode, int dstNode, const Tree& tr, std::vector<Hop>& out, std::uint64_t seed) const;
  /// The router where the choices of srcNode's shortest paths to dstNode begin: srcNode itself, or the end of the
  /// hops every such path starts with (into `chain`), taken while the node reached has one link on to one router
  /// that is not a dead end and dstNode is not next to it or behind a dead end beside it.
  int gateway(int srcNode, int dstNode, std::vector<Hop>& chain) const;
  static constexpr int kNoGateway = -2;
  /// The route through the gateways of both ends (into `out`): its hops, -1 when unreachable, kNoGateway when
  /// neither end has one or their chains meet.
  int gatewayRoute(int srcNode, int dstNode, std::vector<Hop>& out) const;
  /// Shortest paths between two gateways: their nodes but the first (sorted), and each one's equal-cost predecessors
  /// (node, link) on the way from the first, preds[first[i]] to preds[first[i + 1]] for nodes[i].
  struct GatewayPaths {
    std::vector<int> nodes;
    std::vector<std::size_t> first;
    std::vector<std::pair<int, int>> preds;
  };

  const Topology* topo_;
  std::vector<int> rankNode_;
  std::vector<char> transit_;                  ///< per node: may a route pass through it (see the constructor)
  std::vector<char> deadEnd_;                  ///< per node: a router whose neighbours are all endpoints
  std::vector<int> adjStart_;                  // CSR adjacency: node -> [adjStart_[n], adjStart_[n+1])
  std::vector<std::pair<int, int>> adj_;       // (neighbor, link)
  std::vector<std::pair<int, int>> linkEnds_;  // link -> (node of a, node of b)
  std::map<std::pair<int, int>, std::vector<Hop>> explicit_;  // (from node, to node) -> hops
  mutable std::unordered_map<int, Tree> trees_;               // bounded LRU; element references survive rehashing
  mutable std::uint64_t useClock_ = 0;
  mutable std::unordered_map<std::uint64_t, GatewayPaths> gatewayPaths_;  // (first << 32 | second) -> paths
  mutable std::size_t gatewayPathNodes_ = 0;
  mutable std::vector<Hop> gatewayHead_, gatewayTail_;
  mutable std::unordered_map<std::uint64_t, std::vector<Hop>> cache_;  // (src rank << 32 | dst rank) -> route
};

struct LinkClassSummary {
  int count = 0;
  double minGBps = 0, maxGBps = 0;  ///< per-direction bandwidth range of the class's links
  double totalGBps = 0;             ///< sum over the class's links (per direction)
};

struct TopologySummary {
  int ranks = 0, hosts = 0, nodes = 0, links = 0, switches = 0;
  /// Bisection bandwidth (GB/s, one direction) between two halves of the ranks: the max-flow (= min cut, switches
  /// free to fall on either side) from one half to the other. With at most 16 ranks (and a small enough graph;
  /// bisectionExact) it is the minimum over every balanced split of the ranks. Otherwise, since that minimum is
  /// expensive (NP-hard in general), it is the max-flow between ranks [0, n/2) and [n/2, n) in rank order: the
  /// generators number ranks along the physical layout (servers, pods, torus planes, groups), so this is the cut
  /// between the two halves of the machine, but in general it is only an upper bound of the true bisection.
  /// Ranks sharing one node with the other half count on the first half (local traffic crosses no link). Switch
  /// port limits (switch_GBps) cap the capacity of their links. Rank-free parts of the graph still carry flow.
  double bisectionGBps = 0;
  bool bisectionExact = false;
  /// Max over rank pairs of route hops (shortest-path hop counts, explicit routes where given). Exact up to 512
  /// ranks; above, the max over the routes from 64 evenly spaced source ranks (rank i * n / 64) to every rank: a
  /// deterministic sample and a lower bound (diameterSampled = true).
  int diameterHops = 0;
  bool diameterSampled = false;
  std::map<std::string, LinkClassSummary> linkClasses;
};
TopologySummary summarize(const Topology& t);

/// What NCCL's topology search needs to know of one server (topologies/README.md, "Servers, NICs and in-network
/// reduction"): its GPUs and their architecture, its NICs and their speed, its NVSwitch's reduction capability.
struct HostProfile {
  std::string host;
  int gpus = 0;
  /// The architecture of the host's GPUs; "" when unknown or when they differ.
  std::string arch;
  /// nic nodes with this host.
  int nics = 0;
  /// Fastest link from one of the host's NICs to a node outside the host (its port to the fabric); 0 without NICs.
  double nicGBps = 0;
  /// Largest reduce_GBps of a switch with this host (NVLS); 0 = no in-switch reduction.
  double nvlsGBps = 0;
  /// A switch with this host multicasts.
  bool multicast = false;
};
/// One profile per host of the ranks, in the order the ranks first reach them (a rank without a host is its own).
std::vector<HostProfile> hostProfiles(const Topology& t);
/// Largest reduce_GBps of a switch without a host (IB SHARP in the fabric); 0 = no fabric switch reduces.
double fabricReduceGBps(const Topology& t);
/// NICs of each gpu node, by the GPU-NIC PCIe paths: the nic nodes reached from the gpu over links of class "pcie",
/// passing only through switches of the gpu's host (PCIe switches), nearest first, ties in node order. GPUs
/// without a PCIe path to a NIC are absent.
std::map<std::string, std::vector<std::string>> gpuNics(const Topology& t);

}  // namespace collbench
