#pragma once
/// tf.distribute.experimental.CommunicationOptions and CommunicationImplementation (TF 2.4+), with the legacy
/// CollectiveCommunication name. Rules: /work/shared/reference/mwms-semantics.md "CommunicationOptions".
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "collbench/strategy/cluster_resolver.h"

namespace collbench::strategy {

/// TF: tf.distribute.experimental.CommunicationImplementation {AUTO, RING, NCCL}.
///   Auto: collbench picks per collective (chooseAlgorithm: the selector's cost model or tuning table, by size)
///         and, on GPU replicas with an nccl backend registered, NCCL; the choice is reported (see
///         ImplementationChoice) and recorded per event in the trace. On a backend that moves data the first calls
///         of each collective shape try the choice's near-tied runner-ups (selector.h, trialCandidates) and later
///         calls run the fastest.
///   Ring: collbench's ring schedules on the strategy's backend.
///   Nccl: NCCL for GPU all-reduce; as in TF, CPU tensors and other collectives still use RING.
enum class CommunicationImplementation { Auto, Ring, Nccl };

/// TF: tf.distribute.experimental.CollectiveCommunication, the pre-2.4 name of the same enum (an alias in TF too).
using CollectiveCommunication = CommunicationImplementation;

/// "AUTO", "RING", "NCCL" (TF's enum member names).
std::string_view toString(CommunicationImplementation impl);
/// Case-insensitive "auto" | "ring" | "nccl"; anything else throws Error{InvalidArgument} naming the value.
CommunicationImplementation parseCommunicationImplementation(std::string_view text);

/// TF: tf.distribute.experimental.CommunicationOptions(bytes_per_pack=0, timeout_seconds=None,
/// implementation=AUTO). Passed to the strategy's constructor (defaults for every collective) and optionally to
/// ReplicaContext::allReduce (per call; see merge()).
struct CommunicationOptions {
  /// TF bytes_per_pack: gradient lists are all-reduced in packs of about this many bytes (see packValues()).
  /// 0 = automatic, which as in TF is one pack holding everything. Negative is an error.
  std::int64_t bytesPerPack = 0;
  /// TF timeout_seconds: a collective (or a replica's wait for the others to reach it) that takes longer fails
  /// with Error{Timeout} and aborts the group. Must be > 0 when set. Unset: the strategy uses
  /// defaultTimeoutSeconds() (COLLBENCH_TIMEOUT_SECONDS, else 60 s). Stricter than TF, whose default is to wait
  /// forever: collbench's collectives never hang (the rule). Per call, unset keeps the strategy's.
  std::optional<double> timeoutSeconds;
  /// TF implementation.
  CommunicationImplementation implementation = CommunicationImplementation::Auto;

  /// Throws Error{InvalidArgument} naming the field and value for bytesPerPack < 0 or timeoutSeconds <= 0.
  void validate() const;
  /// TF's CommunicationOptions.merge: each field of `perCall` that is not its default overrides this one's.
  CommunicationOptions merge(const CommunicationOptions& perCall) const;
  /// "CommunicationOptions(bytes_per_pack=0, timeout_seconds=None, implementation=AUTO)" (None: unset).
  std::string describe() const;

  bool operator==(const CommunicationOptions&) const = default;
};

/// What an implementation request resolves to on the replicas' devices.
struct ImplementationChoice {
  CommunicationImplementation requested = CommunicationImplementation::Auto;
  /// What runs: Ring (collbench schedules, per-size selector under Auto) or Nccl (native NCCL calls).
  CommunicationImplementation effective = CommunicationImplementation::Ring;
  /// Backend that runs the collectives ("nccl" for effective Nccl, else the strategy's own).
  bool useNcclBackend = false;
  std::string reason;  ///< one line: what was chosen and why, logged by the strategy
};

/// The environment variable that overrides the default timeout (the process backend reads it too).
inline constexpr const char* kTimeoutSecondsEnv = "COLLBENCH_TIMEOUT_SECONDS";

/// COLLBENCH_TIMEOUT_SECONDS as seconds; nullopt when unset or empty. Throws Error{InvalidArgument} naming the
/// variable and its value unless it is a positive finite number.
std::optional<double> timeoutSecondsFromEnvironment(const EnvLookup& env = systemEnvironment());
/// The timeout of a strategy whose CommunicationOptions leave it unset: timeoutSecondsFromEnvironment(), else
/// kDefaultTimeoutSeconds (collbench/backend.h: 60 s).
double defaultTimeoutSeconds(const EnvLookup& env = systemEnvironment());

/// TF's rule plus collbench's AUTO: NCCL is used only for GPU replicas and only when an nccl backend is available;
/// AUTO chooses it then, RING otherwise. An explicit NCCL request on CPU replicas falls back to RING (TF uses NCCL
/// only for GPU all-reduce); on GPU replicas without an nccl backend it is Error{Unsupported}.
ImplementationChoice resolveImplementation(CommunicationImplementation requested, bool gpuReplicas,
                                           bool ncclBackendAvailable);

/// What one collective runs with when its (merged) options ask for `requested` and the strategy resolved its own
/// implementation to `strategyChoice`: that choice when the request is the strategy's, else resolveImplementation()
/// with the same device facts (whether the replicas are GPUs and an nccl backend is available; not whether the
/// strategy's own choice used it).
ImplementationChoice implementationForCall(const ImplementationChoice& strategyChoice,
                                           CommunicationImplementation requested, bool gpuReplicas,
                                           bool ncclBackendAvailable);

}  // namespace collbench::strategy
