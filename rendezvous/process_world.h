#pragma once
/// The process backend's world and its small wire protocol, kept free of Gloo headers so that tools and tests can
/// use them: where this process sits (from BackendOptions, which the CLI fills from the cluster resolver), the
/// per-collective header that lets a receiver refuse a mismatched call before any data moves, and the hello and
/// control messages exchanged between processes.
///
/// BackendOptions keys understood by the "gloo" backend (all strings):
///   rank       this process's rank, 0..world-1                           (default 0)
///   world      number of processes                                       (default 1)
///   addresses  "host:port,host:port,..." per rank in rank order; this rank's host is the address its transport
///              listens on (never all interfaces)                         (required when world > 1)
///   tasks      "worker[0],worker[1],..." per rank, names used in messages (default "rank <i>")
///   master     the leader's "host:port": the chief serves the TCP store there (default addresses[0])
///   store      "tcp" (the chief serves it at master) or "file:<dir>" (a directory every process shares; fresh per
///              job)                                                      (default tcp)
///   token      cluster token carried by every store frame and transport hello (default: derived from addresses)
///   timeout    seconds; bounds rendezvous and overrides RunOptions::timeoutSeconds (COLLBENCH_TIMEOUT_SECONDS)
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/backend.h"
#include "collbench/error.h"
#include "collbench/schedule.h"

namespace collbench::host {

/// Environment variables the CLI maps onto the options above.
inline constexpr const char* kClusterTokenEnv = "COLLBENCH_CLUSTER_TOKEN";
inline constexpr const char* kTimeoutEnv = "COLLBENCH_TIMEOUT_SECONDS";

struct ProcessWorld {
  int rank = 0;
  int world = 1;
  std::vector<std::string> addresses;
  std::vector<std::string> tasks;
  std::string master;
  std::string store = "tcp";
  std::string token;
  std::optional<double> timeoutSeconds;

  /// Validates and fills defaults; throws Error{InvalidArgument} naming the option and the value.
  static ProcessWorld fromOptions(const BackendOptions& options);
  /// "worker[2] (rank 2, 127.0.0.1:4002)" for messages.
  std::string describeRank(int r) const;
  /// Host part of addresses[r] (IPv6 brackets removed).
  std::string hostOf(int r) const;
};

/// A token every task of one cluster derives identically when COLLBENCH_CLUSTER_TOKEN is not set: a hash of the
/// cluster spec, so that processes of another cluster (or a stale job with other addresses) are refused.
std::string deriveClusterToken(std::string_view clusterSpecText);

/// 64-bit FNV-1a, used for the schedule fingerprint and the transport hello digest (integrity against mistakes,
/// not a cryptographic MAC).
std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t seed = 0xcbf29ce484222325ull);
std::uint64_t fnv1a(std::string_view text, std::uint64_t seed = 0xcbf29ce484222325ull);

/// Fingerprint of everything both sides of a transfer must agree on: the spec, the algorithm and every op.
std::uint64_t scheduleFingerprint(const Schedule& s);

/// 2: the header covers a run of collectives (`epochs`); heartbeats.
inline constexpr std::uint16_t kProcessProtocolVersion = 2;

/// Sent by each rank to each neighbour before every run of consecutive collectives of one schedule (a run() call's
/// warmup, then its timed iterations: `epochs` of them); a rank sends no data to a peer whose header differs from
/// its own, so a mismatched call fails on both sides before any data moves.
struct CollectiveHeader {
  static constexpr std::uint32_t kMagic = 0x44484243;  // "CBHD"
  static constexpr std::size_t kBytes = 64;
  std::uint16_t version = kProcessProtocolVersion;
  Collective kind = Collective::AllReduce;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  std::int32_t root = 0;
  std::int32_t nranks = 0;
  std::int32_t rank = 0;
  std::uint64_t sequence = 0;  ///< collectives this backend has run before this one
  std::uint64_t count = 0;
  std::uint64_t algorithmHash = 0;
  std::uint64_t scheduleHash = 0;
  std::uint32_t epochs = 1;  ///< collectives of this schedule run back to back from `sequence` on

  static CollectiveHeader of(const Schedule& s, int rank, std::uint64_t sequence, std::uint64_t fingerprint);
  std::array<std::byte, kBytes> encode() const;
  /// Decodes, or explains why the bytes are not a header of our protocol version.
  static CollectiveHeader decode(std::span<const std::byte> bytes, std::string* whyNot);
};

/// "" when `theirs` (received from rank theirs.rank) agrees with `mine`; otherwise what differs, in words, naming
/// each side's values by rank, lower rank first (the same text on both ranks and when relayed to others):
/// "rank 1 (this process) and rank 0 called different collectives: rank 0: count 1000; rank 1: count 2000".
std::string describeMismatch(const CollectiveHeader& mine, const CollectiveHeader& theirs);

/// First message on every connection after rendezvous: proves the peer is the rank it claims, of this cluster and
/// protocol version.
struct Hello {
  static constexpr std::uint32_t kMagic = 0x4c484243;  // "CBHL"
  static constexpr std::size_t kBytes = 32;
  std::uint16_t version = kProcessProtocolVersion;
  std::int32_t rank = 0;
  std::int32_t world = 0;
  std::uint64_t tokenDigest = 0;

  static std::uint64_t digest(std::string_view token);
  std::array<std::byte, kBytes> encode() const;
  /// "" when `bytes` is a hello from `expectedRank` of this world and token; else the reason.
  static std::string check(std::span<const std::byte> bytes, int expectedRank, int world, std::uint64_t tokenDigest);
};

/// Out-of-band notice between processes: a rank that fails tells the others why (so that every survivor names the
/// rank that really failed), a rank that finishes says goodbye (so that its closing socket is not a failure), and
/// every rank sends heartbeats (so that a peer that stops responding without closing its connections, e.g. stopped
/// by SIGSTOP or swapped out, is the one named when a wait times out, rather than a live peer waiting on it).
struct ControlMessage {
  static constexpr std::uint32_t kMagic = 0x54434243;  // "CBCT"
  static constexpr std::size_t kBytes = 256;
  static constexpr std::size_t kMaxReason = kBytes - 24;
  enum class Kind : std::uint16_t { Abort = 1, Goodbye = 2, Heartbeat = 3 };
  Kind kind = Kind::Abort;
  Errc code = Errc::PeerFailure;
  std::int32_t origin = -1;   ///< rank that sends the notice
  std::int32_t culprit = -1;  ///< rank at fault (dead, late or mismatched), -1 if none
  std::string reason;         ///< truncated to kMaxReason

  std::array<std::byte, kBytes> encode() const;
  static std::optional<ControlMessage> decode(std::span<const std::byte> bytes);
};

}  // namespace collbench::host
