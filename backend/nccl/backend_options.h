#pragma once
// Parsing of the BackendOptions the GPU backends understand (no CUDA here: tested without a device).
#include <cstddef>
#include <string>
#include <vector>

#include "collbench/backend.h"

namespace collbench::nccl {

/// Size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES; nccl_backend.cc asserts they agree).
inline constexpr std::size_t kUniqueIdBytes = 128;

/// Lower-case hex of `bytes` (two digits per byte).
std::string hexEncode(const std::string& bytes);
/// The kUniqueIdBytes bytes of a hex-encoded ncclUniqueId; Error{InvalidArgument} naming option nccl_id otherwise.
std::string decodeUniqueIdHex(const std::string& hex);

/// options[key] as an int, `fallback` when absent; Error{InvalidArgument} naming the key and value otherwise.
int intOption(const BackendOptions& options, const std::string& key, int fallback);
/// options[key] as positive seconds, `fallback` when absent.
double secondsOption(const BackendOptions& options, const std::string& key, double fallback);
/// "0,2,3" -> {0, 2, 3}; Error{InvalidArgument} for empty items, non-numbers and negative indices.
std::vector<int> parseDeviceList(const std::string& s);

}  // namespace collbench::nccl
