// Google Benchmark driver: the gloo process backend (one rank per process over Gloo's TCP transport, loopback) x
// algorithm x size, with Gloo's own all-reduce algorithms (gloo_ring, gloo_ring_chunked, gloo_halving_doubling,
// gloo_bcube) as peers in the same grid.
//
// Ranks are processes, so the driver forks them itself: `bench_gloo --ranks=4` starts 3 more processes of this
// program before Google Benchmark runs. Every process registers the same benchmarks and runs them in the same order
// with a fixed iteration count (Google Benchmark's adaptive count would differ between processes, and then their
// collectives would not match), so do not pass --benchmark_min_warmup_time, which is adaptive too. Rank 0 reports;
// the others print nothing and write no --benchmark_out. Manual time is rank 0's clock per collective (start to its
// own completion, after the header exchange that starts every collective); algbw/busbw are byte rates.
//   build/release/bench/bench_gloo --ranks=4 --benchmark_out=gloo.json --benchmark_out_format=json
//   build/release/bench/bench_gloo --ranks=2 --benchmark_filter='all_reduce/(ring|gloo_ring)/'
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"

namespace {

using namespace collbench;

constexpr int kDefaultRanks = 2;
/// Collectives per benchmark iteration (one run() call): amortises the per-call header exchange the way a training
/// loop's back-to-back calls do, as bench_host does.
constexpr int kCollectivesPerIteration = 5;
/// Fixed iterations: about this many bytes per benchmark, between kMinIterations and kMaxIterations.
constexpr std::int64_t kBytesPerBenchmark = std::int64_t{64} << 20;
constexpr std::int64_t kMinIterations = 1;
constexpr std::int64_t kMaxIterations = 50;
/// A rank that waits this long for a peer fails the benchmark rather than hanging it.
constexpr double kTimeoutSeconds = 120;

std::unique_ptr<Backend> gBackend;
int gRank = 0;

void runCollective(benchmark::State& state, const AlgorithmInfo* algo) {
  const int n = gBackend->nranks();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const CollectiveSpec spec{algo->collective, n, bytes / sizeof(float), DType::F32, ReduceOp::Sum};
  // This process's rank only, laid out as every backend expects (input, output), unique values per element.
  std::vector<std::byte> in(std::max<std::size_t>(spec.inputBytes(), 1)),
      out(std::max<std::size_t>(spec.outputBytes(), 1));
  fillRankInput(spec, gRank, in.data());
  const Buffers bufs{RankBuffers{in.data(), out.data()}};
  try {
    const Schedule schedule = algo->build(spec, {});
    gBackend->run(schedule, bufs, RunOptions{1, 1, kTimeoutSeconds});
    for (auto _ : state) {
      state.SetIterationTime(
          gBackend->run(schedule, bufs, RunOptions{kCollectivesPerIteration, 0, kTimeoutSeconds}).seconds);
    }
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double moved = static_cast<double>(std::max(spec.inputBytes(), spec.outputBytes()));
  state.counters["algbw"] = benchmark::Counter(moved, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(moved * busBandwidthFactor(algo->collective, n),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void registerBenchmarks(int n) {
  const auto isGloo = [](const AlgorithmInfo& a) {
    return std::find(host::kGlooNativeAlgorithms.begin(), host::kGlooNativeAlgorithms.end(), a.name) !=
           host::kGlooNativeAlgorithms.end();
  };
  for (const auto& a : algorithms()) {
    if (a.collective == Collective::Barrier || (a.native && !isGloo(a)) || a.traits.needsSwitchReduction) continue;
    for (std::int64_t bytes = 8; bytes <= (std::int64_t{256} << 20); bytes *= 32) {
      // One registration per size: the fixed iteration count belongs to a registration, and it depends on the size.
      auto* b = benchmark::RegisterBenchmark(
          fmt::format("gloo/{}/{}/ranks:{}", toString(a.collective), a.name, n).c_str(), runCollective, &a);
      b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"bytes"})->Args({bytes});
      b->Iterations(std::clamp(kBytesPerBenchmark / bytes, kMinIterations, kMaxIterations));
    }
  }
}

/// Removes "--ranks=N" from argv (Google Benchmark rejects flags it does not know) and returns N.
int takeRanksFlag(int& argc, char** argv) {
  int ranks = kDefaultRanks;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.rfind("--ranks=", 0) == 0) {
      ranks = std::atoi(argv[i] + 8);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return ranks;
}

/// A TCP port of 127.0.0.1 that is free now (rank 0's rendezvous store listens there).
int freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("bench_gloo: cannot bind a loopback port");
    std::exit(1);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// What ranks other than 0 report: nothing (their errors still reach stderr).
class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

/// Ranks other than 0 report nothing: stdout to /dev/null, no --benchmark_out file.
void silenceFollower(int& argc, char** argv) {
  const int devnull = ::open("/dev/null", O_WRONLY);
  ::dup2(devnull, STDOUT_FILENO);
  ::close(devnull);
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).rfind("--benchmark_out", 0) != 0) argv[kept++] = argv[i];
  }
  argc = kept;
  argv[argc] = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = takeRanksFlag(argc, argv);
  if (ranks < 1) {
    std::fprintf(stderr, "bench_gloo: --ranks must be at least 1\n");
    return 2;
  }
  const int port = freeLoopbackPort();
  std::string addresses;
  for (int r = 0; r < ranks; ++r) addresses += fmt::format("{}127.0.0.1:0", r ? "," : "");
  const pid_t leader = ::getpid();
  std::vector<pid_t> followers;
  std::fflush(stdout);
  for (int r = 1; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("bench_gloo: fork");
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // die with rank 0
      if (::getppid() != leader) std::_Exit(1);
      gRank = r;
      followers.clear();
      break;
    }
    followers.push_back(pid);
  }
  if (gRank > 0) silenceFollower(argc, argv);
  try {
    gBackend =
        host::makeGlooBackend(host::ProcessWorld::fromOptions({{"rank", std::to_string(gRank)},
                                                               {"world", std::to_string(ranks)},
                                                               {"addresses", addresses},
                                                               {"master", fmt::format("127.0.0.1:{}", port)},
                                                               {"token", fmt::format("bench-gloo-{}-{}", leader, port)},
                                                               {"timeout", fmt::format("{}", kTimeoutSeconds)}}));
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gloo: rank %d: %s\n", gRank, e.what());
    return 1;
  }
  registerBenchmarks(ranks);
  benchmark::Initialize(&argc, argv);
  SilentReporter silent;
  if (gRank > 0) {
    benchmark::RunSpecifiedBenchmarks(&silent);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  gBackend.reset();
  int rc = 0;
  for (std::size_t i = 0; i < followers.size(); ++i) {
    int status = 0;
    ::waitpid(followers[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_gloo: rank %zu exited with status %d\n", i + 1,
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      rc = 1;
    }
  }
  return rc;
}
