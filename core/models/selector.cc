// Algorithm choice: forced name, then tuning table (model-shaped interpolation), then cost model (selector.h).
#include "collbench/selector.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <memory>
#include <system_error>
#include <thread>

#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"

namespace collbench {
namespace {

constexpr const char* kAlgoEnv = "COLLBENCH_ALGO";

bool scheduleAlgorithm(Collective c, std::string_view name) {
  for (const auto& a : algorithms()) {
    if (a.collective == c && a.name == name && !a.native) return true;
  }
  return false;
}

bool anyCollectiveHas(std::string_view name) {
  for (const auto& a : algorithms()) {
    if (a.name == name) return true;
  }
  return false;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

/// The nccl-tests size of a spec (what tables are keyed by): the larger of the per-rank input and output.
std::size_t tableBytes(const CollectiveSpec& s) { return std::max(s.inputBytes(), s.outputBytes()); }

std::string describeAlt(const Alternative& a) {
  std::string s = a.algorithm;
  if (a.chunkBytes) s += fmt::format(" chunk {}", formatBytes(a.chunkBytes));
  if (a.channels != 1) s += fmt::format(" x{} channels", a.channels);
  return s;
}

std::string runnerUp(const std::vector<Alternative>& ranking) {
  if (ranking.size() < 2 || ranking[0].predictedUs < 0 || ranking[1].predictedUs < 0) return "";
  const double r = ranking[0].predictedUs > 0 ? ranking[1].predictedUs / ranking[0].predictedUs : 1;
  return fmt::format("; runner-up {} {:.3g} us (x{:.3f})", describeAlt(ranking[1]), ranking[1].predictedUs, r);
}

/// A GPU system: the topology's rank GPUs name their architecture (TopoNode::arch), so NCCL's model applies.
bool gpuSystem(const Topology& t) {
  if (t.ranks.empty()) return false;
  for (const TopoNode& n : t.nodes) {
    if (n.id == t.ranks.front()) return n.kind == NodeKind::Gpu && !n.arch.empty();
  }
  return false;
}

/// Backend `name` runs NCCL's own collective (the sim backend emulates it); "" (plan without --backend) counts as
/// the simulator, the default backend of a topology.
bool runsNccl(const std::string& name) {
  if (name.empty()) return true;
  const std::optional<BackendCapabilities> caps = findBackendCapabilities(name);
  if (!caps) return false;
  const auto& natives = caps->nativeAlgorithms;
  return std::find(natives.begin(), natives.end(), kNcclNativeAlgorithm) != natives.end();
}

}  // namespace

std::string forcedAlgorithm(std::string_view value, Collective c) {
  const std::string v = trim(value);
  if (v.empty() || v == "auto") return "";
  std::string forAll;
  std::size_t start = 0;
  while (start <= v.size()) {
    const std::size_t semi = v.find(';', start);
    const std::string item =
        trim(std::string_view(v).substr(start, semi == std::string::npos ? std::string::npos : semi - start));
    start = semi == std::string::npos ? v.size() + 1 : semi + 1;
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    std::string name = colon == std::string::npos ? item : trim(std::string_view(item).substr(colon + 1));
    if (name.empty() || !anyCollectiveHas(name)) {
      throw Error(Errc::InvalidArgument, fmt::format("algorithm '{}' in '{}' is not an algorithm of any collective",
                                                     printable(name), printable(v)));
    }
    if (colon == std::string::npos) {
      forAll = name;
      continue;
    }
    const Collective which = parseCollective(trim(std::string_view(item).substr(0, colon)));
    if (which == c) {
      findAlgorithm(c, name);  // a per-collective entry must name one of that collective's algorithms
      return name;
    }
  }
  for (const auto& a : algorithms()) {
    if (!forAll.empty() && a.collective == c && a.name == forAll) return forAll;
  }
  return "";  // the plain name is another collective's algorithm: this one is not forced
}

struct Selector::NcclState {
  std::map<int, NcclSystem> systems;  ///< by rank count
  NcclEnv env = ncclEnvFromProcess();
};

Selector::Selector(SelectorOptions options) : opt_(std::move(options)) {}
Selector::~Selector() = default;

std::optional<Alternative> Selector::ncclCandidate(const CollectiveSpec& spec) const {
  if (!opt_.topology || !gpuSystem(*opt_.topology) || !runsNccl(opt_.backend)) return std::nullopt;
  const bool registered = std::any_of(algorithms().begin(), algorithms().end(), [&](const AlgorithmInfo& a) {
    return a.collective == spec.kind && a.name == kNcclNativeAlgorithm;
  });
  if (!registered) return std::nullopt;
  if (!nccl_) nccl_ = std::make_unique<NcclState>();
  auto it = nccl_->systems.find(spec.nranks);
  if (it == nccl_->systems.end()) {
    it = nccl_->systems.emplace(spec.nranks, ncclSystemOf(*opt_.topology, spec.nranks)).first;
  }
  try {
    const NcclChoice c = ncclChoose(it->second, spec, nccl_->env);
    return Alternative{std::string(kNcclNativeAlgorithm), 0, 1, c.predictedUs};
  } catch (const Error& e) {
    if (e.code() == Errc::Unsupported) return std::nullopt;  // NCCL_ALGO / NCCL_PROTO leave nothing for this call
    throw;
  }
}

const CostModel& Selector::model(int nranks) const {
  auto it = models_.find(nranks);
  if (it == models_.end()) {
    auto m = opt_.topology ? std::make_unique<CostModel>(*opt_.topology, nranks)
                           : std::make_unique<CostModel>(CostModel::defaultFlat(nranks));
    it = models_.emplace(nranks, std::move(m)).first;
  }
  return *it->second;
}

Choice Selector::choose(const CollectiveSpec& spec) const {
  const int n = spec.nranks;
  const std::size_t bytes = tableBytes(spec);

  // 1. Forced.
  std::string forced, forcedBy;
  if (!opt_.algo.empty() && opt_.algo != "auto") {
    findAlgorithm(spec.kind, opt_.algo);  // unknown names fail here, listing the valid ones
    forced = opt_.algo;
    forcedBy = "--algo";
  } else if (const char* env = std::getenv(kAlgoEnv)) {
    forced = forcedAlgorithm(env, spec.kind);
    if (!forced.empty()) forcedBy = fmt::format("{}={}", kAlgoEnv, printable(env));
  }
  if (!forced.empty() && !scheduleAlgorithm(spec.kind, forced)) {
    Choice c{forced, fmt::format("forced by {} (a peer library's own implementation)", forcedBy)};
    c.source = "forced";
    return c;
  }

  // Candidates: every schedule algorithm of the collective, or the forced one.
  std::vector<std::string> candidates;
  if (!forced.empty()) {
    candidates.push_back(forced);
  } else {
    for (const auto& a : algorithms()) {
      if (a.collective == spec.kind && !a.native && a.traits.admits(n)) candidates.push_back(a.name);
    }
  }
  auto isCandidate = [&](const std::string& a) {
    return std::find(candidates.begin(), candidates.end(), a) != candidates.end();
  };

  ModelTimeFn modelFn = [&](std::string_view a, std::size_t chunk, int channels, int nr,
                            std::size_t b) -> std::optional<double> {
    try {
      const CostModel& m = model(nr);
      CollectiveSpec q = spec;
      q.nranks = nr;
      q.count = countForBytes(spec.kind, nr, b, spec.dtype, /*alignBytes=*/1);
      q.root = std::min(spec.root, nr - 1);
      const Estimate e = m.estimate(q, a, AlgoParams{chunk, channels, m.rankHost()});
      if (!e.supported) return std::nullopt;
      return e.terms.us;
    } catch (const Error&) {
      return std::nullopt;  // a rank count the topology does not have
    }
  };

  // 2. Table.
  std::string tableNote;
  if (opt_.table) {
    const std::string fp = opt_.topology ? fingerprint(*opt_.topology) : "";
    const TuningSection* section = opt_.table->find(fp, kLibraryCollbench, opt_.backend);
    const std::string where = fmt::format(
        "table {}{}", opt_.tableSource.empty() ? "" : printable(opt_.tableSource) + " ",
        section ? fmt::format("[{} on {}]", printable(section->topology.empty() ? "no topology" : section->topology),
                              printable(section->backend))
                : "");
    if (!section) {
      tableNote = fp.empty() ? "; the table has no section measured without a topology"
                             : fmt::format("; the table has no section for topology fingerprint {}", fp);
    } else {
      // With a topology, only table rows of the query's host count (no interpolation across a host boundary).
      const int hosts = opt_.topology ? model(n).summary().hosts : 0;
      // Between points the topology's model gives the shape; without a topology the model is a made-up flat network
      // (free concurrency flatters direct), so measured times alone are interpolated: on this project's 2-vCPU host
      // table, shaping by it picked direct for 3-rank all-reduces of 1-12 KiB, 1.2-1.5x slower than the best. The
      // price: between power-of-two rank counts nothing shows the fold step recursive doubling and Rabenseifner take
      // at the others (3 ranks, 2.4 MiB from a sqrt(2)-step table: Rabenseifner chosen, 2.1-3x slower than direct).
      std::vector<TablePrediction> preds =
          predictFromTable(*section, spec.kind, n, bytes, opt_.topology ? modelFn : ModelTimeFn{}, hosts);
      preds.erase(std::remove_if(preds.begin(), preds.end(),
                                 [&](const TablePrediction& p) { return !isCandidate(p.candidate.algorithm); }),
                  preds.end());
      if (preds.empty()) {
        tableNote = hosts > 0 ? fmt::format("; {} has no {} entry on {} host(s) for these algorithms", where,
                                            toString(spec.kind), hosts)
                              : fmt::format("; {} has no {} entry for these algorithms", where, toString(spec.kind));
      } else {
        const TablePrediction& best = preds.front();
        if (const auto nccl = forced.empty() ? ncclCandidate(spec) : std::nullopt;
            nccl && nccl->predictedUs < best.candidate.timeUs) {
          return ncclChoice(
              spec, *nccl,
              fmt::format("; {} best {} {:.3g} us", where, best.candidate.algorithm, best.candidate.timeUs));
        }
        Choice c{best.candidate.algorithm, ""};
        c.chunkBytes = best.candidate.chunkBytes;
        c.channels = best.candidate.channels;
        c.predictedUs = best.candidate.timeUs;
        c.source = best.fit == TableFit::Exact ? "table" : std::string(toString(best.fit));
        for (const auto& p : preds) {
          c.ranking.push_back(
              {p.candidate.algorithm, p.candidate.chunkBytes, p.candidate.channels, p.candidate.timeUs});
        }
        std::string how;
        if (best.fit == TableFit::Exact) {
          how = fmt::format("fastest measured at n={}, {}", n, formatBytes(bytes));
        } else {
          how = fmt::format("{} from n={}..{}, {}..{} ({})", toString(best.fit), best.nranksLo, best.nranksHi,
                            formatBytes(best.bytesLo), formatBytes(best.bytesHi),
                            best.modelShaped ? "cost model shape x measured scale" : "log-time");
        }
        c.reason = fmt::format("{}{}: {}: {:.3g} us{}", forced.empty() ? "" : "forced by " + forcedBy + "; ", where,
                               how, best.candidate.timeUs, runnerUp(c.ranking));
        return c;
      }
    }
  }

  // 3. Cost model; without a topology over the algorithms AlgorithmTraits::defaultModel offers (the table above
  // measured them all).
  std::vector<std::string> modelled;
  for (const std::string& a : candidates) {
    if (forced.empty() && !opt_.topology && !findAlgorithm(spec.kind, a).traits.defaultModel) continue;
    modelled.push_back(a);
  }
  std::vector<Alternative> ranking;
  std::string unsupported;
  for (const Priced& p : price(spec, modelled)) {
    if (p.best.predictedUs >= 0) ranking.push_back(p.best);
    if (!p.unsupported.empty()) unsupported = p.unsupported;
  }
  if (const auto nccl = forced.empty() ? ncclCandidate(spec) : std::nullopt) ranking.push_back(*nccl);
  std::stable_sort(ranking.begin(), ranking.end(),
                   [](const Alternative& x, const Alternative& y) { return x.predictedUs < y.predictedUs; });
  if (ranking.empty()) {
    throw Error(Errc::Unsupported, fmt::format("no algorithm can run {}{}", describe(spec),
                                               unsupported.empty() ? "" : ": " + unsupported));
  }
  if (ranking.front().algorithm == kNcclNativeAlgorithm) {
    return ncclChoice(spec, ranking.front(), runnerUp(ranking) + tableNote, ranking);
  }
  Choice c{ranking.front().algorithm, ""};
  c.chunkBytes = ranking.front().chunkBytes;
  c.channels = ranking.front().channels;
  c.predictedUs = ranking.front().predictedUs;
  c.source = "model";
  c.ranking = ranking;
  const std::string on = opt_.topology ? fmt::format("topology {}", printable(opt_.topology->name))
                                       : fmt::format("the default flat network ({} GB/s, {} us links)",
                                                     kDefaultFlatGBps, kDefaultFlatLatencyUs);
  c.reason = fmt::format("{}cost model on {}: {:.3g} us{}{}", forced.empty() ? "" : "forced by " + forcedBy + "; ", on,
                         c.predictedUs, runnerUp(ranking), tableNote);
  return c;
}

namespace {

/// The model's best configuration of `algorithm` over kModelChunkCandidates x kModelChannelCandidates, among those
/// `backend` can run (backendCanRun).
Selector::Priced priceOne(const CostModel& m, const CollectiveSpec& spec, const std::string& algorithm,
                          const std::string& backend) {
  const ParamSpace ps = paramSpace(spec.kind, algorithm);
  const AlgorithmInfo& info = findAlgorithm(spec.kind, algorithm);
  Selector::Priced out{{algorithm, 0, 1, -1}, ""};
  for (std::size_t chunk : kModelChunkCandidates) {
    if (chunk != 0 && !ps.chunk) continue;
    for (int ch : kModelChannelCandidates) {
      if (ch != 1 && !ps.channels) continue;
      const AlgoParams params{chunk, ch, m.rankHost()};
      if (!backendCanRun(backend, spec, info, params)) {
        out.unsupported = fmt::format("'{}' on {} channel{} would need about {} transfers: too large to build",
                                      algorithm, ch, ch == 1 ? "" : "s", estimateTransfers(info, spec, params));
        continue;
      }
      const Estimate e = m.estimate(spec, algorithm, params);
      if (!e.supported) {
        out.unsupported = e.note;
        continue;
      }
      if (out.best.predictedUs < 0 || e.terms.us < out.best.predictedUs) out.best = {algorithm, chunk, ch, e.terms.us};
    }
  }
  return out;
}

}  // namespace

std::vector<Selector::Priced> Selector::price(const CollectiveSpec& spec,
                                              const std::vector<std::string>& algorithms) const {
  std::vector<Priced> out(algorithms.size());
  std::size_t wanted = 1;
  if (opt_.pricingThreads > 0) {
    wanted = static_cast<std::size_t>(opt_.pricingThreads);
  } else if (spec.nranks >= kParallelPricingRanks) {
    wanted = std::max(1U, std::thread::hardware_concurrency());
  }
  const int workers = opt_.topology == nullptr ? 1 : static_cast<int>(std::min(algorithms.size(), wanted));
  if (workers <= 1) {
    for (std::size_t i = 0; i < algorithms.size(); ++i)
      out[i] = priceOne(model(spec.nranks), spec, algorithms[i], opt_.backend);
    return out;
  }
  // Each worker prices whole algorithms on its own cost model (a Router serves one thread). Results and errors land
  // in the candidates' order, so the ranking, and the error one thread would have met first, do not depend on which
  // worker finished first.
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> failed(algorithms.size());
  auto work = [&](const CostModel& m) {
    for (std::size_t i = next++; i < algorithms.size(); i = next++) {
      try {
        out[i] = priceOne(m, spec, algorithms[i], opt_.backend);
      } catch (...) {
        failed[i] = std::current_exception();
        next = algorithms.size();  // the algorithms before it are taken; no more after it
      }
    }
  };
  const CostModel& first = model(spec.nranks);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(workers));
  for (int w = 1; w < workers; ++w) {
    // A thread the system refuses (std::system_error) leaves its share to the others too.
    try {
      threads.emplace_back([&] {
        std::unique_ptr<CostModel> own;
        try {
          own = std::make_unique<CostModel>(*opt_.topology, spec.nranks);
        } catch (const std::exception&) {
          // The same model was built once already, so only memory can run out: the other workers price its share.
          return;
        }
        work(*own);
      });
    } catch (const std::system_error&) {
      break;
    }
  }
  work(first);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

Choice Selector::ncclChoice(const CollectiveSpec& spec, const Alternative& nccl, const std::string& note,
                            std::vector<Alternative> ranking) const {
  Choice c{nccl.algorithm, ""};
  c.predictedUs = nccl.predictedUs;
  c.source = "model";
  c.ranking = ranking.empty() ? std::vector<Alternative>{nccl} : std::move(ranking);
  const NcclChoice emulated = ncclChoose(nccl_->systems.at(spec.nranks), spec, nccl_->env);
  c.reason = fmt::format("NCCL's model on topology {}: {}: {:.3g} us{}", printable(opt_.topology->name),
                         ncclChoiceSummary(emulated), nccl.predictedUs, note);
  return c;
}

std::vector<Alternative> trialCandidates(const Choice& choice) {
  std::vector<Alternative> out{{choice.algorithm, choice.chunkBytes, choice.channels, choice.predictedUs}};
  if (choice.source == "forced" || !(choice.predictedUs > 0)) return out;
  for (const Alternative& a : choice.ranking) {
    if (out.size() >= kTrialMaxCandidates) break;
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const Alternative& o) { return o.algorithm == a.algorithm; });
    if (seen || !(a.predictedUs > 0) || a.predictedUs > kTrialSpread * choice.predictedUs) continue;
    out.push_back(a);
  }
  return out;
}

Choice settleTrial(const Choice& tableChoice, const std::vector<Alternative>& tried,
                   const std::vector<double>& measuredUs) {
  COLLBENCH_CHECK(!tried.empty() && tried.size() == measuredUs.size(), "{} candidates, {} times", tried.size(),
                  measuredUs.size());
  std::size_t best = 0;
  for (std::size_t i = 1; i < tried.size(); ++i) {
    if (measuredUs[i] < measuredUs[best]) best = i;
  }
  Choice c = tableChoice;
  c.algorithm = tried[best].algorithm;
  c.chunkBytes = tried[best].chunkBytes;
  c.channels = tried[best].channels;
  c.predictedUs = measuredUs[best];
  c.source = "trial";
  std::vector<std::size_t> order(tried.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return measuredUs[x] < measuredUs[y]; });
  c.ranking.clear();
  for (std::size_t i : order)
    c.ranking.push_back({tried[i].algorithm, tried[i].chunkBytes, tried[i].channels, measuredUs[i]});
  std::string times;
  for (std::size_t i : order)
    times += fmt::format("{}{} {:.3g} us", times.empty() ? "" : ", ", describeAlt(tried[i]), measuredUs[i]);
  c.reason = fmt::format("trial of {} near-tied candidates on this machine: {}; the table's choice was {} ({})",
                         tried.size(), times, describeAlt(tried.front()), tableChoice.reason);
  return c;
}

bool backendCanRun(std::string_view backend, const CollectiveSpec& spec, const AlgorithmInfo& algorithm,
                   const AlgoParams& params) {
  if (estimateTransfers(algorithm, spec, params) <= kMaterializeTransferLimit) return true;
  const std::optional<BackendCapabilities> caps = findBackendCapabilities(backend);
  if (!backend.empty() && !caps) return true;
  return (backend.empty() || caps->device == DeviceKind::Simulated) && algorithm.traits.timedWithoutSchedule();
}

Choice chooseAlgorithm(const CollectiveSpec& spec) { return Selector(SelectorOptions{}).choose(spec); }

Choice chooseAlgorithm(const CollectiveSpec& spec, const SelectorOptions& options) {
  return Selector(options).choose(spec);
}

}  // namespace collbench
