#include <mutex>

#include "collbench/backend.h"
#include "collbench/error.h"

namespace collbench {
namespace {

struct Entry {
  std::string summary;
  BackendFactory factory;
};

std::map<std::string, Entry, std::less<>>& registry() {
  static std::map<std::string, Entry, std::less<>> r;
  return r;
}
std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void registerBackend(std::string name, std::string summary, BackendFactory factory) {
  std::lock_guard lock(registryMutex());
  registry()[std::move(name)] = Entry{std::move(summary), std::move(factory)};
}

std::unique_ptr<Backend> makeBackend(std::string_view name, int nranks, const BackendOptions& options) {
  BackendFactory factory;
  {
    std::lock_guard lock(registryMutex());
    auto it = registry().find(name);
    if (it == registry().end()) {
      std::string known;
      for (const auto& [n, e] : registry()) known += (known.empty() ? "" : ", ") + n;
      throw Error(Errc::InvalidArgument, fmt::format("unknown backend '{}' (available: {})", name, known));
    }
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

}  // namespace collbench
