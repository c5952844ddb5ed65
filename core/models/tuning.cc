// Tuning tables: JSON format with validation, and the interpolation between measured points (tuning.h).
#include "collbench/tuning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "collbench/algorithms.h"
#include "collbench/cost_model.h"
#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/json_fields.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "collbench-tuning";
constexpr int kVersion = 1;

/// Rank counts beyond this are typos, not worlds (the topology loader's bound).
constexpr std::int64_t kMaxRanks = 1 << 24;
/// NCCL's channel bound (NCCL_MAX_NCHANNELS is at most 64 today; 1024 leaves room).
constexpr std::int64_t kMaxChannels = 1024;

/// "<path>: unknown algorithm for all_reduce \"rnig\"": a name a parser or a rule refused, echoed.
[[noreturn]] void failName(const JsonFields& f, const char* field, const std::string& problem,
                           const std::string& name) {
  f.fail(field, fmt::format("{} \"{}\"", problem, printable(name)));
}

TuningCandidate parseCandidate(const JsonFields& f, Collective c, bool nccl) {
  f.allowOnly({"algorithm", "protocol", "chunk_bytes", "channels", "time_us"});
  TuningCandidate k;
  k.algorithm = f.string("algorithm");
  if (nccl) {
    // The tuner plugin's names (ncclTunerAlgorithmName / ncclTunerProtocolName), any case.
    const auto lower = [](std::string v) {
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      return v;
    };
    std::string names;
    bool known = false;
    for (NcclAlgorithm a : kNcclAlgorithms) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", ncclTunerAlgorithmName(a));
      if (lower(k.algorithm) == ncclTunerAlgorithmName(a)) {
        k.algorithm = std::string(ncclTunerAlgorithmName(a));
        known = true;
      }
    }
    if (!known) failName(f, "algorithm", fmt::format("unknown NCCL algorithm ({})", names), k.algorithm);
    if (k.algorithm == ncclTunerAlgorithmName(NcclAlgorithm::Tree) && c != Collective::AllReduce) {
      failName(f, "algorithm", fmt::format("NCCL has no tree {}", toString(c)), k.algorithm);
    }
    k.protocol = f.string("protocol");
    known = false;
    for (NcclProtocol p : kNcclProtocols) {
      if (lower(k.protocol) == ncclTunerProtocolName(p)) {
        k.protocol = std::string(ncclTunerProtocolName(p));
        known = true;
      }
    }
    if (!known) failName(f, "protocol", "unknown NCCL protocol (ll, ll128, simple)", k.protocol);
  } else {
    bool known = false;
    for (const auto& a : algorithms()) known = known || (a.collective == c && a.name == k.algorithm);
    if (!known) failName(f, "algorithm", fmt::format("unknown algorithm for {}", toString(c)), k.algorithm);
    if (f.present("protocol")) f.fail("protocol", "only NCCL candidates (library \"nccl\") have a protocol");
  }
  k.chunkBytes = static_cast<std::size_t>(f.integerOr("chunk_bytes", 0, 0));
  k.channels = static_cast<int>(f.integerOr("channels", 1, 1, kMaxChannels));
  k.timeUs = f.number("time_us", 0);
  return k;
}

json candidateJson(const TuningCandidate& k) {
  json j = {{"algorithm", k.algorithm}};
  if (!k.protocol.empty()) j["protocol"] = k.protocol;
  j["chunk_bytes"] = k.chunkBytes;
  j["channels"] = k.channels;
  j["time_us"] = k.timeUs;
  return j;
}

void sortCandidates(std::vector<TuningCandidate>& v) {
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.timeUs < b.timeUs; });
}

}  // namespace

const TuningEntry* TuningSection::find(Collective c, int nranks, std::size_t bytes) const {
  for (const TuningEntry& e : entries) {
    if (e.collective == c && e.nranks == nranks && e.bytes == bytes) return &e;
  }
  return nullptr;
}

const TuningSection* TuningTable::find(std::string_view fp, std::string_view library, std::string_view backend) const {
  const TuningSection* first = nullptr;
  for (const TuningSection& s : sections) {
    if (s.fingerprint != fp || s.library != library) continue;
    if (!first) first = &s;
    if (!backend.empty() && s.backend == backend) return &s;
  }
  return first;
}

TuningSection meanOfPasses(const std::vector<TuningSection>& passes) {
  if (passes.empty()) throw Error(Errc::InvalidArgument, "meanOfPasses: no passes");
  using CandidateKey = std::tuple<std::string, std::string, std::size_t, int>;
  auto keyOf = [](const TuningCandidate& k) { return CandidateKey{k.algorithm, k.protocol, k.chunkBytes, k.channels}; };
  TuningSection out = passes.front();
  for (std::size_t p = 1; p < passes.size(); ++p) {
    if (passes[p].entries.size() != out.entries.size()) {
      throw Error(Errc::InvalidArgument, fmt::format("pass {} has {} points, pass 1 has {}", p + 1,
                                                     passes[p].entries.size(), out.entries.size()));
    }
  }
  for (TuningEntry& e : out.entries) {
    std::map<CandidateKey, double> sumUs;
    for (const TuningCandidate& k : e.candidates) sumUs[keyOf(k)] = 0;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const TuningEntry* other = passes[p].find(e.collective, e.nranks, e.bytes);
      if (!other || other->candidates.size() != e.candidates.size()) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("pass {} has no {} at {} ranks, {} bytes with {} candidates", p + 1,
                                toString(e.collective), e.nranks, e.bytes, e.candidates.size()));
      }
      for (const TuningCandidate& k : other->candidates) {
        const auto it = sumUs.find(keyOf(k));
        if (it == sumUs.end()) {
          throw Error(
              Errc::InvalidArgument,
              fmt::format("pass {} has candidate {} (chunk {}, channels {}) at {} ranks, {} bytes, which pass 1 lacks",
                          p + 1, k.algorithm, k.chunkBytes, k.channels, e.nranks, e.bytes));
        }
        it->second += k.timeUs;
      }
    }
    for (TuningCandidate& k : e.candidates) k.timeUs = sumUs[keyOf(k)] / static_cast<double>(passes.size());
    sortCandidates(e.candidates);
  }
  return out;
}

TuningTable parseTuningTable(const std::string& text, const std::string& source) {
  const json doc = parseJsonDocument(text, source);
  const JsonFields top(source, "", doc);
  top.allowOnly({"format", "version", "provenance", "sections"});
  top.requireFormat(kFormat, kVersion);
  TuningTable t;
  if (top.has("provenance")) {
    const JsonFields f = top.object("provenance");
    f.allowOnly({"tool", "command_line", "backend", "host", "date", "topology", "topology_fingerprint", "shard"});
    t.provenance = {f.stringOr("tool", ""),
                    f.stringOr("command_line", ""),
                    f.stringOr("backend", ""),
                    f.stringOr("host", ""),
                    f.stringOr("date", ""),
                    f.stringOr("topology", ""),
                    f.stringOr("topology_fingerprint", ""),
                    f.stringOr("shard", "")};
  }
  for (std::size_t si = 0; si < top.array("sections").size(); ++si) {
    const JsonFields f = top.element("sections", si);
    f.allowOnly({"topology", "fingerprint", "backend", "library", "entries"});
    TuningSection s;
    s.topology = f.stringOr("topology", "");
    s.fingerprint = f.string("fingerprint");
    s.backend = f.stringOr("backend", "");
    s.library = f.stringOr("library", std::string(kLibraryCollbench));
    if (s.library != kLibraryCollbench && s.library != kLibraryNccl) {
      failName(f, "library", "must be \"collbench\" or \"nccl\", got", s.library);
    }
    const bool nccl = s.library == kLibraryNccl;
    std::set<std::tuple<int, int, std::size_t>> seen;
    for (std::size_t ei = 0; ei < f.array("entries").size(); ++ei) {
      const JsonFields g = f.element("entries", ei);
      g.allowOnly({"collective", "nranks", "nnodes", "bytes", "candidates"});
      TuningEntry e;
      const std::string name = g.string("collective");
      try {
        e.collective = parseCollective(name);
      } catch (const Error&) {
        failName(g, "collective", "unknown collective", name);
      }
      e.nranks = static_cast<int>(g.integer("nranks", 1, kMaxRanks));
      e.nnodes = static_cast<int>(g.integerOr("nnodes", 1, 1, e.nranks));
      e.bytes = static_cast<std::size_t>(g.integer("bytes", 0));
      if (!seen.insert({static_cast<int>(e.collective), e.nranks, e.bytes}).second) {
        g.fail("", fmt::format("duplicate point ({}, nranks {}, bytes {})", toString(e.collective), e.nranks, e.bytes));
      }
      const json& cands = g.array("candidates");
      if (cands.empty()) g.fail("candidates", "must hold at least one candidate");
      for (std::size_t ci = 0; ci < cands.size(); ++ci) {
        e.candidates.push_back(parseCandidate(g.element("candidates", ci), e.collective, nccl));
      }
      sortCandidates(e.candidates);
      s.entries.push_back(std::move(e));
    }
    t.sections.push_back(std::move(s));
  }
  return t;
}

TuningTable loadTuningTable(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(Errc::InvalidArgument, fmt::format("cannot read tuning table '{}'", printable(path)));
  std::stringstream ss;
  ss << f.rdbuf();
  return parseTuningTable(ss.str(), path);
}

std::string toJson(const TuningTable& t) {
  // One entry per line: diffs of committed tables stay readable.
  const TuningProvenance& p = t.provenance;
  json prov = {{"tool", p.tool},
               {"command_line", p.commandLine},
               {"backend", p.backend},
               {"host", p.host},
               {"date", p.date},
               {"topology", p.topology},
               {"topology_fingerprint", p.topologyFingerprint}};
  if (!p.shard.empty()) prov["shard"] = p.shard;
  std::string out = fmt::format("{{\"format\": \"{}\", \"version\": {},\n \"provenance\": {},\n \"sections\": [",
                                kFormat, kVersion, prov.dump());
  for (std::size_t si = 0; si < t.sections.size(); ++si) {
    const TuningSection& s = t.sections[si];
    const json head = {
        {"topology", s.topology}, {"fingerprint", s.fingerprint}, {"backend", s.backend}, {"library", s.library}};
    std::string h = head.dump();
    h.pop_back();  // reopen the object to append the entries
    out += fmt::format("{}\n  {}, \"entries\": [", si ? "," : "", h);
    for (std::size_t ei = 0; ei < s.entries.size(); ++ei) {
      const TuningEntry& e = s.entries[ei];
      json cands = json::array();
      for (const auto& k : e.candidates) cands.push_back(candidateJson(k));
      const json ej = {{"collective", std::string(toString(e.collective))},
                       {"nranks", e.nranks},
                       {"nnodes", e.nnodes},
                       {"bytes", e.bytes},
                       {"candidates", cands}};
      out += fmt::format("{}\n    {}", ei ? "," : "", ej.dump());
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

std::string FoundTuningTable::describe() const {
  if (table) return fmt::format("{} ({})", printable(path), how);
  return fmt::format("none ({})", note);
}

FoundTuningTable findTuningTable(const std::string& explicitPath, const Topology* topology, std::string_view backend) {
  FoundTuningTable f;
  if (!explicitPath.empty()) {
    f.table = loadTuningTable(explicitPath);
    f.path = explicitPath;
    f.how = "--tuning";
    return f;
  }
  if (const char* env = std::getenv("COLLBENCH_TUNING_FILE"); env && *env) {
    f.table = loadTuningTable(env);
    f.path = env;
    f.how = "COLLBENCH_TUNING_FILE";
    return f;
  }
  if (!topology) {
    f.note = "no --tuning, COLLBENCH_TUNING_FILE or topology";
    return f;
  }
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("COLLBENCH_TUNING_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  dirs.push_back((std::filesystem::path(COLLBENCH_SOURCE_DIR) / kShippedTuningDir).string());
  std::vector<std::string> names;
  // The backend's own table first, then the simulator's (shipped for every topology); each name once.
  const std::string simulated = topology->name + ".sim.json";
  if (!backend.empty()) names.push_back(fmt::format("{}.{}.json", topology->name, backend));
  if (names.empty() || names.front() != simulated) names.push_back(simulated);
  std::string fp;  // once a table is found: at 131072 GPUs the fingerprint takes a second
  std::vector<std::string> stale;
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) {
      const std::filesystem::path p = std::filesystem::path(dir) / name;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(p, ec)) continue;
      TuningTable t;
      try {
        t = loadTuningTable(p.string());
      } catch (const Error& e) {
        stale.push_back(fmt::format("{} unreadable: {}", p.string(), e.what()));
        continue;
      }
      if (fp.empty()) fp = fingerprint(*topology);
      if (!t.find(fp, kLibraryCollbench)) {
        stale.push_back(fmt::format("{} has no section for fingerprint {} (stale: regenerate it)", p.string(), fp));
        continue;
      }
      f.table = std::move(t);
      f.path = p.string();
      f.how = fmt::format("shipped table for {}", printable(topology->name));
      return f;
    }
  }
  f.note = stale.empty() ? fmt::format("no shipped table for topology {}", printable(topology->name))
                         : fmt::format("{}", fmt::join(stale, "; "));
  return f;
}

ParamSpace paramSpace(Collective c, std::string_view algorithm) {
  // What the generator reads (AlgorithmTraits); unknown names read nothing.
  for (const auto& a : algorithms()) {
    if (a.collective == c && a.name == algorithm) return {a.traits.usesChunkBytes, a.traits.usesChannels};
  }
  return {};
}

std::vector<AlgoParams> sweepConfigs(Collective c, std::string_view algorithm, const std::vector<std::size_t>& chunks,
                                     const std::vector<int>& channels, const std::vector<int>& rankHost) {
  const ParamSpace ps = paramSpace(c, algorithm);
  const std::vector<std::size_t> cs = ps.chunk && !chunks.empty() ? chunks : std::vector<std::size_t>{0};
  const std::vector<int> hs = ps.channels && !channels.empty() ? channels : std::vector<int>{1};
  std::vector<AlgoParams> out;
  for (std::size_t chunk : cs) {
    for (int ch : hs) out.push_back(AlgoParams{chunk, ch, rankHost});
  }
  return out;
}

// ---- Interpolation -----------------------------------------------------------------------------------------------

std::string_view toString(TableFit f) {
  switch (f) {
    case TableFit::Exact:
      return "table point";
    case TableFit::Interpolated:
      return "interpolated";
    case TableFit::Extrapolated:
      return "extrapolated";
  }
  return "?";
}

namespace {

/// The enclosing pair of `v` in sorted unique `grid` (clamped to the ends), and the weight of the upper one.
struct Bracket {
  std::size_t lo = 0, hi = 0;
  double w = 0;
  bool outside = false;
};

template <typename T, typename F>
Bracket bracket(const std::vector<T>& grid, T v, F coord) {
  Bracket b;
  if (grid.empty()) return b;
  if (v <= grid.front()) {
    b.outside = v < grid.front();
    return b;
  }
  if (v >= grid.back()) {
    b.lo = b.hi = grid.size() - 1;
    b.outside = v > grid.back();
    return b;
  }
  const auto it = std::upper_bound(grid.begin(), grid.end(), v);
  b.hi = static_cast<std::size_t>(it - grid.begin());
  b.lo = b.hi - 1;
  const double x0 = coord(grid[b.lo]), x1 = coord(grid[b.hi]), x = coord(v);
  b.w = x1 > x0 ? (x - x0) / (x1 - x0) : 0;
  if (b.w <= 0) {
    b.hi = b.lo;
    b.w = 0;
  }
  return b;
}

double logBytes(std::size_t b) { return std::log(static_cast<double>(std::max<std::size_t>(b, 1))); }

}  // namespace

std::vector<TablePrediction> predictFromTable(const TuningSection& section, Collective collective, int nranks,
                                              std::size_t bytes, const ModelTimeFn& model, int nnodes) {
  // Rank counts and, per rank count, the sizes measured for this collective; only rank counts of the query's host
  // layout: as many hosts, or one rank per host like the query. Times jump where a rank count first needs another
  // host of several ranks (8 -> 9 ranks of 8-GPU hosts moves the ring's slowest hop from NVLink to a NIC), so nothing
  // across that boundary is an interpolation; with one rank per host every rank count adds a host alike.
  auto layout = [](int nr, int nn) { return nn == nr ? 0 : nn; };
  std::map<int, std::map<std::size_t, const TuningEntry*>> grid;
  for (const TuningEntry& e : section.entries) {
    if (e.collective != collective) continue;
    if (nnodes > 0 && layout(e.nranks, e.nnodes) != layout(nranks, nnodes)) continue;
    grid[e.nranks][e.bytes] = &e;
  }
  if (grid.empty()) return {};
  std::vector<int> ranks;
  for (const auto& [r, _] : grid) ranks.push_back(r);
  const Bracket rb = bracket(ranks, nranks, [](int r) { return static_cast<double>(r); });

  struct Corner {
    const TuningEntry* entry;
    double weight;
  };
  std::vector<Corner> corners;
  bool outside = rb.outside;
  std::size_t bytesLo = 0, bytesHi = 0;
  const std::size_t rankRows[2] = {rb.lo, rb.hi};
  const double rankWeights[2] = {1 - rb.w, rb.w};
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && rb.hi == rb.lo) break;
    const auto& row = grid.at(ranks[rankRows[k]]);
    std::vector<std::size_t> sizes;
    for (const auto& [b, _] : row) sizes.push_back(b);
    const Bracket bb = bracket(sizes, bytes, logBytes);
    outside = outside || bb.outside;
    if (k == 0 || rankWeights[1] > rankWeights[0]) {  // report the sizes around the query at the nearer rank count
      bytesLo = sizes[bb.lo];
      bytesHi = sizes[bb.hi];
    }
    corners.push_back({row.at(sizes[bb.lo]), rankWeights[k] * (1 - bb.w)});
    if (bb.hi != bb.lo) corners.push_back({row.at(sizes[bb.hi]), rankWeights[k] * bb.w});
  }
  const bool exact = !outside && corners.size() == 1;

  // Every algorithm found at some corner, and every configuration (chunk, channels) of it that some corner measured.
  // Each configuration is interpolated on its own (its times at the corners that have it), and an algorithm is
  // predicted at its fastest configuration at the query: the best configuration moves with size and rank count (the
  // tree's chunk and channels do), so taking the nearest corner's best would miss it.
  std::vector<std::string> algos;
  for (const Corner& c : corners) {
    for (const auto& k : c.entry->candidates) {
      if (std::find(algos.begin(), algos.end(), k.algorithm) == algos.end()) algos.push_back(k.algorithm);
    }
  }
  std::vector<TablePrediction> out;
  for (const std::string& a : algos) {
    std::vector<std::pair<std::size_t, int>> configs;
    for (const Corner& c : corners) {
      for (const auto& k : c.entry->candidates) {
        const std::pair<std::size_t, int> cfg{k.chunkBytes, k.channels};
        if (k.algorithm == a && std::find(configs.begin(), configs.end(), cfg) == configs.end()) configs.push_back(cfg);
      }
    }
    std::optional<TablePrediction> best;
    for (const auto& cfg : configs) {
      struct Sample {
        const TuningCandidate* cand;
        const TuningEntry* entry;
        double weight;
      };
      std::vector<Sample> samples;
      for (const Corner& c : corners) {
        for (const auto& k : c.entry->candidates) {  // sorted: the first match is the fastest (protocols of NCCL)
          if (k.algorithm == a && k.chunkBytes == cfg.first && k.channels == cfg.second) {
            samples.push_back({&k, c.entry, c.weight});
            break;
          }
        }
      }
      const Sample* nearest = &samples.front();
      double wsum = 0;
      for (const Sample& s : samples) {
        wsum += s.weight;
        if (s.weight > nearest->weight) nearest = &s;
      }
      TablePrediction p;
      p.candidate = *nearest->cand;
      p.fit = exact ? TableFit::Exact : outside ? TableFit::Extrapolated : TableFit::Interpolated;
      p.nranksLo = ranks[rb.lo];
      p.nranksHi = ranks[rb.hi];
      p.bytesLo = bytesLo;
      p.bytesHi = bytesHi;
      // Model-shaped: log(measured / model) at the corners, the model at the query, same configuration.
      std::optional<double> atQuery;
      bool shaped = static_cast<bool>(model);
      double logRatio = 0;
      if (shaped) {
        atQuery = model(a, cfg.first, cfg.second, nranks, bytes);
        if (!atQuery) continue;  // cannot run here (hierarchical on unequal hosts, ...)
        for (const Sample& s : samples) {
          const auto m = model(a, cfg.first, cfg.second, s.entry->nranks, s.entry->bytes);
          if (!m || !(*m > 0) || !(s.cand->timeUs > 0) || !(*atQuery > 0)) {
            shaped = false;
            break;
          }
          logRatio +=
              (wsum > 0 ? s.weight / wsum : 1.0 / static_cast<double>(samples.size())) * std::log(s.cand->timeUs / *m);
        }
      }
      if (shaped) {
        p.candidate.timeUs = *atQuery * std::exp(logRatio);
      } else {
        double lt = 0;
        bool zero = false;
        for (const Sample& s : samples) {
          zero = zero || !(s.cand->timeUs > 0);
          lt += (wsum > 0 ? s.weight / wsum : 1.0 / static_cast<double>(samples.size())) *
                std::log(std::max(s.cand->timeUs, 1e-9));
        }
        p.candidate.timeUs = zero && exact ? nearest->cand->timeUs : std::exp(lt);
      }
      // At a table point the measured time itself (the model ratio cancels up to rounding).
      if (exact) p.candidate.timeUs = nearest->cand->timeUs;
      p.modelShaped = shaped;
      if (!best || p.candidate.timeUs < best->candidate.timeUs) best = std::move(p);
    }
    if (best) out.push_back(std::move(*best));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& x, const auto& y) { return x.candidate.timeUs < y.candidate.timeUs; });
  return out;
}

}  // namespace collbench
