#include "environment.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace collbench::cli {

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
  env["gpu"] = nullptr;
  env["driver"] = nullptr;
  env["nccl_version"] = nullptr;
  return env;
}

}  // namespace collbench::cli
