#include "collbench/strategy/communication_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "collbench/backend.h"
#include "collbench/error.h"

namespace collbench::strategy {

std::string_view toString(CommunicationImplementation impl) {
  switch (impl) {
    case CommunicationImplementation::Auto:
      return "AUTO";
    case CommunicationImplementation::Ring:
      return "RING";
    case CommunicationImplementation::Nccl:
      return "NCCL";
  }
  return "?";
}

CommunicationImplementation parseCommunicationImplementation(std::string_view text) {
  std::string key(text);
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  if (key == "auto") return CommunicationImplementation::Auto;
  if (key == "ring") return CommunicationImplementation::Ring;
  if (key == "nccl") return CommunicationImplementation::Nccl;
  throw Error(Errc::InvalidArgument,
              fmt::format("CommunicationOptions.implementation \"{}\" is not one of AUTO, RING, NCCL", text));
}

void CommunicationOptions::validate() const {
  if (bytesPerPack < 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("CommunicationOptions.bytes_per_pack must be >= 0 (0 = automatic), got {}", bytesPerPack));
  }
  if (timeoutSeconds && !(*timeoutSeconds > 0 && std::isfinite(*timeoutSeconds))) {
    throw Error(Errc::InvalidArgument,
                fmt::format("CommunicationOptions.timeout_seconds must be a positive number of seconds (or unset for "
                            "the default), got {}",
                            *timeoutSeconds));
  }
}

CommunicationOptions CommunicationOptions::merge(const CommunicationOptions& perCall) const {
  CommunicationOptions out = *this;
  if (perCall.bytesPerPack != 0) out.bytesPerPack = perCall.bytesPerPack;
  if (perCall.timeoutSeconds) out.timeoutSeconds = perCall.timeoutSeconds;
  if (perCall.implementation != CommunicationImplementation::Auto) out.implementation = perCall.implementation;
  return out;
}

std::string CommunicationOptions::describe() const {
  return fmt::format("CommunicationOptions(bytes_per_pack={}, timeout_seconds={}, implementation={})", bytesPerPack,
                     timeoutSeconds ? fmt::format("{}", *timeoutSeconds) : std::string("None"),
                     toString(implementation));
}

std::optional<double> timeoutSecondsFromEnvironment(const EnvLookup& env) {
  const std::optional<std::string> text = env(kTimeoutSecondsEnv);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}=\"{}\" is not a positive number of seconds", kTimeoutSecondsEnv, *text));
  }
  return v;
}

double defaultTimeoutSeconds(const EnvLookup& env) {
  return timeoutSecondsFromEnvironment(env).value_or(kDefaultTimeoutSeconds);
}

ImplementationChoice implementationForCall(const ImplementationChoice& strategyChoice,
                                           CommunicationImplementation requested, bool gpuReplicas,
                                           bool ncclBackendAvailable) {
  if (requested == strategyChoice.requested) return strategyChoice;
  return resolveImplementation(requested, gpuReplicas, ncclBackendAvailable);
}

ImplementationChoice resolveImplementation(CommunicationImplementation requested, bool gpuReplicas,
                                           bool ncclBackendAvailable) {
  using CI = CommunicationImplementation;
  ImplementationChoice c;
  c.requested = requested;
  switch (requested) {
    case CI::Auto:
      if (gpuReplicas && ncclBackendAvailable) {
        c.effective = CI::Nccl;
        c.useNcclBackend = true;
        c.reason = "AUTO chose NCCL: GPU replicas and the nccl backend are present";
      } else {
        c.effective = CI::Ring;
        c.reason = gpuReplicas ? "AUTO chose RING: GPU replicas but no nccl backend available"
                               : "AUTO chose collbench schedules: replicas are CPU; the selector picks each "
                                 "collective's algorithm by size (chooseAlgorithm)";
      }
      break;
    case CI::Ring:
      c.effective = CI::Ring;
      c.reason = "RING requested: ring schedules for every collective";
      break;
    case CI::Nccl:
      if (!gpuReplicas) {
        c.effective = CI::Ring;
        c.reason = "NCCL requested but replicas are CPU: NCCL is used only for GPU all-reduce, so RING runs (as in TF)";
      } else if (!ncclBackendAvailable) {
        throw Error(Errc::Unsupported,
                    "CommunicationOptions.implementation NCCL: GPU replicas need the nccl backend, which this build "
                    "does not have (build with COLLBENCH_WITH_CUDA, or use AUTO or RING)");
      } else {
        c.effective = CI::Nccl;
        c.useNcclBackend = true;
        c.reason = "NCCL requested: ncclAllReduce for GPU all-reduce, RING for other collectives";
      }
      break;
  }
  return c;
}

}  // namespace collbench::strategy
