#pragma once
// What the run happened on, for JSON outputs (so runs can be compared later).
#include <nlohmann/json.hpp>

namespace collbench::cli {

nlohmann::json describeEnvironment();
std::string hostName();

}  // namespace collbench::cli
