// The nccl backend with one rank per process: how rank 0's NCCL unique id reaches the other ranks through the
// rendezvous store (exchangeNcclId, no device needed: the id is any string here), and on a device the backend's
// nccl_id path at world 1 and its setup timeout when a peer never comes.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/error.h"
#include "collbench/reference.h"
#include "gpu_test_util.h"
#include "world_options.h"

namespace collbench::nccl {
namespace {

using Clock = std::chrono::steady_clock;

/// A TCP port free right now on 127.0.0.1 (the kernel's pick for port 0; closed again for the store to bind).
int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// processWorldOptions()'s keys for rank `rank` of a `world`-process cluster on 127.0.0.1 whose store is at `port`.
BackendOptions worldOptions(int rank, int world, int port, const std::string& timeout) {
  std::string addresses;
  for (int r = 0; r < world; ++r) addresses += fmt::format("{}127.0.0.1:{}", r ? "," : "", port + r);
  return {{"rank", std::to_string(rank)}, {"world", std::to_string(world)},
          {"addresses", addresses},       {"master", fmt::format("127.0.0.1:{}", port)},
          {"token", "test-nccl-world"},   {"timeout", timeout}};
}

std::string mustNotBeCalled() {
  ADD_FAILURE() << "only rank 0 creates the id";
  return "wrong";
}

// ---- No device ----

TEST(HostNcclWorld, WorldOfOneCreatesTheIdWithoutAStore) {
  int calls = 0;
  const std::string id = cli::exchangeNcclId({{"rank", "0"}, {"world", "1"}}, [&calls] {
    ++calls;
    return std::string("id-of-one");
  });
  EXPECT_EQ(id, "id-of-one");
  EXPECT_EQ(calls, 1);
}

TEST(HostNcclWorld, EveryRankGetsRankZerosId) {
  const int port = freePort();
  constexpr int kWorld = 3;
  std::vector<std::future<std::string>> ranks;
  // The others start first: they retry until rank 0 serves the store.
  for (int r = kWorld - 1; r >= 0; --r) {
    ranks.push_back(std::async(std::launch::async, [r, port] {
      const BackendOptions o = worldOptions(r, kWorld, port, "20");
      return r == 0 ? cli::exchangeNcclId(o, [] { return std::string(256, 'a'); })
                    : cli::exchangeNcclId(o, mustNotBeCalled);
    }));
  }
  for (auto& f : ranks) EXPECT_EQ(f.get(), std::string(256, 'a'));
}

TEST(HostNcclWorld, RankZeroAloneTimesOutNamingTheMissingRank) {
  const int port = freePort();
  const auto t0 = Clock::now();
  try {
    cli::exchangeNcclId(worldOptions(0, 2, port, "0.5"), [] { return std::string("id"); });
    FAIL() << "rank 1 never came";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout) << e.what();
    EXPECT_EQ(e.rank(), 0);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1 (127.0.0.1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not fetch the NCCL id within 0.5 s"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(HostNcclWorld, OtherRankAloneTimesOutNamingRankZero) {
  const int port = freePort();
  const auto t0 = Clock::now();
  try {
    cli::exchangeNcclId(worldOptions(1, 2, port, "0.5"), mustNotBeCalled);
    FAIL() << "rank 0 never came";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout) << e.what();
    EXPECT_EQ(e.rank(), 1);
    EXPECT_EQ(e.peer(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 0 (127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(HostNcclWorld, FileStoreIsRefusedByName) {
  BackendOptions o = worldOptions(1, 2, 4000, "1");
  o["store"] = "file:/tmp/x";
  try {
    cli::exchangeNcclId(o, mustNotBeCalled);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_NE(std::string(e.what()).find("store=\"file:/tmp/x\""), std::string::npos) << e.what();
  }
}

TEST(HostNcclWorld, BackendRefusesAWorldWithoutAnId) {
  // Without a device the probe refuses first (Unsupported); with one, the missing id does. Neither waits.
  try {
    makeNcclBackend(1, {{"rank", "0"}, {"world", "2"}});
    FAIL();
  } catch (const Error& e) {
    if (probeDevices().count == 0) {
      EXPECT_EQ(e.code(), Errc::Unsupported) << e.what();
    } else {
      EXPECT_EQ(e.code(), Errc::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("world=2 (one rank per process) needs option nccl_id"), std::string::npos)
          << e.what();
    }
  }
}

// ---- One device ----

TEST(GpuNcclProcess, NcclIdPathAtWorldOneMatchesReference) {
  COLLBENCH_REQUIRE_GPUS(1);
  auto b = makeNcclBackend(1, {{"nccl_id", newUniqueIdHex()}, {"rank", "0"}, {"world", "1"}, {"timeout", "30"}});
  EXPECT_EQ(b->nranks(), 1);
  for (const char* algo : {kNativeAlgorithm, "ring"}) {
    const CollectiveSpec spec{Collective::AllReduce, 1, 4099, DType::BF16, ReduceOp::Sum};
    for (bool inPlace : {false, true}) {
      RankBufferSet bufs(spec, inPlace);
      bufs.fill();
      b->run(buildSchedule(spec, algo), bufs.views(), RunOptions{2, 1, 30.0});
      EXPECT_EQ(bufs.countWrong(), 0u) << algo << (inPlace ? " in place" : " out of place");
    }
  }
}

TEST(GpuNcclProcess, SetupTimesOutNamingTheRankThatNeverCame) {
  COLLBENCH_REQUIRE_GPUS(1);
  const auto t0 = Clock::now();
  try {
    makeNcclBackend(1, {{"nccl_id", newUniqueIdHex()}, {"rank", "0"}, {"world", "2"}, {"timeout", "2"}});
    FAIL() << "rank 1 never started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Timeout) << e.what();
    EXPECT_EQ(e.rank(), 0);
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("timed out after 2 s waiting for rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));  // aborted, not stuck in NCCL's bootstrap
}

/// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(GpuNcclProcess, NativeLabelShowsTheSettingsTheCommunicatorWasCreatedWith) {
  COLLBENCH_REQUIRE_GPUS(1);
  std::unique_ptr<Backend> b;
  {
    ScopedEnv proto("NCCL_PROTO", "Simple");
    b = makeNcclBackend(1);
  }
  ScopedEnv later("NCCL_PROTO", "LL");  // NCCL read NCCL_PROTO at ncclCommInitAll; this changes nothing that runs
  const CollectiveSpec spec{Collective::AllReduce, 1, 64, DType::F32};
  RankBufferSet bufs(spec, false);
  bufs.fill();
  const RunResult r = b->run(buildSchedule(spec, kNativeAlgorithm), bufs.views(), RunOptions{1, 0, 30.0});
  EXPECT_NE(r.algorithm.find("NCCL_PROTO=Simple"), std::string::npos) << r.algorithm;
  EXPECT_EQ(bufs.countWrong(), 0u);
}

}  // namespace
}  // namespace collbench::nccl
