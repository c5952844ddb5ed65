#include "cli_common.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/units.h"

namespace collbench::cli {

// ---- The command line ----

namespace {

/// Written once by setCommandLine (from main, before any command runs), read-only afterwards.
std::string& recordedCommandLine() {
  static std::string line;
  return line;
}
bool& commandLineSet() {
  static bool set = false;
  return set;
}

}  // namespace

void setCommandLine(int argc, const char* const* argv) {
  COLLBENCH_CHECK(!commandLineSet(), "the command line is recorded once, by main");
  commandLineSet() = true;
  std::string& line = recordedCommandLine();
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
}

const std::string& commandLine() { return recordedCommandLine(); }

// ---- Comma-separated list flags ----

namespace {

[[noreturn]] void emptyList(std::string_view flag) {
  throw Error(Errc::InvalidArgument, fmt::format("{}: empty list", flag));
}

}  // namespace

std::vector<std::string> splitList(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int parseIntItem(std::string_view flag, std::string_view item, int min, std::string_view alternatives) {
  int v = 0;
  const char* end = item.data() + item.size();
  const auto [ptr, ec] = std::from_chars(item.data(), end, v);
  if (item.empty() || ec != std::errc() || ptr != end || v < min) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: '{}' is not an integer >= {}{}", flag, printable(item), min, alternatives));
  }
  return v;
}

std::vector<int> parseIntList(std::string_view flag, std::string_view text, int min) {
  std::vector<int> out;
  for (const std::string& item : splitList(text)) out.push_back(parseIntItem(flag, item, min));
  if (out.empty()) emptyList(flag);
  return out;
}

int checkChannels(std::string_view flag, int channels) {
  if (channels < 1) {
    throw Error(Errc::InvalidArgument, fmt::format("{}: '{}' is not an integer >= 1", flag, channels));
  }
  if (channels > kMaxChannels) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {} channels: at most {} (NCCL's MAXCHANNELS)", flag, channels, kMaxChannels));
  }
  return channels;
}

std::vector<int> parseChannelList(std::string_view flag, std::string_view text) {
  std::vector<int> out = parseIntList(flag, text, 1);
  for (const int c : out) checkChannels(flag, c);
  return out;
}

std::vector<std::size_t> parseBytesList(std::string_view flag, std::string_view text) {
  std::vector<std::size_t> out;
  for (const std::string& item : splitList(text)) out.push_back(parseBytes(item, flag));
  if (out.empty()) emptyList(flag);
  return out;
}

// ---- The wire protocol flag ----

void addProtoOption(CLI::App* cmd, std::string& value) {
  cmd->add_option("--proto", value,
                  "wire protocol the simulator times transfers with: LL | LL128 | Simple (NCCL's; timing only, the "
                  "data movement is the same; default: none on CPU ranks, NCCL's point-to-point choice on GPUs)");
}

std::optional<Protocol> parseProtoFlag(std::string_view value) {
  if (value.empty()) return std::nullopt;
  try {
    return parseProtocol(value);
  } catch (const Error& e) {
    throw Error(Errc::InvalidArgument, fmt::format("--proto: {}", e.what()));
  }
}

}  // namespace collbench::cli
