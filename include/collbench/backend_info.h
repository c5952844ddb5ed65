#pragma once
/// What the backend registry (backend.h) knows beyond the factories and capabilities, filled by the same register
/// functions: the peer-library algorithms each backend runs, and what each backend library can read about the
/// machine. Tools ask here rather than include a backend's header.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace collbench {

/// The native algorithm that runs NCCL's own collective (core/algorithms registers it as AlgorithmInfo::native; a
/// backend that runs it lists it in BackendCapabilities::nativeAlgorithms).
inline constexpr std::string_view kNcclNativeAlgorithm = "nccl";

/// The native algorithms of backend `name` (BackendCapabilities::nativeAlgorithms: none for backends that declared
/// none); throws Error{InvalidArgument} listing the registered backends when there is no backend of that name.
std::vector<std::string> backendNativeAlgorithms(std::string_view name);

/// What a backend library can read about this machine for run records (perf -J "environment"): "gpu", "gpu_count",
/// "driver", "nccl_version", ... A probe leaves out what it cannot read; it must not crash or throw on a machine
/// without the hardware (a probe that throws anyway contributes nothing).
using EnvironmentProbe = std::function<std::map<std::string, std::string>()>;
/// Registered by a backend library's register function; a second registration under `library` replaces the first.
void registerEnvironmentProbe(std::string library, EnvironmentProbe probe);
/// Every registered probe's fields, merged in registration order.
std::map<std::string, std::string> probeEnvironment();

}  // namespace collbench
