#include "world_options.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "environment.h"
#include "perf_runner.h"
#include "process_world.h"

namespace collbench::cli {

bool isProcessBackend(std::string_view backend) { return backend == "gloo"; }

BackendOptions processWorldOptions(const strategy::EnvLookup& env) {
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
  }
  if (auto t = env(host::kTimeoutEnv); t && !t->empty()) {
    char* end = nullptr;
    const double v = std::strtod(t->c_str(), &end);
    if (end == t->c_str() || *end != '\0' || !(v > 0)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{}=\"{}\" is not a positive number of seconds", host::kTimeoutEnv, *t));
    }
    o["timeout"] = *t;
  }
  if (auto s = env("COLLBENCH_STORE"); s && !s->empty()) o["store"] = *s;
  return o;
}

PerfBuffers::PerfBuffers(const CollectiveSpec& spec, bool inPlace, int localRank) : spec_(spec), rank_(localRank) {
  if (localRank < 0) {
    all_.emplace(spec, inPlace);
    return;
  }
  local_ = true;
  inBytes_ = spec.inputBytes();
  outBytes_ = spec.outputBytes();
  if (inPlace) {
    allocBytes_ = std::max(inBytes_, outBytes_);
    out_ = std::make_unique<std::byte[]>(std::max<std::size_t>(allocBytes_, 1));
    localViews_ = {
        RankBuffers{out_.get() + spec.inPlaceInputOffset(localRank), out_.get() + spec.inPlaceOutputOffset(localRank)}};
  } else {
    in_ = std::make_unique<std::byte[]>(std::max<std::size_t>(inBytes_, 1));
    out_ = std::make_unique<std::byte[]>(std::max<std::size_t>(outBytes_, 1));
    allocBytes_ = outBytes_;
    localViews_ = {RankBuffers{in_.get(), out_.get()}};
  }
}

void PerfBuffers::fill() {
  if (all_) {
    all_->fill();
    return;
  }
  if (in_) std::memset(in_.get(), 0, inBytes_);
  std::memset(out_.get(), 0, allocBytes_);
  if (spec_.kind == Collective::Barrier) return;
  void* in = const_cast<void*>(localViews_[0].input);
  const std::size_t elems = inBytes_ / spec_.elementSize();
  for (std::size_t i = 0; i < elems; ++i) storeFromDouble(spec_.dtype, in, i, inputValue(spec_, rank_, i));
}

std::size_t PerfBuffers::countWrong() const {
  if (all_) return all_->countWrong();
  if (spec_.kind == Collective::Barrier || (spec_.kind == Collective::Reduce && rank_ != spec_.root)) return 0;
  const void* out = localViews_[0].output;
  const std::size_t elems = outBytes_ / spec_.elementSize();
  std::size_t wrong = 0;
  std::uint64_t rounded = 0;
  for (std::size_t i = 0; i < elems; ++i) {
    // Round the expectation to the dtype, as RankBufferSet does: that is the closest the dtype can hold.
    storeFromDouble(spec_.dtype, &rounded, 0, expectedValue(spec_, rank_, i));
    if (!matches(spec_, loadAsDouble(spec_.dtype, out, i), loadAsDouble(spec_.dtype, &rounded, 0))) ++wrong;
  }
  return wrong;
}

long long sumOverProcesses(Backend& backend, long long value, bool processMode, double timeoutSeconds) {
  if (!processMode || backend.nranks() == 1) return value;
  const CollectiveSpec spec{Collective::AllReduce, backend.nranks(), 1, DType::I64, ReduceOp::Sum};
  const Schedule s = buildSchedule(spec, "ring");
  std::int64_t v = value;
  backend.run(s, Buffers{RankBuffers{&v, &v}}, RunOptions{1, 0, timeoutSeconds});
  return v;
}

namespace {

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
    throw Error(Errc::Unsupported, "--algo mpi measures MPI_Allreduce only (all_reduce)");
  }
  std::vector<std::string> args = {"mpirun",
                                   "-np",
                                   std::to_string(c.ranks),
                                   "--oversubscribe",
                                   "--allow-run-as-root",
                                   "--bind-to",
                                   "none",
                                   mpiDriverPath(),
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
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) throw Error(Errc::BackendError, "--algo mpi: pipe failed");
  std::fflush(out);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(Errc::BackendError, "--algo mpi: fork failed");
  if (pid == 0) {
    ::dup2(pipeFds[1], STDOUT_FILENO);
    ::close(pipeFds[0]);
    ::close(pipeFds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    // NOLINTNEXTLINE(concurrency-mt-unsafe): the forked child is single-threaded until it exits.
    std::fprintf(stderr, "collbench: --algo mpi: cannot run mpirun: %s\n", std::strerror(errno));
    std::_Exit(127);
  }
  ::close(pipeFds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(pipeFds[0], buf, sizeof buf)) > 0;) {
    std::fwrite(buf, 1, static_cast<std::size_t>(n), out);
    std::fflush(out);
  }
  ::close(pipeFds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace collbench::cli
