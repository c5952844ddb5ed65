// The alpha-beta-gamma cost model (see cost_model.h for the model and its sources). Each algorithm's closed form is
// registered with its generator in core/algorithms/ (AlgorithmInfo::cost) and composes cost_context.h's blocks.
#include "collbench/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "collbench/error.h"
#include "cost_context.h"

namespace collbench {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::string_view toString(LinkClassKind k) { return k == LinkClassKind::Intra ? "intra" : "inter"; }

CostTerms& CostTerms::operator+=(const CostTerms& o) {
  us += o.us;
  calls += o.calls;
  for (int c = 0; c < kLinkClasses; ++c) {
    alphaCount[c] += o.alphaCount[c];
    betaBytes[c] += o.betaBytes[c];
  }
  gammaBytes += o.gammaBytes;
  return *this;
}

CostTerms CostTerms::operator+(const CostTerms& o) const {
  CostTerms r = *this;
  r += o;
  return r;
}

CostTerms CostTerms::operator*(double k) const {
  CostTerms r = *this;
  r.us *= k;
  r.calls *= k;
  for (int c = 0; c < kLinkClasses; ++c) {
    r.alphaCount[c] *= k;
    r.betaBytes[c] *= k;
  }
  r.gammaBytes *= k;
  return r;
}

// ---------------------------------------------------------------------------------------------------------------

/// The model of one topology: its building blocks, the per-call overhead, and one model per memory tier.
struct CostModel::Impl : CostContext {
  double callOverheadUs = 0;
  std::vector<std::unique_ptr<Impl>> tiers;  ///< per memory tier (topo.memoryTiers); empty without tiers

  Impl(Topology t, int nranks, double overheadUs)
      : CostContext(std::move(t), checkedRanks(nranks, overheadUs)), callOverheadUs(overheadUs) {
    // A call runs on its memory tier's rates: one model per tier, chosen per call by its working set.
    for (std::size_t k = 0; k < topo.memoryTiers.size(); ++k) {
      tiers.push_back(std::make_unique<Impl>(applyMemoryTier(topo, k), n, overheadUs));
    }
  }

  /// `nranks`, once the overhead is known to be valid (checked before the topology is routed).
  static int checkedRanks(int nranks, double overheadUs) {
    if (!(overheadUs >= 0) || !std::isfinite(overheadUs)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("call overhead must be a finite number >= 0 us, got {}", overheadUs));
    }
    return nranks;
  }

  Estimate estimate(const CollectiveSpec& s, std::string_view algorithm, const AlgoParams& p) const {
    if (!tiers.empty() && s.nranks == n) {
      return tiers[memoryTierIndex(topo, hostWorkingSetBytes(topo, s))]->estimate(s, algorithm, p);
    }
    Estimate e = estimateNetwork(s, algorithm, p);
    if (e.supported && (s.count > 0 || s.kind == Collective::Barrier)) {
      e.terms.calls += 1;
      e.terms.us += callOverheadUs;
    }
    return e;
  }

  /// The estimate without the per-call overhead: the algorithm's registered cost term (AlgorithmInfo::cost).
  Estimate estimateNetwork(const CollectiveSpec& s, std::string_view algorithm, const AlgoParams& p) const {
    Estimate e;
    if (s.nranks != n) {
      throw Error(Errc::InvalidArgument, fmt::format("cost model of {} ranks asked about {}", n, describe(s)));
    }
    if (p.channels < 1) {
      throw Error(Errc::InvalidArgument, fmt::format("channels must be at least 1, got {}", p.channels));
    }
    const AlgorithmInfo* info = nullptr;
    for (const auto& a : algorithms()) {
      if (a.name != algorithm) continue;
      if (a.native) {
        e.supported = false;
        e.note = fmt::format("'{}' is a peer library's own implementation; the model has no closed form for it",
                             printable(algorithm));
        return e;
      }
      if (a.collective == s.kind) info = &a;
    }
    if (!info || !info->cost) {
      e.supported = false;
      e.note = info ? fmt::format("'{}' has no closed form in the model", printable(algorithm))
                    : fmt::format("no algorithm '{}' for {}", printable(algorithm), toString(s.kind));
      return e;
    }
    if (!info->traits.admits(n)) {
      e.supported = false;
      e.note = fmt::format("'{}' cannot run {} ranks", printable(algorithm), n);
      return e;
    }
    if (s.count == 0 && s.kind != Collective::Barrier) return e;
    return info->cost(*this, s, p);
  }
};

CostModel::CostModel(Topology topology, int nranks, double callOverheadUs)
    : impl_(std::make_unique<Impl>(std::move(topology), nranks, callOverheadUs)) {}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

CostModel CostModel::defaultFlat(int nranks) {
  return CostModel(flatTopology(std::max(nranks, 1), kDefaultFlatGBps, kDefaultFlatLatencyUs), std::max(nranks, 1));
}

int CostModel::nranks() const { return impl_->n; }
double CostModel::callOverheadUs() const { return impl_->callOverheadUs; }
const Topology& CostModel::topology() const { return impl_->topo; }
const CostSummary& CostModel::summary() const { return impl_->summary; }
const std::vector<int>& CostModel::rankHost() const { return impl_->host; }

Estimate CostModel::estimate(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params) const {
  return impl_->estimate(spec, algorithm, params);
}

// ---------------------------------------------------------------------------------------------------------------

Topology classTopology(const std::string& name, int hosts, int ranksPerHost, const LinkClassCost& intra,
                       const LinkClassCost& inter, double gammaGBps, NodeKind kind) {
  if (hosts < 1 || ranksPerHost < 1) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("class topology needs at least one host and one rank per host, got {} x {}", hosts, ranksPerHost));
  }
  const bool needIntra = ranksPerHost > 1, needInter = hosts > 1;
  if (needIntra && !(intra.betaGBps > 0 && std::isfinite(intra.betaGBps) && intra.alphaUs >= 0)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("intra class needs bandwidth > 0 and latency >= 0 (got {} GB/s, {} us)", intra.betaGBps,
                            intra.alphaUs));
  }
  if (needInter && !(inter.betaGBps > 0 && std::isfinite(inter.betaGBps) && inter.alphaUs >= 0)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("inter class needs bandwidth > 0 and latency >= 0 (got {} GB/s, {} us)", inter.betaGBps,
                            inter.alphaUs));
  }
  if (needIntra && needInter && !(inter.alphaUs > intra.alphaUs)) {
    // Routes tie on hop count (two links either way); the lower latency must be the host's own switch.
    throw Error(
        Errc::InvalidArgument,
        fmt::format("inter latency {} us must exceed intra latency {} us so that routes inside a host stay there",
                    inter.alphaUs, intra.alphaUs));
  }
  Topology t;
  t.name = name;
  t.description =
      fmt::format("{} host(s) x {} rank(s): intra {} us / {} GB/s, inter {} us / {} GB/s, reduce {} GB/s", hosts,
                  ranksPerHost, intra.alphaUs, intra.betaGBps, inter.alphaUs, inter.betaGBps, gammaGBps);
  if (needInter) t.nodes.push_back({"fabric", NodeKind::Switch, "", 0, 0});
  for (int h = 0; h < hosts; ++h) {
    const std::string hostId = fmt::format("h{}", h);
    const std::string sw = hostId + ".sw";
    if (needIntra) t.nodes.push_back({sw, NodeKind::Switch, hostId, 0, 0});
    for (int i = 0; i < ranksPerHost; ++i) {
      const std::string id = fmt::format("{}.r{}", hostId, i);
      t.nodes.push_back({id, kind, hostId, gammaGBps, 0});
      t.ranks.push_back(id);
      if (needIntra) t.links.push_back({id, sw, intra.betaGBps, intra.alphaUs / 2, "intra"});
      if (needInter) t.links.push_back({id, "fabric", inter.betaGBps, inter.alphaUs / 2, "inter"});
    }
  }
  if (!needIntra && !needInter) {  // one rank: a lone node is still a valid topology
    t.nodes.push_back({"sw0", NodeKind::Switch, "", 0, 0});
    t.links.push_back(
        {t.ranks.front(), "sw0", intra.betaGBps > 0 ? intra.betaGBps : kDefaultFlatGBps, intra.alphaUs / 2, "intra"});
  }
  validateTopology(t, name);
  return t;
}

// ---- NCCL's tuning model ---------------------------------------------------------------------------------------
// Constants from NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel,
// ncclTopoGetAlgoTime), src/graph/search.cc (sm90 speed arrays) and src/init.cc (buffer sizes), Hopper (sm90) row;
// indices [algo: tree, ring][proto: LL, LL128, Simple].
namespace {

constexpr int kNcclTree = 0, kNcclRing = 1;
/// baseLatencies: fixed cost of a call (us).
constexpr double kNcclBaseLatUs[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
/// hwLatencies per step (us): NVLINK, PCI, NET.
constexpr double kNcclHwLatNvlinkUs[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kNcclHwLatPciUs[2][3] = {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}};
constexpr double kNcclHwLatNetUs[2][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
/// llMaxBws (GB/s): one node uses the GPU row (Hopper 141.0); more nodes the CPU row, and we assume Intel x86 hosts
/// (DGX H100: Xeon Platinum 8480C): 39.0 for 2 nodes, 20.4 for more.
constexpr double kNcclLlMaxBwHopperN1 = 141.0;
constexpr double kNcclLlMaxBwIntelN2 = 39.0;
constexpr double kNcclLlMaxBwIntelN4 = 20.4;
/// perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws (GB/s per channel), Hopper, [N1, N2, N4].
constexpr double kNcclPerChRingLL128GBps[3] = {36.7, 36.7, 36.7};
constexpr double kNcclPerChTreeLL128GBps[3] = {36.7, 36.7, 29.0};
constexpr double kNcclPerChTreeGBps[3] = {38.7, 41.4, 36.0};
/// Highest per-channel graph bandwidth the topology search tries on sm90 (sm90SpeedArrayIntra[0] /
/// sm90SpeedArrayInter[0] in search.cc): the per-channel limit of Simple rings.
constexpr double kNcclSm90MaxChannelIntraGBps = 60.0;
constexpr double kNcclSm90MaxChannelInterGBps = 48.0;
/// Protocol efficiencies of the model: ring LL moves 8 data bytes per 16-byte line (x0.5), ring LL128 120 of 128
/// (x0.92 in tuning.cc); tree all-reduce x0.92, tree LL x1/3.8, tree LL128 x7/9 on one node, x120/128 on more.
constexpr double kNcclRingLLFactor = 0.5;
constexpr double kNcclRingLL128Factor = 0.92;
constexpr double kNcclTreeFactor = 0.92;
constexpr double kNcclTreeLLFactor = 1.0 / 3.8;
constexpr double kNcclTreeLL128FactorN1 = 7.0 / 9.0;
constexpr double kNcclTreeLL128FactorNet = 120.0 / 128.0;
/// ncclTopoGetAlgoTime: tree all-reduce bandwidth correction per protocol, index log2(bytes >> 6) in [0, 23).
constexpr double kNcclTreeCorrection[3][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
/// Multi-node Simple ring all-reduce latency plateau factor (sm >= 80) and the bytes per channel-rank above which
/// it applies.
constexpr double kNcclRingPlateauFactor = 1.4;
constexpr std::size_t kNcclRingPlateauBytes = 64;
/// getNetOverhead: 1 us per network step on Intel x86, x3 for Simple.
constexpr double kNcclNetOverheadUs = 1.0;
constexpr double kNcclNetOverheadSimpleFactor = 3.0;
/// Buffers (src/init.cc, src/include/device.h): LL 8 lines/thread x 512 threads x NCCL_STEPS 8 x 16 B lines, half of
/// each line data; LL128 120 elements/thread x 640 threads x 8 steps x 8 B, 120 of 128 bytes data; Simple 4 MiB.
constexpr int kNcclSteps = 8;
constexpr std::size_t kNcclLlBuffBytes = 8 * 512 * kNcclSteps * 16;
constexpr std::size_t kNcclLl128BuffBytes = 120 * 640 * kNcclSteps * 8;
constexpr std::size_t kNcclSimpleBuffBytes = std::size_t{1} << 22;

int log2i(std::size_t v) { return v == 0 ? -1 : static_cast<int>(std::bit_width(v)) - 1; }

int scaleIndex(int nnodes) { return nnodes <= 2 ? nnodes - 1 : 2; }

double llMaxBw(int nnodes) {
  return nnodes == 1 ? kNcclLlMaxBwHopperN1 : nnodes == 2 ? kNcclLlMaxBwIntelN2 : kNcclLlMaxBwIntelN4;
}

int ai(NcclAlgo a) { return a == NcclAlgo::Tree ? kNcclTree : kNcclRing; }
int pi(NcclProto p) { return static_cast<int>(p); }

}  // namespace

std::string_view toString(NcclAlgo a) { return a == NcclAlgo::Tree ? "tree" : "ring"; }

std::string_view toString(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return "ll";
    case NcclProto::LL128:
      return "ll128";
    case NcclProto::Simple:
      return "simple";
  }
  return "?";
}

NcclAlgo parseNcclAlgo(std::string_view s) {
  const std::string l = lower(s);
  if (l == "tree") return NcclAlgo::Tree;
  if (l == "ring") return NcclAlgo::Ring;
  throw Error(Errc::InvalidArgument, fmt::format("unknown NCCL algorithm '{}' (available: tree, ring)", printable(s)));
}

NcclProto parseNcclProto(std::string_view s) {
  const std::string l = lower(s);
  if (l == "ll") return NcclProto::LL;
  if (l == "ll128") return NcclProto::LL128;
  if (l == "simple") return NcclProto::Simple;
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown NCCL protocol '{}' (available: ll, ll128, simple)", printable(s)));
}

NcclMachine ncclMachine(const Topology& t, int nranks) {
  const CostModel model(t, nranks);
  const CostSummary& s = model.summary();
  NcclMachine m;
  m.nranks = s.ranks;
  m.nnodes = s.hosts;
  const auto& intra = s.cls[static_cast<int>(LinkClassKind::Intra)];
  const auto& inter = s.cls[static_cast<int>(LinkClassKind::Inter)];
  m.intraGBps = intra.present ? intra.betaGBps : inter.betaGBps;
  m.interGBps = inter.present ? inter.betaGBps : intra.betaGBps;
  m.nvlink = false;
  if (intra.present) {
    Router r(model.topology());
    int peer = 1;
    while (peer < s.ranks && model.rankHost()[static_cast<std::size_t>(peer)] != model.rankHost()[0]) ++peer;
    if (peer < s.ranks) {
      for (const Hop& h : r.route(0, peer))
        m.nvlink = m.nvlink || t.links[static_cast<std::size_t>(h.link)].linkClass == "nvlink";
    }
  }
  return m;
}

std::optional<double> ncclModelTimeUs(Collective coll, NcclAlgo algo, NcclProto proto, int channels, std::size_t bytes,
                                      const NcclMachine& m) {
  if (coll == Collective::Barrier) return std::nullopt;
  if (algo == NcclAlgo::Tree && coll != Collective::AllReduce) return std::nullopt;  // tree is all-reduce only
  if (channels < 1 || m.nranks < 1 || m.nnodes < 1) return std::nullopt;
  const int n = m.nranks, nn = m.nnodes, a = ai(algo), p = pi(proto), idx = scaleIndex(nn);
  if (n == 1) return kNcclBaseLatUs[a][p];
  const int nsteps = coll == Collective::AllReduce                                          ? 2 * (n - 1)
                     : (coll == Collective::ReduceScatter || coll == Collective::AllGather) ? n - 1
                                                                                            : n;
  // Graph bandwidth per channel: the per-GPU link shared by the channels, at most the search's top speed.
  const double perChannel = nn == 1
                                ? std::min(kNcclSm90MaxChannelIntraGBps, m.intraGBps / channels)
                                : std::min(kNcclSm90MaxChannelInterGBps, std::min(m.intraGBps, m.interGBps) / channels);
  double busBw = channels * perChannel;
  if (algo == NcclAlgo::Ring && proto == NcclProto::LL) busBw = std::min(llMaxBw(nn), busBw * kNcclRingLLFactor);
  if (algo == NcclAlgo::Ring && proto == NcclProto::LL128) {
    busBw = std::min(busBw * kNcclRingLL128Factor, channels * kNcclPerChRingLL128GBps[idx]);
  }
  if (algo == NcclAlgo::Tree) busBw = std::min(busBw * kNcclTreeFactor, channels * kNcclPerChTreeGBps[idx]);
  if (algo == NcclAlgo::Tree && proto == NcclProto::LL) busBw = std::min(busBw * kNcclTreeLLFactor, llMaxBw(nn));
  if (algo == NcclAlgo::Tree && proto == NcclProto::LL128) {
    busBw = std::min(busBw * (nn == 1 ? kNcclTreeLL128FactorN1 : kNcclTreeLL128FactorNet),
                     channels * kNcclPerChTreeLL128GBps[idx]);
  }
  // Bus bandwidth to algorithm bandwidth.
  busBw *= algo == NcclAlgo::Ring ? static_cast<double>(n) / nsteps : 0.5;
  double lat = kNcclBaseLatUs[a][p];
  const double intraLatBase = m.nvlink ? kNcclHwLatNvlinkUs[a][p] : kNcclHwLatPciUs[a][p];
  const double ppn = static_cast<double>(n) / nn;
  const double interLat = ppn == 1 ? kNcclHwLatNetUs[kNcclTree][p] : kNcclHwLatNetUs[a][p];
  if (algo == NcclAlgo::Ring) {
    const double hwLat = nn == 1 ? intraLatBase : kNcclHwLatNetUs[a][p];
    if (coll == Collective::Broadcast || coll == Collective::Reduce) {
      // Rings of different channels (sameChannels = 0): a chunk latency per step; Simple uses the tree's.
      const double stepLat = proto == NcclProto::Simple
                                 ? (nn == 1 ? (m.nvlink ? kNcclHwLatNvlinkUs : kNcclHwLatPciUs)[kNcclTree][p]
                                            : kNcclHwLatNetUs[kNcclTree][p])
                                 : hwLat;
      lat += nsteps * stepLat;
    } else {
      double netOverhead = 0;
      if (nn > 1) netOverhead = kNcclNetOverheadUs * (proto == NcclProto::Simple ? kNcclNetOverheadSimpleFactor : 1.0);
      const double intraLat = std::max(intraLatBase, netOverhead);
      const int interSteps = nn == 1 ? 0 : coll == Collective::AllReduce ? 2 * (nn - 1) : nn - 1;
      lat += (nsteps - interSteps) * intraLat + interSteps * interLat;
    }
  } else {
    const int ranksPerNode = n / nn;  // whole ranks, as NCCL's nRanks/nNodes
    lat += 2 * ((ranksPerNode - 1) * intraLatBase + log2i(static_cast<std::size_t>(nn)) * interLat);
  }
  double bw = busBw;
  const int logSize = log2i(bytes >> 6);
  if (algo == NcclAlgo::Tree && logSize >= 0 && logSize < 23) bw *= kNcclTreeCorrection[p][logSize];
  if (algo == NcclAlgo::Ring && proto == NcclProto::Simple && nn > 1 && coll == Collective::AllReduce &&
      bytes / (static_cast<std::size_t>(channels) * static_cast<std::size_t>(n)) >= kNcclRingPlateauBytes) {
    lat *= kNcclRingPlateauFactor;
  }
  if (!(bw > 0)) return std::nullopt;
  return lat + static_cast<double>(bytes) / (kBytesPerUsPerGBps * bw);
}

std::size_t ncclChunkBytes(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return kNcclLlBuffBytes / kNcclSteps / 2;
    case NcclProto::LL128:
      return kNcclLl128BuffBytes / kNcclSteps / 128 * 120;
    case NcclProto::Simple:
      return kNcclSimpleBuffBytes / kNcclSteps;
  }
  return kNcclSimpleBuffBytes / kNcclSteps;
}

double ncclBaseLatencyUs(NcclAlgo a, NcclProto p) { return kNcclBaseLatUs[ai(a)][pi(p)]; }

Topology ncclProtocolTopology(const Topology& t, NcclAlgo algo, NcclProto proto, int channels, int nranks) {
  if (channels < 1) throw Error(Errc::InvalidArgument, fmt::format("channels must be at least 1, got {}", channels));
  if (nranks <= 0) nranks = static_cast<int>(t.ranks.size());
  const int a = ai(algo), p = pi(proto);
  // NCCL tunes by node count (ncclTopoTuneModel's index2 and llMaxBw row) and ranks per node (ppn 1 exposes the
  // tree's network latency).
  const std::vector<int> hosts = rankHosts(t, nranks);
  const int nnodes = hosts.empty() ? 1 : *std::max_element(hosts.begin(), hosts.end()) + 1;
  const int idx = scaleIndex(nnodes);
  const bool onePerNode = nnodes == nranks;
  Topology out = t;
  std::vector<bool> isRank(t.nodes.size(), false), hasNvlink(t.nodes.size(), false);
  std::map<std::string, int> index;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) index[t.nodes[i].id] = static_cast<int>(i);
  for (const std::string& r : t.ranks) isRank[static_cast<std::size_t>(index.at(r))] = true;
  for (const TopoLink& l : t.links) {
    if (l.linkClass == "nvlink")
      hasNvlink[static_cast<std::size_t>(index.at(l.a))] = hasNvlink[static_cast<std::size_t>(index.at(l.b))] = true;
  }
  // Bandwidth the protocol reaches: the model's efficiency factor on every link, and NCCL's caps (per channel for
  // Simple and LL128, in total for LL) on a rank's own links and on network links; the caps of inter-node
  // communicators (per-channel rows N2/N4, the CPU's llMaxBw, the inter-node search speed) once ranks span hosts.
  double efficiency = 1.0, perChannelCap = 0, perChannelNetCap = 0, totalCap = 0;
  if (algo == NcclAlgo::Ring) {
    if (proto == NcclProto::LL) {
      efficiency = kNcclRingLLFactor;
      totalCap = llMaxBw(nnodes);
    } else if (proto == NcclProto::LL128) {
      efficiency = kNcclRingLL128Factor;
      perChannelCap = perChannelNetCap = kNcclPerChRingLL128GBps[idx];
    } else {
      perChannelCap = kNcclSm90MaxChannelIntraGBps;
      perChannelNetCap = kNcclSm90MaxChannelInterGBps;
    }
  } else {
    efficiency = kNcclTreeFactor;
    if (proto == NcclProto::LL) {
      efficiency *= kNcclTreeLLFactor;
      totalCap = llMaxBw(nnodes);
    } else if (proto == NcclProto::LL128) {
      efficiency *= nnodes == 1 ? kNcclTreeLL128FactorN1 : kNcclTreeLL128FactorNet;
      perChannelCap = perChannelNetCap = kNcclPerChTreeLL128GBps[idx];
    } else {
      perChannelCap = perChannelNetCap = kNcclPerChTreeGBps[idx];
    }
  }
  // Per-step hardware latency, half on each end of a route: NVLink (or PCI) inside a node, at least the network
  // post overhead once the communicator spans nodes (NCCL: intraLat = max(intraLat, netOverhead)); the network
  // latency on NIC links, the tree's when every node holds one rank (ppn 1).
  const double netOverhead =
      nnodes > 1 ? kNcclNetOverheadUs * (proto == NcclProto::Simple ? kNcclNetOverheadSimpleFactor : 1.0) : 0.0;
  const double netLat = onePerNode ? kNcclHwLatNetUs[kNcclTree][p] : kNcclHwLatNetUs[a][p];
  for (TopoLink& l : out.links) {
    const auto ia = static_cast<std::size_t>(index.at(l.a)), ib = static_cast<std::size_t>(index.at(l.b));
    const bool atRank = isRank[ia] || isRank[ib];
    const bool network = l.linkClass == "nic" || (atRank && l.linkClass != "pcie" && l.linkClass != "nvlink");
    l.bandwidthGBps *= efficiency;
    // A network link carries at most every channel (an upper bound: rings spread channels over the NICs).
    const double perChannel = network ? perChannelNetCap : perChannelCap;
    if ((atRank || network) && perChannel > 0) l.bandwidthGBps = std::min(l.bandwidthGBps, channels * perChannel);
    if ((atRank || network) && totalCap > 0) l.bandwidthGBps = std::min(l.bandwidthGBps, totalCap);
    double extra = 0;
    if (network)
      extra = netLat / 2;
    else if (l.linkClass == "nvlink" && atRank)
      extra = std::max(kNcclHwLatNvlinkUs[a][p], netOverhead) / 2;
    else if (l.linkClass == "pcie" && atRank && !(hasNvlink[ia] || hasNvlink[ib]))
      extra = std::max(kNcclHwLatPciUs[a][p], netOverhead) / 2;
    l.latencyUs += extra;
  }
  out.name = fmt::format("{}+nccl-{}-{}-c{}-n{}", t.name, toString(algo), toString(proto), channels, nranks);
  return out;
}

}  // namespace collbench
