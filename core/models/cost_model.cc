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
    beginCall(p.protocol);
    Estimate e = estimateNetwork(s, algorithm, p);
    if (e.supported && (s.count > 0 || s.kind == Collective::Barrier)) {
      e.terms.calls += 1;
      e.terms.us += callOverheadUs;
      // The wire rule's launch floor, paid once as the simulator does (0 on CPU ranks without a protocol).
      const double floorUs = launchFloorUs();
      if (floorUs > 0) e.terms.us += floorUs;
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

}  // namespace collbench
