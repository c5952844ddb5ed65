#include "collbench/strategy/cluster_resolver.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "collbench/error.h"
#include "collbench/json_document.h"

namespace collbench::strategy {

namespace {

using nlohmann::json;

/// Throws the one error kind resolvers raise: Error{InvalidArgument} with a formatted one-line message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(Errc::InvalidArgument, fmt::format(format, std::forward<Args>(args)...));
}

constexpr const char* kAllowedJobs = "chief, worker, ps, evaluator";
/// Cap on quoted input echoed in a message, so a huge TF_CONFIG still gives a one-line error of sane length.
constexpr std::size_t kMaxEchoChars = 200;

/// A string as a JSON literal (escaped, one line, truncated) for messages.
std::string quote(std::string_view s) {
  std::string text = json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxEchoChars) text = text.substr(0, kMaxEchoChars) + "...\"";
  return text;
}

std::optional<long long> parseInteger(std::string_view s) {
  if (s.empty()) return std::nullopt;
  bool negative = false;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  unsigned long long magnitude = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  constexpr auto kMax = static_cast<unsigned long long>(std::numeric_limits<long long>::max());
  if (magnitude > kMax) return std::nullopt;
  long long value = static_cast<long long>(magnitude);
  return negative ? -value : value;
}

std::string_view trimSpace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  std::size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

bool isKnownJob(std::string_view job) {
  return std::find(ClusterSpec::kJobNames.begin(), ClusterSpec::kJobNames.end(), job) != ClusterSpec::kJobNames.end();
}

bool isHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

bool isIpv6Char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

/// URL scheme characters (RFC 3986): letter, then letters, digits, '+', '-', '.'.
void checkRpcLayer(std::string_view layer, std::string_view what) {
  if (layer.empty()) return;
  bool ok = (layer[0] >= 'a' && layer[0] <= 'z') || (layer[0] >= 'A' && layer[0] <= 'Z');
  for (char c : layer) ok = ok && (isHostChar(c) || c == '+') && c != '_';
  if (!ok) fail("{} {} is not a protocol name such as \"grpc\"", what, quote(layer));
}

std::string_view jsonTypeName(const json& v) { return v.type_name(); }

/// JSON text of a value for messages, truncated.
std::string echo(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxEchoChars) s = s.substr(0, kMaxEchoChars) + "...";
  return s;
}

/// Builds a spec from the "cluster" value; structure only. `source` prefixes errors, fields are "cluster.<job>".
ClusterSpec specFromJsonValue(const json& cluster, std::string_view source) {
  if (!cluster.is_object()) {
    fail("{}: cluster must be an object of jobs such as {{\"worker\": [\"host:port\"]}}, got {} {}", source,
         jsonTypeName(cluster), echo(cluster));
  }
  ClusterSpec spec;
  for (const auto& [job, tasks] : cluster.items()) {
    std::vector<std::string> addresses;
    if (tasks.is_array()) {
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        if (!tasks[i].is_string()) {
          fail("{}: cluster.{}[{}] must be a \"host:port\" string, got {} {}", source, job, i, jsonTypeName(tasks[i]),
               echo(tasks[i]));
        }
        addresses.push_back(tasks[i].get<std::string>());
      }
    } else if (tasks.is_object()) {
      // TensorFlow's sparse form {"0": addr, "1": addr}; collbench needs every index 0..n-1.
      std::map<long long, std::string> byIndex;
      for (const auto& [key, address] : tasks.items()) {
        std::optional<long long> index = parseInteger(key);
        if (!index || *index < 0) {
          fail("{}: cluster.{} task index key {} is not a non-negative integer", source, job, quote(key));
        }
        if (!address.is_string()) {
          fail("{}: cluster.{}[{}] must be a \"host:port\" string, got {} {}", source, job, key, jsonTypeName(address),
               echo(address));
        }
        if (!byIndex.emplace(*index, address.get<std::string>()).second) {
          fail("{}: cluster.{} task index key {} repeats index {}", source, job, quote(key), *index);
        }
      }
      long long expected = 0;
      for (const auto& [index, address] : byIndex) {
        if (index != expected) {
          fail("{}: cluster.{} has no task {} but has task {}; sparse jobs are not supported, list every task", source,
               job, expected, index);
        }
        addresses.push_back(address);
        ++expected;
      }
    } else {
      fail("{}: cluster.{} must be a list of \"host:port\" strings, got {} {}", source, job, jsonTypeName(tasks),
           echo(tasks));
    }
    spec.jobs.emplace(job, std::move(addresses));
  }
  return spec;
}

std::string jobList(const ClusterSpec& spec) {
  std::string out;
  for (const auto& [job, tasks] : spec.jobs) out += (out.empty() ? "" : ", ") + job;
  return out;
}

/// The jobs in kJobNames order, then any others (only reachable before validation).
std::vector<std::string_view> orderedJobs(const ClusterSpec& spec) {
  std::vector<std::string_view> jobs;
  for (std::string_view job : ClusterSpec::kJobNames) {
    if (spec.hasJob(job)) jobs.push_back(job);
  }
  for (const auto& [job, tasks] : spec.jobs) {
    if (!isKnownJob(job)) jobs.push_back(job);
  }
  return jobs;
}

bool isLoopback(std::string_view host) { return host == "localhost" || host == "::1" || host.substr(0, 4) == "127."; }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// ClusterSpec

int ClusterSpec::numTasks(std::string_view job) const {
  auto it = jobs.find(job);
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

int ClusterSpec::totalTasks() const {
  int total = 0;
  for (const auto& [job, tasks] : jobs) total += static_cast<int>(tasks.size());
  return total;
}

const std::string& ClusterSpec::taskAddress(std::string_view job, int index) const {
  auto it = jobs.find(job);
  if (it == jobs.end()) fail("cluster spec: no job {} (jobs: {})", quote(job), jobList(*this));
  if (index < 0 || index >= static_cast<int>(it->second.size())) {
    fail("cluster spec: job {} has no task {} ({} tasks)", quote(job), index, it->second.size());
  }
  return it->second[static_cast<std::size_t>(index)];
}

std::string ClusterSpec::toJson() const {
  // nlohmann's object sorts keys; build the text by hand to keep kJobNames order.
  std::string text = "{";
  for (std::string_view job : orderedJobs(*this)) {
    if (text.size() > 1) text += ",";
    text += json(std::string(job)).dump() + ":" + json(jobs.find(job)->second).dump();
  }
  return text + "}";
}

ClusterSpec ClusterSpec::fromJson(std::string_view jsonText, std::string_view source) {
  json value;
  try {
    value = parseJsonDocument(jsonText, source);
  } catch (const Error& e) {
    fail("{} in {}", e.what(), quote(jsonText));
  }
  return specFromJsonValue(value, source);
}

// ---------------------------------------------------------------------------------------------------------------
// Addresses and validation

HostPort parseHostPort(std::string_view address, std::string_view what) {
  auto bad = [&](std::string_view reason) { fail("{} {}: {}", what, quote(address), reason); };
  if (address.empty()) bad("empty address; expected host:port");
  std::string_view host;
  std::string_view port;
  HostPort out;
  if (address.front() == '[') {
    std::size_t close = address.find(']');
    if (close == std::string_view::npos) bad("unclosed '[' in IPv6 address; expected [addr]:port");
    host = address.substr(1, close - 1);
    std::string_view rest = address.substr(close + 1);
    if (rest.empty() || rest.front() != ':') bad("no port after the IPv6 address; expected [addr]:port");
    port = rest.substr(1);
    if (host.empty() || host.find(':') == std::string_view::npos ||
        !std::all_of(host.begin(), host.end(), isIpv6Char)) {
      bad(fmt::format("{} is not an IPv6 address", quote(host)));
    }
  } else {
    std::size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) bad("no port; expected host:port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) bad("IPv6 addresses need brackets, as in [::1]:8888");
    if (host.empty()) bad("empty host; expected host:port");
    auto badChar = std::find_if_not(host.begin(), host.end(), isHostChar);
    if (badChar != host.end()) {
      bad(fmt::format("host {} has the invalid character {}", quote(host), quote(std::string_view(&*badChar, 1))));
    }
  }
  std::optional<long long> number = parseInteger(port);
  bool digitsOnly = !port.empty() && std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digitsOnly || !number || *number < 1 || *number > 65535) {
    bad(fmt::format("port {} is not a number in 1..65535", quote(port)));
  }
  out.host = std::string(host);
  out.port = static_cast<int>(*number);
  return out;
}

void validateClusterSpec(const ClusterSpec& spec, std::string_view taskType, int taskId,
                         const ClusterInputNames& names) {
  if (spec.empty()) return;
  const std::string& src = names.source;
  // 1..6: TensorFlow's multi_worker_util._validate_cluster_spec, in its order.
  for (const auto& [job, tasks] : spec.jobs) {
    if (!isKnownJob(job)) fail("{}: cluster.{}: job name {} is not one of {}", src, job, quote(job), kAllowedJobs);
  }
  if (!isKnownJob(taskType))
    fail("{}: {} {} is not a task type; types are {}", src, names.typeField, quote(taskType), kAllowedJobs);
  if (taskType != ClusterSpec::kEvaluator && !spec.hasJob(taskType)) {
    fail("{}: {} {} has no job in the cluster (jobs: {})", src, names.typeField, quote(taskType), jobList(spec));
  }
  for (std::string_view single : {ClusterSpec::kChief, ClusterSpec::kEvaluator}) {
    if (spec.numTasks(single) > 1) {
      fail("{}: cluster.{} has {} tasks; there must be at most one {}", src, single, spec.numTasks(single), single);
    }
  }
  if (spec.hasJob(taskType) && taskId >= spec.numTasks(taskType)) {
    int n = spec.numTasks(taskType);
    fail("{}: {} {} is out of range: job {} has {} task{}{}", src, names.indexField, taskId, quote(taskType), n,
         n == 1 ? "" : "s", n == 0 ? "" : fmt::format(" (indices 0..{})", n - 1));
  }
  // 7..9: collbench is stricter than TensorFlow.
  if (taskId < 0) fail("{}: {} {} is negative", src, names.indexField, taskId);
  std::map<std::string, std::string, std::less<>> seen;  // address -> field
  for (std::string_view job : orderedJobs(spec)) {
    const auto& tasks = spec.jobs.find(job)->second;
    for (std::size_t i = 0; i < tasks.size(); ++i)
      parseHostPort(tasks[i], fmt::format("{}: cluster.{}[{}]", src, job, i));
  }
  for (std::string_view job : orderedJobs(spec)) {
    const auto& tasks = spec.jobs.find(job)->second;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      std::string field = fmt::format("cluster.{}[{}]", job, i);
      auto [it, inserted] = seen.emplace(tasks[i], field);
      if (!inserted) fail("{}: {} {} duplicates {}", src, field, quote(tasks[i]), it->second);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// ClusterResolver: TensorFlow's multi_worker_util rules, from the four accessors.

int ClusterResolver::numWorkers() const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty() || taskType() == ClusterSpec::kEvaluator) return 1;
  return spec.numTasks(ClusterSpec::kChief) + spec.numTasks(ClusterSpec::kWorker);
}

int ClusterResolver::rank() const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty()) return 0;
  const std::string& type = taskType();
  if (type == ClusterSpec::kChief || type == ClusterSpec::kEvaluator) return 0;
  if (type == ClusterSpec::kWorker) return taskId() + spec.numTasks(ClusterSpec::kChief);
  fail("{}: task type {} (index {}) has no rank; only chief and worker tasks are replicas (an evaluator is its own)",
       source(), quote(type), taskId());
}

bool ClusterResolver::isChief() const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty()) return true;
  const std::string& type = taskType();
  if (type == ClusterSpec::kChief || type == ClusterSpec::kEvaluator) return true;
  return type == ClusterSpec::kWorker && !spec.hasJob(ClusterSpec::kChief) && taskId() == 0;
}

bool ClusterResolver::isMultiWorker() const { return numWorkers() > 1; }

std::string ClusterResolver::leaderAddress() const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty() || taskType() == ClusterSpec::kEvaluator) return "";
  if (spec.hasJob(ClusterSpec::kChief)) {
    return spec.numTasks(ClusterSpec::kChief) > 0 ? spec.taskAddress(ClusterSpec::kChief, 0) : "";
  }
  return spec.numTasks(ClusterSpec::kWorker) > 0 ? spec.taskAddress(ClusterSpec::kWorker, 0) : "";
}

std::string ClusterResolver::master(std::string_view rpcLayerOverride) const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty() || spec.totalTasks() <= 1 || taskType() == ClusterSpec::kEvaluator) return "";
  std::string address = leaderAddress();
  if (address.empty()) return "";
  std::string_view layer = rpcLayerOverride.empty() ? std::string_view(rpcLayer()) : rpcLayerOverride;
  return layer.empty() ? address : fmt::format("{}://{}", layer, address);
}

std::string ClusterResolver::taskAddress() const {
  const ClusterSpec& spec = clusterSpec();
  if (spec.empty() || taskId() < 0 || taskId() >= spec.numTasks(taskType())) return "";
  return spec.taskAddress(taskType(), taskId());
}

// ---------------------------------------------------------------------------------------------------------------
// Environment

EnvLookup systemEnvironment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

EnvLookup environmentFromMap(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// TFConfigClusterResolver

std::string tfConfigJson(const ClusterSpec& spec, std::string_view taskType, int taskIndex) {
  // By hand around spec.toJson(), which keeps kJobNames order; the task object's keys are in nlohmann's sorted order.
  return fmt::format(R"({{"cluster":{},"task":{{"index":{},"type":{}}}}})", spec.toJson(), taskIndex,
                     json(std::string(taskType)).dump());
}

TFConfigClusterResolver::TFConfigClusterResolver(std::string_view tfConfigJson) {
  const std::string_view src = kEnvVar;
  if (trimSpace(tfConfigJson).empty()) {
    // TensorFlow's json.loads("") fails too; say what to do instead.
    fail("{} is set but empty ({}); unset it or set it to {{}} for single-worker mode", src, quote(tfConfigJson));
  }
  json config;
  try {
    config = parseJsonDocument(tfConfigJson, src);
  } catch (const Error& e) {
    fail("{} in {}", e.what(), quote(tfConfigJson));
  }
  if (!config.is_object()) fail("{}: must be a JSON object, got {} {}", src, jsonTypeName(config), echo(config));

  static constexpr std::array<std::string_view, 5> kKnownKeys = {"cluster", "task", "rpc_layer", "environment",
                                                                 "session_master"};
  for (const auto& [key, value] : config.items()) {
    if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) == kKnownKeys.end()) {
      spdlog::warn("{}: ignoring unknown key {} (known: cluster, task, rpc_layer, environment, session_master)", src,
                   quote(key));
    }
  }

  if (config.contains("cluster")) spec_ = specFromJsonValue(config["cluster"], src);

  // task.type is taken as a string, task.index as an integer (TensorFlow's str() / int()).
  std::optional<std::string> type;
  std::optional<long long> index;
  if (config.contains("task")) {
    const json& task = config["task"];
    if (!task.is_object()) {
      fail("{}: task must be an object such as {{\"type\": \"worker\", \"index\": 0}}, got {} {}", src,
           jsonTypeName(task), echo(task));
    }
    if (task.contains("type")) type = task["type"].is_string() ? task["type"].get<std::string>() : echo(task["type"]);
    if (task.contains("index")) {
      const json& idx = task["index"];
      if (idx.is_number_unsigned()) {
        auto u = idx.get<unsigned long long>();
        if (u > static_cast<unsigned long long>(std::numeric_limits<int>::max())) {
          fail("{}: task.index {} is out of range", src, echo(idx));
        }
        index = static_cast<long long>(u);
      } else if (idx.is_number_integer()) {
        index = idx.get<long long>();
      } else if (idx.is_string()) {
        index = parseInteger(trimSpace(idx.get<std::string>()));
        if (!index) fail("{}: task.index {} is not an integer", src, echo(idx));
      } else {
        fail("{}: task.index {} is not an integer ({})", src, echo(idx), jsonTypeName(idx));
      }
      if (*index > std::numeric_limits<int>::max() || *index < std::numeric_limits<int>::min()) {
        fail("{}: task.index {} is out of range", src, echo(idx));
      }
    }
  }

  if (config.contains("rpc_layer") && !config["rpc_layer"].is_null()) {
    const json& layer = config["rpc_layer"];
    if (!layer.is_string()) fail("{}: rpc_layer must be a string, got {} {}", src, jsonTypeName(layer), echo(layer));
    rpcLayer_ = layer.get<std::string>();
    checkRpcLayer(rpcLayer_, fmt::format("{}: rpc_layer", src));
  }

  if (spec_.empty()) {  // single-worker mode; TensorFlow ignores the task here
    taskType_ = std::string(ClusterSpec::kWorker);
    taskId_ = 0;
    return;
  }
  if (!type || !index) {
    std::string_view missing = !type && !index ? "task.type and task.index are"
                               : !type         ? "task.type is"
                                               : "task.index is";
    fail("{}: {} missing; a multi-worker cluster (jobs: {}) needs task.type and task.index", src, missing,
         jobList(spec_));
  }
  taskType_ = *type;
  taskId_ = static_cast<int>(*index);
  validateClusterSpec(spec_, taskType_, taskId_, {std::string(src), "task.type", "task.index"});
}

TFConfigClusterResolver TFConfigClusterResolver::fromEnvironment(const EnvLookup& env) {
  std::optional<std::string> value = env(kEnvVar);
  return TFConfigClusterResolver(value ? std::string_view(*value) : std::string_view("{}"));
}

// ---------------------------------------------------------------------------------------------------------------
// SimpleClusterResolver

SimpleClusterResolver::SimpleClusterResolver(ClusterSpec spec, std::string taskType, int taskId, std::string rpcLayer)
    : spec_(std::move(spec)), taskType_(std::move(taskType)), taskId_(taskId), rpcLayer_(std::move(rpcLayer)) {
  const std::string src(source());
  checkRpcLayer(rpcLayer_, src + ": rpc_layer");
  if (spec_.empty()) {
    taskType_ = std::string(ClusterSpec::kWorker);
    taskId_ = 0;
    return;
  }
  if (taskType_.empty()) {
    fail("{}: task_type is missing (empty); a multi-worker cluster (jobs: {}) needs task_type and task_id", src,
         jobList(spec_));
  }
  validateClusterSpec(spec_, taskType_, taskId_, {src, "task_type", "task_id"});
}

// ---------------------------------------------------------------------------------------------------------------
// Factory

std::unique_ptr<ClusterResolver> makeClusterResolverFromEnvironment(const EnvLookup& env, const SlurmOptions& slurm,
                                                                    const MpiOptions& mpi) {
  if (std::optional<std::string> tfConfig = env(TFConfigClusterResolver::kEnvVar)) {
    return std::make_unique<TFConfigClusterResolver>(*tfConfig);
  }
  if (env("SLURM_PROCID")) return std::make_unique<SlurmClusterResolver>(env, slurm);
  if (env("OMPI_COMM_WORLD_RANK") || env("PMI_RANK")) return std::make_unique<MpiClusterResolver>(env, mpi);
  return std::make_unique<SimpleClusterResolver>(SimpleClusterResolver::singleWorker());
}

// ---------------------------------------------------------------------------------------------------------------
// MpiClusterResolver

MpiClusterResolver::MpiClusterResolver(const EnvLookup& env, MpiOptions options)
    : rpcLayer_(std::move(options.rpcLayer)) {
  checkRpcLayer(rpcLayer_, "MPI: rpc_layer");
  struct Vars {
    const char* rank;
    const char* size;
    const char* localRank;
    const char* localSize;
  };
  static constexpr Vars kOpenMpi = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_SIZE"};
  static constexpr Vars kPmi = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
  const Vars& vars = env(kOpenMpi.rank) ? kOpenMpi : kPmi;
  if (!env(vars.rank)) fail("MPI: neither OMPI_COMM_WORLD_RANK nor PMI_RANK is set; is this an mpirun launch?");
  auto readInt = [&](const char* name, int minimum) -> std::optional<int> {
    std::optional<std::string> text = env(name);
    if (!text) return std::nullopt;
    std::optional<long long> v = parseInteger(*text);
    if (!v || *v < minimum || *v > std::numeric_limits<int>::max()) {
      fail("{} {}: not an integer >= {}", name, quote(*text), minimum);
    }
    return static_cast<int>(*v);
  };
  int rank = *readInt(vars.rank, 0);
  std::optional<int> size = readInt(vars.size, 1);
  if (!size) fail("MPI: {} is set but {} is not", vars.rank, vars.size);
  // The spec holds one address per rank: a corrupt size must not allocate gigabytes (found by the resolver fuzz).
  if (*size > kMaxMpiRanks) fail("{} {} is more than {} ranks", vars.size, *size, kMaxMpiRanks);
  if (rank >= *size) fail("{} {} is out of range: {} is {}", vars.rank, rank, vars.size, *size);
  localRank_ = readInt(vars.localRank, 0);
  localSize_ = readInt(vars.localSize, 1);
  if (localSize_ && *localSize_ > *size) {
    fail("{} {} exceeds {} {}", vars.localSize, *localSize_, vars.size, *size);
  }
  if (localRank_ && localSize_ && *localRank_ >= *localSize_) {
    fail("{} {} is out of range: {} is {}", vars.localRank, *localRank_, vars.localSize, *localSize_);
  }

  std::optional<std::string> masterVar = env(kMasterAddrVar);
  std::string masterAddr = masterVar ? *masterVar : kDefaultMasterAddr;
  HostPort master = parseHostPort(masterAddr, kMasterAddrVar);
  if (*size > 1 && localSize_ && *localSize_ < *size && isLoopback(master.host)) {
    spdlog::warn("MPI: {} ranks over several hosts ({} {}) but the leader address {} is loopback; set {}", *size,
                 vars.localSize, *localSize_, masterAddr, kMasterAddrVar);
  }
  std::vector<std::string> workers(static_cast<std::size_t>(*size));
  workers[0] = masterAddr;  // the others are unknown: MPI launchers publish only ranks
  spec_.jobs.emplace(std::string(ClusterSpec::kWorker), std::move(workers));
  taskId_ = rank;
}

// ---------------------------------------------------------------------------------------------------------------
// Slurm

namespace {

/// Strict non-negative decimal (Slurm numbers): digits only, fits in int.
std::optional<int> parseCount(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  std::optional<long long> v = parseInteger(s);
  if (!v || *v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(*v);
}

/// One name of a hostlist: literal pieces and bracket groups, expanded as a product (leftmost outermost).
std::vector<std::string> expandHostName(std::string_view name, const std::function<void(std::string)>& bad) {
  std::vector<std::vector<std::string>> pieces;  // each piece: its alternatives
  std::size_t i = 0;
  long long combinations = 1;
  while (i < name.size()) {
    if (name[i] != '[') {
      std::size_t end = name.find('[', i);
      if (end == std::string_view::npos) end = name.size();
      std::string_view literal = name.substr(i, end - i);
      auto badChar = std::find_if_not(literal.begin(), literal.end(), isHostChar);
      if (badChar != literal.end()) {
        bad(fmt::format("host name {} has the invalid character {}", quote(name),
                        quote(std::string_view(&*badChar, 1))));
      }
      pieces.push_back({std::string(literal)});
      i = end;
      continue;
    }
    std::size_t close = name.find(']', i);  // balance was checked by the caller
    std::string_view group = name.substr(i + 1, close - i - 1);
    if (group.empty()) bad(fmt::format("empty range list \"[]\" in {}", quote(name)));
    std::vector<std::string> values;
    std::size_t start = 0;
    while (start <= group.size()) {
      std::size_t comma = group.find(',', start);
      if (comma == std::string_view::npos) comma = group.size();
      std::string_view range = group.substr(start, comma - start);
      std::size_t dash = range.find('-');
      std::string_view loText = range.substr(0, dash);
      std::string_view hiText = dash == std::string_view::npos ? loText : range.substr(dash + 1);
      std::optional<int> lo = parseCount(loText);
      std::optional<int> hi = parseCount(hiText);
      if (range.empty()) bad(fmt::format("empty range in [{}]", group));
      if (!lo || !hi) bad(fmt::format("range {} in {} is not N or N-M with decimal N, M", quote(range), quote(name)));
      if (*lo > *hi) bad(fmt::format("range {} in {} is descending", quote(range), quote(name)));
      long long count = static_cast<long long>(*hi) - *lo + 1;
      if (count > kMaxSlurmHosts || static_cast<long long>(values.size()) + count > kMaxSlurmHosts) {
        bad(fmt::format("range {} expands to more than {} hosts", quote(range), kMaxSlurmHosts));
      }
      const std::size_t width = loText.size();  // Slurm keeps the lower bound's zero padding
      for (int v = *lo; v <= *hi; ++v) values.push_back(fmt::format("{:0{}d}", v, width));
      start = comma + 1;
    }
    combinations *= static_cast<long long>(values.size());
    if (combinations > kMaxSlurmHosts)
      bad(fmt::format("{} expands to more than {} hosts", quote(name), kMaxSlurmHosts));
    pieces.push_back(std::move(values));
    i = close + 1;
  }
  std::vector<std::string> names{""};
  for (const auto& alternatives : pieces) {
    std::vector<std::string> next;
    next.reserve(names.size() * alternatives.size());
    for (const auto& prefix : names) {
      for (const auto& alt : alternatives) next.push_back(prefix + alt);
    }
    names = std::move(next);
  }
  return names;
}

}  // namespace

std::vector<std::string> expandSlurmHostlist(std::string_view hostlist, std::string_view source) {
  auto bad = [&](const std::string& reason) { fail("{} {}: {}", source, quote(hostlist), reason); };
  std::string_view list = trimSpace(hostlist);
  if (list.empty()) bad("empty hostlist");
  // Split at commas outside brackets; brackets do not nest.
  std::vector<std::string_view> names;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (depth > 0) bad(fmt::format("nested '[' at position {}", i));
      depth = 1;
    } else if (c == ']') {
      if (depth == 0) bad(fmt::format("']' without '[' at position {}", i));
      depth = 0;
    } else if (c == ',' && depth == 0) {
      if (i == start) bad(fmt::format("empty host name at position {}", i));
      names.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth > 0) bad("unclosed '['");
  std::vector<std::string> hosts;
  for (std::string_view name : names) {
    std::vector<std::string> expanded = expandHostName(name, bad);
    if (hosts.size() + expanded.size() > static_cast<std::size_t>(kMaxSlurmHosts)) {
      bad(fmt::format("expands to more than {} hosts", kMaxSlurmHosts));
    }
    hosts.insert(hosts.end(), std::make_move_iterator(expanded.begin()), std::make_move_iterator(expanded.end()));
  }
  return hosts;
}

std::vector<int> parseSlurmTasksPerNode(std::string_view value, std::string_view source) {
  auto bad = [&](const std::string& reason) { fail("{} {}: {}", source, quote(value), reason); };
  std::string_view list = trimSpace(value);
  if (list.empty()) bad("empty; expected counts such as \"2(x3),1\"");
  std::vector<int> counts;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(start, comma - start);
    std::string_view countText = item;
    std::optional<int> repeat = 1;
    std::size_t paren = item.find('(');
    if (paren != std::string_view::npos) {
      countText = item.substr(0, paren);
      std::string_view rest = item.substr(paren);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')')
        repeat = std::nullopt;
      else
        repeat = parseCount(rest.substr(2, rest.size() - 3));
    }
    std::optional<int> count = parseCount(countText);
    if (!count || !repeat) bad(fmt::format("item {} is not N or N(xM)", quote(item)));
    if (*count < 1 || *repeat < 1) bad(fmt::format("item {} has a count below 1", quote(item)));
    if (static_cast<long long>(counts.size()) + *repeat > kMaxSlurmHosts) {
      bad(fmt::format("describes more than {} hosts", kMaxSlurmHosts));
    }
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat), *count);
    start = comma + 1;
  }
  return counts;
}

SlurmClusterResolver::SlurmClusterResolver(const EnvLookup& env, SlurmOptions options)
    : rpcLayer_(std::move(options.rpcLayer)) {
  checkRpcLayer(rpcLayer_, "Slurm: rpc_layer");
  if (options.portBase < 1 || options.portBase > 65535)
    fail("Slurm: port base {} is not in 1..65535", options.portBase);
  // The first variable of `names` that is set, with its name.
  auto firstSet = [&](std::initializer_list<const char*> names) -> std::pair<const char*, std::optional<std::string>> {
    for (const char* name : names) {
      if (std::optional<std::string> v = env(name)) return {name, std::move(v)};
    }
    return {*names.begin(), std::nullopt};
  };
  auto count = [&](const char* name, const std::string& text, int minimum) {
    std::optional<int> v = parseCount(trimSpace(text));
    if (!v || *v < minimum) fail("{} {}: not an integer >= {}", name, quote(text), minimum);
    return *v;
  };

  auto [procVar, procText] = firstSet({"SLURM_PROCID"});
  if (!procText) fail("Slurm: SLURM_PROCID is not set; run under srun");
  const int procId = count(procVar, *procText, 0);

  auto [listVar, listText] = firstSet({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!listText) fail("Slurm: none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST is set");
  std::vector<std::string> hosts = expandSlurmHostlist(*listText, listVar);
  {
    std::map<std::string_view, std::size_t> seen;
    for (std::size_t h = 0; h < hosts.size(); ++h) {
      if (!seen.emplace(hosts[h], h).second)
        fail("{} {}: host {} appears twice", listVar, quote(*listText), quote(hosts[h]));
    }
  }
  const int numHosts = static_cast<int>(hosts.size());

  auto [ntasksVar, ntasksText] = firstSet({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  std::optional<int> ntasks;
  if (ntasksText) ntasks = count(ntasksVar, *ntasksText, 1);

  std::vector<int> perHost;
  std::string perHostFrom;  // for messages
  auto [tpnVar, tpnText] = firstSet({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  auto [ntpnVar, ntpnText] = firstSet({"SLURM_NTASKS_PER_NODE"});
  if (tpnText) {
    perHost = parseSlurmTasksPerNode(*tpnText, tpnVar);
    perHostFrom = fmt::format("{} {}", tpnVar, quote(*tpnText));
    if (static_cast<int>(perHost.size()) != numHosts) {
      fail("{} {}: gives task counts for {} hosts but {} {} has {}", tpnVar, quote(*tpnText), perHost.size(), listVar,
           quote(*listText), numHosts);
    }
  } else if (ntpnText) {
    perHost.assign(hosts.size(), count(ntpnVar, *ntpnText, 1));
    perHostFrom = fmt::format("{} {}", ntpnVar, quote(*ntpnText));
  } else if (ntasks) {
    // Slurm's default block split: the first ntasks % nhosts hosts get one task more.
    for (int h = 0; h < numHosts; ++h) perHost.push_back(*ntasks / numHosts + (h < *ntasks % numHosts ? 1 : 0));
    perHostFrom = fmt::format("{} {} over {} hosts", ntasksVar, *ntasks, numHosts);
  } else {
    fail(
        "Slurm: cannot tell the number of tasks: none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, "
        "SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE is set");
  }
  long long total = 0;
  for (int n : perHost) total += n;
  if (ntasks && total != *ntasks) {
    fail("{}: gives {} tasks but {} is {}", perHostFrom, total, ntasksVar, *ntasks);
  }
  if (total > kMaxSlurmHosts) fail("{}: {} tasks is more than {}", perHostFrom, total, kMaxSlurmHosts);
  const int numTasks = static_cast<int>(total);
  if (procId >= numTasks) {
    fail("{} {} is out of range for {} tasks ({})", procVar, procId, numTasks, perHostFrom);
  }
  const int maxPerHost = *std::max_element(perHost.begin(), perHost.end());
  if (options.portBase + maxPerHost - 1 > 65535) {
    fail("Slurm: port base {} + local id {} exceeds 65535", options.portBase, maxPerHost - 1);
  }

  // Block assignment in rank order.
  std::vector<std::string> addresses;
  addresses.reserve(static_cast<std::size_t>(numTasks));
  for (int h = 0; h < numHosts; ++h) {
    for (int local = 0; local < perHost[static_cast<std::size_t>(h)]; ++local) {
      if (static_cast<int>(addresses.size()) == procId) {
        localRank_ = local;
        localSize_ = perHost[static_cast<std::size_t>(h)];
      }
      const std::string& host = hosts[static_cast<std::size_t>(h)];
      addresses.push_back(fmt::format("{}:{}", host, options.portBase + local));
      hostOfRank_.push_back(host);
    }
  }
  auto [localVar, localText] = firstSet({"SLURM_LOCALID"});
  if (localText) {
    int localId = count(localVar, *localText, 0);
    if (localId != localRank_) {
      fail(
          "{} {} does not match the block assignment ({}): SLURM_PROCID {} is local task {} of {} on host {}; only "
          "block distribution is supported",
          localVar, localId, perHostFrom, procId, localRank_, localSize_,
          quote(hostOfRank_[static_cast<std::size_t>(procId)]));
    }
  }
  spec_.jobs.emplace(std::string(ClusterSpec::kWorker), std::move(addresses));
  taskId_ = procId;
  validateClusterSpec(spec_, taskType_, taskId_, {"Slurm", "task_type", "SLURM_PROCID"});
}

}  // namespace collbench::strategy
