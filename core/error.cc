#include "collbench/error.h"

namespace collbench {

std::string_view toString(Errc e) {
  switch (e) {
    case Errc::InvalidArgument: return "invalid argument";
    case Errc::InvalidTopology: return "invalid topology";
    case Errc::InvalidSchedule: return "invalid schedule";
    case Errc::Timeout: return "timeout";
    case Errc::PeerFailure: return "peer failure";
    case Errc::Unsupported: return "unsupported";
    case Errc::BackendError: return "backend error";
  }
  return "?";
}

void failCheck(const char* expr, const char* file, int line, const std::string& detail) {
  throw Error(Errc::BackendError,
              fmt::format("internal check failed: {} at {}:{}{}{}", expr, file, line, detail.empty() ? "" : ": ",
                          detail));
}

}  // namespace collbench
