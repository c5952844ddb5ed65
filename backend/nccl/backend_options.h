#pragma once
// Parsing of the BackendOptions the GPU backends understand (no CUDA here: tested without a device).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

/// NCCL's own implementation of a collbench in-network algorithm. Switch ops cannot be issued as ncclSend/ncclRecv,
/// so the nccl backend runs such an algorithm as ncclAllReduce on communicators created with NCCL_ALGO naming NCCL's
/// implementation: NCCL reads NCCL_ALGO (src/graph/tuning.cc ncclTopoTuneModel) and NCCL_COLLNET_ENABLE (src/init.cc,
/// re-read at every communicator's creation) when a communicator is initialised, not per call.
struct NcclNativeAlgorithm {
  std::string_view ncclAlgo;  ///< NCCL_ALGO's value, as NCCL spells it (src/init.cc ncclAlgoStr)
  bool collnet = false;       ///< CollNet: needs NCCL_COLLNET_ENABLE=1 (and a CollNet/SHARP network plugin)
};

/// NCCL's algorithm for collbench's `algorithm`: nvls -> NVLS, nvls_tree -> NVLSTree, collnet_direct ->
/// CollNetDirect, collnet_chain -> CollNetChain; nullopt for every other algorithm.
std::optional<NcclNativeAlgorithm> ncclNativeAlgorithm(std::string_view algorithm);

/// The environment that makes a new communicator run `a`: NCCL_ALGO, and NCCL_COLLNET_ENABLE=1 for CollNet.
std::vector<std::pair<std::string, std::string>> ncclAlgorithmEnvironment(const NcclNativeAlgorithm& a);

/// Sets environment variables for its lifetime and restores each one's previous value (or its absence) when it ends,
/// so that a communicator made inside the scope sees them and the process's environment is as before afterwards.
/// Not thread safe (setenv): hold it only while this thread alone creates communicators.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const std::vector<std::pair<std::string, std::string>>& vars);
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  ~ScopedEnvironment();

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;  ///< name, previous value
};

}  // namespace collbench::nccl
