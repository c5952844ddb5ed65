// Grid points in forked worker processes, and shards of a grid (include/collbench/parallel.h).
#include "collbench/parallel.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "collbench/backend_info.h"
#include "collbench/error.h"

namespace collbench {

namespace {

/// The index a parent sends to tell a worker to exit.
constexpr std::uint64_t kStopItem = UINT64_MAX;

std::optional<long long> parseInteger(std::string_view s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// A launcher's (rank, size) pair, or nullopt when `rankVar` is unset.
std::optional<Shard> launcherShard(const EnvLookup& env, const char* rankVar, const char* sizeVar, long long base) {
  const char* rank = env(rankVar);
  if (!rank) return std::nullopt;
  const char* size = env(sizeVar);
  const auto r = parseInteger(rank);
  const auto s = size ? parseInteger(size) : std::nullopt;
  if (!s || *s < 1 || *s > INT32_MAX) {
    throw Error(Errc::InvalidArgument, fmt::format("--shard auto: {}={} needs {} set to a positive count, got '{}'",
                                                   rankVar, printable(rank), sizeVar, size ? printable(size) : ""));
  }
  if (!r || *r - base < 0 || *r - base >= *s) {
    throw Error(Errc::InvalidArgument, fmt::format("--shard auto: {} '{}' is not in {}..{} ({}={})", rankVar,
                                                   printable(rank), base, base + *s - 1, sizeVar, *s));
  }
  return Shard{static_cast<int>(*r - base + 1), static_cast<int>(*s)};
}

void writeAll(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(Errc::BackendError, fmt::format("worker pipe: write failed: {}", errnoText(errno)));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// False at end of file before the first byte.
bool readAll(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(Errc::BackendError, fmt::format("worker pipe: read failed: {}", errnoText(errno)));
    if (r == 0) {
      if (got == 0) return false;
      throw Error(Errc::BackendError, "worker pipe: truncated message");
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

/// A worker's answer: [item u64][errc i32, -1 = ok][length u64][bytes].
struct Answer {
  std::uint64_t item = 0;
  std::int32_t errc = -1;
  std::string text;
};

void sendAnswer(int fd, const Answer& a) {
  const std::uint64_t n = a.text.size();
  writeAll(fd, &a.item, sizeof a.item);
  writeAll(fd, &a.errc, sizeof a.errc);
  writeAll(fd, &n, sizeof n);
  writeAll(fd, a.text.data(), a.text.size());
}

std::optional<Answer> receiveAnswer(int fd) {
  Answer a;
  if (!readAll(fd, &a.item, sizeof a.item)) return std::nullopt;
  std::uint64_t n = 0;
  readAll(fd, &a.errc, sizeof a.errc);
  readAll(fd, &n, sizeof n);
  a.text.resize(n);
  readAll(fd, a.text.data(), n);
  return a;
}

/// The worker's loop: item indices in, answers out, until kStopItem or the parent closes its end.
[[noreturn]] void workerMain(int in, int out, const std::vector<std::size_t>& items,
                             const std::function<std::string(std::size_t)>& work) {
  int status = 0;
  try {
    std::uint64_t k = 0;
    while (readAll(in, &k, sizeof k) && k != kStopItem) {
      Answer a;
      a.item = k;
      try {
        a.text = work(items[k]);
      } catch (const Error& e) {
        a.errc = static_cast<std::int32_t>(e.code());
        a.text = e.what();
      } catch (const std::exception& e) {
        a.errc = static_cast<std::int32_t>(Errc::BackendError);
        a.text = e.what();
      }
      sendAnswer(out, a);
    }
  } catch (...) {
    status = 1;  // the parent sees the missing answer
  }
  std::fflush(nullptr);
  // _exit: the fork's copies of the parent's atexit handlers and static destructors must not run twice.
  ::_exit(status);
}

struct Worker {
  pid_t pid = -1;
  int toWorker = -1, fromWorker = -1;
  std::optional<std::uint64_t> busyWith;
};

std::string describeExit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), sigdescr_np(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace

std::pair<std::size_t, std::size_t> Shard::range(std::size_t total) const {
  const auto k = static_cast<std::size_t>(index), n = static_cast<std::size_t>(count);
  return {(k - 1) * total / n, k * total / n};
}

std::string Shard::toString() const { return fmt::format("{}/{}", index, count); }

EnvLookup processEnvironment() {
  return [](const char* name) { return std::getenv(name); };  // NOLINT(concurrency-mt-unsafe): read before forking
}

Shard parseShard(std::string_view text, const EnvLookup& env) {
  if (text == "auto") return shardFromEnvironment(env);
  const std::size_t slash = text.find('/');
  const auto k = slash == std::string_view::npos ? std::nullopt : parseInteger(text.substr(0, slash));
  const auto n = slash == std::string_view::npos ? std::nullopt : parseInteger(text.substr(slash + 1));
  if (!k || !n) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--shard '{}': expected K/N (this job's part K of N, e.g. 2/8) or auto", printable(text)));
  }
  if (*n < 1 || *n > INT32_MAX || *k < 1 || *k > *n) {
    throw Error(Errc::InvalidArgument, fmt::format("--shard '{}': K must be in 1..N and N >= 1", printable(text)));
  }
  return Shard{static_cast<int>(*k), static_cast<int>(*n)};
}

Shard shardFromEnvironment(const EnvLookup& env) {
  if (auto s = launcherShard(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", 0)) return *s;
  if (auto s = launcherShard(env, "PMI_RANK", "PMI_SIZE", 0)) return *s;
  // A job array's task is a Slurm step of one task (SLURM_PROCID 0 of 1): the array decides there.
  const char* ntasks = env("SLURM_NTASKS");
  const auto tasks = ntasks ? parseInteger(ntasks) : std::nullopt;
  if (!env("SLURM_ARRAY_TASK_ID") || (tasks && *tasks > 1)) {
    if (auto s = launcherShard(env, "SLURM_PROCID", "SLURM_NTASKS", 0)) return *s;
  }
  if (env("SLURM_ARRAY_TASK_ID")) {
    const char* min = env("SLURM_ARRAY_TASK_MIN");
    const auto base = min ? parseInteger(min) : std::nullopt;
    if (!base) {
      throw Error(Errc::InvalidArgument, fmt::format("--shard auto: SLURM_ARRAY_TASK_ID is set but "
                                                     "SLURM_ARRAY_TASK_MIN is '{}', not a number",
                                                     min ? printable(min) : ""));
    }
    if (auto s = launcherShard(env, "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", *base)) return *s;
  }
  throw Error(Errc::InvalidArgument,
              "--shard auto: no launcher rank in the environment (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
              "SLURM_ARRAY_TASK_ID); give --shard K/N");
}

std::string shardPath(std::string_view path, const Shard& shard) {
  constexpr std::string_view kPlaceholder = "{shard}";
  std::string out;
  std::size_t at = 0;
  for (std::size_t hit; (hit = path.find(kPlaceholder, at)) != std::string_view::npos; at = hit + kPlaceholder.size())
    out += fmt::format("{}{}", path.substr(at, hit - at), shard.index);
  return out + std::string(path.substr(at));
}

bool backendMovesData(std::string_view backend) {
  if (backend == kModelBackend) return false;
  const std::optional<BackendCapabilities> caps = findBackendCapabilities(backend);
  return !caps || caps->movesData;
}

int resolveJobs(std::optional<int> given, std::string_view backend) {
  if (given && *given < 1) throw Error(Errc::InvalidArgument, fmt::format("-j/--jobs must be >= 1, got {}", *given));
  if (!backendMovesData(backend)) return given ? *given : defaultJobs();
  if (given && *given > 1) {
    throw Error(Errc::InvalidArgument,
                fmt::format("-j/--jobs {}: backend '{}' moves data, and configurations timed at once would disturb "
                            "each other's times (use -j 1; --shard K/N splits the grid over separate machines)",
                            *given, printable(backend)));
  }
  return 1;
}

int defaultJobs() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::vector<std::string> runInProcesses(const std::vector<std::size_t>& items,
                                        const std::function<std::string(std::size_t)>& work,
                                        const ParallelOptions& options) {
  std::vector<std::string> out(items.size());
  const std::size_t jobs = std::min(items.size(), static_cast<std::size_t>(std::max(options.jobs, 1)));
  if (jobs <= 1) {
    for (std::size_t k = 0; k < items.size(); ++k) {
      out[k] = work(items[k]);
      if (options.progress) options.progress(k + 1, items.size(), items[k]);
    }
    return out;
  }
  std::fflush(nullptr);  // buffered output would be written again by every worker
  std::vector<Worker> workers(jobs);
  auto closeFd = [](int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  };
  auto reap = [&] {  // closing a worker's input ends its loop
    for (Worker& w : workers) {
      closeFd(w.toWorker);
      closeFd(w.fromWorker);
      if (w.pid > 0) ::waitpid(w.pid, nullptr, 0);
      w.pid = -1;
    }
  };
  for (std::size_t i = 0; i < jobs; ++i) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) {
      reap();
      throw Error(Errc::BackendError, fmt::format("cannot create a worker pipe: {}", errnoText(errno)));
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      reap();
      throw Error(Errc::BackendError, fmt::format("cannot fork a worker process: {}", errnoText(errno)));
    }
    if (pid == 0) {
      for (std::size_t j = 0; j < i; ++j) {  // earlier workers' pipes are the parent's
        ::close(workers[j].toWorker);
        ::close(workers[j].fromWorker);
      }
      ::close(down[1]);
      ::close(up[0]);
      workerMain(down[0], up[1], items, work);
    }
    ::close(down[0]);
    ::close(up[1]);
    workers[i] = Worker{pid, down[1], up[0], std::nullopt};
  }
  std::uint64_t next = 0, done = 0;
  std::optional<Error> failure;
  auto feed = [&](Worker& w) {
    if (next < items.size() && !failure) {
      w.busyWith = next;
      writeAll(w.toWorker, &next, sizeof next);
      ++next;
    } else {
      w.busyWith.reset();
      closeFd(w.toWorker);
    }
  };
  for (Worker& w : workers) feed(w);
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Worker*> of;
    for (Worker& w : workers) {
      if (w.busyWith) {
        fds.push_back(pollfd{w.fromWorker, POLLIN, 0});
        of.push_back(&w);
      }
    }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      reap();
      throw Error(Errc::BackendError, fmt::format("waiting for workers: {}", errnoText(errno)));
    }
    for (std::size_t f = 0; f < fds.size(); ++f) {
      if (fds[f].revents == 0) continue;
      Worker& w = *of[f];
      const std::optional<Answer> a = receiveAnswer(w.fromWorker);
      if (!a) {  // died without answering
        int status = 0;
        ::waitpid(w.pid, &status, 0);
        if (!failure) {
          failure = Error(Errc::BackendError, fmt::format("worker process {} {} while running grid point {}", w.pid,
                                                          describeExit(status), items[*w.busyWith]));
        }
        w.pid = -1;
        w.busyWith.reset();
        closeFd(w.toWorker);
        continue;
      }
      if (a->errc >= 0) {
        if (!failure) failure = Error(static_cast<Errc>(a->errc), a->text);
      } else {
        out[a->item] = a->text;
        ++done;
        if (options.progress && !failure) options.progress(done, items.size(), items[a->item]);
      }
      feed(w);
    }
  }
  reap();
  if (failure) throw *failure;
  return out;
}

TerminalProgress::TerminalProgress(std::string prefix)
    : prefix_(std::move(prefix)), tty_(::isatty(STDERR_FILENO) != 0) {}

TerminalProgress::~TerminalProgress() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
}

void TerminalProgress::show(std::size_t done, std::size_t total, const std::string& what) {
  if (!tty_) return;
  std::fprintf(stderr, "\r\033[K%s[%zu/%zu] %s", prefix_.c_str(), done, total, what.c_str());
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace collbench
