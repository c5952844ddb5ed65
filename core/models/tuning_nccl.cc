// NCCL example tuner plugin CSV: rules from a tuning table's nccl sections, the CSV text, and a strict parser
// that applies the plugin's matching (facts from NVIDIA/nccl ext-tuner/example/plugin.c, v2.27.7 to v2.29).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>

#include "collbench/error.h"
#include "collbench/tuning.h"

namespace collbench {
namespace {

/// The plugin reads lines with fgets into a 256-byte buffer (MAX_LINE_LENGTH): longer lines would be split.
constexpr std::size_t kMaxLineChars = 255;
/// Fields: 8 required, numPipeOps and regBuff optional (CONFIG_FIELDS_REQUIRED .. CONFIG_FIELDS_MAX).
constexpr std::size_t kRequiredFields = 8;
constexpr std::size_t kMaxFields = 10;
/// Algorithm names the plugin knows (parseAlgorithm), in NCCL's order.
constexpr std::string_view kPluginAlgorithms[] = {"tree",      "ring", "collnet_direct", "collnet_chain", "nvls",
                                                  "nvls_tree", "pat"};
constexpr std::string_view kPluginProtocols[] = {"ll", "ll128", "simple"};
constexpr std::string_view kFieldNames[] = {"collective_type", "min_bytes", "max_bytes", "algorithm",  "protocol",
                                            "channels",        "nNodes",    "nRanks",    "numPipeOps", "regBuff"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void failAt(const std::string& source, std::size_t line, std::string_view field, const std::string& what,
                         std::string_view value) {
  throw Error(Errc::InvalidArgument,
              fmt::format("{}:{}: {}: {} (got '{}')", printable(source), line, field, what, printable(value)));
}

Collective pluginCollective(std::string_view s, const std::string& source, std::size_t line) {
  for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather, Collective::Broadcast,
                       Collective::Reduce}) {
    if (s == ncclTunerCollectiveName(c)) return c;
  }
  failAt(source, line, kFieldNames[0], "unknown collective (broadcast, reduce, allgather, reducescatter, allreduce)",
         s);
}

template <typename T>
T number(std::string_view s, const std::string& source, std::size_t line, std::size_t field, T lo, T hi) {
  T v{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) failAt(source, line, kFieldNames[field], "not an integer", s);
  if (v < lo || v > hi) failAt(source, line, kFieldNames[field], fmt::format("must be in [{}, {}]", lo, hi), s);
  return v;
}

}  // namespace

std::string_view ncclTunerCollectiveName(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "allreduce";
    case Collective::ReduceScatter:
      return "reducescatter";
    case Collective::AllGather:
      return "allgather";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::Barrier:
      break;
  }
  throw Error(Errc::InvalidArgument, "NCCL's tuner has no barrier collective");
}

// kPluginAlgorithms and kPluginProtocols are in NCCL's order, as NcclAlgorithm and NcclProtocol.
std::string_view ncclTunerAlgorithmName(NcclAlgorithm a) { return kPluginAlgorithms[static_cast<std::size_t>(a)]; }
std::string_view ncclTunerProtocolName(NcclProtocol p) { return kPluginProtocols[static_cast<std::size_t>(p)]; }

std::vector<NcclTunerRule> ncclTunerRules(const TuningTable& table) {
  std::vector<NcclTunerRule> rules;
  bool any = false;
  for (const TuningSection& s : table.sections) {
    if (s.library != kLibraryNccl) continue;
    any = true;
    // Per (collective, nranks, nnodes), in order of first appearance, the entries by size.
    std::map<std::tuple<int, int, int>, std::vector<const TuningEntry*>> groups;
    std::vector<std::tuple<int, int, int>> order;
    for (const TuningEntry& e : s.entries) {
      if (e.collective == Collective::Barrier || e.candidates.empty()) continue;
      const auto key = std::make_tuple(static_cast<int>(e.collective), e.nranks, e.nnodes);
      if (!groups.count(key)) order.push_back(key);
      groups[key].push_back(&e);
    }
    for (const auto& key : order) {
      auto& es = groups[key];
      std::sort(es.begin(), es.end(), [](const auto* a, const auto* b) { return a->bytes < b->bytes; });
      for (std::size_t i = 0; i < es.size(); ++i) {
        const TuningCandidate& best = es[i]->candidates.front();
        NcclTunerRule r;
        r.collective = es[i]->collective;
        r.nranks = es[i]->nranks;
        r.nnodes = es[i]->nnodes;
        r.algorithm = best.algorithm;
        r.protocol = best.protocol;
        r.channels = best.channels;
        // A size between two table points goes to the nearer one in log(bytes): split at the geometric mean.
        r.minBytes = i == 0 ? 0 : rules.back().maxBytes + 1;
        if (i + 1 == es.size()) {
          r.maxBytes = SIZE_MAX;
        } else {
          const double mid = std::sqrt(static_cast<double>(std::max<std::size_t>(es[i]->bytes, 1)) *
                                       static_cast<double>(es[i + 1]->bytes));
          r.maxBytes = std::clamp(static_cast<std::size_t>(mid), es[i]->bytes, es[i + 1]->bytes - 1);
        }
        NcclTunerRule* prev = i > 0 ? &rules.back() : nullptr;
        if (prev && prev->algorithm == r.algorithm && prev->protocol == r.protocol && prev->channels == r.channels) {
          prev->maxBytes = r.maxBytes;  // same choice as the range before: widen it
        } else {
          rules.push_back(r);
        }
      }
    }
  }
  if (!any) {
    throw Error(Errc::InvalidArgument,
                "the tuning table has no NCCL section (library \"nccl\"): run `collbench tune --backend nccl` or "
                "`--backend sim` with --export nccl-tuner to sweep NCCL's algorithms and protocols");
  }
  return rules;
}

std::string ncclTunerCsv(const std::vector<NcclTunerRule>& rules, const TuningProvenance& p) {
  std::string out;
  // Comment lines too must fit the plugin's line buffer: a longer one would be read as two lines, the second not
  // starting with '#'.
  auto comment = [&](const std::string& text) {
    std::string line = "# " + text;
    if (line.size() > kMaxLineChars) line = line.substr(0, kMaxLineChars - 3) + "...";
    out += line + "\n";
  };
  comment(fmt::format("NCCL tuner plugin configuration (NCCL_TUNER_CONFIG_FILE), written by {}",
                      p.tool.empty() ? "collbench" : printable(p.tool)));
  if (!p.commandLine.empty()) comment(fmt::format("command: {}", printable(p.commandLine)));
  comment(fmt::format("backend {}, topology {} (fingerprint {}), host {}, date {}", printable(p.backend),
                      printable(p.topology), printable(p.topologyFingerprint), printable(p.host), printable(p.date)));
  out += "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n";
  for (const NcclTunerRule& r : rules) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", ncclTunerCollectiveName(r.collective), r.minBytes, r.maxBytes,
                       r.algorithm, r.protocol, r.channels, r.nnodes, r.nranks, r.numPipeOps, r.regBuff);
  }
  return out;
}

std::vector<NcclTunerRule> parseNcclTunerCsv(const std::string& text, const std::string& source) {
  std::vector<NcclTunerRule> rules;
  std::size_t lineNo = 0, pos = 0;
  while (pos <= text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::string_view raw =
        std::string_view(text).substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? text.size() + 1 : eol + 1;
    ++lineNo;
    if (raw.size() > kMaxLineChars) {
      failAt(source, lineNo, "line", fmt::format("longer than the plugin's {} characters", kMaxLineChars),
             raw.substr(0, 40));
    }
    const std::string_view line = trim(raw);
    if (line.empty() || raw.front() == '#') continue;
    std::vector<std::string_view> f;
    for (std::size_t start = 0;;) {
      const std::size_t comma = line.find(',', start);
      f.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (f.size() < kRequiredFields || f.size() > kMaxFields) {
      failAt(source, lineNo, "line",
             fmt::format("expected {} to {} comma-separated fields, found {}", kRequiredFields, kMaxFields, f.size()),
             line.substr(0, 60));
    }
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (f[i].empty()) failAt(source, lineNo, kFieldNames[i], "empty field", line.substr(0, 60));
    }
    NcclTunerRule r;
    r.collective = pluginCollective(f[0], source, lineNo);
    r.minBytes = number<std::size_t>(f[1], source, lineNo, 1, 0, SIZE_MAX);
    r.maxBytes = number<std::size_t>(f[2], source, lineNo, 2, 0, SIZE_MAX);
    if (r.minBytes > r.maxBytes) failAt(source, lineNo, kFieldNames[1], "larger than max_bytes", f[1]);
    if (std::find(std::begin(kPluginAlgorithms), std::end(kPluginAlgorithms), f[3]) == std::end(kPluginAlgorithms)) {
      failAt(source, lineNo, kFieldNames[3],
             "unknown algorithm (tree, ring, collnet_direct, collnet_chain, nvls, "
             "nvls_tree, pat)",
             f[3]);
    }
    r.algorithm = std::string(f[3]);
    if (std::find(std::begin(kPluginProtocols), std::end(kPluginProtocols), f[4]) == std::end(kPluginProtocols)) {
      failAt(source, lineNo, kFieldNames[4], "unknown protocol (ll, ll128, simple)", f[4]);
    }
    r.protocol = std::string(f[4]);
    constexpr int kMaxCount = 1 << 24;
    r.channels = number<int>(f[5], source, lineNo, 5, -1, kMaxCount);
    r.nnodes = number<int>(f[6], source, lineNo, 6, -1, kMaxCount);
    r.nranks = number<int>(f[7], source, lineNo, 7, -1, kMaxCount);
    for (std::size_t i : {std::size_t{5}, std::size_t{6}, std::size_t{7}}) {
      if (f[i] == "0") failAt(source, lineNo, kFieldNames[i], "must be positive or -1", f[i]);
    }
    if (f.size() > 8) r.numPipeOps = number<int>(f[8], source, lineNo, 8, -1, kMaxCount);
    if (f.size() > 9) r.regBuff = number<int>(f[9], source, lineNo, 9, -1, 1);
    rules.push_back(std::move(r));
  }
  return rules;
}

const NcclTunerRule* matchNcclTunerRule(const std::vector<NcclTunerRule>& rules, Collective c, std::size_t bytes,
                                        int nnodes, int nranks,
                                        const std::function<bool(const NcclTunerRule&)>& usable) {
  constexpr int kPipeOps = 1, kRegBuff = 0;  // one operation per group, buffers not registered
  for (const NcclTunerRule& r : rules) {
    if (r.collective == c && bytes >= r.minBytes && bytes <= r.maxBytes && (r.nnodes == -1 || r.nnodes == nnodes) &&
        (r.nranks == -1 || r.nranks == nranks) && (r.numPipeOps == -1 || r.numPipeOps == kPipeOps) &&
        (r.regBuff == -1 || r.regBuff == kRegBuff) && (!usable || usable(r))) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace collbench
