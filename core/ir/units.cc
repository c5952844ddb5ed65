#include "collbench/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "collbench/error.h"

namespace collbench {

std::size_t parseBytes(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) -> Error {
    return Error(Errc::InvalidArgument,
                 fmt::format("invalid {} '{}': {} (expected e.g. 8, 64K, 32M, 1.5G)", what, printable(text), why));
  };
  std::size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  const std::string_view number = text.substr(0, pos);
  if (number.empty()) throw bad(text.empty() ? "empty" : "not a number");
  std::string_view suffix = text.substr(pos);
  double scale = 1;
  if (!suffix.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    const std::string_view units = "KMGT";
    const auto u = units.find(c);
    if (u != std::string_view::npos) {
      scale = std::ldexp(1.0, 10 * static_cast<int>(u + 1));
      suffix.remove_prefix(1);
      if (!suffix.empty() && (suffix[0] == 'i' || suffix[0] == 'I')) suffix.remove_prefix(1);
    }
    if (!suffix.empty() && (suffix[0] == 'B' || suffix[0] == 'b')) suffix.remove_prefix(1);
    if (!suffix.empty()) throw bad(fmt::format("unknown suffix '{}'", printable(text.substr(pos))));
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size()) throw bad("not a number");
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) throw bad("too large");
  if (bytes != std::floor(bytes)) throw bad("not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

std::string formatBytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return v == std::floor(v) ? fmt::format("{:.0f} {}", v, kUnits[u]) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace collbench
