// Least-squares calibration of the cost model's per-class alpha, beta and gamma (calibrate.h).
#include "collbench/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/fidelity.h"
#include "collbench/records.h"

namespace collbench {
namespace {

// alpha_intra, alpha_inter, 1/beta_intra, 1/beta_inter, 1/gamma, overhead (u's order; the calibration record's names)
constexpr int kParams = CalibrationRecord::kParamCount;
constexpr const auto& kParamNames = CalibrationRecord::kParamNames;
// identified[] order in CalibrationResult: as u.
/// Bytes per us per GB/s (topology bandwidths are 1e9 bytes/s).
constexpr double kBytesPerUsPerGBps = 1e3;
/// Convergence: the largest relative change of a parameter between two iterations.
constexpr double kConvergedRelChange = 1e-7;
/// IRLS for the L1 loss: relative residuals below this weigh as this (keeps weights finite at exact fits).
constexpr double kL1Floor = 1e-3;
/// Index of the per-call overhead in u.
constexpr int kOverhead = 5;
/// Relative remainder below which a column lies in the span of the others (columnRank).
constexpr double kRankTolerance = 1e-6;
/// Relative pivot below which the normal equations are singular (collinear columns).
constexpr double kSingularPivot = 1e-12;

bool scheduleAlgorithm(Collective c, const std::string& name) {
  for (const auto& a : algorithms()) {
    if (a.collective == c && a.name == name && !a.native) return true;
  }
  return false;
}

std::size_t countOf(const CalibrationSample& s) {
  const std::size_t es = dtypeSize(s.dtype);
  const std::size_t count = s.bytes / es;
  return (s.collective == Collective::ReduceScatter || s.collective == Collective::AllGather)
             ? count / static_cast<std::size_t>(s.nranks)
             : count;
}

using Vec = std::array<double, kParams>;

Vec toU(const CalibrationParams& p) {
  auto inv = [](double gbps) { return gbps > 0 ? 1.0 / (gbps * kBytesPerUsPerGBps) : 0.0; };
  return {p.intra.alphaUs,       p.inter.alphaUs,  inv(p.intra.betaGBps),
          inv(p.inter.betaGBps), inv(p.gammaGBps), p.callOverheadUs};
}

CalibrationParams fromU(const Vec& u) {
  auto bw = [](double inv) { return inv > 0 ? 1.0 / (inv * kBytesPerUsPerGBps) : kCalibrateUnboundedGBps; };
  CalibrationParams p;
  p.intra = {true, u[0], bw(u[2])};
  p.inter = {true, u[1], bw(u[3])};
  p.gammaGBps = u[4] > 0 ? 1.0 / (u[4] * kBytesPerUsPerGBps) : 0.0;
  p.callOverheadUs = u[5];
  return p;
}

/// Cost models of the class topology for each (hosts, ranks per host) layout among the samples.
class Models {
 public:
  Models(const CalibrationParams& p, NodeKind kind, std::vector<MemoryTier> tiers = {})
      : p_(p), kind_(kind), tiers_(std::move(tiers)) {}
  const CostModel& at(int hosts, int perHost) {
    auto key = std::make_pair(hosts, perHost);
    auto it = models_.find(key);
    if (it == models_.end()) {
      LinkClassCost inter = p_.inter;
      // Routes inside a host must stay there: the topology needs inter latency above intra (a fit may tie them).
      if (hosts > 1 && perHost > 1 && !(inter.alphaUs > p_.intra.alphaUs))
        inter.alphaUs = p_.intra.alphaUs * (1 + 1e-6) + 1e-6;
      Topology t = classTopology("fit", hosts, perHost, p_.intra, inter, p_.gammaGBps, kind_);
      t.memoryTiers = tiers_;
      it = models_.emplace(key, std::make_unique<CostModel>(std::move(t), hosts * perHost, p_.callOverheadUs)).first;
    }
    return *it->second;
  }

 private:
  CalibrationParams p_;
  NodeKind kind_;
  std::vector<MemoryTier> tiers_;
  std::map<std::pair<int, int>, std::unique_ptr<CostModel>> models_;
};

Estimate estimateOf(Models& models, const CalibrationSample& s) {
  const CostModel& m = models.at(s.hosts, s.nranks / s.hosts);
  CollectiveSpec spec{s.collective, s.nranks, countOf(s), s.dtype};
  return m.estimate(spec, s.algorithm, AlgoParams{s.chunkBytes, s.channels, m.rankHost()});
}

Vec coefficients(const CostTerms& t) {
  return {t.alphaCount[0], t.alphaCount[1], t.betaBytes[0], t.betaBytes[1], t.gammaBytes, t.calls};
}

/// Solves the normal equations of min |A x - y| over the columns in `cols`; false when singular.
bool leastSquares(const std::vector<Vec>& A, const std::vector<double>& y, const std::vector<int>& cols, Vec& x) {
  const std::size_t m = cols.size();
  std::vector<double> scale(m, 0.0);
  for (std::size_t j = 0; j < m; ++j) {
    for (const Vec& r : A) scale[j] += r[static_cast<std::size_t>(cols[j])] * r[static_cast<std::size_t>(cols[j])];
    scale[j] = std::sqrt(scale[j]);
    if (!(scale[j] > 0)) return false;
  }
  // (S A^T A S) z = S A^T y with x = S z: columns scaled to unit norm for conditioning.
  std::vector<std::vector<double>> M(m, std::vector<double>(m + 1, 0.0));
  for (std::size_t i = 0; i < A.size(); ++i) {
    for (std::size_t a = 0; a < m; ++a) {
      const double va = A[i][static_cast<std::size_t>(cols[a])] / scale[a];
      for (std::size_t b = 0; b < m; ++b) M[a][b] += va * A[i][static_cast<std::size_t>(cols[b])] / scale[b];
      M[a][m] += va * y[i];
    }
  }
  for (std::size_t c = 0; c < m; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < m; ++r) {
      if (std::abs(M[r][c]) > std::abs(M[piv][c])) piv = r;
    }
    if (std::abs(M[piv][c]) < kSingularPivot) return false;
    std::swap(M[c], M[piv]);
    for (std::size_t r = 0; r < m; ++r) {
      if (r == c) continue;
      const double f = M[r][c] / M[c][c];
      for (std::size_t k = c; k <= m; ++k) M[r][k] -= f * M[c][k];
    }
  }
  x.fill(0.0);
  for (std::size_t j = 0; j < m; ++j) x[static_cast<std::size_t>(cols[j])] = M[j][m] / M[j][j] / scale[j];
  return true;
}

/// Rank of the columns `cols` of A (modified Gram-Schmidt on unit-norm columns; a column whose remainder is below
/// kRankTolerance of its norm adds nothing).
int columnRank(const std::vector<Vec>& A, const std::vector<int>& cols) {
  std::vector<std::vector<double>> basis;
  for (int c : cols) {
    std::vector<double> v(A.size());
    double norm = 0;
    for (std::size_t i = 0; i < A.size(); ++i) {
      v[i] = A[i][static_cast<std::size_t>(c)];
      norm += v[i] * v[i];
    }
    norm = std::sqrt(norm);
    if (!(norm > 0)) continue;
    for (double& x : v) x /= norm;
    for (const auto& b : basis) {
      double dot = 0;
      for (std::size_t i = 0; i < v.size(); ++i) dot += v[i] * b[i];
      for (std::size_t i = 0; i < v.size(); ++i) v[i] -= dot * b[i];
    }
    double rest = 0;
    for (double x : v) rest += x * x;
    rest = std::sqrt(rest);
    if (rest < kRankTolerance) continue;
    for (double& x : v) x /= rest;
    basis.push_back(std::move(v));
  }
  return static_cast<int>(basis.size());
}

/// Non-negative least squares over the `free` columns by trying every subset (at most 2^6): the feasible solution
/// with the smallest residual. `fixedPart` is subtracted from y first (the contribution of fixed columns).
Vec nnls(const std::vector<Vec>& A, const std::vector<double>& y, const std::vector<int>& free) {
  Vec best{};
  double bestRes = std::numeric_limits<double>::infinity();
  const int k = static_cast<int>(free.size());
  for (int mask = 0; mask < (1 << k); ++mask) {
    std::vector<int> cols;
    for (int j = 0; j < k; ++j) {
      if (mask & (1 << j)) cols.push_back(free[static_cast<std::size_t>(j)]);
    }
    Vec x{};
    if (!cols.empty() && !leastSquares(A, y, cols, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    double res = 0;
    for (std::size_t i = 0; i < A.size(); ++i) {
      double p = 0;
      for (int j = 0; j < kParams; ++j) p += A[i][static_cast<std::size_t>(j)] * x[static_cast<std::size_t>(j)];
      res += (p - y[i]) * (p - y[i]);
    }
    if (res < bestRes) {
      bestRes = res;
      best = x;
    }
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

std::vector<CalibrationSample> samplesFromPerfJson(const std::string& text, const std::string& source, int hosts) {
  const PerfRun run = parsePerfRun(text, source);
  const auto failAt = [&](const std::string& path, const std::string& problem, const std::string& value) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {}: {} (got \"{}\")", printable(source), path, problem, printable(value)));
  };
  Collective coll = Collective::AllReduce;
  try {
    coll = parseCollective(run.collective);
  } catch (const Error&) {
    failAt("collective", "unknown collective", run.collective);
  }
  if (!run.topology.empty()) {
    const std::vector<int> rh = rankHosts(loadTopology(run.topology), run.ranks);
    std::map<int, int> perHost;
    for (int h : rh) ++perHost[h];
    hosts = static_cast<int>(perHost.size());
    for (const auto& [h, k] : perHost) {
      if (k != run.ranks / hosts) {
        failAt("config.topology", "ranks are not spread evenly over the topology's hosts", run.topology);
      }
    }
  }
  if (hosts < 1 || run.ranks % hosts != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {} ranks do not split evenly over {} hosts", printable(source), run.ranks, hosts));
  }
  std::vector<CalibrationSample> out;
  for (std::size_t i = 0; i < run.rows.size(); ++i) {
    const PerfRow& r = run.rows[i];
    CalibrationSample s;
    s.collective = coll;
    s.nranks = run.ranks;
    s.hosts = hosts;
    s.bytes = r.size;
    s.algorithm = r.algorithm;
    try {
      s.dtype = parseDType(r.type);
    } catch (const Error&) {
      failAt(fmt::format("results[{}].type", i), "unknown data type", r.type);
    }
    s.chunkBytes = r.chunkBytes;
    s.channels = r.channels;
    s.timeUs = r.outOfPlace.timeUs;
    s.origin = fmt::format("{} results[{}]", source, i);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<CalibrationSample> samplesFromNcclTestsLog(const NcclTestsLog& log, const std::string& source,
                                                       const std::string& algorithm,
                                                       std::optional<Collective> collective) {
  const std::optional<Collective> c = log.collective ? log.collective : collective;
  if (!c) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: the log does not say which collective it measured (no 'Collective test starting' "
                            "line); pass --collective",
                            printable(source)));
  }
  const std::string algo = !log.algorithm.empty() && log.algorithm != "auto" ? log.algorithm : algorithm;
  findAlgorithm(*c, algo);
  const int n = std::max(log.nranks, 1), hosts = log.nnodes();
  if (n % hosts != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {} ranks do not split evenly over the log's {} hosts", printable(source), n, hosts));
  }
  std::vector<CalibrationSample> out;
  for (const NcclTestsRow& r : log.rows) {
    CalibrationSample s;
    s.collective = *c;
    s.algorithm = algo;
    s.nranks = n;
    s.hosts = hosts;
    s.bytes = r.bytes;
    try {
      s.dtype = parseDType(r.type);
    } catch (const Error&) {
      throw Error(Errc::InvalidArgument, fmt::format("{}:{}: type: unknown data type (got '{}')", printable(source),
                                                     r.line, printable(r.type)));
    }
    s.timeUs = r.outOfPlace.timeUs;
    s.origin = fmt::format("{}:{}", source, r.line);
    s.ncclTests = log.algorithm.empty();
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

/// Columns of u that a memory tier scales: intra-host 1/beta and 1/gamma (applyMemoryTier scales intra-host links
/// and reduction rates).
bool tierScaled(int j) { return j == 2 || j == 4; }
/// Bounds on a fitted tier scale: a tier 1000x off tier 0 is a fit gone wrong, not a cache level.
constexpr double kMinTierScale = 1e-3, kMaxTierScale = 1e3;
/// Iterations per candidate while searching tier bounds; the chosen bounds are then fitted to convergence.
constexpr int kTierSearchIterations = 8;
/// Relative error treated as exact when fits are compared by BIC: below it, ln(RSS) differences are rounding.
constexpr double kBicErrorFloor = 1e-4;

/// What every fit of one calibration shares.
struct FitProblem {
  const std::vector<CalibrationSample>& samples;
  const std::vector<std::size_t>& train;
  const std::vector<std::size_t>& workingSet;  ///< per sample (hostWorkingSetBytes)
  const std::vector<int>& free;                ///< identified columns of u
  const CalibrationOptions& opt;
};

struct TierFit {
  std::vector<std::size_t> bounds;  ///< inclusive largest working set of tiers 0..k-2
  std::vector<double> scales;       ///< per tier; scales[0] = 1 (tier 0 is what u describes)
  Vec u{};
  double residual = std::numeric_limits<double>::infinity();
  int iterations = 0;

  std::vector<MemoryTier> tiers() const {
    std::vector<MemoryTier> out;
    if (bounds.empty()) return out;
    for (std::size_t k = 0; k < scales.size(); ++k) out.push_back({k < bounds.size() ? bounds[k] : 0, scales[k]});
    return out;
  }
  std::size_t tierOf(std::size_t workingSet) const {  // as memoryTierIndex
    return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), workingSet) - bounds.begin());
  }
};

/// The loss over the training samples (relative errors), timed by the cost model on the tiered class topology.
double residualOf(const FitProblem& fp, const Vec& u, const std::vector<MemoryTier>& tiers, bool squared) {
  Models models(fromU(u), fp.opt.rankKind, tiers);
  double sum = 0;
  for (std::size_t i : fp.train) {
    const double e = estimateOf(models, fp.samples[i]).terms.us / fp.samples[i].timeUs - 1;
    sum += squared ? e * e : std::abs(e);
  }
  return sum;
}

/// Alternating least squares for fixed tier bounds: u by non-negative least squares with every sample's scaled
/// columns divided by its tier's scale, then each tier's scale by one-dimensional least squares given u; repeated
/// until nothing changes, keeping the best fit seen.
TierFit fitTiers(const FitProblem& fp, std::vector<std::size_t> bounds, int maxIterations) {
  const bool l1 = fp.opt.loss == CalibrationLoss::L1;
  TierFit cur;
  cur.bounds = std::move(bounds);
  cur.scales.assign(cur.bounds.size() + 1, 1.0);
  cur.u = toU(fp.opt.initial);
  TierFit best = cur;
  best.residual = residualOf(fp, cur.u, cur.tiers(), !l1);
  int it = 1;
  for (; it <= maxIterations; ++it) {
    Models models(fromU(cur.u), fp.opt.rankKind, cur.tiers());
    std::vector<Vec> A, raw;
    std::vector<double> y, weight;
    for (std::size_t i : fp.train) {
      const CalibrationSample& s = fp.samples[i];
      const Estimate est = estimateOf(models, s);
      const Vec c = coefficients(est.terms);
      const double scale = cur.scales[cur.tierOf(fp.workingSet[i])];
      double w = 1.0 / s.timeUs;  // relative error
      if (l1) {
        // Iteratively reweighted least squares: weighting each squared residual by 1/|r| minimises sum |r|, so a
        // few disturbed measurements (preempted threads) pull the fit far less than under squares.
        w /= std::sqrt(std::max(std::abs(est.terms.us / s.timeUs - 1), kL1Floor));
      }
      double fixedPart = 0;
      Vec row{};
      for (int j = 0; j < kParams; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        const double cj = tierScaled(j) ? c[jj] / scale : c[jj];
        if (std::find(fp.free.begin(), fp.free.end(), j) != fp.free.end())
          row[jj] = cj * w;
        else
          fixedPart += cj * cur.u[jj];
      }
      A.push_back(row);
      y.push_back((s.timeUs - fixedPart) * w);
      raw.push_back(c);
      weight.push_back(w);
    }
    Vec next = nnls(A, y, fp.free);
    for (int j = 0; j < kParams; ++j) {
      if (std::find(fp.free.begin(), fp.free.end(), j) == fp.free.end())
        next[static_cast<std::size_t>(j)] = cur.u[static_cast<std::size_t>(j)];
    }
    // Each tier's scale given u: t ~ a + b / scale, a = the unscaled terms, b = the scaled ones at tier 0's rates.
    std::vector<double> num(cur.scales.size(), 0.0), den(cur.scales.size(), 0.0);
    for (std::size_t r = 0; r < fp.train.size(); ++r) {
      const std::size_t i = fp.train[r];
      double a = 0, b = 0;
      for (int j = 0; j < kParams; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        (tierScaled(j) ? b : a) += raw[r][jj] * next[jj];
      }
      const std::size_t k = cur.tierOf(fp.workingSet[i]);
      const double w2 = weight[r] * weight[r];
      num[k] += w2 * b * (fp.samples[i].timeUs - a);
      den[k] += w2 * b * b;
    }
    std::vector<double> scales = cur.scales;
    for (std::size_t k = 1; k < scales.size(); ++k) {
      if (den[k] > 0 && num[k] > 0) scales[k] = std::clamp(den[k] / num[k], kMinTierScale, kMaxTierScale);
    }
    double change = 0;
    for (int j = 0; j < kParams; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      const double m = std::max(std::abs(cur.u[jj]), std::abs(next[jj]));
      if (m > 0) change = std::max(change, std::abs(next[jj] - cur.u[jj]) / m);
    }
    for (std::size_t k = 0; k < scales.size(); ++k) {
      change = std::max(change, std::abs(scales[k] - cur.scales[k]) / std::max(scales[k], cur.scales[k]));
    }
    cur.u = next;
    cur.scales = std::move(scales);
    cur.residual = residualOf(fp, cur.u, cur.tiers(), !l1);
    if (cur.residual < best.residual) best = cur;
    if (change < kConvergedRelChange) break;
  }
  best.iterations = std::min(it, maxIterations);
  return best;
}

/// Every choice of `cuts` bounds among `candidates` (candidate j lies between distinct working sets j and j+1 of
/// `sizes`) that leaves each tier at least kCalibrateMinSizesPerTier sizes.
void tierBounds(std::size_t sizes, int cuts, std::size_t from, std::vector<std::size_t>& chosen,
                std::vector<std::vector<std::size_t>>& out) {
  const auto minSizes = static_cast<std::size_t>(kCalibrateMinSizesPerTier);
  if (cuts == 0) {
    const std::size_t first = chosen.empty() ? 0 : chosen.back() + 1;
    if (sizes - first >= minSizes) out.push_back(chosen);
    return;
  }
  for (std::size_t j = from; j + 1 < sizes; ++j) {
    const std::size_t first = chosen.empty() ? 0 : chosen.back() + 1;
    if (j + 1 - first < minSizes) continue;
    chosen.push_back(j);
    tierBounds(sizes, cuts - 1, j + 1, chosen, out);
    chosen.pop_back();
  }
}

}  // namespace

CalibrationResult calibrate(const std::vector<CalibrationSample>& all, const CalibrationOptions& opt) {
  if (opt.holdOutEvery < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("hold-out: every k-th size needs k >= 2, or 0 for none (got {})", opt.holdOutEvery));
  }
  if (opt.memoryTiers < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("memory tiers: need 1 or more, or 0 to choose (got {})", opt.memoryTiers));
  }
  CalibrationResult res;
  std::vector<CalibrationSample> samples;
  for (const CalibrationSample& s : all) {
    if (!(s.timeUs > 0) || s.bytes == 0 || countOf(s) == 0) continue;  // nothing to fit (empty or zero-time rows)
    if (!scheduleAlgorithm(s.collective, s.algorithm)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{}: algorithm '{}' has no cost model (a peer library's own call or unknown); record the "
                              "run with a collbench algorithm",
                              printable(s.origin), printable(s.algorithm)));
    }
    if (s.hosts < 1 || s.nranks % s.hosts != 0) {
      throw Error(Errc::InvalidArgument, fmt::format("{}: {} ranks do not split evenly over {} hosts",
                                                     printable(s.origin), s.nranks, s.hosts));
    }
    samples.push_back(s);
  }
  if (samples.empty()) throw Error(Errc::InvalidArgument, "no usable samples (need rows with bytes > 0 and time > 0)");

  // Hold-out: every k-th distinct size of each series, never its largest (the fit then interpolates).
  std::vector<bool> held(samples.size(), false);
  if (opt.holdOutEvery >= 2) {
    using Key = std::tuple<int, std::string, int, int, std::size_t, int, int>;
    std::map<Key, std::set<std::size_t>> sizes;
    auto key = [](const CalibrationSample& s) {
      return Key{static_cast<int>(s.collective), s.algorithm, s.nranks, s.hosts, s.chunkBytes, s.channels,
                 static_cast<int>(s.dtype)};
    };
    for (const auto& s : samples) sizes[key(s)].insert(s.bytes);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const auto& set = sizes[key(samples[i])];
      const auto idx = static_cast<std::size_t>(std::distance(set.begin(), set.find(samples[i].bytes)));
      held[i] = idx % static_cast<std::size_t>(opt.holdOutEvery) == static_cast<std::size_t>(opt.holdOutEvery - 1) &&
                idx + 1 < set.size();
    }
  }
  std::vector<std::size_t> train;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!held[i]) train.push_back(i);
  }

  // Which parameters the training samples depend on (coefficients are structural: zero or not at any p), and every
  // sample's working set.
  std::vector<std::size_t> workingSet(samples.size());
  {
    Models models(opt.initial, opt.rankKind);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const CalibrationSample& s = samples[i];
      workingSet[i] = hostWorkingSetBytes(models.at(s.hosts, s.nranks / s.hosts).topology(),
                                          CollectiveSpec{s.collective, s.nranks, countOf(s), s.dtype});
    }
    std::vector<Vec> rows;
    for (std::size_t i : train) {
      Vec c = coefficients(estimateOf(models, samples[i]).terms);
      for (int j = 0; j < kParams; ++j) res.identified[j] = res.identified[j] || c[static_cast<std::size_t>(j)] > 0;
      for (double& x : c) x /= samples[i].timeUs;
      rows.push_back(c);
    }
    // The per-call overhead is a constant per sample: with one algorithm at one rank count every latency term is
    // constant too, and the split between them is arbitrary. Fit it only when it adds a direction of its own.
    std::vector<int> others;
    for (int j = 0; j < kOverhead; ++j) {
      if (res.identified[j]) others.push_back(j);
    }
    std::vector<int> with = others;
    with.push_back(kOverhead);
    res.identified[kOverhead] = res.identified[kOverhead] && columnRank(rows, with) > columnRank(rows, others);
    std::vector<int> identified = others;
    if (res.identified[kOverhead]) identified.push_back(kOverhead);
    if (const int rank = columnRank(rows, identified); rank < static_cast<int>(identified.size())) {
      // E.g. one algorithm at one rank count: every sample moves beta and gamma bytes in the same ratio.
      std::string names;
      for (int j : identified) names += fmt::format("{}{}", names.empty() ? "" : ", ", kParamNames[j]);
      res.notes.push_back(
          fmt::format("the samples determine only {} combinations of {}: the split between them is "
                      "arbitrary (time other algorithms or rank counts to separate them)",
                      rank, names));
    }
  }
  std::vector<int> free;
  for (int j = 0; j < kParams; ++j) {
    if (res.identified[j]) free.push_back(j);
  }
  const FitProblem fp{samples, train, workingSet, free, opt};

  // Tier bounds lie between neighbouring distinct training working sets (at their geometric midpoint).
  std::vector<std::size_t> sizes;
  for (std::size_t i : train) sizes.push_back(workingSet[i]);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  auto boundAt = [&](std::size_t j) {
    const double mid = std::sqrt(static_cast<double>(sizes[j]) * static_cast<double>(sizes[j + 1]));
    return std::clamp(static_cast<std::size_t>(mid), sizes[j], sizes[j + 1] - 1);
  };
  const int maxTiers = opt.memoryTiers > 0 ? opt.memoryTiers : kCalibrateMaxMemoryTiers;
  const int minTiers = opt.memoryTiers > 0 ? opt.memoryTiers : 1;
  if (minTiers > 1 && sizes.size() < static_cast<std::size_t>(minTiers) * kCalibrateMinSizesPerTier) {
    throw Error(Errc::InvalidArgument,
                fmt::format("memory tiers: {} tiers need {} distinct training sizes ({} each), the samples have {}",
                            minTiers, minTiers * kCalibrateMinSizesPerTier, kCalibrateMinSizesPerTier, sizes.size()));
  }
  const double n = static_cast<double>(train.size());
  TierFit chosen;
  double chosenBic = std::numeric_limits<double>::infinity();
  std::string bicNote;
  for (int k = minTiers; k <= maxTiers; ++k) {
    std::vector<std::vector<std::size_t>> cuts;
    std::vector<std::size_t> scratch;
    if (k == 1) {
      cuts.emplace_back();  // one tier: no bounds, whatever the sizes
    } else {
      tierBounds(sizes.size(), k - 1, 0, scratch, cuts);
    }
    if (cuts.empty()) break;  // too few sizes for k tiers
    TierFit best;
    for (const auto& c : cuts) {
      std::vector<std::size_t> bounds;
      for (std::size_t j : c) bounds.push_back(boundAt(j));
      TierFit f = fitTiers(fp, bounds, cuts.size() == 1 ? opt.maxIterations : kTierSearchIterations);
      if (f.residual < best.residual) best = std::move(f);
    }
    if (cuts.size() > 1) best = fitTiers(fp, best.bounds, opt.maxIterations);
    const double rss = residualOf(fp, best.u, best.tiers(), true);
    const double params = static_cast<double>(free.size()) + 2.0 * (k - 1);
    const double bic = n * std::log(std::max(rss / n, kBicErrorFloor * kBicErrorFloor)) + params * std::log(n);
    bicNote += fmt::format("{}{} tier(s) {:.1f}", bicNote.empty() ? "" : ", ", k, bic);
    if (bic < chosenBic) {
      chosenBic = bic;
      chosen = std::move(best);
    }
  }
  res.iterations = chosen.iterations;
  res.params = fromU(chosen.u);
  res.memoryTiers = chosen.tiers();
  if (opt.memoryTiers == 0) {
    res.notes.push_back(fmt::format("memory tiers: {} chosen by BIC ({}; lowest wins)", chosen.scales.size(), bicNote));
  }
  for (int j = 0; j < kParams; ++j) {
    if (!res.identified[j]) {
      res.notes.push_back(
          fmt::format("{} is not identified by these samples: kept at its initial value", kParamNames[j]));
    } else if (chosen.u[static_cast<std::size_t>(j)] == 0) {
      if (j == 2 || j == 3) res.unboundedBandwidths.push_back(kParamNames[j]);
      res.notes.push_back(
          fmt::format("{} fitted to 0 (no measurable cost{})", kParamNames[j],
                      j == 2 || j == 3 ? fmt::format(": written as {} GB/s", kCalibrateUnboundedGBps) : ""));
    }
  }

  // Predictions with the final parameters, by the cost model of the topology written (tiers included).
  Models models(res.params, opt.rankKind, res.memoryTiers);
  std::vector<double> fitErr, heldErr;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    SampleFit f;
    f.sample = samples[i];
    f.heldOut = held[i];
    f.predictedUs = estimateOf(models, samples[i]).terms.us;
    f.relError = f.predictedUs / samples[i].timeUs - 1;
    (held[i] ? heldErr : fitErr).push_back(std::abs(f.relError));
    res.fits.push_back(std::move(f));
  }
  res.fitMedian = median(fitErr);
  res.fitWorst = fitErr.empty() ? 0 : *std::max_element(fitErr.begin(), fitErr.end());
  res.heldOutMedian = median(heldErr);
  res.heldOutWorst = heldErr.empty() ? 0 : *std::max_element(heldErr.begin(), heldErr.end());
  res.heldOutCount = static_cast<int>(heldErr.size());

  int hosts = 1, perHost = 1;
  for (const auto& s : samples) {
    hosts = std::max(hosts, s.hosts);
    perHost = std::max(perHost, s.nranks / s.hosts);
  }
  CalibrationParams written = res.params;
  if (hosts > 1 && perHost > 1 && !(written.inter.alphaUs > written.intra.alphaUs)) {
    written.inter.alphaUs = written.intra.alphaUs * (1 + 1e-6) + 1e-6;
    res.notes.push_back(
        "inter latency fitted at or below intra latency: written just above it so that routes inside "
        "a host stay there");
  }
  res.topology =
      classTopology(opt.topologyName, hosts, perHost, written.intra, written.inter, written.gammaGBps, opt.rankKind);
  res.topology.memoryTiers = res.memoryTiers;
  validateTopology(res.topology, opt.topologyName);
  std::string tiersText;
  for (const MemoryTier& m : res.memoryTiers) {
    tiersText +=
        fmt::format("{}{} x{:.4g}", tiersText.empty() ? "; memory tiers (working set per host): " : ", ",
                    m.maxWorkingSetBytes ? fmt::format("<= {} B", m.maxWorkingSetBytes) : "above", m.bandwidthScale);
  }
  res.topology.description = fmt::format(
      "calibrated by collbench from {} samples ({} held out): {}{}; fitted call overhead {} us per call (not part of "
      "the topology: add it to simulated times)",
      samples.size(), res.heldOutCount, res.topology.description, tiersText, res.params.callOverheadUs);
  return res;
}

CalibrationRecord toRecord(const CalibrationResult& r) {
  CalibrationRecord rec;
  rec.topologyFingerprint = fingerprint(r.topology);
  const CalibrationParams& p = r.params;
  rec.intraAlphaUs = p.intra.alphaUs;
  rec.intraBetaGBps = p.intra.betaGBps;
  rec.interAlphaUs = p.inter.alphaUs;
  rec.interBetaGBps = p.inter.betaGBps;
  rec.gammaGBps = p.gammaGBps;
  rec.callOverheadUs = p.callOverheadUs;
  for (const MemoryTier& m : r.memoryTiers) {
    rec.memoryTiers.push_back(
        {m.maxWorkingSetBytes ? std::optional<std::size_t>(m.maxWorkingSetBytes) : std::nullopt, m.bandwidthScale});
  }
  std::copy(std::begin(r.identified), std::end(r.identified), std::begin(rec.identified));
  rec.fitMedian = r.fitMedian;
  rec.fitWorst = r.fitWorst;
  rec.heldOut.count = static_cast<std::size_t>(r.heldOutCount);
  if (r.heldOutCount > 0) {
    rec.heldOut.median = r.heldOutMedian;
    rec.heldOut.worst = r.heldOutWorst;
  }
  rec.notes = r.notes;
  for (const SampleFit& f : r.fits) {
    rec.samples.push_back({std::string(toString(f.sample.collective)), f.sample.algorithm, f.sample.origin,
                           f.sample.nranks, f.sample.hosts, f.sample.bytes, f.sample.timeUs, f.predictedUs,
                           std::nullopt, f.heldOut});
  }
  return rec;
}

std::vector<CalibrationSample> readCalibrationSamples(const CalibrationInput& in) {
  std::vector<CalibrationSample> samples;
  for (const std::string& file : in.files) {
    const std::string text = readTextFile(file, "calibration input");
    const auto first = text.find_first_not_of(" \t\r\n");
    const std::vector<CalibrationSample> got =
        first != std::string::npos && text[first] == '{'
            ? samplesFromPerfJson(text, file, in.hosts)
            : samplesFromNcclTestsLog(parseNcclTestsLog(text, file), file, in.assumeAlgorithm, in.collective);
    samples.insert(samples.end(), got.begin(), got.end());
  }
  std::erase_if(samples, [&](const CalibrationSample& s) {
    return s.bytes < in.minBytes || (in.maxBytes > 0 && s.bytes > in.maxBytes);
  });
  if (in.keepAll) return samples;
  std::map<std::tuple<int, std::string, int, int, std::size_t, int, std::size_t, int>, std::size_t> best;
  std::vector<CalibrationSample> kept;
  for (const CalibrationSample& s : samples) {
    const auto key = std::make_tuple(static_cast<int>(s.collective), s.algorithm, s.nranks, s.hosts, s.bytes,
                                     static_cast<int>(s.dtype), s.chunkBytes, s.channels);
    auto it = best.find(key);
    if (it == best.end()) {
      best.emplace(key, kept.size());
      kept.push_back(s);
    } else if (s.timeUs < kept[it->second].timeUs) {
      kept[it->second] = s;
    }
  }
  return kept;
}

std::vector<double> simulateCalibration(const CalibrationResult& r, const std::string& topologyFile) {
  std::string simulator;  // the first simulated backend linked in
  for (const auto& [name, summary] : backendNames()) {
    if (simulator.empty() && backendCapabilities(name).device == DeviceKind::Simulated) simulator = name;
  }
  if (simulator.empty()) throw Error(Errc::Unsupported, "--verify-sim: this collbench was built without the simulator");
  std::map<int, std::unique_ptr<Backend>> sims;
  std::vector<double> simUs;
  for (const SampleFit& f : r.fits) {
    const CalibrationSample& s = f.sample;
    auto& b = sims[s.nranks];
    if (!b) b = makeBackend(simulator, s.nranks, {{"topology", topologyFile}});
    const CollectiveSpec spec{s.collective, s.nranks, countForBytes(s.collective, s.nranks, s.bytes, s.dtype), s.dtype};
    const AlgoParams p{s.chunkBytes, s.channels, rankHosts(r.topology, s.nranks)};
    const Buffers none(static_cast<std::size_t>(s.nranks));
    simUs.push_back(b->run(buildSchedule(spec, s.algorithm, p), none, RunOptions{}).seconds * 1e6 +
                    r.params.callOverheadUs);
  }
  return simUs;
}

void addSimulated(CalibrationRecord& rec, const CalibrationResult& r, const std::vector<double>& simUs) {
  std::vector<double> held;
  for (std::size_t i = 0; i < simUs.size() && i < rec.samples.size(); ++i) {
    rec.samples[i].simUs = simUs[i];
    if (r.fits[i].heldOut) held.push_back(simUs[i] / r.fits[i].sample.timeUs - 1);
  }
  if (!held.empty()) {
    const ErrorStats e = errorStats(held);
    rec.simHeldOut = CalibrationErrors{e.median, e.worst, e.rows};
  }
}

}  // namespace collbench
