#pragma once
/// What the backend registry (backend.h) knows beyond the factories, filled by the same register functions: the
/// peer-library algorithms each backend runs, and what each backend library can read about the machine. Tools ask
/// here rather than include a backend's header.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace collbench {

/// Declares the native algorithms (AlgorithmInfo::native: a peer library's own call, e.g. "nccl", "gloo_ring") that
/// backend `backend` runs; every backend that moves data runs collbench's own schedules.
void registerNativeAlgorithms(std::string backend, std::vector<std::string> algorithms);
/// The native algorithms of backend `name` (none for backends that declared none); throws Error{InvalidArgument}
/// listing the registered backends when there is no backend of that name (the message makeBackend gives).
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
