// `collbench launch -n N [--hosts h1,h2] -- <command...>`: starts N local processes of <command> as one
// MultiWorkerMirroredStrategy cluster (TF_CONFIG with a worker job of N tasks, task i in process i, plus the
// torchrun-style RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT), streams their output prefixed by
// "[rank i] " (stdout to stdout, stderr to stderr), forwards SIGINT/SIGTERM, and when one process fails gives the
// others a grace period to report what they saw, then stops them (SIGTERM, then SIGKILL) and exits non-zero naming
// the failed rank and its status, as torchrun and mpirun do.
//
// Only local spawning is implemented: --hosts may list several addresses of this machine (127.0.0.1,127.0.0.2 ...,
// which makes each rank's transport listen on its own address); for several machines, start one process per task
// with TF_CONFIG yourself, or under Slurm or mpirun (the cluster resolvers read their environments).
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/strategy/cluster_resolver.h"
#include "commands.h"
#include "process_world.h"

namespace collbench::cli {
namespace {

using Clock = std::chrono::steady_clock;

/// After the first failure, how long the others may take to exit on their own (they usually detect the failure
/// and report which rank died) before they get SIGTERM, and then again before SIGKILL.
constexpr double kDefaultGraceSeconds = 3.0;
/// Once every child has exited, output still buffered in pipes held open by grandchildren is drained this long.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(500);
constexpr int kPollMs = 100;
constexpr std::size_t kTokenBytes = 16;

/// Descriptors the launcher holds besides its children's pipes: stdin, stdout, stderr, the signal pipe, and a few
/// for getaddrinfo, /dev/urandom and what the caller left open.
constexpr long kReservedFds = 16;
/// Linux's default net.ipv4.ip_local_port_range (ip-sysctl.rst), where /proc does not say: the ports bind(:0) picks.
constexpr long kDefaultLocalPorts = 60999 - 32768 + 1;

int gSignalPipe[2] = {-1, -1};

extern "C" void onLaunchSignal(int sig) {
  const unsigned char c = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(gSignalPipe[1], &c, 1);
}

struct Args {
  int nprocs = 1;
  std::string hosts = "127.0.0.1";
  double grace = kDefaultGraceSeconds;
  std::vector<std::string> command;
};

struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string pending;  // bytes after the last newline
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  Stream out, err;
  bool exited = false;
  int status = 0;
};

/// A socket bound to host:0, left open so that the next call cannot pick the same port.
struct PortHold {
  int fd = -1;
  int port = 0;
};

PortHold holdFreePort(const std::string& host, int rank) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &res) != 0 || !res) {
    throw Error(Errc::InvalidArgument, fmt::format("--hosts: cannot resolve '{}'", host));
  }
  PortHold h;
  int lastErrno = 0;
  for (addrinfo* ai = res; ai && h.fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      lastErrno = errno;
      continue;
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      h.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      h.fd = fd;
    } else {
      lastErrno = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  // Out of descriptors or ports (other programs took them after admitProcesses counted): the count, not the host.
  if (h.fd < 0 && (lastErrno == EMFILE || lastErrno == ENFILE || lastErrno == EADDRINUSE)) {
    throw Error(Errc::InvalidArgument, fmt::format("-n/--nprocs: cannot take a port on '{}' for rank {}: {}", host,
                                                   rank, errnoText(lastErrno)));
  }
  if (h.fd < 0) {
    throw Error(Errc::Unsupported,
                fmt::format("--hosts: '{}' is not an address of this machine; collbench launch starts local processes "
                            "only (on several machines start each task with TF_CONFIG, or under Slurm or mpirun)",
                            host));
  }
  return h;
}

/// The ports bind(host:0) can pick from (net.ipv4.ip_local_port_range), and that range as text.
std::pair<long, std::string> localPorts() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  long lo = 0, hi = 0;
  if (in >> lo >> hi && hi >= lo) return {hi - lo + 1, fmt::format("{}-{}", lo, hi)};
  return {kDefaultLocalPorts, "32768-60999"};
}

/// Refuses more processes than this machine lets one launcher start, before any port is taken or process started:
/// each holds a port of its host until the children start, and two pipes of the launcher's open files until it ends.
void admitProcesses(int nprocs, std::size_t hosts) {
  long most = std::numeric_limits<long>::max();
  std::string why;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const long byFiles = std::max(0L, (static_cast<long>(files.rlim_cur) - kReservedFds) / 2);
    if (byFiles < most) {
      most = byFiles;
      why = fmt::format("it keeps 2 pipes open per process and may open {} files: ulimit -n", files.rlim_cur);
    }
  }
  const auto [ports, range] = localPorts();
  if (const long byPorts = ports * static_cast<long>(hosts); byPorts < most) {
    most = byPorts;
    why = fmt::format("each takes a port of its host from net.ipv4.ip_local_port_range {}: {} per host, {} host{}",
                      range, ports, hosts, hosts == 1 ? "" : "s");
  }
  rlimit procs{};
  // RLIMIT_NPROC counts every process of the user and does not bind root.
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &procs) == 0 && procs.rlim_cur != RLIM_INFINITY &&
      static_cast<long>(procs.rlim_cur) < most) {
    most = static_cast<long>(procs.rlim_cur);
    why = fmt::format("this user may run {} processes: ulimit -u", procs.rlim_cur);
  }
  if (nprocs <= most) return;
  throw Error(Errc::InvalidArgument,
              fmt::format("-n/--nprocs {} is more than the {} processes collbench launch can start here ({})", nprocs,
                          most, why));
}

std::string randomToken() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char b[kTokenBytes] = {};
  urandom.read(reinterpret_cast<char*>(b), sizeof b);
  std::string s;
  for (unsigned char c : b) s += fmt::format("{:02x}", c);
  return s;
}

std::string joinHostPort(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

void writeAll(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

/// Reads what is available; emits complete lines with the rank prefix. Returns false at EOF.
bool pump(Stream& s, int rank) {
  char buf[16384];
  const ssize_t n = ::read(s.fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!s.pending.empty()) writeAll(s.target, fmt::format("[rank {}] {}\n", rank, s.pending));
    s.pending.clear();
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
  s.pending.append(buf, static_cast<std::size_t>(n));
  std::string lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines += fmt::format("[rank {}] ", rank);
    lines.append(s.pending, start, nl + 1 - start);
  }
  s.pending.erase(0, start);
  if (!lines.empty()) writeAll(s.target, lines);
  return true;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("status {}", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  // strsignal is in glibc's MT-Unsafe list for unknown signals only, which glibc >= 2.32 (Debian 12: 2.36)
  // formats in a per-thread buffer.
  const char* signalName = ::strsignal(sig);  // NOLINT(concurrency-mt-unsafe)
  return fmt::format("status {} (killed by signal {}: {})", 128 + sig, sig, signalName);
}

int exitCodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

int launch(const Args& a) {
  if (a.nprocs < 1) throw Error(Errc::InvalidArgument, fmt::format("-n/--nprocs must be at least 1, got {}", a.nprocs));
  if (a.command.empty()) throw Error(Errc::InvalidArgument, "launch needs a command after --");
  if (!(a.grace >= 0)) throw Error(Errc::InvalidArgument, fmt::format("--grace must be >= 0, got {}", a.grace));
  const std::vector<std::string> hosts = splitList(a.hosts);
  if (hosts.empty()) throw Error(Errc::InvalidArgument, "--hosts lists no host");
  admitProcesses(a.nprocs, hosts.size());

  // Addresses: rank i on hosts[i % H], each on a port free right now (held until the children start, so that no
  // two ranks get the same one). Rank 0's serves the rendezvous store.
  std::vector<PortHold> holds;
  strategy::ClusterSpec cluster;
  std::vector<std::string>& addresses = cluster.jobs[std::string(strategy::ClusterSpec::kWorker)];
  for (int r = 0; r < a.nprocs; ++r) {
    const std::string& host = hosts[static_cast<std::size_t>(r) % hosts.size()];
    holds.push_back(holdFreePort(host, r));
    addresses.push_back(joinHostPort(host, holds.back().port));
  }
  const char* existingToken = std::getenv(host::kClusterTokenEnv);
  const std::string token = existingToken && *existingToken ? existingToken : randomToken();

  if (::pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(Errc::BackendError, "launch: pipe failed");
  struct sigaction sa {};
  sa.sa_handler = onLaunchSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) ::sigaction(sig, &sa, nullptr);

  const pid_t launcher = ::getpid();
  std::vector<Child> children(static_cast<std::size_t>(a.nprocs));
  for (auto& h : holds) ::close(h.fd);
  for (int r = 0; r < a.nprocs; ++r) {
    Child& c = children[static_cast<std::size_t>(r)];
    c.rank = r;
    int outPipe[2], errPipe[2];
    if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
      throw Error(Errc::BackendError, "launch: pipe failed");
    }
    const std::string tf = strategy::tfConfigJson(cluster, strategy::ClusterSpec::kWorker, r);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid < 0)
      throw Error(Errc::BackendError, fmt::format("launch: fork failed: {}", std::system_category().message(errno)));
    if (pid == 0) {
      // Die with the launcher, so that a killed launcher leaves no orphans holding ports.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) std::_Exit(1);
      for (int sig : {SIGINT, SIGTERM, SIGCHLD}) ::signal(sig, SIG_DFL);
      ::dup2(outPipe[1], STDOUT_FILENO);
      ::dup2(errPipe[1], STDERR_FILENO);
      // The forked child is single-threaded until execvp: setenv and strerror cannot race here.
      // NOLINTBEGIN(concurrency-mt-unsafe)
      ::setenv("TF_CONFIG", tf.c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(a.nprocs).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.nprocs).c_str(), 1);
      const std::string master = addresses[0];
      const std::size_t colon = master.rfind(':');
      ::setenv("MASTER_ADDR", hosts[0].c_str(), 1);
      ::setenv("MASTER_PORT", master.substr(colon + 1).c_str(), 1);
      ::setenv(host::kClusterTokenEnv, token.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& s : a.command) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "collbench launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      // NOLINTEND(concurrency-mt-unsafe)
      std::_Exit(127);
    }
    ::close(outPipe[1]);
    ::close(errPipe[1]);
    c.pid = pid;
    c.out = Stream{outPipe[0], STDOUT_FILENO, {}};
    c.err = Stream{errPipe[0], STDERR_FILENO, {}};
  }

  int failedRank = -1, failedStatus = 0, interrupts = 0;
  std::optional<Clock::time_point> failedAt, termAt, allExitedAt;
  bool termSent = false, killSent = false;
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.grace));
  auto signalAlive = [&](int sig) {
    for (Child& c : children) {
      if (!c.exited) ::kill(c.pid, sig);
    }
  };
  auto reap = [&] {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (Child& c : children) {
        if (c.pid != pid) continue;
        c.exited = true;
        c.status = status;
        if (status != 0 && failedRank < 0 && !termSent) {
          failedRank = c.rank;
          failedStatus = status;
          failedAt = Clock::now();
          writeAll(STDERR_FILENO, fmt::format("collbench launch: rank {} exited with {}; stopping the other ranks\n",
                                              c.rank, describeStatus(status)));
        }
      }
    }
  };
  for (;;) {
    std::vector<pollfd> fds{{gSignalPipe[0], POLLIN, 0}};
    std::vector<std::pair<Stream*, int>> streams;
    for (Child& c : children) {
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.emplace_back(s, c.rank);
        }
      }
    }
    const bool allExited = std::all_of(children.begin(), children.end(), [](const Child& c) { return c.exited; });
    if (allExited && !allExitedAt) allExitedAt = Clock::now();
    if (allExited && (streams.empty() || Clock::now() - *allExitedAt > kDrainAfterExit)) break;
    ::poll(fds.data(), fds.size(), kPollMs);
    if (fds[0].revents & POLLIN) {
      unsigned char sig;
      while (::read(gSignalPipe[0], &sig, 1) == 1) {
        if (sig == SIGINT || sig == SIGTERM) {
          // First interrupt: pass it on; a second one: no more patience.
          signalAlive(++interrupts == 1 ? sig : SIGKILL);
          termSent = true;
          termAt = Clock::now();
        }
      }
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) pump(*streams[i].first, streams[i].second);
    }
    reap();
    const auto now = Clock::now();
    if (failedAt && !termSent && now - *failedAt >= grace) {
      signalAlive(SIGTERM);
      termSent = true;
      termAt = now;
    }
    if (termSent && !killSent && termAt && now - *termAt >= grace) {
      signalAlive(SIGKILL);
      killSent = true;
    }
  }
  for (Child& c : children) {
    for (Stream* s : {&c.out, &c.err}) {
      if (s->fd >= 0) ::close(s->fd);
    }
  }
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) ::signal(sig, SIG_DFL);
  ::close(gSignalPipe[0]);
  ::close(gSignalPipe[1]);
  if (failedRank >= 0) {
    writeAll(STDERR_FILENO,
             fmt::format("collbench launch: rank {} exited with {}\n", failedRank, describeStatus(failedStatus)));
    return exitCodeOf(failedStatus);
  }
  if (interrupts > 0) {
    for (const Child& c : children) {
      if (c.status != 0) return exitCodeOf(c.status);
    }
    return 128 + SIGINT;
  }
  return 0;
}

}  // namespace

void addLaunchCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "start N local processes as one cluster (TF_CONFIG per task), output prefixed by rank");
  cmd->add_option("-n,--nprocs", a->nprocs, "number of processes (tasks of the worker job)")->default_val(1);
  cmd->add_option("--hosts", a->hosts,
                  "comma-separated addresses of THIS machine, rank i on host i mod count (only local spawning is "
                  "implemented)")
      ->default_val("127.0.0.1");
  cmd->add_option("--grace", a->grace,
                  "seconds the other ranks get after one fails, before SIGTERM (and again before SIGKILL)")
      ->default_val(kDefaultGraceSeconds);
  cmd->add_option("command", a->command, "the command each process runs, after --")->required()->expected(-1);
  cmd->footer(
      "Example: collbench launch -n 4 -- collbench perf --backend gloo -b 1M -e 64M -f 4\n"
      "Each process gets TF_CONFIG={\"cluster\":{\"worker\":[...]},\"task\":{\"type\":\"worker\",\"index\":i}},\n"
      "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a fresh COLLBENCH_CLUSTER_TOKEN\n"
      "(kept if already set). Exit status: 0 when all succeed, else the first failed rank's status.");
  cmd->callback([a, &exitCode] { exitCode = launch(*a); });
}

}  // namespace collbench::cli
