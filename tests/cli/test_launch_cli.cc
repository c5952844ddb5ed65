// `collbench launch` as users run it: TF_CONFIG and rank variables per process, output prefixed by rank, a failed
// rank stopping the others with its status named, bad invocations; and `collbench perf --backend gloo` under it:
// correct results for every all-reduce algorithm, only rank 0 printing, and kill -9 of one process during a
// 256 MiB all-reduce, after which the survivors exit naming the dead rank within timeout + 5 s.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "collbench/algorithms.h"
#include "loopback_ports.h"

namespace collbench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Launched {
  int exitCode = -1;
  std::string out, err;
  double seconds = 0;
};

/// Runs the collbench CLI with `args` (argv, no shell) and extra environment; `whileRunning(pid, out)` is called
/// every 50 ms with the stdout so far until it returns true.
Launched runCollbench(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                      const std::function<bool(pid_t, const std::string&)>& whileRunning = {},
                      std::chrono::seconds limit = 120s) {
  int outPipe[2], errPipe[2];
  EXPECT_EQ(::pipe(outPipe), 0);
  EXPECT_EQ(::pipe(errPipe), 0);
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(outPipe[1], STDOUT_FILENO);
    ::dup2(errPipe[1], STDERR_FILENO);
    for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1]}) ::close(fd);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(COLLBENCH_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(COLLBENCH_CLI, argv.data());
    std::_Exit(127);
  }
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  Launched r;
  bool outOpen = true, errOpen = true, watching = static_cast<bool>(whileRunning);
  while (outOpen || errOpen) {
    if (Clock::now() - t0 > limit) {
      ::kill(pid, SIGKILL);
      ADD_FAILURE() << "collbench did not finish within " << limit.count() << " s";
      break;
    }
    pollfd fds[2] = {{outOpen ? outPipe[0] : -1, POLLIN, 0}, {errOpen ? errPipe[0] : -1, POLLIN, 0}};
    ::poll(fds, 2, 50);
    char buf[8192];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? outOpen : errOpen) = false;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
    if (watching && whileRunning(pid, r.out)) watching = false;
  }
  ::close(outPipe[0]);
  ::close(errPipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::vector<std::string> linesOf(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(LaunchCli, SetsTfConfigPerRankAndPrefixesOutput) {
  const Launched r = runCollbench(
      {"launch", "-n", "3", "--", "sh", "-c", "echo \"$TF_CONFIG\"; echo \"err $RANK of $WORLD_SIZE\" >&2"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  int seen = 0;
  std::vector<std::string> workers;
  for (const auto& line : linesOf(r.out)) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0u) << line;
    const int rank = line[6] - '0';
    const auto tf = nlohmann::json::parse(line.substr(line.find("] ") + 2));
    EXPECT_EQ(tf["task"]["type"], "worker");
    EXPECT_EQ(tf["task"]["index"], rank);
    ASSERT_EQ(tf["cluster"]["worker"].size(), 3u);
    if (workers.empty()) workers = tf["cluster"]["worker"].get<std::vector<std::string>>();
    EXPECT_EQ(tf["cluster"]["worker"].get<std::vector<std::string>>(), workers);  // one cluster for all
    ++seen;
  }
  EXPECT_EQ(seen, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(contains(r.err, "[rank " + std::to_string(i) + "] err " + std::to_string(i) + " of 3")) << r.err;
    EXPECT_EQ(workers[static_cast<std::size_t>(i)].rfind("127.0.0.1:", 0), 0u);
  }
}

TEST(LaunchCli, AFailedRankStopsTheOthersAndIsNamed) {
  const Launched r = runCollbench(
      {"launch", "-n", "3", "--grace", "0.5", "--", "sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"});
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_TRUE(contains(r.err, "collbench launch: rank 1 exited with status 3\n")) << r.err;
  EXPECT_LT(r.seconds, 10);  // the sleepers were stopped, not waited for

  const Launched k = runCollbench(
      {"launch", "-n", "2", "--grace", "0.5", "--", "sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; sleep 60"});
  EXPECT_EQ(k.exitCode, 137);
  EXPECT_TRUE(contains(k.err, "collbench launch: rank 0 exited with status 137 (killed by signal 9")) << k.err;
}

TEST(LaunchCli, BadInvocationsAreRefused) {
  Launched r = runCollbench({"launch", "-n", "2"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  r = runCollbench({"launch", "-n", "0", "--", "true"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "-n/--nprocs must be at least 1")) << r.err;
  r = runCollbench({"launch", "-n", "2", "--hosts", "192.0.2.1", "--", "true"});  // TEST-NET-1, never local
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "'192.0.2.1' is not an address of this machine")) << r.err;
  r = runCollbench({"launch", "-n", "1", "--", "/nonexistent/program"});
  EXPECT_EQ(r.exitCode, 127);
  EXPECT_TRUE(contains(r.err, "[rank 0] collbench launch: cannot run '/nonexistent/program'")) << r.err;
}

TEST(LaunchCli, MoreProcessesThanTheMachineGivesAreRefusedUpFront) {
  // Refused in one line naming -n before any port is taken or process started (not after 8 s of binding ports,
  // naming --hosts). No machine gives one launcher a million: ports alone stop at 64 K per host.
  Launched r = runCollbench({"launch", "-n", "1000000", "--", "true"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  EXPECT_TRUE(r.err.rfind("collbench: error: -n/--nprocs 1000000 is more than the ", 0) == 0) << r.err;
  EXPECT_LT(r.seconds, 5) << r.err;
  // The bound names its reason: with 100 open files the launcher has pipes for (100 - 16) / 2 = 42 processes.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 100;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  r = runCollbench({"launch", "-n", "60", "--", "true"});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(r.err,
            "collbench: error: -n/--nprocs 60 is more than the 42 processes collbench launch can start here (it keeps "
            "2 pipes open per process and may open 100 files: ulimit -n)\n");
}

#ifdef COLLBENCH_HAVE_GLOO
/// The perf table of rank 0 (all stdout must come from rank 0) and its rows.
void expectCorrectTable(const Launched& r, std::size_t rows) {
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::string table;
  for (const auto& line : linesOf(r.out)) {
    ASSERT_EQ(line.rfind("[rank 0] ", 0), 0u) << "only rank 0 prints: " << line;
    table += line.substr(9) + "\n";
  }
  EXPECT_TRUE(contains(table, "# Out of bounds values : 0 OK")) << table;
  EXPECT_EQ(testing::tableRows(table).size() % rows, 0u) << table;
}

TEST(LaunchCli, PerfOverGlooEveryAllReduceAlgorithm) {
  const std::string cli = COLLBENCH_CLI;
  std::string algos;
  for (const auto& a : algorithms()) {
    const bool gloo = a.native && a.name.rfind("gloo_", 0) == 0;
    // hierarchical needs a topology (hosts of ranks); the fork tests cover it.
    if (a.collective == Collective::AllReduce && (gloo || !a.native) && a.name != "hierarchical" &&
        !a.traits.needsSwitchReduction) {
      algos += " " + a.name;
    }
  }
  // Every algorithm at 3 processes (one launch, each process running perf per algorithm in turn).
  const std::string loop = "for a in" + algos + "; do " + cli +
                           " perf --backend gloo --algo $a -b 4 -e 256K -f 64 -n 1 -w 1 || exit 1; done";
  Launched r = runCollbench({"launch", "-n", "3", "--", "sh", "-c", loop});
  expectCorrectTable(r, 3);  // 4, 256, 16K bytes
  for (const std::string n : {"2", "4"}) {
    for (const std::string algo : {"ring", "gloo_ring"}) {
      r = runCollbench({"launch", "-n", n,    "--", cli,  "perf", "--backend", "gloo", "--algo", algo, "-b",
                        "8",      "-e", "1M", "-f", "32", "-n",   "2",         "-d",   "double", "-o", "avg"});
      expectCorrectTable(r, 4);  // 8, 256, 8K, 256K bytes
      EXPECT_TRUE(contains(r.out, "[rank 0] # nThread 1 nGpus " + n)) << r.out;
    }
  }
}

// --algo auto over processes: every process times the same near-tied candidates (the default model's, no table)
// and they agree through the backend on which one to run, or the sweep after it would mismatch and time out.
TEST(LaunchCli, PerfAutoTrialAgreesAcrossProcesses) {
  const auto json = std::filesystem::temp_directory_path() / ("launch_trial_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(json);
  const Launched r =
      runCollbench({"launch", "-n", "3",  "--",   COLLBENCH_CLI, "perf", "--backend", "gloo", "--algo", "auto",
                    "-b",     "4K", "-e", "256K", "-f",          "8",    "-n",        "2",    "-J",     json.string()});
  expectCorrectTable(r, 3);  // 4K, 32K, 256K bytes
  const auto doc = nlohmann::json::parse(testing::slurp(json));
  std::filesystem::remove(json);
  int tried = 0;
  for (const auto& row : doc["results"]) {
    tried +=
        row["algorithm_reason"].get<std::string>().find("near-tied candidates on this machine") != std::string::npos;
  }
  EXPECT_GT(tried, 0) << doc["results"].dump();
}

TEST(LaunchCli, RanksOnTwoLoopbackAddresses) {
  const Launched r = runCollbench({"launch", "-n", "2", "--hosts", "127.0.0.1,127.0.0.2", "--", COLLBENCH_CLI, "perf",
                                   "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1"});
  expectCorrectTable(r, 1);
}

TEST(LaunchCli, PerfTimeoutBoundsRendezvous) {
  // Worker 1 never starts: -T (COLLBENCH_TIMEOUT_SECONDS unset) bounds the wait for it, and the error names it.
  const std::vector<int> ports = collbench::testing::freeLoopbackPorts(2);
  const int p0 = ports[0], p1 = ports[1];
  const std::string tf = fmt::format(
      R"(TF_CONFIG={{"cluster":{{"worker":["127.0.0.1:{}","127.0.0.1:{}"]}},"task":{{"type":"worker","index":0}}}})",
      p0, p1);
  const Launched r = runCollbench({"perf", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-T", "2"},
                                  {tf, "COLLBENCH_TIMEOUT_SECONDS=", "COLLBENCH_CLUSTER_TOKEN="});
  EXPECT_NE(r.exitCode, 0) << r.err;
  EXPECT_LT(r.seconds, 2 + 8) << r.err;
  EXPECT_TRUE(contains(r.err, fmt::format("worker[1] (rank 1, 127.0.0.1:{}) did not join within 2 s", p1))) << r.err;
  // A derived token on loopback is fine: no warning.
  EXPECT_FALSE(contains(r.err, "warning")) << r.err;
}

TEST(LaunchCli, DerivedTokenOffLoopbackWarns) {
  // TEST-NET-1 addresses (never this machine's): the run fails to listen, but first warns that the token is derived.
  const std::string tf =
      R"(TF_CONFIG={"cluster":{"worker":["192.0.2.1:2222","192.0.2.2:2222"]},"task":{"type":"worker","index":1}})";
  const Launched r = runCollbench({"perf", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-T", "1"},
                                  {tf, "COLLBENCH_TIMEOUT_SECONDS=", "COLLBENCH_CLUSTER_TOKEN="});
  EXPECT_NE(r.exitCode, 0) << r.err;
  EXPECT_TRUE(
      contains(r.err, "collbench: warning: COLLBENCH_CLUSTER_TOKEN is not set, so the cluster token is derived"))
      << r.err;
}

/// /proc/<launcher>/task/<launcher>/children, and the RANK in each one's environment.
pid_t childWithRank(pid_t launcher, int rank) {
  std::ifstream children(fmt::format("/proc/{}/task/{}/children", launcher, launcher));
  for (pid_t pid; children >> pid;) {
    std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (contains(std::string(1, '\0') + all, std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0')) {
      return pid;
    }
  }
  return -1;
}

double residentMiB(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return 0;
}

TEST(LaunchCli, KillDuringA256MiBAllReduceNamesTheDeadRank) {
  constexpr double kTimeout = 5;
  Clock::time_point killedAt{};
  const auto startedAt = Clock::now();
  pid_t victim = -1;
  const Launched r = runCollbench(
      {"launch", "-n", "3",    "--grace", "20",   "--", COLLBENCH_CLI, "perf", "--backend", "gloo", "--algo",
       "ring",   "-b", "256M", "-e",      "256M", "-n", "1000",        "-w",   "1",         "-c",   "0"},
      {"COLLBENCH_TIMEOUT_SECONDS=5"}, [&](pid_t launcher, const std::string&) {
        // Rank 0's table is buffered until its first row, so watch rank 1's memory instead: past its 512 MiB of
        // buffers it is folding received data into staging, i.e. inside the all-reduce.
        if (victim < 0) victim = childWithRank(launcher, 1);
        if (victim < 0 || residentMiB(victim) < 600) {
          if (Clock::now() - startedAt > 60s) ::kill(launcher, SIGKILL);  // never got there: fail, do not hang
          return false;
        }
        std::this_thread::sleep_for(300ms);
        killedAt = Clock::now();
        ::kill(victim, SIGKILL);
        return true;
      });
  ASSERT_GT(victim, 0) << r.err;
  const double after = std::chrono::duration<double>(Clock::now() - killedAt).count();
  EXPECT_LT(after, kTimeout + 5) << r.err;
  EXPECT_EQ(r.exitCode, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "collbench launch: rank 1 exited with status 137 (killed by signal 9")) << r.err;
  for (int survivor : {0, 2}) {
    bool named = false;
    for (const auto& line : linesOf(r.err)) {
      if (line.rfind(fmt::format("[rank {}] collbench: error: worker[1] (rank 1, 127.0.0.1:", survivor), 0) == 0 &&
          contains(line, "failed")) {
        named = true;
      }
    }
    EXPECT_TRUE(named) << "rank " << survivor << " did not name the dead rank:\n" << r.err;
  }
}
#endif  // COLLBENCH_HAVE_GLOO

TEST(LaunchCli, PerfAlgoMpiRunsOpenMpisDriver) {
  const auto driver = std::filesystem::path(COLLBENCH_CLI).parent_path() / "collbench-mpi-allreduce";
  if (!std::filesystem::exists(driver) || std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no collbench-mpi-allreduce or mpirun (built only with COLLBENCH_WITH_MPI)";
  }
  const auto json = std::filesystem::temp_directory_path() / fmt::format("collbench_mpi_{}.json", ::getpid());
  std::filesystem::remove(json);
  const Launched r = runCollbench(
      {"perf", "--algo", "mpi", "-g", "2", "-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-J", json.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_TRUE(contains(r.out, "backend mpi, 2 ranks")) << r.out;
  EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << r.out;
  EXPECT_FALSE(contains(r.out, "Pid      0 on          ?")) << "every rank's pid and host: " << r.out;
  const auto rows = testing::tableRows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  // -J holds the driver's rows: sizes, times as printed, busbw = size / time x 2(n-1)/n with n = 2.
  const auto doc = nlohmann::json::parse(testing::slurp(json));
  std::filesystem::remove(json);
  EXPECT_EQ(doc["config"]["backend"], "mpi");
  ASSERT_EQ(doc["results"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& row = doc["results"][i];
    EXPECT_EQ(row["size"], std::stoull(rows[i][0]));
    EXPECT_EQ(row["algorithm"], "mpi");
    const double us = row["out_of_place"]["time_us"].get<double>();
    EXPECT_EQ(us, std::stod(rows[i][5]));
    EXPECT_NEAR(row["out_of_place"]["busbw_GBps"].get<double>(), row["size"].get<double>() / (us * 1e3), 1e-12);
    EXPECT_EQ(row["in_place"]["wrong"], 0);
  }
  // mpirun's failure is one line (its message, and where the rest of its output went), not a screenful.
  const Launched bad = runCollbench({"perf", "--algo", "mpi", "-g", "2", "-b", "1K", "-e", "1K"},
                                    {"COLLBENCH_MPIRUN_ARGS=--no-such-mpirun-flag"});
  EXPECT_EQ(bad.exitCode, 1) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_TRUE(contains(bad.err, "collbench: error: --algo mpi: mpirun exited with status")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "no-such-mpirun-flag")) << bad.err;
  const std::size_t log = bad.err.find("(full output: ");
  if (log != std::string::npos) {
    std::filesystem::remove(bad.err.substr(log + 14, bad.err.find(')', log) - log - 14));
  }
}

}  // namespace
}  // namespace collbench
