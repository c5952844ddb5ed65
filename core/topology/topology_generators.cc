// Parametric topology generators: nvswitch_node, multi_node, fat_tree, torus, dragonfly, ring, flat.
// Every default is a named constant with its source; topologies/README.md explains the derivations.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "collbench/error.h"
#include "collbench/topology.h"
#include "topology_internal.h"

namespace collbench {
namespace topo_detail {
namespace {

// ---- Bandwidths, GB/s per direction ----
// NVLink4 on H100 SXM: 18 links x 25 GB/s = 450 GB/s per direction (NVIDIA H100 datasheet: 900 GB/s total).
constexpr double kNvlink4GBps = 450;
// PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 encoding / 8 bits = 63 GB/s per direction, theoretical (PCI-SIG).
constexpr double kPcieGen5x16GBps = 63;
// ConnectX-7 / NDR InfiniBand port: 400 Gb/s = 50 GB/s per direction (NVIDIA ConnectX-7 datasheet).
constexpr double kNdrPortGBps = 50;
// Torus, dragonfly, ring and flat defaults: one 400 Gb/s-class port per link. Illustrative, not a product figure.
constexpr double kGenericLinkGBps = 50;

// ---- Latencies, microseconds per link ----
// NCCL's per-hop NVLink latency is 0.6 us (src/graph/tuning.cc, hwLat, LL protocol); a GPU -> NVSwitch -> GPU hop
// crosses two links, so each gets half. Estimate.
constexpr double kNvlinkLatencyUs = 0.3;
// NCCL's per-hop PCI latency is 1.0 us (same table); GPU -> PCIe switch -> GPU crosses two links. Estimate.
constexpr double kPcieLatencyUs = 0.5;
// NCCL's network hop is 2.7 us (hwLat NET, ring LL). GPU -> NIC -> leaf -> NIC -> GPU has two PCIe links
// (2 x 0.5) and two NIC links, which get the remaining 1.7 us between them. Estimate.
constexpr double kNicLatencyUs = 0.85;
// Switch-to-switch link: cut-through switch latency (a few hundred ns in vendor material for 400G InfiniBand
// switches) plus a few metres of cable at ~5 ns/m. Estimate.
constexpr double kFabricLatencyUs = 0.4;
// Dragonfly global link: long optical cable (tens of metres at ~5 ns/m) plus the router. Estimate.
constexpr double kGlobalLatencyUs = 0.8;
// Direct GPU-to-GPU link (torus, ring): one SerDes hop without a switch. Estimate.
constexpr double kDirectLatencyUs = 0.5;
// flat: 1 us per link, a round number for the closed-form tests (alpha = 2 us per message between two ranks).
constexpr double kFlatLatencyUs = 1.0;

// ---- Reduction throughput, output GB/s ----
// H100 SXM: HBM3 3.35 TB/s (NVIDIA H100 datasheet) / 3 bytes moved per output byte (read two inputs, write one).
// Estimate; measured reduction kernels reach somewhat less.
constexpr double kH100ReduceGBps = 1100;

// ---- Structure ----
// NVIDIA Quantum-2 QM9700: 64 ports of NDR 400 Gb/s (datasheet); half face down, half up in a two-level fabric.
constexpr long long kSwitchRadix = 64;
// Keeps a typo (k=1000 is 250 M hosts) from allocating gigabytes; 8192-rank fabrics need about 10^4 nodes.
constexpr long long kMaxGeneratedNodes = 1 << 20;
constexpr long long kMaxGeneratedLinks = 1 << 22;
// Bounds for integer parameters that count things (GPUs per server, torus dimensions...).
constexpr long long kMaxCount = 1 << 20;

std::string quoted(const std::string& s) { return json(s).dump(); }

// Reads generator parameters, remembering which keys the generator asked for so that the rest are reported as
// unknown with the accepted list.
class Params {
 public:
  Params(const json& params, const std::string& source) : params_(params), source_(source) {
    if (!params_.is_null() && !params_.is_object()) fail(source_, "params", "expected an object", render(params_));
  }

  long long integer(const char* key, long long def, long long min, long long max) {
    const json* v = get(key);
    if (!v) return def;
    long long out = 0;
    if (v->is_number_integer()) {
      out = v->get<long long>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 1e15) {
      out = static_cast<long long>(v->get<double>());
    } else {
      bad(key, "expected an integer");
    }
    if (out < min || out > max) bad(key, fmt::format("must be between {} and {}", min, max));
    return out;
  }
  std::optional<long long> optionalInteger(const char* key, long long min, long long max) {
    if (!has(key)) return std::nullopt;
    return integer(key, 0, min, max);
  }
  double positive(const char* key, double def) {
    const double v = number(key, def);
    if (v <= 0) bad(key, "must be > 0");
    return v;
  }
  /// GB/s of a link, within the file format's range (topology.h).
  double bandwidth(const char* key, double def) {
    const double v = number(key, def);
    if (const std::string why = bandwidthProblem(v); !why.empty()) bad(key, why);
    return v;
  }
  /// Microseconds of a link, within the file format's range.
  double latency(const char* key, double def) {
    const double v = number(key, def);
    if (const std::string why = latencyProblem(v); !why.empty()) bad(key, why);
    return v;
  }
  /// reduce_GBps: 0 (infinitely fast) or a bandwidth.
  double reduceRate(const char* key, double def) {
    const double v = number(key, def);
    if (const std::string why = rateProblem(v, "infinitely fast"); !why.empty()) bad(key, why);
    return v;
  }
  /// An oversubscription ratio s (downlinks : uplinks = s : 1), 1 (non-blocking) when absent.
  double ratio(const char* key) {
    const double v = number(key, 1);
    if (!(v >= 1 && v <= kMaxCount)) bad(key, fmt::format("must be between 1 and {}", kMaxCount));
    return v;
  }
  /// One of `accepted`, or `def` ("" allowed) when absent.
  std::string choice(const char* key, std::string def, const std::vector<std::string>& accepted) {
    const json* v = get(key);
    if (!v) return def;
    std::string list;
    for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
    if (!v->is_string() || std::find(accepted.begin(), accepted.end(), v->get<std::string>()) == accepted.end()) {
      bad(key, fmt::format("expected one of: {}", list));
    }
    return v->get<std::string>();
  }
  bool boolean(const char* key, bool def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(key, "expected true or false");
    return v->get<bool>();
  }
  std::vector<long long> integerList(const char* key, std::vector<long long> def, std::size_t minLen,
                                     std::size_t maxLen, long long min, long long max) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_array() || v->size() < minLen || v->size() > maxLen) {
      bad(key, fmt::format("expected an array of {} to {} integers", minLen, maxLen));
    }
    std::vector<long long> out;
    for (const json& e : *v) {
      if (!e.is_number_integer() || e.get<long long>() < min || e.get<long long>() > max) {
        bad(key, fmt::format("entries must be integers between {} and {}", min, max));
      }
      out.push_back(e.get<long long>());
    }
    return out;
  }
  bool has(const char* key) {
    if (std::find(accepted_.begin(), accepted_.end(), key) == accepted_.end()) accepted_.push_back(key);
    return params_.is_object() && params_.contains(key);
  }
  /// Fails naming params.<key> and its value (or the default when the key was not given).
  [[noreturn]] void bad(const char* key, const std::string& what) const {
    const bool given = params_.is_object() && params_.contains(key);
    fail(source_, std::string("params.") + key, what + (given ? "" : " (the default)"),
         given ? render(params_.at(key)) : "");
  }
  /// Whole-configuration problems that no single parameter explains.
  [[noreturn]] void badConfig(const std::string& what) const { fail(source_, "params", what); }
  void finish() const {
    if (!params_.is_object()) return;
    for (const auto& [key, value] : params_.items()) {
      if (std::find(accepted_.begin(), accepted_.end(), key) == accepted_.end()) {
        std::string list;
        for (const auto& a : accepted_) list += (list.empty() ? "" : ", ") + a;
        fail(source_, "params." + key, fmt::format("unknown parameter (accepted: {})", list), render(value));
      }
    }
  }
  void checkSize(long long nodes, long long links) const {
    if (nodes > kMaxGeneratedNodes || links > kMaxGeneratedLinks) {
      badConfig(fmt::format("would build {} nodes and {} links (limits {} and {})", nodes, links, kMaxGeneratedNodes,
                            kMaxGeneratedLinks));
    }
  }

 private:
  const json* get(const char* key) {
    if (!has(key)) return nullptr;
    return &params_.at(key);
  }
  double number(const char* key, double def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number() || !std::isfinite(v->get<double>())) bad(key, "expected a number");
    return v->get<double>();
  }

  const json& params_;
  const std::string& source_;
  std::vector<std::string> accepted_;
};

class Builder {
 public:
  Builder(std::string name, long long nodes, long long links) {
    t_.name = std::move(name);
    t_.nodes.reserve(static_cast<std::size_t>(nodes));
    t_.links.reserve(static_cast<std::size_t>(links));
  }
  void node(std::string id, NodeKind kind, std::string host, double reduceGBps = 0) {
    TopoNode n;
    n.id = std::move(id);
    n.kind = kind;
    n.host = std::move(host);
    n.reduceGBps = reduceGBps;
    t_.nodes.push_back(std::move(n));
  }
  /// A gpu node running the next rank, of the architecture set by gpuArch ("" until then).
  void gpu(const std::string& id, const std::string& host, double reduceGBps) {
    node(id, NodeKind::Gpu, host, reduceGBps);
    t_.nodes.back().arch = gpuArch_;
    t_.ranks.push_back(id);
  }
  void gpuArch(std::string arch) { gpuArch_ = std::move(arch); }
  void link(const std::string& a, const std::string& b, double bw, double lat, const char* cls) {
    t_.links.push_back(TopoLink{a, b, bw, lat, cls});
  }
  Topology done(std::string description) {
    t_.description = std::move(description);
    return std::move(t_);
  }

 private:
  Topology t_;
  std::string gpuArch_;
};

std::string gpuId(long long host, long long gpu) { return fmt::format("n{}.gpu{}", host, gpu); }
std::string hostId(long long host) { return fmt::format("n{}", host); }

long long ceilDiv(long long a, long long b) { return (a + b - 1) / b; }

/// Uplinks of a switch with `down` downlinks at oversubscription s: ceil(down / s), at least one.
long long uplinks(long long down, double s) {
  return std::max<long long>(1, static_cast<long long>(std::ceil(static_cast<double>(down) / s)));
}
/// "2" or "1.33": a ratio for descriptions.
std::string ratioText(long long down, long long up) {
  return fmt::format("{:.3g}", static_cast<double>(down) / static_cast<double>(std::max<long long>(1, up)));
}

Topology nvswitchNode(Params& p) {
  const long long gpus = p.integer("gpus", 8, 1, kMaxCount);
  const double bw = p.bandwidth("link_GBps", kNvlink4GBps);
  const double lat = p.latency("latency_us", kNvlinkLatencyUs);
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  const std::string arch = p.choice("arch", "", gpuArchitectures());
  const double nvls = p.reduceRate("nvls_GBps", 0);
  p.finish();
  p.checkSize(gpus + 1, gpus);
  Builder b(fmt::format("nvswitch_node-{}", gpus), gpus + 1, gpus);
  b.gpuArch(arch);
  for (long long g = 0; g < gpus; ++g) b.gpu(gpuId(0, g), hostId(0), reduce);
  b.node("n0.nvsw", NodeKind::Switch, hostId(0), nvls);
  for (long long g = 0; g < gpus; ++g) b.link(gpuId(0, g), "n0.nvsw", bw, lat, "nvlink");
  return b.done(fmt::format("one server: {}{} GPUs on a non-blocking NVSwitch, {} GB/s per GPU per direction{}", gpus,
                            arch.empty() ? "" : " " + arch, bw, nvls > 0 ? fmt::format(", NVLS {} GB/s", nvls) : ""));
}

Topology multiNode(Params& p) {
  const long long nodes = p.integer("nodes", 2, 1, kMaxCount);
  const long long gpus = p.integer("gpus_per_node", 8, 1, kMaxCount);
  const long long nics = p.integer("nics_per_node", std::min<long long>(8, gpus), 1, kMaxCount);
  const bool rail = p.boolean("rail_optimized", true);
  const double nvlinkBw = p.bandwidth("nvlink_GBps", kNvlink4GBps);
  const double nvlinkLat = p.latency("nvlink_latency_us", kNvlinkLatencyUs);
  const double pcieBw = p.bandwidth("pcie_GBps", kPcieGen5x16GBps);
  const double pcieLat = p.latency("pcie_latency_us", kPcieLatencyUs);
  const double nicBw = p.bandwidth("nic_GBps", kNdrPortGBps);
  const double nicLat = p.latency("nic_latency_us", kNicLatencyUs);
  const double fabricBw = p.bandwidth("fabric_GBps", nicBw);
  const double fabricLat = p.latency("fabric_latency_us", kFabricLatencyUs);
  const long long radix = p.integer("radix", kSwitchRadix, 2, kMaxCount);
  const long long levelsParam = p.integer("levels", 0, 0, 3);
  const std::optional<long long> leavesParam = p.optionalInteger("leaves", 1, kMaxCount);
  const std::optional<long long> spinesParam = p.optionalInteger("spines", 0, kMaxCount);
  const double leafOver = p.ratio("leaf_oversubscription");
  const double spineOver = p.ratio("spine_oversubscription");
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  const std::string arch = p.choice("arch", "", gpuArchitectures());
  const double nvls = p.reduceRate("nvls_GBps", 0);
  const double sharp = p.reduceRate("sharp_GBps", 0);
  p.finish();
  // Fewer NICs than GPUs: GPUs share them (p4de: 2 per NIC); more: each GPU has nics/gpus of its own (p5: 4).
  if (nics > gpus && nics % gpus != 0) {
    p.bad("nics_per_node", fmt::format("must be <= gpus_per_node ({}) or a multiple of it", gpus));
  }
  if (nvls > 0 && gpus == 1) p.bad("nvls_GBps", "needs an NVSwitch: gpus_per_node must be > 1");

  // Half of a switch's ports face down, half up (the non-blocking Clos layout); an s:1 oversubscribed level keeps
  // its downlinks and has ceil(down / s) uplinks at the full rate, as real s:1 fabrics are built.
  const long long downPorts = std::max<long long>(1, radix / 2);
  const long long ports = nodes * nics;
  // Leaves the fabric needs in one pod of at most `perPod` leaves: rail-optimized, NIC r of every server of a pod
  // sits on rail r's leaves of that pod, so same-rail traffic never meets a spine while it stays in its leaf.
  const long long railLeavesOnePod = ceilDiv(nodes, downPorts) * nics;
  const long long sharedLeavesOnePod = ceilDiv(ports, downPorts);
  const long long leavesOnePod = rail ? railLeavesOnePod : sharedLeavesOnePod;
  long long levels = levelsParam;
  if (levels == 0) {
    // The fewest levels that fit: one leaf alone, leaves joined by spines of `radix` ports, else pods under cores.
    levels = (leavesParam || spinesParam) ? 2 : leavesOnePod <= 1 ? 1 : leavesOnePod <= radix ? 2 : 3;
  }
  if (levels != 2 && (leavesParam || spinesParam)) {
    p.bad(leavesParam ? "leaves" : "spines", "applies to two-level fabrics only (levels 2)");
  }
  if (levels == 1 && leavesOnePod > 1) {
    p.bad("levels", fmt::format("one leaf of {} down ports cannot take {} NIC ports", downPorts, ports));
  }
  if (levels == 3 && rail && nics > downPorts) {
    p.bad("levels", fmt::format("a pod needs a leaf per rail: {} rails exceed {} leaves per pod", nics, downPorts));
  }

  // Pods: all of the fabric below two levels; with three, blocks of servers (rail) or of leaves (shared) whose
  // leaves a spine's down ports can all reach.
  auto podsFor = [&](long long r) {
    const long long half = std::max<long long>(1, r / 2);
    return rail ? ceilDiv(nodes, std::max<long long>(1, half / nics) * half) : ceilDiv(ceilDiv(ports, half), half);
  };
  const long long pods = levels == 3 ? podsFor(radix) : 1;
  const long long nodesPerPod = ceilDiv(nodes, pods);
  long long leavesPerPod = 0, leavesPerRail = 0, nodesPerLeaf = 0, portsPerLeaf = 0;
  if (rail) {
    if (leavesParam) {
      if (*leavesParam % nics != 0) p.bad("leaves", fmt::format("must be a multiple of nics_per_node ({})", nics));
      leavesPerRail = *leavesParam / nics;
    } else {
      leavesPerRail = ceilDiv(nodesPerPod, downPorts);
    }
    leavesPerPod = leavesPerRail * nics;
    nodesPerLeaf = ceilDiv(nodesPerPod, leavesPerRail);
  } else {
    leavesPerPod = leavesParam ? *leavesParam : ceilDiv(sharedLeavesOnePod, pods);
    portsPerLeaf = ceilDiv(ports, leavesPerPod * pods);
  }
  const long long leaves = leavesPerPod * pods;
  auto leafOf = [&](long long host, long long nic) {
    if (!rail) return (host * nics + nic) / portsPerLeaf;
    const long long pod = host / nodesPerPod;
    return pod * leavesPerPod + nic * leavesPerRail + (host % nodesPerPod) / nodesPerLeaf;
  };
  std::vector<long long> down(static_cast<std::size_t>(leaves), 0);
  for (long long h = 0; h < nodes; ++h) {
    for (long long r = 0; r < nics; ++r) ++down[static_cast<std::size_t>(leafOf(h, r))];
  }
  const long long maxDown = *std::max_element(down.begin(), down.end());
  // Spines per pod: each leaf has one link to every spine of its pod.
  long long spinesPerPod = 0;
  if (spinesParam) {
    spinesPerPod = *spinesParam;
  } else if (levels >= 2) {
    spinesPerPod = leaves > 1 ? std::min(uplinks(maxDown, leafOver), radix) : 0;
    if (levels == 2 && leaves > radix) {
      p.badConfig(
          fmt::format("{} leaves exceed the spine radix {}: a two-level fabric cannot join them (raise radix, give "
                      "leaves and spines, or leave levels out for a three-level fabric)",
                      leaves, radix));
    }
  }
  if (leaves > 1 && spinesPerPod == 0) p.bad("spines", "must be >= 1 when there are several leaves");
  // Cores: spine j of every pod has `spineUp` uplinks, to cores j * spineUp .. j * spineUp + spineUp - 1 (one plane
  // per spine index); a core has one link to each pod.
  const long long spineUp = levels == 3 ? uplinks(leavesPerPod, spineOver) : 0;
  if (levels == 3 && pods > radix) {
    long long enough = radix;
    while (podsFor(enough) > enough) enough += 2;
    p.badConfig(fmt::format("{} pods exceed the core radix {}: {} servers x {} NICs need radix >= {} for three levels",
                            pods, radix, nodes, nics, enough));
  }
  const long long spines = spinesPerPod * pods, cores = spinesPerPod * spineUp;

  const bool nvswitch = gpus > 1;
  const long long nodeCount = nodes * (gpus + nics + (nvswitch ? 1 : 0)) + leaves + spines + cores;
  const long long linkCount =
      nodes * ((nvswitch ? gpus : 0) + std::max(gpus, nics) + nics) + leaves * spinesPerPod + cores * pods;
  p.checkSize(nodeCount, linkCount);
  Builder b(fmt::format("multi_node-{}x{}-{}", nodes, gpus, rail ? "rail" : "shared"), nodeCount, linkCount);
  auto nicId = [](long long h, long long r) { return fmt::format("n{}.nic{}", h, r); };
  auto leafId = [](long long l) { return fmt::format("leaf{}", l); };
  auto spineId = [](long long s) { return fmt::format("spine{}", s); };
  b.gpuArch(arch);
  for (long long h = 0; h < nodes; ++h) {
    for (long long g = 0; g < gpus; ++g) b.gpu(gpuId(h, g), hostId(h), reduce);
    if (nvswitch) b.node(fmt::format("n{}.nvsw", h), NodeKind::Switch, hostId(h), nvls);
    for (long long r = 0; r < nics; ++r) b.node(nicId(h, r), NodeKind::Nic, hostId(h));
  }
  for (long long l = 0; l < leaves; ++l) b.node(leafId(l), NodeKind::Switch, "", sharp);
  for (long long s = 0; s < spines; ++s) b.node(spineId(s), NodeKind::Switch, "", sharp);
  for (long long c = 0; c < cores; ++c) b.node(fmt::format("core{}", c), NodeKind::Switch, "", sharp);
  const long long nicsPerGpu = std::max<long long>(1, nics / gpus);
  for (long long h = 0; h < nodes; ++h) {
    for (long long g = 0; g < gpus; ++g) {
      if (nvswitch) b.link(gpuId(h, g), fmt::format("n{}.nvsw", h), nvlinkBw, nvlinkLat, "nvlink");
      // GPU g uses NIC g*nics/gpus, or NICs g*k .. g*k+k-1 when it has k = nics/gpus of its own: the PCIe-switch
      // pairing of DGX/HGX boards (one NIC per GPU when equal, a NIC shared by neighbouring GPUs when fewer).
      for (long long k = 0; k < nicsPerGpu; ++k) {
        const long long nic = nics >= gpus ? g * nicsPerGpu + k : g * nics / gpus;
        b.link(gpuId(h, g), nicId(h, nic), pcieBw, pcieLat, "pcie");
      }
    }
    for (long long r = 0; r < nics; ++r) b.link(nicId(h, r), leafId(leafOf(h, r)), nicBw, nicLat, "nic");
  }
  for (long long l = 0; l < leaves; ++l) {
    const long long pod = l / leavesPerPod;
    for (long long s = 0; s < spinesPerPod; ++s) {
      b.link(leafId(l), spineId(pod * spinesPerPod + s), fabricBw, fabricLat, "fabric");
    }
  }
  for (long long c = 0; c < cores; ++c) {
    for (long long pod = 0; pod < pods; ++pod) {
      b.link(spineId(pod * spinesPerPod + c / spineUp), fmt::format("core{}", c), fabricBw, fabricLat, "fabric");
    }
  }
  const std::string fabric =
      levels == 3 ? fmt::format(
                        "three-level fabric: {} pods of {} leaves and {} spines ({}:1 at the leaves), {} cores "
                        "({}:1 at the spines)",
                        pods, leavesPerPod, spinesPerPod, ratioText(maxDown, spinesPerPod), cores,
                        ratioText(leavesPerPod, spineUp))
                  : fmt::format("leaf/spine fabric: {} leaves, {} spines", leaves, spines);
  return b.done(
      fmt::format("{} servers x {}{} GPUs{}{}, {} NICs of {} GB/s per server, {} {}{}", nodes, gpus,
                  arch.empty() ? "" : " " + arch, nvswitch ? fmt::format(" on NVSwitch ({} GB/s)", nvlinkBw) : "",
                  nvls > 0 ? fmt::format(", NVLS {} GB/s", nvls) : "", nics, nicBw, rail ? "rail-optimized" : "shared",
                  fabric, sharp > 0 ? fmt::format(", SHARP {} GB/s", sharp) : ""));
}

Topology fatTree(Params& p) {
  const long long k = p.integer("k", 8, 2, 256);
  const long long over = p.integer("oversubscription", 1, 1, k / 2);
  const double bw = p.bandwidth("link_GBps", kNdrPortGBps);
  const double lat = p.latency("latency_us", kFabricLatencyUs);
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  p.finish();
  if (k % 2 != 0) p.bad("k", "must be even (k-ary fat tree: k/2 ports down, k/2 up)");
  const long long half = k / 2;
  // Oversubscription s is built as real s:1 fabrics are: fewer uplinks at the full rate (an edge switch with k/2
  // hosts has k/(2s) uplinks), not thinner ones. So each pod has k/(2s) aggregation switches and there are
  // k/(2s) * k/2 cores; contention appears where more flows leave a rack than it has uplinks, and a flow alone on
  // an uplink still gets the whole link.
  if (half % over != 0)
    p.bad("oversubscription", fmt::format("must divide k/2 = {} (uplinks per edge: k/2 / s)", half));
  const long long up = half / over;
  const long long hosts = k * k * k / 4;
  const long long switches = k * half + k * up + up * half;
  const long long links = hosts + 2 * k * half * up;
  p.checkSize(hosts + switches, links);
  Builder b(fmt::format("fat_tree-k{}", k), hosts + switches, links);
  auto edge = [](long long pod, long long e) { return fmt::format("pod{}.edge{}", pod, e); };
  auto agg = [](long long pod, long long a) { return fmt::format("pod{}.agg{}", pod, a); };
  auto core = [](long long c) { return fmt::format("core{}", c); };
  for (long long h = 0; h < hosts; ++h) b.gpu(gpuId(h, 0), hostId(h), reduce);
  for (long long pod = 0; pod < k; ++pod) {
    for (long long e = 0; e < half; ++e) b.node(edge(pod, e), NodeKind::Switch, "");
    for (long long a = 0; a < up; ++a) b.node(agg(pod, a), NodeKind::Switch, "");
  }
  for (long long c = 0; c < up * half; ++c) b.node(core(c), NodeKind::Switch, "");
  for (long long h = 0; h < hosts; ++h) b.link(gpuId(h, 0), edge(h / (half * half), (h / half) % half), bw, lat, "nic");
  for (long long pod = 0; pod < k; ++pod) {
    for (long long e = 0; e < half; ++e) {
      for (long long a = 0; a < up; ++a) b.link(edge(pod, e), agg(pod, a), bw, lat, "fabric");
    }
  }
  for (long long pod = 0; pod < k; ++pod) {
    for (long long a = 0; a < up; ++a) {
      for (long long c = 0; c < half; ++c) b.link(agg(pod, a), core(a * half + c), bw, lat, "fabric");
    }
  }
  return b.done(
      fmt::format("k={} fat tree: {} single-GPU hosts, {} switches, {} GB/s links, {} uplinks per edge "
                  "switch ({}:1)",
                  k, hosts, switches, bw, up, over));
}

Topology torus(Params& p) {
  const std::vector<long long> dims = p.integerList("dims", {4, 4, 4}, 1, 6, 1, kMaxCount);
  const double bw = p.bandwidth("link_GBps", kGenericLinkGBps);
  const double lat = p.latency("latency_us", kDirectLatencyUs);
  const bool wrap = p.boolean("wraparound", true);
  const long long perHost = p.integer("gpus_per_host", 1, 1, kMaxCount);
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  p.finish();
  long long total = 1;
  for (long long d : dims) {
    total *= d;
    if (total > kMaxGeneratedNodes) p.bad("dims", fmt::format("more than {} GPUs", kMaxGeneratedNodes));
  }
  long long linkCount = 0;
  for (long long d : dims) linkCount += (d - 1 + (wrap && d > 2 ? 1 : 0)) * (total / d);
  p.checkSize(total, linkCount);
  std::string shape;
  for (long long d : dims) {
    if (!shape.empty()) shape += 'x';
    shape += std::to_string(d);
  }
  Builder b(fmt::format("torus-{}", shape), total, linkCount);
  // Node i has coordinates (i mod d0, i / d0 mod d1, ...): rank order walks the first dimension fastest.
  for (long long i = 0; i < total; ++i) b.gpu(gpuId(i / perHost, i % perHost), hostId(i / perHost), reduce);
  long long stride = 1;
  for (long long d : dims) {
    for (long long i = 0; i < total; ++i) {
      const long long c = (i / stride) % d;
      if (c + 1 < d) {
        const long long j = i + stride;
        b.link(gpuId(i / perHost, i % perHost), gpuId(j / perHost, j % perHost), bw, lat, "direct");
      } else if (wrap && d > 2) {  // size 2 already has its one link; size 1 none
        const long long j = i - c * stride;
        b.link(gpuId(i / perHost, i % perHost), gpuId(j / perHost, j % perHost), bw, lat, "direct");
      }
    }
    stride *= d;
  }
  return b.done(fmt::format("{} {} of {} GPUs with direct {} GB/s links", shape, wrap ? "torus" : "mesh", total, bw));
}

Topology dragonfly(Params& p) {
  const long long groups = p.integer("groups", 9, 1, kMaxCount);
  const long long routers = p.integer("routers", 4, 1, kMaxCount);
  const long long hosts = p.integer("hosts", 2, 1, kMaxCount);
  const long long globalLinks = p.integer("global_links", 1, 1, kMaxCount);
  const double bw = p.bandwidth("link_GBps", kGenericLinkGBps);
  const double globalBw = p.bandwidth("global_GBps", bw);
  const double lat = p.latency("latency_us", kFabricLatencyUs);
  const double globalLat = p.latency("global_latency_us", kGlobalLatencyUs);
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  p.finish();
  const long long hostCount = groups * routers * hosts;
  const long long linkCount =
      hostCount + groups * routers * (routers - 1) / 2 + groups * (groups - 1) / 2 * globalLinks;
  p.checkSize(hostCount + groups * routers, linkCount);
  Builder b(fmt::format("dragonfly-g{}a{}p{}", groups, routers, hosts), hostCount + groups * routers, linkCount);
  auto router = [](long long g, long long r) { return fmt::format("g{}.r{}", g, r); };
  for (long long h = 0; h < hostCount; ++h) b.gpu(gpuId(h, 0), hostId(h), reduce);
  for (long long g = 0; g < groups; ++g) {
    for (long long r = 0; r < routers; ++r) b.node(router(g, r), NodeKind::Switch, "");
  }
  for (long long h = 0; h < hostCount; ++h) {
    b.link(gpuId(h, 0), router(h / (routers * hosts), (h / hosts) % routers), bw, lat, "nic");
  }
  for (long long g = 0; g < groups; ++g) {
    for (long long r = 0; r < routers; ++r) {
      for (long long s = r + 1; s < routers; ++s) b.link(router(g, r), router(g, s), bw, lat, "local");
    }
  }
  // Global ports of a group are numbered by peer group (skipping itself) and dealt round-robin over its routers:
  // the "consecutive" arrangement of Kim et al., "Technology-Driven, Highly-Scalable Dragonfly Topology" (ISCA 2008).
  for (long long g = 0; g < groups; ++g) {
    for (long long h = g + 1; h < groups; ++h) {
      for (long long c = 0; c < globalLinks; ++c) {
        const long long portG = (h - 1) * globalLinks + c;  // h's index among g's peers is h-1 (h > g)
        const long long portH = g * globalLinks + c;        // g's index among h's peers is g (g < h)
        b.link(router(g, portG % routers), router(h, portH % routers), globalBw, globalLat, "global");
      }
    }
  }
  return b.done(
      fmt::format("dragonfly: {} groups x {} routers x {} single-GPU hosts, {} global link(s) per group "
                  "pair, local {} GB/s, global {} GB/s",
                  groups, routers, hosts, globalLinks, bw, globalBw));
}

Topology ring(Params& p) {
  const long long n = p.integer("n", 8, 1, kMaxGeneratedNodes);
  const double bw = p.bandwidth("link_GBps", kGenericLinkGBps);
  const double lat = p.latency("latency_us", kDirectLatencyUs);
  const long long perHost = p.integer("gpus_per_host", n, 1, kMaxCount);
  const double reduce = p.reduceRate("reduce_GBps", kH100ReduceGBps);
  p.finish();
  const long long linkCount = n <= 1 ? 0 : (n == 2 ? 1 : n);
  Builder b(fmt::format("ring-{}", n), n, linkCount);
  for (long long i = 0; i < n; ++i) b.gpu(gpuId(i / perHost, i % perHost), hostId(i / perHost), reduce);
  for (long long i = 0; i < linkCount; ++i) {
    const long long j = (i + 1) % n;
    b.link(gpuId(i / perHost, i % perHost), gpuId(j / perHost, j % perHost), bw, lat, "direct");
  }
  return b.done(fmt::format("ring of {} GPUs with direct {} GB/s links", n, bw));
}

Topology flat(Params& p) {
  static_assert(kMaxFlatRanks == kMaxGeneratedNodes - 1, "flat: n GPUs and one switch");
  const long long n = p.integer("n", 8, 1, kMaxFlatRanks);
  const double bw = p.bandwidth("bandwidth_GBps", kGenericLinkGBps);
  const double lat = p.latency("latency_us", kFlatLatencyUs);
  const long long perHost = p.integer("gpus_per_host", 1, 1, kMaxCount);
  // 0 = infinite: the closed forms the simulator is tested against have no reduction term by default.
  const double reduce = p.reduceRate("reduce_GBps", 0);
  p.finish();
  Builder b(fmt::format("flat-{}", n), n + 1, n);
  for (long long i = 0; i < n; ++i) b.gpu(gpuId(i / perHost, i % perHost), hostId(i / perHost), reduce);
  b.node("sw0", NodeKind::Switch, "");
  for (long long i = 0; i < n; ++i) b.link(gpuId(i / perHost, i % perHost), "sw0", bw, lat, "fabric");
  return b.done(fmt::format("{} GPUs, each one {} GB/s, {} us link to a non-blocking switch", n, bw, lat));
}

using GeneratorFn = Topology (*)(Params&);
const std::map<std::string, GeneratorFn>& generators() {
  static const std::map<std::string, GeneratorFn> kGenerators{{"nvswitch_node", nvswitchNode},
                                                              {"multi_node", multiNode},
                                                              {"fat_tree", fatTree},
                                                              {"torus", torus},
                                                              {"dragonfly", dragonfly},
                                                              {"ring", ring},
                                                              {"flat", flat}};
  return kGenerators;
}

}  // namespace

Topology generateFromJson(const std::string& generator, const json& params, const std::string& source) {
  const auto& gens = generators();
  const auto it = gens.find(generator);
  if (it == gens.end()) {
    std::string list;
    for (const auto& [name, fn] : gens) list += (list.empty() ? "" : ", ") + name;
    fail(source, "generator", fmt::format("unknown generator (accepted: {})", list), quoted(generator));
  }
  Params p(params, source);
  return it->second(p);
}

}  // namespace topo_detail

std::vector<std::string> topologyGenerators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : topo_detail::generators()) names.push_back(name);
  return names;
}

Topology flatTopology(int n, double bandwidthGBps, double latencyUs) {
  const topo_detail::json params{{"n", n}, {"bandwidth_GBps", bandwidthGBps}, {"latency_us", latencyUs}};
  return topo_detail::generateFromJson("flat", params, "flatTopology");
}

}  // namespace collbench
