#include <mutex>

#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"

namespace collbench {
namespace {

struct Entry {
  std::string summary;
  BackendFactory factory;
  BackendCapabilities capabilities;
};

std::map<std::string, Entry, std::less<>>& registry() {
  static std::map<std::string, Entry, std::less<>> r;
  return r;
}
std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
std::vector<std::pair<std::string, EnvironmentProbe>>& probes() {
  static std::vector<std::pair<std::string, EnvironmentProbe>> p;
  return p;
}

/// Error{InvalidArgument} naming the registered backends; the caller holds registryMutex().
[[noreturn]] void unknownBackend(std::string_view name) {
  std::string known;
  for (const auto& [n, e] : registry()) known += (known.empty() ? "" : ", ") + n;
  throw Error(Errc::InvalidArgument, fmt::format("unknown backend '{}' (available: {})", name, known));
}

}  // namespace

void registerBackend(std::string name, std::string summary, BackendFactory factory) {
  registerBackend(std::move(name), std::move(summary), std::move(factory), BackendCapabilities{});
}

void registerBackend(std::string name, std::string summary, BackendFactory factory, BackendCapabilities capabilities) {
  std::lock_guard lock(registryMutex());
  registry()[std::move(name)] = Entry{std::move(summary), std::move(factory), std::move(capabilities)};
}

std::unique_ptr<Backend> makeBackend(std::string_view name, int nranks, const BackendOptions& options) {
  BackendFactory factory;
  {
    std::lock_guard lock(registryMutex());
    auto it = registry().find(name);
    if (it == registry().end()) unknownBackend(name);
    factory = it->second.factory;
  }
  if (nranks < 1) throw Error(Errc::InvalidArgument, fmt::format("backend needs at least 1 rank, got {}", nranks));
  return factory(nranks, options);
}

std::vector<std::pair<std::string, std::string>> backendNames() {
  std::lock_guard lock(registryMutex());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [n, e] : registry()) out.emplace_back(n, e.summary);
  return out;
}

BackendCapabilities backendCapabilities(std::string_view name) {
  std::lock_guard lock(registryMutex());
  const auto it = registry().find(name);
  if (it == registry().end()) unknownBackend(name);
  return it->second.capabilities;
}

std::optional<BackendCapabilities> findBackendCapabilities(std::string_view name) {
  std::lock_guard lock(registryMutex());
  const auto it = registry().find(name);
  if (it == registry().end()) return std::nullopt;
  return it->second.capabilities;
}

std::vector<std::string> backendNativeAlgorithms(std::string_view name) {
  return backendCapabilities(name).nativeAlgorithms;
}

void registerEnvironmentProbe(std::string library, EnvironmentProbe probe) {
  std::lock_guard lock(registryMutex());
  for (auto& [lib, p] : probes()) {
    if (lib == library) {
      p = std::move(probe);
      return;
    }
  }
  probes().emplace_back(std::move(library), std::move(probe));
}

std::map<std::string, std::string> probeEnvironment() {
  std::vector<EnvironmentProbe> all;
  {
    std::lock_guard lock(registryMutex());
    for (const auto& [lib, p] : probes()) all.push_back(p);
  }
  std::map<std::string, std::string> out;
  for (const auto& p : all) {
    try {
      for (auto& [k, v] : p()) out[k] = std::move(v);
    } catch (const std::exception&) {
      // A run record without this library's fields is better than no run record.
    }
  }
  return out;
}

void admitRanks(std::string_view backend, int nranks, std::string_view flag) {
  const BackendCapabilities caps = backendCapabilities(backend);
  if (caps.maxRanks <= 0 || nranks <= caps.maxRanks) return;
  throw Error(Errc::InvalidArgument, fmt::format("{} {}: backend '{}' runs at most {} ranks ({}); use --backend sim "
                                                 "for larger worlds",
                                                 flag, nranks, backend, caps.maxRanks, caps.maxRanksReason));
}

}  // namespace collbench
