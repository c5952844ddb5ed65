#include "collbench/error.h"

#include <system_error>

namespace collbench {

std::string_view toString(Errc e) {
  switch (e) {
    case Errc::InvalidArgument:
      return "invalid argument";
    case Errc::InvalidTopology:
      return "invalid topology";
    case Errc::InvalidSchedule:
      return "invalid schedule";
    case Errc::Timeout:
      return "timeout";
    case Errc::PeerFailure:
      return "peer failure";
    case Errc::Unsupported:
      return "unsupported";
    case Errc::BackendError:
      return "backend error";
  }
  return "?";
}

std::string errnoText(int e) { return std::system_category().message(e); }

std::string printable(std::string_view text) {
  constexpr std::size_t kMaxEcho = 200;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMaxEcho; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxEcho) out += "...";
  return out;
}

void failCheck(const char* expr, const char* file, int line, const std::string& detail) {
  throw Error(Errc::BackendError, fmt::format("internal check failed: {} at {}:{}{}{}", expr, file, line,
                                              detail.empty() ? "" : ": ", detail));
}

}  // namespace collbench
