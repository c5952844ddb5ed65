// `collbench calibrate --model nccl`: the bounded fit of the NCCL time model's open parameters and its
// identifiability check (nccl_calibration.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "collbench/error.h"
#include "collbench/nccl_calibration.h"

namespace collbench {

namespace {

constexpr const char* kParamNames[kNcclParamCount] = {
    "ll128_rate",           "ll_rate",      "nvlink_fraction",  "nvls_fraction",   "nvls_tree_fraction",
    "nvls_pipeline_depth",  "net_fraction", "net_hop_extra_us", "launch_extra_us", "net_channel_us",
    "p2p_read_fill_slices", "net_read_us"};

/// Central-difference step of the Jacobian, in units of a parameter's bound range: wide enough to see through the
/// kinks of min() bottlenecks at one size, small against the range.
constexpr double kJacobianStep = 0.01;
/// Levenberg-Marquardt damping: start, growth on a rejected step, shrink on an accepted one, give-up ceiling.
constexpr double kLambdaStart = 1e-3, kLambdaUp = 4, kLambdaDown = 3, kLambdaMax = 1e8;
/// A step smaller than this (scaled coordinates) ends the fit.
constexpr double kMinStep = 1e-7;
/// L1 by iteratively reweighted least squares: weight 1 / max(|r|, floor), the floor keeping exact rows finite.
constexpr double kL1WeightFloor = 1e-3;
/// Identifiability is re-checked at the fit this many times at most (a parameter that goes flat there is reset).
constexpr int kMaxIdentifyRounds = 3;
/// A fitted value this close to a bound (scaled coordinates) is reported as at that bound.
constexpr double kAtBoundTol = 1e-4;

int idx(NcclParam p) { return static_cast<int>(p); }

bool isEfficiency(NcclParam p) {
  return p == NcclParam::NvlinkFraction || p == NcclParam::NvlsFraction || p == NcclParam::NvlsTreeFraction ||
         p == NcclParam::NetFraction;
}

/// One row to fit: the call and its measured time.
struct Sample {
  Collective collective = Collective::AllReduce;
  int ranks = 0;
  std::size_t bytes = 0;
  double measuredUs = 0;
  std::size_t log = 0;  ///< index into the logs (its environment and system)
  bool heldOut = false;
  NcclCalibrationRow row;
};

struct Problem {
  std::vector<NcclSystem> systems;  ///< per log: the topology's system at the log's rank count
  std::vector<NcclEnv> envs;        ///< per log
  std::vector<Sample> samples;
  GpuArch arch = GpuArch::Hopper;
  NicKind nic = NicKind::InfiniBand;
  std::array<double, kNcclParamCount> prior{};
  std::array<NcclParamBounds, kNcclParamCount> bounds{};

  /// Parameter values of scaled coordinates x (x[k] in [0, 1] across bounds[k]).
  NcclModelParams params(const std::array<double, kNcclParamCount>& x) const {
    NcclModelParams m;
    for (NcclParam p : kNcclParams) {
      const NcclParamBounds& b = bounds[static_cast<std::size_t>(idx(p))];
      ncclParamRef(m, p, arch, nic) = b.lower + x[static_cast<std::size_t>(idx(p))] * (b.upper - b.lower);
    }
    return m;
  }
  std::array<double, kNcclParamCount> scaled(const std::array<double, kNcclParamCount>& values) const {
    std::array<double, kNcclParamCount> x{};
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double w = bounds[k].upper - bounds[k].lower;
      x[k] = w > 0 ? (values[k] - bounds[k].lower) / w : 0;
    }
    return x;
  }
  double predictUs(const Sample& s, const NcclModelParams& m) const {
    NcclSystem sys = systems[s.log];
    sys.model = m;
    return ncclChoose(sys, s.collective, s.bytes, s.ranks, envs[s.log]).predictedUs;
  }
  /// log(predicted / measured) of every fitted (not held-out) sample.
  std::vector<double> residuals(const std::array<double, kNcclParamCount>& x) const {
    const NcclModelParams m = params(x);
    std::vector<double> r;
    for (const Sample& s : samples) {
      if (!s.heldOut) r.push_back(std::log(predictUs(s, m) / s.measuredUs));
    }
    return r;
  }
};

double lossOf(const std::vector<double>& r, CalibrationLoss loss) {
  double sum = 0;
  for (double v : r) sum += loss == CalibrationLoss::L1 ? std::abs(v) : v * v;
  return sum;
}

/// Columns of d residual / d x for the parameters in `which` (central differences, one-sided at a bound).
std::vector<std::vector<double>> jacobian(const Problem& pr, const std::array<double, kNcclParamCount>& x,
                                          const std::vector<int>& which) {
  std::vector<std::vector<double>> cols;
  for (int k : which) {
    auto lo = x, hi = x;
    const auto uk = static_cast<std::size_t>(k);
    hi[uk] = std::min(1.0, x[uk] + kJacobianStep);
    lo[uk] = std::max(0.0, x[uk] - kJacobianStep);
    const std::vector<double> rh = pr.residuals(hi), rl = pr.residuals(lo);
    std::vector<double> col(rh.size());
    for (std::size_t i = 0; i < col.size(); ++i) col[i] = (rh[i] - rl[i]) / (hi[uk] - lo[uk]);
    cols.push_back(std::move(col));
  }
  return cols;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Solves the k x k system a y = b by Gaussian elimination with partial pivoting; false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& y) {
  const std::size_t n = b.size();
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < n; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    }
    if (!(std::abs(a[piv][c]) > 0)) return false;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (std::size_t j = c; j < n; ++j) a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  y.assign(n, 0);
  for (std::size_t c = n; c-- > 0;) {
    double s = b[c];
    for (std::size_t j = c + 1; j < n; ++j) s -= a[c][j] * y[j];
    y[c] = s / a[c][c];
  }
  return true;
}

/// Decides which of `candidates` the samples identify at x (Gram-Schmidt over the Jacobian columns in NcclParam
/// order); writes the reason of every rejected one into `why`.
std::vector<int> identify(const Problem& pr, const std::array<double, kNcclParamCount>& x,
                          const std::vector<int>& candidates, std::array<std::string, kNcclParamCount>& why) {
  const std::vector<std::vector<double>> cols = jacobian(pr, x, candidates);
  std::vector<int> kept;
  std::vector<std::vector<double>> basis;  // orthonormal
  std::vector<std::size_t> keptCol;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const int k = candidates[c];
    const std::vector<double>& col = cols[c];
    const double norm = std::sqrt(dot(col, col));
    const double rms = col.empty() ? 0 : norm / std::sqrt(static_cast<double>(col.size()));
    if (rms < kNcclFlatRms) {
      why[static_cast<std::size_t>(k)] = "no row depends on it";
      continue;
    }
    const auto support =
        std::count_if(col.begin(), col.end(), [](double d) { return std::abs(d) >= kNcclSupportShift; });
    if (support < kNcclMinSupportRows) {
      why[static_cast<std::size_t>(k)] =
          fmt::format("only {} row{} depend{} on it, {} needed", support, support == 1 ? "" : "s",
                      support == 1 ? "s" : "", kNcclMinSupportRows);
      continue;
    }
    std::vector<double> v = col;
    for (const std::vector<double>& q : basis) {
      const double d = dot(v, q);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] -= d * q[i];
    }
    const double rest = std::sqrt(dot(v, v));
    if (rest < kNcclSeparableTol * norm) {
      // Name the kept parameter its column is most alike.
      double best = -1;
      int like = kept.front();
      for (std::size_t j = 0; j < kept.size(); ++j) {
        const std::vector<double>& o = cols[keptCol[j]];
        const double cosine = std::abs(dot(col, o)) / (norm * std::sqrt(dot(o, o)));
        if (cosine > best) {
          best = cosine;
          like = kept[j];
        }
      }
      why[static_cast<std::size_t>(k)] =
          fmt::format("the rows cannot separate it from {} (|cos| {:.4f})", kParamNames[like], best);
      continue;
    }
    for (double& e : v) e /= rest;
    basis.push_back(std::move(v));
    kept.push_back(k);
    keptCol.push_back(c);
  }
  return kept;
}

/// Levenberg-Marquardt over the free parameters, projected onto [0, 1]; returns the iterations taken.
int minimise(const Problem& pr, std::array<double, kNcclParamCount>& x, const std::vector<int>& free,
             CalibrationLoss loss, int maxIterations) {
  if (free.empty()) return 0;
  const std::size_t n = free.size();
  std::vector<double> r = pr.residuals(x);
  double cost = lossOf(r, loss);
  double lambda = kLambdaStart;
  int it = 0;
  for (; it < maxIterations && lambda < kLambdaMax; ++it) {
    const std::vector<std::vector<double>> cols = jacobian(pr, x, free);
    std::vector<double> w(r.size(), 1.0);
    if (loss == CalibrationLoss::L1) {
      for (std::size_t i = 0; i < r.size(); ++i) w[i] = 1 / std::max(std::abs(r[i]), kL1WeightFloor);
    }
    std::vector<std::vector<double>> jtj(n, std::vector<double>(n, 0));
    std::vector<double> jtr(n, 0);
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t i = 0; i < r.size(); ++i) jtr[a] -= w[i] * cols[a][i] * r[i];
      for (std::size_t b = 0; b < n; ++b) {
        for (std::size_t i = 0; i < r.size(); ++i) jtj[a][b] += w[i] * cols[a][i] * cols[b][i];
      }
    }
    bool accepted = false;
    double stepNorm = 0;
    while (!accepted && lambda < kLambdaMax) {
      auto damped = jtj;
      for (std::size_t a = 0; a < n; ++a) damped[a][a] += lambda * (jtj[a][a] + 1);
      std::vector<double> step;
      if (!solve(damped, jtr, step)) {
        lambda *= kLambdaUp;
        continue;
      }
      auto trial = x;
      stepNorm = 0;
      for (std::size_t a = 0; a < n; ++a) {
        const auto k = static_cast<std::size_t>(free[a]);
        trial[k] = std::clamp(x[k] + step[a], 0.0, 1.0);
        stepNorm = std::max(stepNorm, std::abs(trial[k] - x[k]));
      }
      const std::vector<double> rt = pr.residuals(trial);
      const double ct = lossOf(rt, loss);
      if (ct < cost) {
        x = trial;
        r = rt;
        cost = ct;
        lambda = std::max(lambda / kLambdaDown, 1e-12);
        accepted = true;
      } else {
        lambda *= kLambdaUp;
      }
    }
    if (!accepted || stepNorm < kMinStep) break;
  }
  return it;
}

CalibrationErrors errorsOf(const std::vector<double>& rel) {
  if (rel.empty()) return {};
  const ErrorStats s = errorStats(rel);
  return {s.median, s.worst, s.rows};
}

std::string choiceText(const NcclChoice& c) {
  return fmt::format("{}/{} x{}", toString(c.algorithm), toString(c.protocol), c.channels);
}

}  // namespace

std::string_view toString(NcclParam p) { return kParamNames[idx(p)]; }

NcclParam parseNcclParam(std::string_view s) {
  for (NcclParam p : kNcclParams) {
    if (s == kParamNames[idx(p)]) return p;
  }
  throw Error(
      Errc::InvalidArgument,
      fmt::format(
          "unknown NCCL model parameter '{}' (available: ll128_rate, ll_rate, nvlink_fraction, nvls_fraction, "
          "nvls_tree_fraction, nvls_pipeline_depth, net_fraction, net_hop_extra_us, launch_extra_us, net_channel_us, "
          "p2p_read_fill_slices, net_read_us)",
          printable(s)));
}

double& ncclParamRef(NcclModelParams& m, NcclParam p, GpuArch arch, NicKind nic) {
  const auto a = static_cast<std::size_t>(arch), n = static_cast<std::size_t>(nic);
  switch (p) {
    case NcclParam::Ll128Rate:
      return m.protocolRate[a][static_cast<std::size_t>(NcclProtocol::LL128)];
    case NcclParam::LlRate:
      return m.protocolRate[a][static_cast<std::size_t>(NcclProtocol::LL)];
    case NcclParam::NvlinkFraction:
      return m.nvlinkFraction[a];
    case NcclParam::NvlsFraction:
      return m.nvlsFraction;
    case NcclParam::NvlsTreeFraction:
      return m.nvlsTreeFraction;
    case NcclParam::NvlsPipelineDepth:
      return m.nvlsPipelineDepth;
    case NcclParam::LaunchExtraUs:
      return m.launchExtraUs[a];
    case NcclParam::NetFraction:
      return m.netFraction[n];
    case NcclParam::NetHopExtraUs:
      return m.netHopExtraUs[n];
    case NcclParam::NetChannelUs:
      return m.netChannelUs[n];
    case NcclParam::P2pReadFillSlices:
      return m.p2pReadFillSlices[a];
    case NcclParam::NetReadUs:
      return m.netReadUs[n];
  }
  throw Error(Errc::InvalidArgument, "unknown NCCL model parameter");
}

double ncclParamOf(const NcclModelParams& m, NcclParam p, GpuArch arch, NicKind nic) {
  NcclModelParams copy = m;
  return ncclParamRef(copy, p, arch, nic);
}

NcclParamBounds ncclParamBounds(NcclParam p, double prior) {
  if (isEfficiency(p)) return {kNcclMinEfficiency, 1.0};
  if (prior > 0) return {kNcclPriorLow * prior, kNcclPriorHigh * prior};
  const double ref = p == NcclParam::LaunchExtraUs       ? kNcclLaunchRefUs
                     : p == NcclParam::P2pReadFillSlices ? kNcclFillRefSlices
                                                         : kNcclHopRefUs;
  return {0.0, kNcclPriorHigh * ref};
}

namespace {

/// The system one log ran on: the topology's first `ranks` ranks, each call launched as the log says (nccl-tests -g).
NcclSystem systemOfLog(const Topology& topology, int ranks, const NcclCalibrationLog& log) {
  NcclSystem sys = ncclSystemOf(topology, ranks);
  sys.gpusPerThread = log.log.gpusPerThread();
  return sys;
}

/// The NCCL one log ran under: its variables, and its release where it states one.
NcclEnv envOfLog(const NcclCalibrationLog& log) {
  NcclEnv env;
  try {
    env = parseNcclEnv(log.envVars);
  } catch (const Error& e) {
    throw Error(Errc::InvalidArgument, fmt::format("{}: {}", printable(log.source), e.what()));
  }
  if (const int v = ncclVersionCode(log.log.ncclVersion); v > 0) env.version = v;
  return env;
}

}  // namespace

FidelityLog predictNcclLog(const Topology& topology, const NcclModelParams& params, const NcclCalibrationLog& log,
                           const NcclCalibrationOptions& options) {
  FidelityOptions fo;
  fo.ranks = options.ranks;
  fo.defaultCollective = options.defaultCollective;
  fo.topology = options.topology;
  fo.topologyFingerprint = fingerprint(topology);
  fo.algorithm = "nccl";
  const int ranks = fidelityRanks(log.log, log.source, options.ranks);
  if (ranks > static_cast<int>(topology.ranks.size())) {
    throw Error(Errc::InvalidArgument, fmt::format("{}: {} ranks, the topology '{}' has {}", printable(log.source),
                                                   ranks, printable(options.topology), topology.ranks.size()));
  }
  NcclSystem sys = systemOfLog(topology, ranks, log);
  sys.model = params;
  const NcclEnv env = envOfLog(log);
  return compareWithSimulation(log.log, log.source, fo, [&](const FidelityCall& call) {
    const NcclChoice c = ncclChoose(sys, call.collective, call.bytes, call.nranks, env);
    return SimulatedCall{c.predictedUs * 1e-6, choiceText(c)};
  });
}

NcclCalibration calibrateNccl(const Topology& topology, const std::vector<NcclCalibrationLog>& logs,
                              const NcclCalibrationOptions& options) {
  if (options.holdOutEvery < 0 || options.holdOutEvery == 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--holdout-every: {} is not a hold-out (k >= 2 holds out every k-th size, 0 none)",
                            options.holdOutEvery));
  }
  if (logs.empty()) throw Error(Errc::InvalidArgument, "calibrate --model nccl: no nccl-tests log given");
  Problem pr;
  NcclCalibration out;
  out.topology = options.topology;
  out.topologyFingerprint = fingerprint(topology);
  const NcclModelParams& defaults = options.prior;
  for (std::size_t li = 0; li < logs.size(); ++li) {
    // The prior's table of this log: the rows, their calls and NCCL's choices.
    const FidelityLog f = predictNcclLog(topology, defaults, logs[li], options);
    const NcclSystem sys = systemOfLog(topology, f.ranks, logs[li]);
    if (li == 0) {
      pr.arch = sys.arch;
      pr.nic = sys.nicKind;
      out.gpusPerNode = sys.gpusPerNode;
    }
    pr.systems.push_back(sys);
    pr.envs.push_back(envOfLog(logs[li]));
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      const FidelityRow& fr = f.rows[i];
      Sample s;
      s.collective = f.collective;
      s.ranks = f.ranks;
      s.bytes = fr.bytes;
      s.measuredUs = fr.measuredUs;
      s.log = li;
      s.heldOut = options.holdOutEvery >= 2 && i % static_cast<std::size_t>(options.holdOutEvery) ==
                                                   static_cast<std::size_t>(options.holdOutEvery - 1);
      s.row = {logs[li].source, fr.line,        f.ranks, sys.nodes,    fr.bytes,
               fr.measuredUs,   fr.simulatedUs, 0,       fr.algorithm, s.heldOut};
      pr.samples.push_back(std::move(s));
    }
  }
  out.arch = pr.arch;
  out.nicKind = pr.nic;
  std::array<double, kNcclParamCount> priorValues{};
  for (NcclParam p : kNcclParams) {
    const auto k = static_cast<std::size_t>(idx(p));
    priorValues[k] = ncclParamOf(defaults, p, pr.arch, pr.nic);
    pr.bounds[k] = ncclParamBounds(p, priorValues[k]);
  }
  pr.prior = priorValues;
  const std::array<double, kNcclParamCount> x0 = pr.scaled(priorValues);
  const std::size_t fitted = static_cast<std::size_t>(
      std::count_if(pr.samples.begin(), pr.samples.end(), [](const Sample& s) { return !s.heldOut; }));
  if (fitted == 0) throw Error(Errc::InvalidArgument, "calibrate --model nccl: every row is held out");

  // Identify at the prior, fit the identified parameters, re-check every parameter at the fit (one can go flat there,
  // e.g. a fraction raised until another link is the bottleneck, or come alive): fit again from the prior with the
  // new set, until it stands.
  std::array<std::string, kNcclParamCount> why{};
  std::vector<int> all;
  for (NcclParam p : kNcclParams) {
    // A network that writes into the receiver's posted buffers has no read to fit (NcclModelParams::netReadUs).
    if (p == NcclParam::NetReadUs && priorValues[static_cast<std::size_t>(idx(p))] == 0) {
      why[static_cast<std::size_t>(idx(p))] = "the network writes into posted buffers, it reads no message";
      continue;
    }
    all.push_back(idx(p));
  }
  std::vector<int> free = identify(pr, x0, all, why);
  std::array<double, kNcclParamCount> x = x0;
  for (int round = 1; !free.empty(); ++round) {
    x = x0;
    out.iterations += minimise(pr, x, free, options.loss, options.maxIterations);
    if (round == kMaxIdentifyRounds) break;
    const std::vector<int> still = identify(pr, x, all, why);
    if (still == free) break;
    free = still;
  }
  if (free.empty()) {
    std::string reasons;
    for (NcclParam p : kNcclParams) {
      reasons +=
          fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", toString(p), why[static_cast<std::size_t>(idx(p))]);
    }
    throw Error(Errc::InvalidArgument,
                fmt::format("calibrate --model nccl: the logs identify none of the NCCL model's open parameters ({}); "
                            "nothing written",
                            reasons));
  }

  const NcclModelParams fittedParams = pr.params(x);
  for (NcclParam p : kNcclParams) {
    const auto k = static_cast<std::size_t>(idx(p));
    NcclParamFit pf;
    pf.param = p;
    pf.prior = priorValues[k];
    pf.bounds = pr.bounds[k];
    pf.identified = std::find(free.begin(), free.end(), idx(p)) != free.end();
    pf.value = pf.identified ? ncclParamOf(fittedParams, p, pr.arch, pr.nic) : pf.prior;
    if (!pf.identified) {
      pf.note = fmt::format("not identified by these logs ({}): kept at prior {:.4g}", why[k], pf.prior);
    } else if ((x[k] <= kAtBoundTol && pf.bounds.lower > 0) || x[k] >= 1 - kAtBoundTol) {
      // A zero latency at its zero bound is an answer (no extra latency), not a limit.
      pf.note = fmt::format("at its {} bound {:.4g}: {}", x[k] <= kAtBoundTol ? "lower" : "upper",
                            x[k] <= kAtBoundTol ? pf.bounds.lower : pf.bounds.upper,
                            isEfficiency(p) ? "the logs ask for a rate outside what is physical (check the topology's "
                                              "line rates)"
                                            : "the logs ask for more than the bounds allow around the prior");
    }
    if (!pf.note.empty()) out.notes.push_back(fmt::format("{}: {}", toString(p), pf.note));
    // An efficiency at a bound is beyond line rate or below a third of it: not this system. A latency or depth at a
    // bound stays there (the bound is the answer's limit, the note says so).
    if (pf.identified && !pf.note.empty() && isEfficiency(p)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("calibrate --model nccl: degenerate fit, nothing written: {} {}; is '{}' the system the "
                              "logs ran on?",
                              toString(p), pf.note, printable(options.topology)));
    }
    out.params.push_back(std::move(pf));
  }
  std::vector<double> priorErr, fitErr, heldErr;
  for (const Sample& s : pr.samples) {
    NcclCalibrationRow row = s.row;
    row.fittedUs = pr.predictUs(s, fittedParams);
    (s.heldOut ? heldErr : fitErr).push_back(row.fittedUs / row.measuredUs - 1);
    if (!s.heldOut) priorErr.push_back(row.priorUs / row.measuredUs - 1);
    out.rows.push_back(std::move(row));
  }
  out.priorFit = errorsOf(priorErr);
  out.fit = errorsOf(fitErr);
  out.heldOut = errorsOf(heldErr);
  return out;
}

NcclModelParams ncclModelParams(const NcclCalibration& c) {
  NcclModelParams m;
  for (const NcclParamFit& p : c.params) ncclParamRef(m, p.param, c.arch, c.nicKind) = p.value;
  return m;
}

void applyNcclCalibration(const NcclCalibration& c, NcclSystem& sys, std::string_view source) {
  if (sys.arch != c.arch || sys.nicKind != c.nicKind) {
    throw Error(Errc::InvalidArgument,
                fmt::format("calibration '{}' is for {}/{} systems, the topology's are {}/{}", printable(source),
                            toString(c.arch), toString(c.nicKind), toString(sys.arch), toString(sys.nicKind)));
  }
  sys.model = ncclModelParams(c);
}

}  // namespace collbench
