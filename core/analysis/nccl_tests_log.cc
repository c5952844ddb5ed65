// nccl-tests stdout parser (nccl_tests_log.h). Column layout from NVIDIA/nccl-tests src/util.cu
// (writeResultHeader, writeBenchmarkLinePreamble, writeBenchmarkLineBody), versions 2.13 to 2.19.
#include "collbench/nccl_tests_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "collbench/error.h"
#include "collbench/nccl_model.h"

namespace collbench {
namespace {

/// Preamble columns: size, count, type, redop, root.
constexpr std::size_t kPreambleColumns = 5;
/// Per half: time, algbw, busbw, #wrong; with per-iteration timing (-I 1) also i_min, i_max, i_p99, i_cv%.
constexpr std::size_t kHalfColumns = 4;
constexpr std::size_t kHalfColumnsPerIter = 8;

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string tok; in >> tok;) out.push_back(tok);
  return out;
}

[[noreturn]] void failAt(const std::string& source, int line, const std::string& field, const std::string& what,
                         const std::string& value) {
  throw Error(Errc::InvalidArgument,
              fmt::format("{}:{}: {}: {} (got '{}')", printable(source), line, field, what, printable(value)));
}

bool parseDouble(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

template <typename T>
bool parseInt(const std::string& s, T& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

/// The value after `key` in a "# nThread 1 nGpus 8 ..." style line: the token following the key's last word.
std::string valueAfter(const std::vector<std::string>& toks, const std::string& key) {
  for (std::size_t i = 0; i + 1 < toks.size(); ++i) {
    if (toks[i] == key) return toks[i + 1];
  }
  return "";
}

NcclTestsHalf parseHalf(const std::vector<std::string>& t, std::size_t at, const std::string& source, int line,
                        const char* which) {
  NcclTestsHalf h;
  const std::string f = which;
  if (!parseDouble(t[at], h.timeUs) || !std::isfinite(h.timeUs) || h.timeUs < 0) {
    failAt(source, line, f + " time (us)", "must be a finite number >= 0", t[at]);
  }
  if (!parseDouble(t[at + 1], h.algbwGBps) || !std::isfinite(h.algbwGBps) || h.algbwGBps < 0) {
    failAt(source, line, f + " algbw (GB/s)", "must be a finite number >= 0", t[at + 1]);
  }
  if (!parseDouble(t[at + 2], h.busbwGBps) || !std::isfinite(h.busbwGBps) || h.busbwGBps < 0) {
    failAt(source, line, f + " busbw (GB/s)", "must be a finite number >= 0", t[at + 2]);
  }
  const std::string& w = t[at + 3];
  if (w == "N/A") {
    h.wrong = -1;
  } else {
    double d = 0;  // nccl-tests prints #wrong with %6g: "0", "12", "1.5e+06"
    if (!parseDouble(w, d) || !std::isfinite(d) || d < 0 || d != std::floor(d)) {
      failAt(source, line, f + " #wrong", "must be a non-negative count or N/A", w);
    }
    h.wrong = static_cast<long long>(d);
  }
  return h;
}

/// The most ranks (or nodes) a log may state: the bound every collbench record puts on ranks, far above any machine.
constexpr long long kMaxRanks = 1 << 24;

/// Whether `s` reads as a number (strtod, the whole token).
bool isNumber(const std::string& s) {
  double d = 0;
  return parseDouble(s, d);
}

/// Whether a line inside a result table (`t`, its tokens) is an attempt at a result row, to be parsed and its errors
/// reported, rather than output of something running beside nccl-tests, which is skipped: NCCL's INFO and WARN lines
/// ("host:pid:tid [dev] NCCL INFO ..."), MPI and shell warnings ("WARNING: ...", "[node:pid] ..."), banners ("-----").
/// A row starts with a number (a negative or garbled size included: "-16", "1e3"), or is colon-free text of at
/// least a row's preamble width that is half numbers ("garbage 1 2 3"): none of those others is.
bool looksLikeRow(const std::string& line, const std::vector<std::string>& t) {
  if (t.empty()) return false;
  const std::string& f = t[0];
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (digit(f[0])) return true;
  if ((f[0] == '-' || f[0] == '+' || f[0] == '.') && f.size() > 1 &&
      (digit(f[1]) || (f[1] == '.' && f.size() > 2 && digit(f[2]))))
    return true;
  if (line.find(':') != std::string::npos || line.find("NCCL") != std::string::npos) return false;
  if (t.size() < kPreambleColumns) return false;
  const auto numbers = static_cast<std::size_t>(std::count_if(t.begin(), t.end(), isNumber));
  return 2 * numbers >= t.size();
}

/// A CSV header's count comment ("# gpu_count: 16 (8 per node)"): its leading integer, which must be in
/// [1, kMaxRanks]; an error naming the comment and its value otherwise.
int statedCount(const std::vector<std::string>& toks, const std::string& source, int line) {
  const std::string value = toks.size() > 1 ? toks[1] : "";
  long long v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr == value.data() || v < 1 || v > kMaxRanks) {
    const std::string name = toks[0].substr(0, toks[0].size() - 1);  // without its ':'
    failAt(source, line, "# " + name, fmt::format("must start with a count in [1, {}]", kMaxRanks), value);
  }
  return static_cast<int>(v);
}

/// The leading integer of a CSV comment value: "16 (8 per node, 1 GPU per MPI rank)" -> 16; 0 when there is none.
int leadingInt(const std::vector<std::string>& toks, std::size_t at) {
  if (at >= toks.size()) return 0;
  const std::string& t = toks[at];
  int v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  return ec == std::errc() && ptr != t.data() && v > 0 ? v : 0;
}

/// The GPUs per thread of the first "-g N" / "--ngpus N" ("-g 8)" too) in a CSV comment quoting the nccl-tests
/// command, unless an earlier comment gave them.
void gpusPerThreadOfCommand(const std::vector<std::string>& toks, int& gpusPerThread) {
  for (std::size_t i = 0; i + 1 < toks.size() && gpusPerThread == 0; ++i) {
    if (toks[i] == "-g" || toks[i] == "--ngpus") gpusPerThread = leadingInt(toks, i + 1);
  }
}

/// The run of digits and dots of `s` from `from` ("2.26.2" of "2.26.2+cuda12.8").
std::string versionAt(const std::string& s, std::size_t from) {
  std::size_t end = from;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
  return s.substr(from, end - from);
}

/// "2.26.2" from NCCL's "NCCL version 2.26.2+cuda12.8" anywhere in `line` ("" when absent).
std::string ncclVersionIn(const std::string& line) {
  static const std::string kKey = "NCCL version ";
  const auto at = line.find(kKey);
  return at == std::string::npos ? "" : versionAt(line, at + kKey.size());
}

/// A CSV's "# nccl_version: 2.26.2+cuda12.8 ...": the MAJOR.MINOR.PATCH its first word starts with ("" otherwise).
std::string leadingNcclVersion(const std::vector<std::string>& toks) {
  if (toks.size() < 2) return "";
  std::string v = versionAt(toks[1], 0);
  return ncclVersionCode(v) > 0 ? v : "";
}

/// nccl-tests' "nccl-library=22809": NCCL_VERSION_CODE, major x 10000 + minor x 100 + patch since NCCL 2.9
/// (nccl.h.in, NCCL_VERSION(X,Y,Z)).
std::string ncclVersionOfCode(const std::string& token) {
  static const std::string kKey = "nccl-library=";
  if (token.rfind(kKey, 0) != 0) return "";
  int code = 0;
  if (!parseInt(token.substr(kKey.size()), code) || code < 20900) return "";
  constexpr int kMajor = 10000, kMinor = 100;
  return fmt::format("{}.{}.{}", code / kMajor, code % kMajor / kMinor, code % kMinor);
}

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) {
    const auto a = cell.find_first_not_of(" \t"), b = cell.find_last_not_of(" \t");
    out.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

/// Column positions of the CSV form's header line; -1 where a column is absent.
struct CsvColumns {
  int bytes = -1, count = -1, type = -1, redop = -1, root = -1;
  int time[2] = {-1, -1}, algbw[2] = {-1, -1}, busbw[2] = {-1, -1}, wrong[2] = {-1, -1};
  std::size_t size = 0;
};

CsvColumns csvColumns(const std::vector<std::string>& names, const std::string& source, int line) {
  CsvColumns c;
  c.size = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int at = static_cast<int>(i);
    const std::string& n = names[i];
    for (auto [name, slot] : {std::pair{"bytes", &c.bytes}, std::pair{"count", &c.count}, std::pair{"type", &c.type},
                              std::pair{"redop", &c.redop}, std::pair{"root", &c.root}}) {
      if (n == name) *slot = at;
    }
    for (int half = 0; half < 2; ++half) {
      const std::string suffix = half == 0 ? "_oop" : "_ip";
      if (n == "time_us" + suffix) c.time[half] = at;
      if (n == "algbw" + suffix) c.algbw[half] = at;
      if (n == "busbw" + suffix) c.busbw[half] = at;
      if (n == "wrong" + suffix) c.wrong[half] = at;
    }
  }
  for (auto [name, slot] : {std::pair{"bytes", c.bytes}, std::pair{"time_us_oop", c.time[0]},
                            std::pair{"algbw_oop", c.algbw[0]}, std::pair{"busbw_oop", c.busbw[0]}}) {
    if (slot < 0) failAt(source, line, "CSV header", fmt::format("has no '{}' column", name), names.front());
  }
  return c;
}

NcclTestsRow parseCsvRow(const std::string& line, const CsvColumns& c, const std::string& source, int lineNo) {
  const std::vector<std::string> t = splitCsv(line);
  if (t.size() != c.size) {
    failAt(source, lineNo, "CSV row", fmt::format("expected {} comma-separated columns, found {}", c.size, t.size()),
           line.substr(0, 60));
  }
  NcclTestsRow row;
  row.line = lineNo;
  const auto cell = [&](int at) { return t[static_cast<std::size_t>(at)]; };
  if (!parseInt(cell(c.bytes), row.bytes))
    failAt(source, lineNo, "bytes", "must be a non-negative integer", cell(c.bytes));
  if (c.count >= 0 && !parseInt(cell(c.count), row.count)) {
    failAt(source, lineNo, "count", "must be a non-negative integer", cell(c.count));
  }
  if (c.type >= 0) row.type = cell(c.type);
  if (c.redop >= 0) row.redop = cell(c.redop);
  if (c.root >= 0 && !parseInt(cell(c.root), row.root))
    failAt(source, lineNo, "root", "must be an integer", cell(c.root));
  for (int half = 0; half < 2; ++half) {
    if (c.time[half] < 0 || c.algbw[half] < 0 || c.busbw[half] < 0) continue;
    const std::string wrong = c.wrong[half] >= 0 ? cell(c.wrong[half]) : "N/A";
    const std::vector<std::string> cols = {cell(c.time[half]), cell(c.algbw[half]), cell(c.busbw[half]), wrong};
    (half == 0 ? row.outOfPlace : row.inPlace) =
        parseHalf(cols, 0, source, lineNo, half == 0 ? "out-of-place" : "in-place");
  }
  if (c.time[1] < 0 || c.algbw[1] < 0 || c.busbw[1] < 0) row.inPlace = row.outOfPlace;
  return row;
}

}  // namespace

std::string stripLauncherPrefix(const std::string& line) {
  std::size_t i = line.find_first_not_of(' ');
  if (i == std::string::npos) return line;
  const auto digitsFrom = [&](std::size_t at) {
    while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at]))) ++at;
    return at;
  };
  // srun --label: the task id right-aligned, then ':' (a table row's first number is followed by spaces instead).
  if (const std::size_t j = digitsFrom(i); j > i && j < line.size() && line[j] == ':') return line.substr(j + 1);
  // mpirun --tag-output: "[jobid,rank]<stdout>:" or "<stderr>:".
  if (line[i] == '[') {
    const std::size_t a = digitsFrom(i + 1);
    if (a > i + 1 && a < line.size() && line[a] == ',') {
      const std::size_t b = digitsFrom(a + 1);
      if (b > a + 1 && b < line.size() && line[b] == ']') {
        for (const char* stream : {"<stdout>:", "<stderr>:"}) {
          if (line.compare(b + 1, std::strlen(stream), stream) == 0) return line.substr(b + 1 + std::strlen(stream));
        }
      }
    }
  }
  return line;
}

std::optional<Collective> collectiveOfProgram(const std::string& program) {
  std::string p = program;
  const auto slash = p.find_last_of('/');
  if (slash != std::string::npos) p = p.substr(slash + 1);
  for (const char* suffix : {"_perf_mpi", "_perf"}) {
    const std::string s = suffix;
    if (p.size() > s.size() && p.compare(p.size() - s.size(), s.size(), s) == 0) {
      p.resize(p.size() - s.size());
      break;
    }
  }
  if (p == "all_reduce") return Collective::AllReduce;
  if (p == "reduce_scatter") return Collective::ReduceScatter;
  if (p == "all_gather") return Collective::AllGather;
  if (p == "broadcast") return Collective::Broadcast;
  if (p == "reduce") return Collective::Reduce;
  return std::nullopt;
}

NcclTestsLog parseNcclTestsLog(const std::string& text, const std::string& source) {
  NcclTestsLog log;
  bool inTable = false, sawHeader = false;
  std::size_t halfColumns = kHalfColumns;
  std::istringstream in(text);
  int lineNo = 0;
  std::optional<CsvColumns> csv;
  int commandGpusPerThread = 0, csvGpusPerThread = 0;  // "-g N" of a CSV's "# command:", of its first other comment
  for (std::string raw; std::getline(in, raw);) {
    ++lineNo;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string line = stripLauncherPrefix(raw);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (log.ncclVersion.empty()) log.ncclVersion = ncclVersionIn(line);
    if (line[first] == '#') {
      const std::vector<std::string> t = split(line.substr(first + 1));
      if (t.empty()) continue;
      if (t[0] == "nccl-tests" && t.size() > 2 && t[1] == "version") {
        log.version = t[2];
        for (const std::string& tok : t) {
          if (log.ncclVersion.empty()) log.ncclVersion = ncclVersionOfCode(tok);
        }
      } else if (t[0] == "gpu_count:") {  // CSV form
        log.nranks = statedCount(t, source, lineNo);
        gpusPerThreadOfCommand(t, csvGpusPerThread);
      } else if (t[0] == "node_count:") {
        log.nodes = statedCount(t, source, lineNo);
      } else if (t[0] == "nccl_version:") {  // CSV form, when the header gives the bare version
        if (log.ncclVersion.empty()) log.ncclVersion = leadingNcclVersion(t);
      } else if (t[0] == "command:") {  // CSV form: the command quoted
        gpusPerThreadOfCommand(t, commandGpusPerThread);
      } else if (!t[0].empty() && t[0].back() == ':') {  // other CSV comments: "# env_vars: ...; command ... -g 8"
        gpusPerThreadOfCommand(t, csvGpusPerThread);
      } else if (t.size() >= 4 && t[0] == "Collective" && t[1] == "test" && t[2] == "starting:") {
        log.program = t[3];
        log.collective = collectiveOfProgram(t[3]);
      } else if (t.size() >= 4 && t[0] == "collbench" && t[2] == "perf") {
        // "# collbench 0.1.0 perf all_reduce: backend host, 4 ranks, algorithm ring"
        std::string c = t[3];
        if (!c.empty() && c.back() == ':') c.pop_back();
        log.program = "collbench perf " + c;
        try {
          log.collective = parseCollective(c);
        } catch (const Error&) {
          failAt(source, lineNo, "collective", "unknown collective in the collbench header", c);
        }
        const std::string algo = valueAfter(t, "algorithm");
        if (!algo.empty()) log.algorithm = algo;
      } else if (t[0] == "nThread") {
        parseInt(valueAfter(t, "nThread"), log.nThread);
        parseInt(valueAfter(t, "nGpus"), log.nGpus);
        parseInt(valueAfter(t, "minBytes"), log.minBytes);
        parseInt(valueAfter(t, "maxBytes"), log.maxBytes);
        for (std::size_t i = 0; i + 2 < t.size(); ++i) {
          if (t[i] == "warmup" && t[i + 1] == "iters:") parseInt(t[i + 2], log.warmupIters);
        }
        for (std::size_t i = 0; i + 1 < t.size(); ++i) {
          if (t[i] == "iters:" && (i == 0 || (t[i - 1] != "warmup" && t[i - 1] != "agg")))
            parseInt(t[i + 1], log.iters);
        }
      } else if (t[0] == "Rank" && t.size() >= 8) {
        ++log.nranks;
        const std::string host = valueAfter(t, "on");
        if (!host.empty() && std::find(log.hosts.begin(), log.hosts.end(), host) == log.hosts.end()) {
          log.hosts.push_back(host);
        }
      } else if (t[0] == "size" && t.size() >= kPreambleColumns && t[1] == "count") {
        sawHeader = inTable = true;
        halfColumns = std::find(t.begin(), t.end(), "i_min") != t.end() ? kHalfColumnsPerIter : kHalfColumns;
      } else if (t[0] == "Out" && t.size() >= 6 && t[1] == "of" && t[2] == "bounds") {
        inTable = false;
        parseInt(t[5], log.outOfBounds);
      } else if (t[0] == "Avg" && t.size() >= 5 && t[1] == "bus") {
        inTable = false;
        double bw = 0;
        if (parseDouble(t[4], bw)) log.avgBusBwGBps = bw;
      }
      continue;
    }
    if (!csv && line.compare(first, 6, "bytes,") == 0) {
      csv = csvColumns(splitCsv(line.substr(first)), source, lineNo);
      log.csv = sawHeader = true;
      continue;
    }
    if (csv) {
      log.rows.push_back(parseCsvRow(line.substr(first), *csv, source, lineNo));
      continue;
    }
    if (!inTable) continue;  // launcher and NCCL INFO output before the table
    const std::vector<std::string> t = split(line);
    if (!looksLikeRow(line, t)) continue;  // NCCL INFO/WARN lines inside it
    NcclTestsRow row;
    row.line = lineNo;
    // Rows: 5 preamble columns, then one half (trace replay: in-place only) or two, optionally a timestamp.
    const std::size_t one = kPreambleColumns + halfColumns, two = kPreambleColumns + 2 * halfColumns;
    std::size_t halves = 0;
    if (t.size() == one) {
      halves = 1;
    } else if (t.size() >= two && t.size() <= two + 2) {
      halves = 2;  // and the "%21s" timestamp of -T (date and time tokens)
    }
    if (halves == 0) {
      failAt(source, lineNo, "row", fmt::format("expected {} or {} columns, found {}", one, two, t.size()),
             line.substr(first, 60));
    }
    if (!parseInt(t[0], row.bytes)) failAt(source, lineNo, "size (B)", "must be a non-negative integer", t[0]);
    if (!parseInt(t[1], row.count)) failAt(source, lineNo, "count (elements)", "must be a non-negative integer", t[1]);
    row.type = t[2];
    row.redop = t[3];
    if (!parseInt(t[4], row.root)) failAt(source, lineNo, "root", "must be an integer", t[4]);
    if (halves == 1) {
      row.inPlace = row.outOfPlace = parseHalf(t, kPreambleColumns, source, lineNo, "in-place");
    } else {
      row.outOfPlace = parseHalf(t, kPreambleColumns, source, lineNo, "out-of-place");
      row.inPlace = parseHalf(t, kPreambleColumns + halfColumns, source, lineNo, "in-place");
    }
    log.rows.push_back(std::move(row));
  }
  if (!sawHeader) {
    throw Error(
        Errc::InvalidArgument,
        fmt::format("{}: no nccl-tests result table (expected a '#  size  count  type  redop  root  time  algbw  "
                    "busbw  #wrong ...' header line, or a CSV 'bytes,count,type,time_us_oop,...' one)",
                    printable(source)));
  }
  if (log.rows.empty()) {
    throw Error(Errc::InvalidArgument, fmt::format("{}: the nccl-tests table has no result rows", printable(source)));
  }
  if (log.nGpus == 0 && log.csv) log.nGpus = commandGpusPerThread > 0 ? commandGpusPerThread : csvGpusPerThread;
  if (log.nranks == 0 && !log.csv) {  // no rank lines (trimmed log): one process's threads x GPUs, when plausible
    const long long n = static_cast<long long>(log.nThread) * log.nGpus;
    log.nranks = n >= 1 && n <= kMaxRanks ? static_cast<int>(n) : 0;
  }
  return log;
}

NcclTestsLog readNcclTestsLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("cannot read nccl-tests log '{}': {}", printable(path),
                            std::filesystem::exists(path) ? "not a readable file" : "no such file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parseNcclTestsLog(ss.str(), path);
}

}  // namespace collbench
