// The "environment" object of the records (records.h): what a run happened on.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <thread>

#include "collbench/backend_info.h"
#include "collbench/records.h"

namespace collbench {
namespace {

/// A probe value of at most this many characters, all digits, is written as a JSON integer (a count such as a
/// driver's CUDA version 12040); longer digit strings stay strings so that std::stoi cannot overflow.
constexpr std::size_t kMaxCountDigits = 9;

}  // namespace

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

nlohmann::json describeEnvironment() {
  nlohmann::json env;
  env["host"] = hostName();
  env["cpus"] = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      env["cpu"] = colon == std::string::npos ? line : line.substr(colon + 2);
      break;
    }
  }
  utsname u{};
  if (uname(&u) == 0) env["kernel"] = std::string(u.sysname) + " " + u.release;
  env["collbench_version"] = COLLBENCH_VERSION;
  // Always present so that runs compare field by field: null where no linked backend library could read it (no GPU,
  // or a build without the nccl backend).
  env["gpu"] = nullptr;
  env["driver"] = nullptr;
  env["nccl_version"] = nullptr;
  for (const auto& [key, value] : probeEnvironment()) {
    const bool count = !value.empty() && value.size() <= kMaxCountDigits &&
                       std::all_of(value.begin(), value.end(), [](unsigned char ch) { return std::isdigit(ch); });
    env[key] = count ? nlohmann::json(std::stoi(value)) : nlohmann::json(value);
  }
  return env;
}

}  // namespace collbench
