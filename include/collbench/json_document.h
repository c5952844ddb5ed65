#pragma once
// The one JSON entry point of every collbench input format (topology, trace, tuning table, perf JSON, gate and report
// inputs, TF_CONFIG, cluster specs): the same rules and the same one-line error for all of them.
#include <nlohmann/json.hpp>
#include <string_view>

#include "collbench/error.h"

namespace collbench {

/// Deeper documents are rejected: no collbench format nests more than 6 levels, and the bound keeps a hostile input
/// from exhausting the stack of code that walks or prints the tree recursively (nlohmann's dump() recurses).
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text`. Duplicate object keys are rejected (nlohmann silently keeps the last one, which in a hand-edited
/// file hides a typo). Every failure, including number overflow and invalid UTF-8, throws Error{code}
/// "<source>: malformed JSON at line L, column C (byte B): <reason>" or "<source>: <path>: duplicate key".
nlohmann::json parseJsonDocument(std::string_view text, std::string_view source, Errc code = Errc::InvalidArgument);

}  // namespace collbench
