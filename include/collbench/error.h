#pragma once
/// collbench's one exception type. Messages name the ranks involved, like gloo's
/// "missing connection between rank X (this process) and rank Y".
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace collbench {

enum class Errc { InvalidArgument, InvalidTopology, InvalidSchedule, Timeout, PeerFailure, Unsupported, BackendError };

std::string_view toString(Errc e);

class Error : public std::runtime_error {
 public:
  static constexpr int kNoRank = -1;
  Error(Errc code, const std::string& message, int rank = kNoRank, int peer = kNoRank)
      : std::runtime_error(message), code_(code), rank_(rank), peer_(peer) {}
  Errc code() const { return code_; }
  int rank() const { return rank_; }
  int peer() const { return peer_; }

 private:
  Errc code_;
  int rank_;
  int peer_;
};

/// `text` with control and non-ASCII bytes escaped (\n, \x1f), cut at 200 bytes: user input echoed in an error
/// message must not break the one-line rule.
std::string printable(std::string_view text);

/// strerror(3)'s text for errno value `e`, without strerror's shared buffer (callers run on several threads).
std::string errnoText(int e);

[[noreturn]] void failCheck(const char* expr, const char* file, int line, const std::string& detail);

}  // namespace collbench

/// Internal invariant: a failure is a collbench bug, reported with file:line.
#define COLLBENCH_CHECK(cond, ...)                                                                 \
  do {                                                                                             \
    if (!(cond)) ::collbench::failCheck(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
