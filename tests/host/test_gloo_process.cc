// The process backend with real processes (fork, one rank each, loopback TCP): every collective and every
// all-reduce algorithm (ours and Gloo's own) against the reference at 2, 3 and 4 processes; the file store;
// rendezvous with a missing task, a wrong token or a reused file-store directory; listeners on the spec addresses;
// mismatched calls; a stalled peer; a stopped (SIGSTOP) peer; and kill -9 of a process in the middle of a 256 MiB
// all-reduce, after which every survivor must name the dead rank within timeout + 5 s.
#ifdef COLLBENCH_HAVE_GLOO
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <span>
#include <sstream>
#include <thread>

#include "collbench/algorithms.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"
#include "loopback_ports.h"

namespace collbench::host {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct ChildResult {
  int rank = -1;
  int status = -1;     ///< waitpid status
  std::string report;  ///< what the child wrote
};

long long nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// Loopback addresses on ports free right now (held until all are chosen so that none repeats).
std::vector<std::string> freeAddresses(int n) {
  std::vector<std::string> out;
  for (int port : collbench::testing::freeLoopbackPorts(n)) out.push_back(fmt::format("127.0.0.1:{}", port));
  return out;
}

BackendOptions worldOptions(const std::vector<std::string>& addresses, int rank, double timeout) {
  std::string joined, tasks;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    joined += (i ? "," : "") + addresses[i];
    tasks += fmt::format("{}worker[{}]", i ? "," : "", i);
  }
  return {{"rank", std::to_string(rank)}, {"world", std::to_string(addresses.size())},
          {"addresses", joined},          {"tasks", tasks},
          {"token", "test-token"},        {"timeout", fmt::format("{}", timeout)}};
}

/// "ERROR <errc> <peer> <ns>: <message>" for a collbench::Error, as children report it.
std::string errorReport(const Error& e) {
  std::string code(toString(e.code()));
  std::replace(code.begin(), code.end(), ' ', '_');
  return fmt::format("ERROR {} {} {}: {}", code, e.peer(), nowNs(), e.what());
}

using Body = std::function<std::string(int rank, const BackendOptions&)>;

/// Forks one child per entry of `ranks` (ranks of a world of `addresses.size()`); each runs `body` and writes its
/// report to a pipe, an Error as errorReport(). Children that outlive `limit` are killed (status shows it).
std::vector<ChildResult> runWorld(const std::vector<std::string>& addresses, const std::vector<int>& ranks,
                                  const Body& body, double timeout, std::chrono::seconds limit,
                                  const std::function<void(int rank, BackendOptions&)>& tweak = {},
                                  std::vector<pid_t>* pidsOut = nullptr,
                                  const std::function<void()>& whileRunning = {}) {
  std::vector<ChildResult> results;
  std::vector<pid_t> pids;
  std::vector<int> fds;
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r : ranks) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    BackendOptions opts = worldOptions(addresses, r, timeout);
    if (tweak) tweak(r, opts);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::string report;
      int code = 0;
      try {
        report = body(r, opts);
      } catch (const Error& e) {
        report = errorReport(e);
        code = 3;
      } catch (const std::exception& e) {
        report = fmt::format("EXCEPTION {}", e.what());
        code = 4;
      }
      for (std::size_t off = 0; off < report.size();) {
        const ssize_t n = ::write(p[1], report.data() + off, report.size() - off);
        if (n <= 0) break;
        off += static_cast<std::size_t>(n);
      }
      ::close(p[1]);
      std::_Exit(code);
    }
    ::close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
    results.push_back(ChildResult{r, -1, {}});
  }
  if (pidsOut) *pidsOut = pids;
  if (whileRunning) whileRunning();
  const auto deadline = Clock::now() + limit;
  std::vector<bool> open(fds.size(), true);
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (open[i]) {
        pfds.push_back({fds[i], POLLIN, 0});
        idx.push_back(i);
      }
    }
    if (pfds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
      ADD_FAILURE() << "children did not finish within " << limit.count() << " s";
      break;
    }
    ::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>(left, 200)));
    for (std::size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[idx[k]], buf, sizeof buf);
      if (n <= 0) {
        open[idx[k]] = false;
      } else {
        results[idx[k]].report.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    ::close(fds[i]);
    ::waitpid(pids[i], &results[i].status, 0);
  }
  return results;
}

/// This rank's buffers laid out as RankBufferSet lays them out, filled with inputValue() (a block at a time).
struct LocalBuffers {
  LocalBuffers(const CollectiveSpec& spec, int rank, bool inPlace) : spec_(spec), rank_(rank) {
    const std::size_t inB = spec.inputBytes(), outB = spec.outputBytes();
    if (inPlace) {
      out_.assign(std::max<std::size_t>(std::max(inB, outB), 1), std::byte{0});
      view = {out_.data() + spec.inPlaceInputOffset(rank), out_.data() + spec.inPlaceOutputOffset(rank)};
    } else {
      in_.assign(std::max<std::size_t>(inB, 1), std::byte{0});
      out_.assign(std::max<std::size_t>(outB, 1), std::byte{0});
      view = {in_.data(), out_.data()};
    }
    fillRankInput(spec, rank, const_cast<void*>(view.input));
  }
  std::size_t wrong() const { return countWrongOnRank(spec_, rank_, view.output); }
  CollectiveSpec spec_;
  int rank_;
  std::vector<std::byte> in_, out_;
  RankBuffers view;
};

bool isGlooNative(const AlgorithmInfo& a) { return a.native && a.name.rfind("gloo_", 0) == 0; }

/// Runs the whole sweep in one world; returns "" or the failures, one per line.
std::string sweep(int rank, const BackendOptions& o) {
  auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
  const int n = backend->nranks();
  std::ostringstream failures;
  int runs = 0;
  auto check = [&](const CollectiveSpec& spec, const std::string& algo, const AlgoParams& params) {
    const Schedule s = buildSchedule(spec, algo, params);
    for (bool inPlace : {false, true}) {
      LocalBuffers fresh(spec, rank, inPlace);
      backend->run(s, Buffers{fresh.view}, RunOptions{1, 0, 30});
      if (const std::size_t w = fresh.wrong()) {
        failures << fmt::format("{} {} {} ch={} chunk={} in_place={}: {} wrong\n", algo, describe(spec),
                                toString(spec.dtype), params.channels, params.chunkBytes, inPlace, w);
      }
      ++runs;
    }
  };
  // Reductions and types the executor folds differently (float, integer, half-width, avg's final division);
  // the reduction kernels themselves are swept in unit tests.
  const std::pair<DType, ReduceOp> ours[] = {{DType::F32, ReduceOp::Sum},
                                             {DType::F64, ReduceOp::Avg},
                                             {DType::I32, ReduceOp::Max},
                                             {DType::BF16, ReduceOp::Prod}};
  const std::pair<DType, ReduceOp> glooTypes[] = {
      {DType::F32, ReduceOp::Sum}, {DType::F64, ReduceOp::Avg}, {DType::I64, ReduceOp::Prod}};
  for (const AlgorithmInfo& a : algorithms()) {
    if (a.collective != Collective::AllReduce || (a.native && !isGlooNative(a)) || a.traits.needsSwitchReduction) {
      continue;
    }
    const std::span<const std::pair<DType, ReduceOp>> types =
        a.native ? std::span<const std::pair<DType, ReduceOp>>(glooTypes)
                 : std::span<const std::pair<DType, ReduceOp>>(ours);
    AlgoParams params;
    // Hierarchical all-reduce needs each rank's host and equal hosts: two "hosts" of consecutive ranks when n is
    // even, else one rank per host.
    for (int r = 0; r < n; ++r) params.rankHost.push_back(n % 2 == 0 ? r * 2 / n : r);
    for (const auto& [dt, op] : types) {
      for (std::size_t count : {std::size_t{1}, std::size_t{777}}) {
        check(CollectiveSpec{Collective::AllReduce, n, count, dt, op}, a.name, params);
      }
    }
    // Large enough that transfers are cut into several pieces.
    check(CollectiveSpec{Collective::AllReduce, n, 700000, DType::F32, ReduceOp::Sum}, a.name, params);
  }
  AlgoParams lanes;
  lanes.channels = 2;
  lanes.chunkBytes = 4096;
  check(CollectiveSpec{Collective::AllReduce, n, 100000, DType::F32, ReduceOp::Sum}, "ring", lanes);
  check(CollectiveSpec{Collective::AllReduce, n, 100000, DType::F32, ReduceOp::Sum}, "tree", lanes);
  check(CollectiveSpec{Collective::ReduceScatter, n, 777, DType::F32, ReduceOp::Sum}, "ring", AlgoParams{});
  check(CollectiveSpec{Collective::AllGather, n, 777, DType::I32, ReduceOp::Sum}, "ring", AlgoParams{});
  check(CollectiveSpec{Collective::Broadcast, n, 777, DType::F64, ReduceOp::Sum, n - 1}, "ring", AlgoParams{});
  check(CollectiveSpec{Collective::Reduce, n, 777, DType::F32, ReduceOp::Max, 1 % n}, "ring", AlgoParams{});
  check(CollectiveSpec{Collective::Barrier, n, 0, DType::F32}, "dissemination", AlgoParams{});
  // Several warmup and timed iterations in one run (headers of the next collective travel ahead); out of place,
  // so every iteration computes the same result.
  for (const char* algo : {"ring", "gloo_ring"}) {
    const CollectiveSpec spec{Collective::AllReduce, n, 777, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    backend->run(buildSchedule(spec, algo), Buffers{b.view}, RunOptions{3, 2, 30});
    if (const std::size_t w = b.wrong())
      failures << fmt::format("{} with 2 warmup + 3 iterations: {} wrong\n", algo, w);
    ++runs;
  }
  const std::string f = failures.str();
  return f.empty() ? fmt::format("OK {}", runs) : f;
}

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryCollectiveAndAlgorithmMatchesTheReference) {
  const int n = GetParam();
  const auto results = runWorld(
      freeAddresses(n),
      [&] {
        std::vector<int> r(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) r[static_cast<std::size_t>(i)] = i;
        return r;
      }(),
      sweep, 30, 120s);
  for (const auto& r : results) {
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << "rank " << r.rank << ": " << r.report;
    EXPECT_EQ(r.report.rfind("OK ", 0), 0u) << "rank " << r.rank << ":\n" << r.report;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld, ::testing::Values(2, 3, 4));

std::string oneAllReduce(int rank, const BackendOptions& o) {
  auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
  const CollectiveSpec spec{Collective::AllReduce, backend->nranks(), 4096, DType::F32, ReduceOp::Sum};
  LocalBuffers b(spec, rank, false);
  backend->run(buildSchedule(spec, "ring"), Buffers{b.view}, RunOptions{1, 0, 30});
  return b.wrong() == 0 ? "OK" : "WRONG";
}

TEST(GlooRendezvous, FileStoreInASharedDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("collbench_filestore_{}", ::getpid());
  std::filesystem::remove_all(dir);
  const auto results = runWorld(freeAddresses(2), {0, 1}, oneAllReduce, 10, 60s,
                                [&](int, BackendOptions& o) { o["store"] = "file:" + dir.string(); });
  for (const auto& r : results) EXPECT_EQ(r.report, "OK") << "rank " << r.rank;
  std::filesystem::remove_all(dir);
}

/// Errc, peer and message of an error report (fails the test if it is not one).
struct Reported {
  std::string code;
  int peer = -2;
  long long ns = 0;
  std::string message;
};
Reported parseError(const ChildResult& r) {
  Reported e;
  std::istringstream in(r.report);
  std::string tag;
  in >> tag >> e.code >> e.peer >> e.ns;
  std::getline(in, e.message);
  EXPECT_EQ(tag, "ERROR") << "rank " << r.rank << " reported: " << r.report;
  return e;
}

TEST(GlooRendezvous, AMissingWorkerIsNamed) {
  constexpr double kTimeout = 1;
  const auto addrs = freeAddresses(3);
  const auto t0 = Clock::now();
  auto results = runWorld(addrs, {0, 1}, oneAllReduce, kTimeout, 60s);
  for (const auto& r : results) {
    const Reported e = parseError(r);
    EXPECT_EQ(e.code, "timeout");
    EXPECT_EQ(e.peer, 2);
    EXPECT_NE(e.message.find("worker[2] (rank 2, " + addrs[2] + ") did not join within 1 s"), std::string::npos)
        << e.message;
  }
  EXPECT_LT(Clock::now() - t0, 10s);
  // Without the chief nobody serves the store: the error names it.
  results = runWorld(addrs, {1, 2}, oneAllReduce, kTimeout, 60s);
  for (const auto& r : results) {
    const Reported e = parseError(r);
    EXPECT_EQ(e.peer, 0);
    EXPECT_NE(e.message.find("worker[0] (rank 0, " + addrs[0] + "), which serves the store"), std::string::npos)
        << e.message;
  }
}

TEST(GlooRendezvous, AWrongTokenIsRefused) {
  const auto results = runWorld(freeAddresses(2), {0, 1}, oneAllReduce, 1, 60s, [](int rank, BackendOptions& o) {
    if (rank == 1) o["token"] = "some-other-cluster";
  });
  const Reported chief = parseError(results[0]);
  EXPECT_EQ(chief.peer, 1);
  EXPECT_NE(chief.message.find("refused 1 connection(s) with a wrong cluster token"), std::string::npos)
      << chief.message;
  const Reported other = parseError(results[1]);
  EXPECT_EQ(other.code, "invalid_argument");
  EXPECT_NE(other.message.find("refused this process (wrong cluster token)"), std::string::npos) << other.message;
}

TEST(GlooRendezvous, AReusedFileStoreDirectoryIsRefusedClearly) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("collbench_filestore_reuse_{}", ::getpid());
  std::filesystem::remove_all(dir);
  const auto addrs = freeAddresses(2);
  auto useDir = [&](int, BackendOptions& o) { o["store"] = "file:" + dir.string(); };
  auto results = runWorld(addrs, {0, 1}, oneAllReduce, 5, 60s, useDir);
  for (const auto& r : results) EXPECT_EQ(r.report, "OK") << "rank " << r.rank;
  // The same cluster (addresses and token) again in the same directory: its keys are there from the first run.
  results = runWorld(addrs, {0, 1}, oneAllReduce, 5, 60s, useDir);
  for (const auto& r : results) {
    const Reported e = parseError(r);
    EXPECT_EQ(e.code, "invalid_argument") << e.message;
    EXPECT_NE(e.message.find("already holds 'rank_" + std::to_string(r.rank) + "' of this cluster from an earlier run"),
              std::string::npos)
        << e.message;
    EXPECT_NE(e.message.find("COLLBENCH_CLUSTER_TOKEN"), std::string::npos) << e.message;
  }
  // Another token (as collbench launch gives every run) scopes the keys anew.
  results = runWorld(addrs, {0, 1}, oneAllReduce, 5, 60s, [&](int r, BackendOptions& o) {
    useDir(r, o);
    o["token"] = "second-run";
  });
  for (const auto& r : results) EXPECT_EQ(r.report, "OK") << "rank " << r.rank;
  std::filesystem::remove_all(dir);
}

/// "host:port" of every TCP socket process `pid` listens on (from /proc: its socket inodes, then the kernel's
/// tables).
std::vector<std::string> listeningAddresses(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in(fmt::format("/proc/{}/net/{}", pid, table));
    std::string line;
    std::getline(in, line);  // column names
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      const std::string hex = local.substr(0, local.find(':'));
      const int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      if (hex.size() == 8) {  // IPv4, in the kernel's byte order (little-endian here)
        const unsigned long a = std::stoul(hex, nullptr, 16);
        out.push_back(fmt::format("{}.{}.{}.{}:{}", a & 0xff, (a >> 8) & 0xff, (a >> 16) & 0xff, a >> 24, port));
      } else {
        out.push_back(fmt::format("[{}]:{}", hex, port));
      }
    }
  }
  return out;
}

TEST(GlooRendezvous, ListenersBindToTheClusterSpecAddress) {
  // Three loopback addresses (every 127.0.0.0/8 address is this machine's). While ranks 0 and 1 wait in rendezvous
  // for rank 2 (which starts late), their listeners (Gloo's transport; the chief's store too) must be on their own
  // address only, never on 0.0.0.0 or another. They close once everyone is connected, so look meanwhile.
  auto addrs = freeAddresses(3);
  for (int r = 0; r < 3; ++r) addrs[static_cast<std::size_t>(r)].replace(0, 9, fmt::format("127.0.0.{}", r + 2));
  const Body body = [](int rank, const BackendOptions& o) {
    if (rank == 2) std::this_thread::sleep_for(1500ms);
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    return std::string("OK");
  };
  std::vector<pid_t> pids;
  std::vector<std::string> seen[2];
  const auto results = runWorld(addrs, {0, 1, 2}, body, 10, 60s, {}, &pids, [&] {
    std::this_thread::sleep_for(700ms);
    for (int r : {0, 1}) seen[r] = listeningAddresses(pids[static_cast<std::size_t>(r)]);
  });
  for (const auto& r : results) EXPECT_EQ(r.report, "OK") << "rank " << r.rank;
  for (int r : {0, 1}) {
    const std::string mine = fmt::format("127.0.0.{}:", r + 2);
    for (const auto& a : seen[r]) {
      EXPECT_EQ(a.rfind(mine, 0), 0u) << "rank " << r << " listens on " << a << ", not on " << mine << "*";
    }
    EXPECT_GE(seen[r].size(), 1u) << "rank " << r << " had no listener while waiting in rendezvous";
  }
  // The chief serves the store on its spec address and port.
  EXPECT_NE(std::find(seen[0].begin(), seen[0].end(), addrs[0]), seen[0].end()) << addrs[0];
}

/// Both ranks of a mismatched 2-rank call fail with InvalidArgument and `sides` (each rank's values, by rank). Each
/// reports either what it saw itself (naming itself "this process" and the other rank as the culprit) or the other
/// rank's notice, whichever arrived first: then the text is the other's, relayed, and the culprit is as the other
/// saw it (this rank).
void expectMismatchOnBothRanks(const std::vector<ChildResult>& results, const std::string& sides) {
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    const Reported e = parseError(r);
    const int other = 1 - r.rank;
    EXPECT_EQ(e.code, "invalid_argument") << "rank " << r.rank << ": " << e.message;
    EXPECT_NE(e.message.find("called different collectives: " + sides), std::string::npos)
        << "rank " << r.rank << ": " << e.message;
    const bool local =
        e.message.find(fmt::format("rank {} (this process) and rank {} called", r.rank, other)) != std::string::npos;
    const bool relayed =
        e.message.find(fmt::format("rank {} and rank {} called", other, r.rank)) != std::string::npos &&
        e.message.find(fmt::format("(reported by worker[{}] (rank {},", other, other)) != std::string::npos;
    EXPECT_TRUE(local || relayed) << "rank " << r.rank << " reported neither its own view nor rank " << other
                                  << "'s: " << e.message;
    EXPECT_EQ(e.peer, local ? other : r.rank) << "rank " << r.rank << ": " << e.message;
  }
}

TEST(GlooFaults, MismatchedCallsFailInsteadOfProducingData) {
  // Different counts.
  Body body = [](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    const CollectiveSpec spec{Collective::AllReduce, 2, rank == 0 ? 1000u : 2000u, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    backend->run(buildSchedule(spec, "ring"), Buffers{b.view}, RunOptions{1, 0, 30});
    return std::string("no error");
  };
  auto results = runWorld(freeAddresses(2), {0, 1}, body, 5, 60s);
  expectMismatchOnBothRanks(results, "rank 0: count 1000; rank 1: count 2000");

  // Different dtype, then different op: each named by the receiver's header check.
  for (const bool dtype : {true, false}) {
    body = [dtype](int rank, const BackendOptions& o) {
      auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
      const CollectiveSpec spec{Collective::AllReduce, 2, 1000, dtype && rank == 1 ? DType::I32 : DType::F32,
                                !dtype && rank == 1 ? ReduceOp::Max : ReduceOp::Sum};
      LocalBuffers b(spec, rank, false);
      backend->run(buildSchedule(spec, "ring"), Buffers{b.view}, RunOptions{1, 0, 30});
      return std::string("no error");
    };
    results = runWorld(freeAddresses(2), {0, 1}, body, 5, 60s);
    expectMismatchOnBothRanks(results,
                              dtype ? "rank 0: dtype float; rank 1: dtype int32" : "rank 0: op sum; rank 1: op max");
  }

  Reported e;
  // One rank runs one collective more than the other: the next call is out of sequence.
  body = [](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    const CollectiveSpec spec{Collective::AllReduce, 2, 1000, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    const Schedule s = buildSchedule(spec, "ring");
    backend->run(s, Buffers{b.view}, RunOptions{rank == 0 ? 1 : 2, 0, 30});
    backend->run(s, Buffers{b.view}, RunOptions{1, 0, 30});
    return std::string("no error");
  };
  results = runWorld(freeAddresses(2), {0, 1}, body, 5, 60s);
  for (const auto& r : results) {
    e = parseError(r);
    EXPECT_NE(e.message.find("called different collectives"), std::string::npos) << e.message;
  }

  // A native call with mismatched sizes is refused too, before Gloo's own buffers could see it.
  body = [](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    const CollectiveSpec spec{Collective::AllReduce, 2, rank == 0 ? 100u : 200u, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    backend->run(buildSchedule(spec, "gloo_ring"), Buffers{b.view}, RunOptions{1, 0, 30});
    return std::string("no error");
  };
  results = runWorld(freeAddresses(2), {0, 1}, body, 5, 60s);
  for (const auto& r : results) EXPECT_NE(parseError(r).message.find("count"), std::string::npos);
}

TEST(GlooFaults, AStalledPeerTimesOutNamingIt) {
  constexpr double kTimeout = 1;
  const Body body = [](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    if (rank == 1) {
      std::this_thread::sleep_for(2s);  // never calls the collective
      return std::string("slept");
    }
    const CollectiveSpec spec{Collective::AllReduce, 2, 1000, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    const auto t0 = Clock::now();
    try {
      backend->run(buildSchedule(spec, "ring"), Buffers{b.view}, RunOptions{1, 0, 30});
    } catch (const Error& e) {
      return fmt::format("{} after {:.1f} s", errorReport(e), std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return std::string("no error");
  };
  const auto results = runWorld(freeAddresses(2), {0, 1}, body, kTimeout, 60s);
  const Reported e = parseError(results[0]);
  EXPECT_EQ(e.code, "timeout");
  EXPECT_EQ(e.peer, 1);
  EXPECT_NE(e.message.find("timed out after 1 s waiting for worker[1]"), std::string::npos) << e.message;
  EXPECT_EQ(results[1].report, "slept");
}

/// kill -9 of rank 1 while every rank is inside a 256 MiB all-reduce (of `algo`): each survivor must throw
/// PeerFailure naming rank 1 within timeout + 5 s of the kill.
void killDuringAllReduce(const std::string& algo, std::size_t bytes) {
  constexpr double kTimeout = 5;
  const int n = 3;
  const auto marker = std::filesystem::temp_directory_path() / fmt::format("collbench_kill_{}_{}", ::getpid(), algo);
  std::filesystem::remove(marker);
  const Body body = [&](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    const CollectiveSpec spec{Collective::AllReduce, n, bytes / 4, DType::F32, ReduceOp::Sum};
    std::vector<std::byte> in(bytes, std::byte{0}), out(bytes, std::byte{0});
    const Schedule s = buildSchedule(spec, algo);
    for (int i = 0;; ++i) {
      backend->run(s, Buffers{RankBuffers{in.data(), out.data()}}, RunOptions{1, 0, kTimeout});
      if (i == 0 && rank == 1) std::ofstream(marker.string()) << "started";
    }
    return std::string("never");
  };
  std::vector<pid_t> pids;
  long long killedAt = 0;
  const auto results = runWorld(freeAddresses(n), {0, 1, 2}, body, kTimeout, 90s, {}, &pids, [&] {
    const auto deadline = Clock::now() + 60s;
    while (!std::filesystem::exists(marker) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(100ms);  // into the next all-reduce
    killedAt = nowNs();
    ::kill(pids[1], SIGKILL);
  });
  std::filesystem::remove(marker);
  ASSERT_TRUE(WIFSIGNALED(results[1].status));
  for (int r : {0, 2}) {
    const Reported e = parseError(results[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e.code, "peer_failure") << e.message;
    EXPECT_EQ(e.peer, 1) << e.message;
    EXPECT_NE(e.message.find("worker[1] (rank 1,"), std::string::npos) << e.message;
    const double after = static_cast<double>(e.ns - killedAt) / 1e9;
    EXPECT_LT(after, kTimeout + 5) << "rank " << r << " reported " << after << " s after the kill";
    EXPECT_GT(after, 0);
  }
}

/// SIGSTOP of rank 1 while three ranks run `algo` all-reduces in a loop: its connections stay open, so only the
/// timeout can end the survivors' waits. Each must throw Timeout naming rank 1 (not the live rank it may be waiting
/// on, which waits on rank 1 itself) within timeout + 5 s of the stop.
void stopDuringAllReduce(const std::string& algo) {
  constexpr double kTimeout = 2;
  const int n = 3;
  const auto marker = std::filesystem::temp_directory_path() / fmt::format("collbench_stop_{}_{}", ::getpid(), algo);
  std::filesystem::remove(marker);
  const Body body = [&](int rank, const BackendOptions& o) {
    auto backend = makeGlooBackend(ProcessWorld::fromOptions(o));
    const CollectiveSpec spec{Collective::AllReduce, n, 1u << 18, DType::F32, ReduceOp::Sum};
    LocalBuffers b(spec, rank, false);
    const Schedule s = buildSchedule(spec, algo);
    try {
      for (int i = 0;; ++i) {
        backend->run(s, Buffers{b.view}, RunOptions{1, 0, kTimeout});
        if (i == 0 && rank == 1) std::ofstream(marker.string()) << "started";
      }
    } catch (const Error& e) {
      return errorReport(e);  // the time of the throw, before the backend's teardown
    }
    return std::string("never");
  };
  std::vector<pid_t> pids;
  long long stoppedAt = 0;
  const auto results = runWorld(freeAddresses(n), {0, 1, 2}, body, kTimeout, 90s, {}, &pids, [&] {
    const auto deadline = Clock::now() + 60s;
    while (!std::filesystem::exists(marker) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(100ms);
    stoppedAt = nowNs();
    ::kill(pids[1], SIGSTOP);
    // Stopped, rank 1 never closes its pipe: end it once the survivors must have reported.
    std::this_thread::sleep_for(std::chrono::duration<double>(kTimeout + 6));
    ::kill(pids[1], SIGKILL);
  });
  std::filesystem::remove(marker);
  ASSERT_TRUE(WIFSIGNALED(results[1].status));
  for (int r : {0, 2}) {
    const Reported e = parseError(results[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e.code, "timeout") << e.message;
    EXPECT_EQ(e.peer, 1) << "rank " << r << ": " << e.message;
    EXPECT_NE(e.message.find("worker[1] (rank 1,"), std::string::npos) << e.message;
    const double after = static_cast<double>(e.ns - stoppedAt) / 1e9;
    EXPECT_LT(after, kTimeout + 5) << "rank " << r << " reported " << after << " s after the stop";
    EXPECT_GT(after, 0);
  }
}

TEST(GlooFaults, KillDuringA256MiBAllReduceNamesTheDeadRank) { killDuringAllReduce("ring", 256u << 20); }

TEST(GlooFaults, AStoppedPeerTimesOutNamingIt) { stopDuringAllReduce("ring"); }

TEST(GlooFaults, AStoppedPeerTimesOutNamingItInGloosOwnAllReduce) { stopDuringAllReduce("gloo_ring"); }

TEST(GlooFaults, KillDuringGloosOwnAllReduceNamesTheDeadRank) { killDuringAllReduce("gloo_ring", 32u << 20); }

}  // namespace
}  // namespace collbench::host
#endif  // COLLBENCH_HAVE_GLOO
