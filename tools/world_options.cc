#include "world_options.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"
#include "collbench/strategy/communication_options.h"
#include "perf_runner.h"
#include "process_world.h"
#include "store.h"

namespace collbench::cli {

bool oneRankPerProcess(std::string_view backend, const strategy::EnvLookup& env) {
  const std::optional<BackendCapabilities> caps = findBackendCapabilities(backend);
  if (!caps) return false;
  switch (caps->ranksPerProcess) {
    case RanksPerProcess::All:
      return false;
    case RanksPerProcess::One:
      return true;
    case RanksPerProcess::OneWhenLaunched:
      // The cluster environment (TF_CONFIG, Slurm, MPI, as `collbench launch` sets it) has more than one worker.
      return strategy::makeClusterResolverFromEnvironment(env)->numWorkers() > 1;
  }
  return false;
}

std::string simulatedBackendNames() {
  std::string names;
  for (const auto& [name, summary] : backendNames()) {
    if (backendCapabilities(name).device == DeviceKind::Simulated) names += (names.empty() ? "" : " or ") + name;
  }
  return names.empty() ? "a simulated backend" : names;
}

bool clusterEnvironmentPresent(const strategy::EnvLookup& env) {
  // The variables makeClusterResolverFromEnvironment() looks for, in its order.
  for (const char* name : {"TF_CONFIG", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (env(name)) return true;
  }
  return false;
}

namespace {

/// Every "host:port" of the comma-separated list is on a loopback address (127.0.0.0/8, ::1 or localhost).
bool allLoopback(const std::string& addresses) {
  std::istringstream in(addresses);
  for (std::string a; std::getline(in, a, ',');) {
    std::string host = a.substr(0, a.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (host.rfind("127.", 0) != 0 && host != "::1" && host != "localhost") return false;
  }
  return true;
}

}  // namespace

BackendOptions processWorldOptions(const strategy::EnvLookup& env, std::optional<double> timeoutSeconds) {
  const auto resolver = strategy::makeClusterResolverFromEnvironment(env);
  BackendOptions o;
  const int rank = resolver->rank();
  const int world = resolver->numWorkers();
  o["rank"] = std::to_string(rank);
  o["world"] = std::to_string(world);
  const auto& spec = resolver->clusterSpec();
  std::string addresses, tasks;
  if (world > 1) {
    // Rank order (TensorFlow's): the chief, then worker 0, 1, ...
    std::vector<std::pair<std::string, std::string>> ranks;
    for (std::string_view job : {strategy::ClusterSpec::kChief, strategy::ClusterSpec::kWorker}) {
      for (int i = 0; i < spec.numTasks(job); ++i) {
        ranks.emplace_back(fmt::format("{}[{}]", job, i), spec.taskAddress(job, i));
      }
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      std::string addr = ranks[r].second;
      // MPI launchers publish only the leader's address; the others are unknown but only used in messages,
      // except this rank's own, where its transport listens.
      if (addr.empty()) addr = static_cast<int>(r) == rank ? hostName() + ":0" : fmt::format("unknown-rank-{}:0", r);
      addresses += (r ? "," : "") + addr;
      tasks += (r ? "," : "") + ranks[r].first;
    }
    o["addresses"] = addresses;
    o["tasks"] = tasks;
    o["master"] = resolver->leaderAddress();
  }
  if (auto token = env(host::kClusterTokenEnv); token && !token->empty()) {
    o["token"] = *token;
  } else {
    o["token"] = host::deriveClusterToken(spec.toJson());
    if (world > 1 && !allLoopback(addresses)) {
      fmt::print(stderr,
                 "collbench: warning: {} is not set, so the cluster token is derived from the cluster spec: it keeps "
                 "other clusters out by accident, not an attacker who knows the spec (set the same secret {} on every "
                 "task; collbench launch sets a random one)\n",
                 host::kClusterTokenEnv, host::kClusterTokenEnv);
    }
  }
  // The strategy's parser (CommunicationOptions' default timeout reads the same variable); the variable wins over
  // the command's own -T / --timeout.
  static_assert(std::string_view(host::kTimeoutEnv) == strategy::kTimeoutSecondsEnv);
  if (strategy::timeoutSecondsFromEnvironment(env)) {
    o["timeout"] = *env(host::kTimeoutEnv);
  } else if (timeoutSeconds) {
    o["timeout"] = fmt::format("{}", *timeoutSeconds);
  }
  if (auto s = env("COLLBENCH_STORE"); s && !s->empty()) o["store"] = *s;
  return o;
}

std::vector<long long> pidsOfRanks(Backend& backend, int rank, double timeoutSeconds) {
  const int n = backend.nranks();
  std::vector<std::int64_t> pids(static_cast<std::size_t>(n), 0);
  pids[static_cast<std::size_t>(rank)] = ::getpid();
  if (n > 1) {
    // Each rank fills its own slot: the sum is every rank's pid.
    const CollectiveSpec spec{Collective::AllReduce, n, pids.size(), DType::I64, ReduceOp::Sum};
    backend.run(buildSchedule(spec, "ring"), Buffers{RankBuffers{pids.data(), pids.data()}},
                RunOptions{1, 0, timeoutSeconds});
  }
  return {pids.begin(), pids.end()};
}

namespace {

/// The types collbench-mpi-allreduce maps to MPI datatypes (its mpiType()).
constexpr std::array<std::string_view, 4> kMpiDriverTypes = {"float", "double", "int32", "int64"};

/// `program` as execvp would find it: a path with a slash, else the first executable of that name on PATH.
bool executableFound(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((std::filesystem::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

/// One line for a failed mpirun: the driver's own error when it printed one, else the first paragraph of mpirun's
/// boxed message (the lines between its rules of dashes), joined.
std::string summarizeMpirunOutput(const std::string& text) {
  constexpr std::string_view kDriverError = "collbench-mpi-allreduce: error: ";
  constexpr std::size_t kMaxChars = 300;
  std::istringstream in(text);
  std::string paragraph;
  bool inParagraph = false;
  for (std::string line; std::getline(in, line);) {
    if (const auto at = line.find(kDriverError); at != std::string::npos) return line.substr(at + kDriverError.size());
    const auto first = line.find_first_not_of(" \t");
    const bool rule = first == std::string::npos || line.find_first_not_of("-=* \t") == std::string::npos;
    if (rule) {
      if (inParagraph) inParagraph = false;
      continue;
    }
    if (!paragraph.empty() && !inParagraph) continue;  // only the first paragraph
    inParagraph = true;
    paragraph += (paragraph.empty() ? "" : " ") + line.substr(first);
  }
  if (paragraph.size() > kMaxChars) paragraph = paragraph.substr(0, kMaxChars) + "...";
  return paragraph.empty() ? "no message" : paragraph;
}

/// The driver's table as -J rows (the driver prints nccl-tests' table only: times carry its 3-4 digits).
PerfRun recordFromTable(const std::string& table, int n) {
  PerfRun r;
  r.backend = "mpi";
  r.ranks = n;
  const double factor = busBandwidthFactor(Collective::AllReduce, n);
  double busSum = 0;
  int busRows = 0;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    if (f.size() != 13 || f[0][0] == '#') continue;
    const std::size_t size = std::stoull(f[0]);
    PerfRow row{size, std::stoull(f[1]), f[2], f[3], std::stoi(f[4]), "mpi", "forced by --algo", 0, 1, {}, {}};
    PerfSample* samples[2] = {&row.outOfPlace, &row.inPlace};
    for (int k = 0; k < 2; ++k) {
      const auto column = static_cast<std::size_t>(k) * 4;
      const double us = std::stod(f[5 + column]);
      const double algbw = us > 0 ? static_cast<double>(size) / (us * 1e-6) / 1e9 : 0;
      const std::string& wrong = f[8 + column];
      *samples[k] = {us, algbw, algbw * factor,
                     wrong == "N/A" ? std::nullopt : std::optional<long long>(std::stoll(wrong))};
      if (wrong != "N/A") r.wrongTotal += std::stoll(wrong);
      busSum += algbw * factor;
      ++busRows;
    }
    r.rows.push_back(std::move(row));
  }
  r.avgBusbwGBps = busRows ? busSum / busRows : 0;
  return r;
}

std::string mpiDriverPath() {
  if (const char* p = std::getenv("COLLBENCH_MPI_DRIVER"); p && *p) return p;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto next = self.parent_path() / "collbench-mpi-allreduce";
    if (std::filesystem::exists(next)) return next.string();
  }
  return "collbench-mpi-allreduce";  // from PATH
}

}  // namespace

int runMpiPerf(const PerfConfig& c, std::FILE* out) {
  if (c.collective != Collective::AllReduce) {
    throw Error(Errc::Unsupported,
                fmt::format("--algo mpi measures MPI_Allreduce only (all_reduce), not {}", toString(c.collective)));
  }
  if (!c.backend.empty()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--algo mpi runs Open MPI's own driver under mpirun, not a collbench backend; drop "
                            "--backend {}",
                            c.backend));
  }
  const std::string type(toString(parseDType(c.datatype)));
  if (std::find(kMpiDriverTypes.begin(), kMpiDriverTypes.end(), type) == kMpiDriverTypes.end()) {
    throw Error(Errc::Unsupported, fmt::format("--algo mpi: -d/--datatype {} is not one the MPI driver reduces "
                                               "(float, double, int32, int64)",
                                               c.datatype));
  }
  if (!c.topology.empty() || c.channels != 1 || c.chunkBytes != 0) {
    throw Error(Errc::InvalidArgument,
                "--algo mpi: --topology, --channels and --chunk-bytes shape collbench's "
                "schedules; MPI_Allreduce takes none of them");
  }
  const std::string driver = mpiDriverPath();
  if (!executableFound(driver)) {
    throw Error(Errc::Unsupported, fmt::format("--algo mpi: MPI driver '{}' not found next to collbench or on PATH "
                                               "(build with COLLBENCH_WITH_MPI=ON, or set COLLBENCH_MPI_DRIVER)",
                                               driver));
  }
  if (!executableFound("mpirun")) {
    throw Error(Errc::Unsupported, "--algo mpi: mpirun is not on PATH (Debian package openmpi-bin)");
  }
  std::vector<std::string> args = {"mpirun",
                                   "-np",
                                   std::to_string(c.ranks),
                                   "--oversubscribe",
                                   "--allow-run-as-root",
                                   "--bind-to",
                                   "none",
                                   driver,
                                   "-b",
                                   std::to_string(c.minBytes),
                                   "-e",
                                   std::to_string(c.maxBytes),
                                   "-n",
                                   std::to_string(c.iters),
                                   "-w",
                                   std::to_string(c.warmup),
                                   "-c",
                                   std::to_string(c.check),
                                   "-d",
                                   c.datatype,
                                   "-o",
                                   c.op,
                                   "-a",
                                   std::to_string(c.average)};
  // Extra mpirun flags, e.g. "--mca btl self,tcp" to make Open MPI use loopback TCP like the gloo backend
  // (by default it uses shared memory between local ranks).
  if (const char* extra = std::getenv("COLLBENCH_MPIRUN_ARGS"); extra && *extra) {
    std::vector<std::string> words;
    std::istringstream in(extra);
    for (std::string w; in >> w;) words.push_back(w);
    args.insert(args.begin() + 1, words.begin(), words.end());
  }
  if (c.stepFactor > 1) {
    args.insert(args.end(), {"-f", fmt::format("{}", c.stepFactor)});
  } else {
    args.insert(args.end(), {"-i", std::to_string(c.stepBytes)});
  }
  // mpirun's stderr goes to a log: on failure it is a dozen lines of boxed text, summarised in one.
  std::string logPath = (std::filesystem::temp_directory_path() / "collbench-mpirun-XXXXXX.log").string();
  const int logFd = ::mkstemps(logPath.data(), 4);
  if (logFd < 0) throw Error(Errc::BackendError, fmt::format("--algo mpi: cannot create {}", logPath));
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) throw Error(Errc::BackendError, "--algo mpi: pipe failed");
  std::fflush(out);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(Errc::BackendError, "--algo mpi: fork failed");
  if (pid == 0) {
    ::dup2(pipeFds[1], STDOUT_FILENO);
    ::dup2(logFd, STDERR_FILENO);
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    ::close(logFd);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    // The forked child is single-threaded until it exits: strerror cannot race here.
    std::fprintf(stderr, "cannot run mpirun: %s\n", std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
    std::_Exit(127);
  }
  ::close(pipeFds[1]);
  std::string table;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipeFds[0], buf, sizeof buf)) > 0;) {
    std::fwrite(buf, 1, static_cast<std::size_t>(n), out);
    std::fflush(out);
    table.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipeFds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(logFd);
  std::string log;
  {
    std::ifstream f(logPath);
    log.assign(std::istreambuf_iterator<char>(f), {});
  }
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // The driver exits 1 after a complete table with wrong values (nccl-tests' convention), else 0 or a failure.
  const bool completed = table.find("# Avg bus bandwidth") != std::string::npos && (rc == 0 || rc == 1);
  if (!completed) {
    throw Error(Errc::BackendError, fmt::format("--algo mpi: mpirun exited with status {}: {} (full output: {})", rc,
                                                summarizeMpirunOutput(log), logPath));
  }
  std::filesystem::remove(logPath);
  std::fputs(log.c_str(), stderr);  // warnings of a run that worked
  if (!c.outputFile.empty()) writePerfJson(c, recordFromTable(table, c.ranks));
  return rc;
}

// ---------------------------------------------------------------------------------------------------------------
// The nccl backend with one rank per process: rank 0's NCCL unique id travels through the rendezvous store.

namespace {

/// Store keys, under the cluster token the store checks on every request.
constexpr const char* kNcclIdKey = "collbench/nccl_id";
constexpr const char* kNcclIdFetchedKey = "collbench/nccl_id_fetched/";

std::pair<std::string, int> splitMaster(const std::string& master) {
  const std::size_t colon = master.rfind(':');
  std::string host = master.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(master.substr(colon + 1))};
}

}  // namespace

std::string exchangeNcclId(const BackendOptions& options, const std::function<std::string()>& newId) {
  const host::ProcessWorld w = host::ProcessWorld::fromOptions(options);
  if (w.world == 1) return newId();
  if (w.store != "tcp") {
    throw Error(Errc::Unsupported, fmt::format("nccl backend: store=\"{}\": the NCCL id travels through the TCP store "
                                               "only (unset COLLBENCH_STORE)",
                                               w.store));
  }
  using Ms = std::chrono::milliseconds;
  const double seconds = w.timeoutSeconds.value_or(kDefaultTimeoutSeconds);
  const auto timeout = Ms(static_cast<long long>(seconds * 1000.0));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&deadline] {
    return std::max(Ms(1), std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now()));
  };
  const auto [host, port] = splitMaster(w.master);
  if (w.rank == 0) {
    std::string id = newId();
    host::StoreServer server(host, port, w.token);
    host::StoreClient client(host, port, w.token, left());
    client.set(kNcclIdKey, std::vector<char>(id.begin(), id.end()));
    // The store closes with this function: first every rank must have its copy.
    for (int r = 1; r < w.world; ++r) {
      if (!client.wait(kNcclIdFetchedKey + std::to_string(r), left())) {
        throw Error(Errc::Timeout,
                    fmt::format("nccl rendezvous: {} did not fetch the NCCL id within {:.3g} s ({} serves it at {})",
                                w.describeRank(r), seconds, w.describeRank(0), w.master),
                    0, r);
      }
    }
    return id;
  }
  std::optional<host::StoreClient> client;
  std::optional<std::vector<char>> id;
  try {
    client.emplace(host, port, w.token, left());
    id = client->get(kNcclIdKey, left());
  } catch (const Error& e) {
    if (e.code() != Errc::Timeout) throw;
  }
  if (!id) {
    throw Error(Errc::Timeout,
                fmt::format("nccl rendezvous: {}, which serves the NCCL id at {}, did not publish it within {:.3g} s "
                            "({} waited for it)",
                            w.describeRank(0), w.master, seconds, w.describeRank(w.rank)),
                w.rank, 0);
  }
  client->set(kNcclIdFetchedKey + std::to_string(w.rank), {'1'});
  return std::string(id->begin(), id->end());
}

}  // namespace collbench::cli
