// The "sim" backend: Backend::run simulates the schedule once (the simulator is deterministic, so iterations and
// warmup would repeat the same number).
#include "sim_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/nccl_calibration.h"
#include "collbench/nccl_model.h"

namespace collbench::sim {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool parseFlag(const std::string& key, const std::string& v) {
  const std::string l = lower(v);
  if (l == "1" || l == "true" || l == "on" || l == "yes") return true;
  if (l == "0" || l == "false" || l == "off" || l == "no") return false;
  throw Error(Errc::InvalidArgument, fmt::format("sim backend option {}: expected 0 or 1, got '{}'", key, v));
}

int parsePositive(const std::string& key, const std::string& v) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("sim backend option {}: expected an integer >= 1, got '{}'", key, v));
  }
  return n;
}

/// Runs collbench's schedules on the simulator, and NCCL's own collective ("nccl") as NCCL 2.28 would run it on the
/// topology: ncclChoose on the topology's NcclSystem with the backend's NCCL environment picks (algorithm, protocol,
/// channels), and the call takes the time model's prediction for that choice (ncclPredictUs: NCCL's latencies and
/// the datasheet link rates, which --set overrides change through the topology).
class SimBackend : public Backend {
 public:
  explicit SimBackend(Simulator sim) : sim_(std::move(sim)) {}
  std::string_view name() const override { return "sim"; }
  int nranks() const override { return sim_.nranks(); }
  bool movesData() const override { return false; }
  RunResult run(const Schedule& s, const Buffers&, const RunOptions&) override {
    RunResult out;
    out.seconds = sim_.run(s).seconds;
    out.algorithm = s.algorithm;
    return out;
  }
  RunResult runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params,
                         const RunOptions&) override {
    RunResult out;
    out.algorithm = std::string(algorithm);
    out.seconds = sim_.runAlgorithm(spec, algorithm, params).seconds;
    return out;
  }
  std::string describeCall(const CollectiveSpec& spec, std::string_view algorithm) const override {
    return algorithm == kNcclNativeAlgorithm ? ncclChoiceSummary(sim_.ncclChoice(spec)) : "";
  }

 private:
  Simulator sim_;
};

}  // namespace

std::string_view toString(NetworkModel m) { return m == NetworkModel::CM02 ? "CM02" : "LV08"; }

NetworkModel parseNetworkModel(std::string_view s) {
  const std::string l = lower(s);
  if (l == "cm02") return NetworkModel::CM02;
  if (l == "lv08") return NetworkModel::LV08;
  throw Error(Errc::InvalidArgument, fmt::format("unknown network model '{}' (available: CM02, LV08)", s));
}

std::string_view toString(SimMode m) {
  switch (m) {
    case SimMode::Auto:
      return "auto";
    case SimMode::Exact:
      return "exact";
    case SimMode::Aggregated:
      return "aggregated";
    case SimMode::Fluid:
      return "fluid";
  }
  return "?";
}

SimMode parseSimMode(std::string_view s) {
  const std::string l = lower(s);
  if (l == "auto") return SimMode::Auto;
  if (l == "exact") return SimMode::Exact;
  if (l == "aggregated") return SimMode::Aggregated;
  if (l == "fluid") return SimMode::Fluid;
  throw Error(Errc::InvalidArgument,
              fmt::format("unknown simulation mode '{}' (available: auto, exact, aggregated, fluid)", s));
}

std::string_view toString(SpanKind k) {
  switch (k) {
    case SpanKind::Send:
      return "send";
    case SpanKind::Recv:
      return "recv";
    case SpanKind::Reduce:
      return "reduce";
    case SpanKind::Copy:
      return "copy";
  }
  return "?";
}

/// Overrides of a generator's parameters: "params.<name>=<value>".
constexpr std::string_view kParamPrefix = "params.";

Topology loadTopologyWithOverrides(const std::string& nameOrPath, const std::string& overrides) {
  std::vector<std::string> assignments;
  std::vector<std::pair<std::string, std::string>> params;  // params.<name>=<value>: the generator's, before it runs
  std::size_t at = 0;
  while (at <= overrides.size()) {
    const std::size_t end = std::min(overrides.find(';', at), overrides.size());
    const std::string one = trim(std::string_view(overrides).substr(at, end - at));
    const std::size_t eq = one.find('=');
    if (one.starts_with(kParamPrefix) && eq != std::string::npos) {
      params.emplace_back(trim(std::string_view(one).substr(kParamPrefix.size(), eq - kParamPrefix.size())),
                          trim(std::string_view(one).substr(eq + 1)));
    } else if (!one.empty()) {
      assignments.push_back(one);
    }
    at = end + 1;
  }
  Topology t = loadTopology(nameOrPath, params);
  for (const std::string& one : assignments) applyOverride(t, one);
  return t;
}

NcclModelParams ncclModelFromCalibration(const std::string& path, const Topology& topology, int nranks,
                                         std::string_view what) {
  try {
    NcclSystem sys = ncclSystemOf(topology, nranks > 0 ? nranks : static_cast<int>(topology.ranks.size()));
    applyNcclCalibration(readNcclCalibration(path), sys, path);
    return sys.model;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", what, e.what()));
  }
}

std::unique_ptr<Backend> makeSimBackend(int nranks, const BackendOptions& options) {
  std::string topology = kDefaultTopology, overrides, ncclEnv, ncclCalibration;
  SimConfig cfg;
  for (const auto& [key, value] : options) {
    if (key == "topology") {
      if (!value.empty()) topology = value;
    } else if (key == "model") {
      cfg.model = parseNetworkModel(value);
    } else if (key == "set") {
      overrides = value;
    } else if (key == "crosstraffic") {
      cfg.crossTraffic = parseFlag(key, value);
    } else if (key == "mode") {
      cfg.mode = parseSimMode(value);
    } else if (key == "nccl_env") {
      ncclEnv = value;
    } else if (key == "nccl_calibration") {
      ncclCalibration = value;
    } else if (key == "gpus_per_thread") {
      cfg.gpusPerThread = parsePositive(key, value);
    } else if (key == "nccl_version") {
      cfg.ncclVersion = ncclVersionCode(value);
      if (cfg.ncclVersion == 0) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("sim backend option nccl_version: expected MAJOR.MINOR.PATCH, got '{}'", value));
      }
    } else {
      throw Error(Errc::InvalidArgument,
                  fmt::format("unknown sim backend option '{}' (accepted: topology, model, set, crosstraffic, mode, "
                              "nccl_env, nccl_calibration, gpus_per_thread, nccl_version)",
                              key));
    }
  }
  // The NCCL environment is read (and a bad value refused) before the platform is built, as NCCL reads it at init.
  cfg.ncclEnv = ncclEnvWith(ncclEnv, "sim backend option nccl_env");
  Topology topo = loadTopologyWithOverrides(topology, overrides);
  if (!ncclCalibration.empty()) {
    cfg.ncclModel = ncclModelFromCalibration(ncclCalibration, topo, nranks, "sim backend option nccl_calibration");
  }
  return std::make_unique<SimBackend>(Simulator(std::move(topo), nranks, cfg));
}

void registerSimBackend() {
  BackendCapabilities caps;
  caps.device = DeviceKind::Simulated;
  caps.ranksPerProcess = RanksPerProcess::All;
  caps.movesData = false;
  caps.defaultTopology = kDefaultTopology;
  caps.nativeAlgorithms = {std::string(kNcclNativeAlgorithm)};  // emulated: NCCL 2.28's choice and time model
  registerBackend("sim",
                  "SimGrid simulation of the topology (--topology, default dgx-h100-8x1); nccl: NCCL 2.28's choice "
                  "emulated (NCCL_* environment)",
                  makeSimBackend, caps);
}

}  // namespace collbench::sim
