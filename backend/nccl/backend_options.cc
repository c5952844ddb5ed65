#include "backend_options.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>

#include "collbench/error.h"

namespace collbench::nccl {

std::string hexEncode(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 0xF];
  }
  return out;
}

std::string decodeUniqueIdHex(const std::string& hex) {
  if (hex.size() != kUniqueIdBytes * 2) {
    throw Error(Errc::InvalidArgument,
                fmt::format("nccl backend option nccl_id must be {} hex digits (an ncclUniqueId), got {} characters",
                            kUniqueIdBytes * 2, hex.size()));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw Error(Errc::InvalidArgument, fmt::format("nccl backend option nccl_id: '{}' is not a hex digit", c));
  };
  std::string out(kUniqueIdBytes, '\0');
  for (std::size_t i = 0; i < kUniqueIdBytes; ++i) {
    out[i] = static_cast<char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
  }
  return out;
}

int intOption(const BackendOptions& options, const std::string& key, int fallback) {
  auto it = options.find(key);
  if (it == options.end()) return fallback;
  int v = 0;
  const char* end = it->second.data() + it->second.size();
  const auto [p, ec] = std::from_chars(it->second.data(), end, v);
  if (it->second.empty() || ec != std::errc() || p != end) {
    throw Error(Errc::InvalidArgument, fmt::format("backend option {}='{}' is not an integer", key, it->second));
  }
  return v;
}

double secondsOption(const BackendOptions& options, const std::string& key, double fallback) {
  auto it = options.find(key);
  if (it == options.end()) return fallback;
  double v = 0;
  const char* end = it->second.data() + it->second.size();
  const auto [p, ec] = std::from_chars(it->second.data(), end, v);
  if (it->second.empty() || ec != std::errc() || p != end || !(v > 0)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("backend option {}='{}' is not a positive number of seconds", key, it->second));
  }
  return v;
}

std::vector<int> parseDeviceList(const std::string& s) {
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    int v = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("backend option devices='{}': '{}' is not a device index", s, item));
    }
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

std::optional<NcclNativeAlgorithm> ncclNativeAlgorithm(std::string_view algorithm) {
  struct Entry {
    std::string_view ours;
    NcclNativeAlgorithm theirs;
  };
  static constexpr std::array<Entry, 4> kTable = {{{"nvls", {"NVLS", false}},
                                                   {"nvls_tree", {"NVLSTree", false}},
                                                   {"collnet_direct", {"CollNetDirect", true}},
                                                   {"collnet_chain", {"CollNetChain", true}}}};
  for (const Entry& e : kTable) {
    if (e.ours == algorithm) return e.theirs;
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> ncclAlgorithmEnvironment(const NcclNativeAlgorithm& a) {
  std::vector<std::pair<std::string, std::string>> env = {{"NCCL_ALGO", std::string(a.ncclAlgo)}};
  if (a.collnet) env.emplace_back("NCCL_COLLNET_ENABLE", "1");
  return env;
}

ScopedEnvironment::ScopedEnvironment(const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): documented single-threaded use
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), value.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  }
}

ScopedEnvironment::~ScopedEnvironment() {
  // Restored in reverse, so that a name given twice ends at its value from before the scope.
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      ::unsetenv(it->first.c_str());  // NOLINT(concurrency-mt-unsafe)
    }
  }
}

}  // namespace collbench::nccl
