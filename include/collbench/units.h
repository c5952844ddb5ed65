#pragma once
/// Size strings as nccl-tests takes them: an integer or decimal with an optional binary suffix K, M, G, T
/// (optionally followed by B or iB), e.g. "8", "32M", "1.5G", "4KiB".
#include <cstddef>
#include <string>
#include <string_view>

namespace collbench {

/// Throws Error{InvalidArgument} naming `what` and the value for empty, negative, non-numeric, fractional-byte or
/// overflowing input.
std::size_t parseBytes(std::string_view text, std::string_view what = "size");
/// "1.5 GiB"-style rendering for headers and messages.
std::string formatBytes(std::size_t bytes);

}  // namespace collbench
