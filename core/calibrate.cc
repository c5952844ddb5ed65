// Least-squares calibration of the cost model's per-class alpha, beta and gamma (calibrate.h).
#include "collbench/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "topology_internal.h"

namespace collbench {
namespace {

using nlohmann::json;

constexpr int kParams = 6;  // alpha_intra, alpha_inter, 1/beta_intra, 1/beta_inter, 1/gamma, overhead (u's order)
constexpr const char* kParamNames[kParams] = {"alpha_intra", "alpha_inter", "beta_intra",
                                              "beta_inter",  "gamma",       "call_overhead"};
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

[[noreturn]] void fail(const std::string& source, const std::string& path, const std::string& what,
                       const json* value = nullptr) {
  std::string msg = fmt::format("{}: {}: {}", printable(source), path, what);
  if (value) {
    std::string s = value->dump(-1, ' ', true, json::error_handler_t::replace);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    msg += fmt::format(" (got {})", s);
  }
  throw Error(Errc::InvalidArgument, msg);
}

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
  Models(const CalibrationParams& p, NodeKind kind) : p_(p), kind_(kind) {}
  const CostModel& at(int hosts, int perHost) {
    auto key = std::make_pair(hosts, perHost);
    auto it = models_.find(key);
    if (it == models_.end()) {
      LinkClassCost inter = p_.inter;
      // Routes inside a host must stay there: the topology needs inter latency above intra (a fit may tie them).
      if (hosts > 1 && perHost > 1 && !(inter.alphaUs > p_.intra.alphaUs))
        inter.alphaUs = p_.intra.alphaUs * (1 + 1e-6) + 1e-6;
      Topology t = classTopology("fit", hosts, perHost, p_.intra, inter, p_.gammaGBps, kind_);
      it = models_.emplace(key, std::make_unique<CostModel>(std::move(t), hosts * perHost, p_.callOverheadUs)).first;
    }
    return *it->second;
  }

 private:
  CalibrationParams p_;
  NodeKind kind_;
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
  json doc;
  try {
    doc = topo_detail::parseJsonText(text, source);
  } catch (const Error& e) {
    throw Error(Errc::InvalidArgument, e.what());
  }
  if (!doc.is_object()) fail(source, "<root>", "must be an object", &doc);
  const auto str = [&](const json& j, const char* key, const std::string& path) -> std::string {
    auto it = j.find(key);
    if (it == j.end()) fail(source, path + key, "missing");
    if (!it->is_string()) fail(source, path + key, "must be a string", &*it);
    return it->get<std::string>();
  };
  if (str(doc, "format", "") != "collbench-perf") fail(source, "format", "must be \"collbench-perf\"", &doc["format"]);
  if (!doc.contains("version") || doc["version"] != 1)
    fail(source, "version", "unsupported (this build reads 1)", doc.contains("version") ? &doc["version"] : nullptr);
  Collective coll = Collective::AllReduce;
  try {
    coll = parseCollective(str(doc, "collective", ""));
  } catch (const Error&) {
    fail(source, "collective", "unknown collective", &doc["collective"]);
  }
  const json cfg = doc.value("config", json::object());
  if (!cfg.is_object()) fail(source, "config", "must be an object", &doc["config"]);
  auto intField = [&](const json& j, const char* key, const std::string& path, long long fallback, long long lo) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<long long>() < lo) {
      fail(source, path + key, fmt::format("must be an integer >= {}", lo), &*it);
    }
    return it->get<long long>();
  };
  const int nranks = static_cast<int>(intField(cfg, "ranks", "config.", 0, 1));
  if (nranks == 0) fail(source, "config.ranks", "missing");
  const std::size_t cfgChunk = static_cast<std::size_t>(intField(cfg, "chunk_bytes", "config.", 0, 0));
  const int cfgChannels = static_cast<int>(intField(cfg, "channels", "config.", 1, 1));
  std::string topoName;
  if (auto t = cfg.find("topology"); t != cfg.end() && !t->is_null()) {
    if (!t->is_string()) fail(source, "config.topology", "must be a string", &*t);
    topoName = t->get<std::string>();
  }
  if (!topoName.empty()) {
    const std::vector<int> rh = rankHosts(loadTopology(topoName), nranks);
    std::map<int, int> perHost;
    for (int h : rh) ++perHost[h];
    hosts = static_cast<int>(perHost.size());
    for (const auto& [h, k] : perHost) {
      if (k != nranks / hosts) {
        fail(source, "config.topology", "ranks are not spread evenly over the topology's hosts", &cfg["topology"]);
      }
    }
  }
  if (hosts < 1 || nranks % hosts != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {} ranks do not split evenly over {} hosts", printable(source), nranks, hosts));
  }
  auto rit = doc.find("results");
  if (rit == doc.end() || !rit->is_array())
    fail(source, "results", "must be an array", rit == doc.end() ? nullptr : &*rit);
  std::vector<CalibrationSample> out;
  for (std::size_t i = 0; i < rit->size(); ++i) {
    const json& r = (*rit)[i];
    const std::string path = fmt::format("results[{}].", i);
    if (!r.is_object()) fail(source, path.substr(0, path.size() - 1), "must be an object", &r);
    CalibrationSample s;
    s.collective = coll;
    s.nranks = nranks;
    s.hosts = hosts;
    s.bytes = static_cast<std::size_t>(intField(r, "size", path, -1, 0));
    s.algorithm = str(r, "algorithm", path);
    // Read before the try: str()'s own "missing" error must not reach the catch, where r has no "type" to show.
    const std::string type = str(r, "type", path);
    try {
      s.dtype = parseDType(type);
    } catch (const Error&) {
      fail(source, path + "type", "unknown data type", &r.at("type"));
    }
    s.chunkBytes = static_cast<std::size_t>(intField(r, "chunk_bytes", path, static_cast<long long>(cfgChunk), 0));
    s.channels = static_cast<int>(intField(r, "channels", path, cfgChannels, 1));
    auto half = r.find("out_of_place");
    if (half == r.end() || !half->is_object()) fail(source, path + "out_of_place", "must be an object");
    auto t = half->find("time_us");
    if (t == half->end() || !t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() < 0) {
      fail(source, path + "out_of_place.time_us", "must be a finite number >= 0", t == half->end() ? nullptr : &*t);
    }
    s.timeUs = t->get<double>();
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
    out.push_back(std::move(s));
  }
  return out;
}

CalibrationResult calibrate(const std::vector<CalibrationSample>& all, const CalibrationOptions& opt) {
  if (opt.holdOutEvery < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("hold-out: every k-th size needs k >= 2, or 0 for none (got {})", opt.holdOutEvery));
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

  // Which parameters the training samples depend on (coefficients are structural: zero or not at any p).
  Vec u = toU(opt.initial);
  {
    Models models(opt.initial, opt.rankKind);
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
  }
  std::vector<int> free;
  for (int j = 0; j < kParams; ++j) {
    if (res.identified[j]) free.push_back(j);
  }

  auto residual = [&](const CalibrationParams& p) {
    Models models(p, opt.rankKind);
    double sum = 0;
    for (std::size_t i : train) {
      const double e = estimateOf(models, samples[i]).terms.us / samples[i].timeUs - 1;
      sum += opt.loss == CalibrationLoss::L1 ? std::abs(e) : e * e;
    }
    return sum;
  };
  Vec bestU = u;
  double bestRes = residual(fromU(u));
  for (res.iterations = 1; res.iterations <= opt.maxIterations; ++res.iterations) {
    Models models(fromU(u), opt.rankKind);
    std::vector<Vec> A;
    std::vector<double> y;
    for (std::size_t i : train) {
      const Estimate est = estimateOf(models, samples[i]);
      const Vec c = coefficients(est.terms);
      double w = 1.0 / samples[i].timeUs;  // relative error
      if (opt.loss == CalibrationLoss::L1) {
        // Iteratively reweighted least squares: weighting each squared residual by 1/|r| minimises sum |r|, so a
        // few disturbed measurements (preempted threads) pull the fit far less than under squares.
        const double r = std::abs(est.terms.us / samples[i].timeUs - 1);
        w /= std::sqrt(std::max(r, kL1Floor));
      }
      double fixedPart = 0;
      Vec row{};
      for (int j = 0; j < kParams; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        if (res.identified[j])
          row[jj] = c[jj] * w;
        else
          fixedPart += c[jj] * u[jj];
      }
      A.push_back(row);
      y.push_back((samples[i].timeUs - fixedPart) * w);
    }
    Vec next = nnls(A, y, free);
    for (int j = 0; j < kParams; ++j) {
      if (!res.identified[j]) next[static_cast<std::size_t>(j)] = u[static_cast<std::size_t>(j)];
    }
    const double r = residual(fromU(next));
    if (r < bestRes) {
      bestRes = r;
      bestU = next;
    }
    double change = 0;
    for (int j = 0; j < kParams; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      const double scale = std::max(std::abs(u[jj]), std::abs(next[jj]));
      if (scale > 0) change = std::max(change, std::abs(next[jj] - u[jj]) / scale);
    }
    u = next;
    if (change < kConvergedRelChange) break;
  }
  res.iterations = std::min(res.iterations, opt.maxIterations);
  res.params = fromU(bestU);
  for (int j = 0; j < kParams; ++j) {
    if (!res.identified[j]) {
      res.notes.push_back(
          fmt::format("{} is not identified by these samples: kept at its initial value", kParamNames[j]));
    } else if (bestU[static_cast<std::size_t>(j)] == 0) {
      res.notes.push_back(
          fmt::format("{} fitted to 0 (no measurable cost{})", kParamNames[j],
                      j == 2 || j == 3 ? fmt::format(": written as {} GB/s", kCalibrateUnboundedGBps) : ""));
    }
  }

  // Predictions with the final parameters.
  Models models(res.params, opt.rankKind);
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
  res.topology.description = fmt::format(
      "calibrated by collbench from {} samples ({} held out): {}; fitted call overhead {} us per call (not part of "
      "the topology: add it to simulated times)",
      samples.size(), res.heldOutCount, res.topology.description, res.params.callOverheadUs);
  return res;
}

}  // namespace collbench
