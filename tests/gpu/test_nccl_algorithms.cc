// Which NCCL algorithm the nccl backend runs for collbench's in-network algorithms, and the environment it creates
// their communicators in (no device needed: the label is Host*, run by test_gpu_plan).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend_options.h"
#include "collbench/algorithms.h"

namespace collbench::nccl {
namespace {

/// The variable's value, or "<unset>".
std::string env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded test
  return v ? v : "<unset>";
}

TEST(HostNcclAlgorithms, InNetworkAlgorithmsMapToNcclsOwn) {
  struct Want {
    const char* ours;
    const char* theirs;
    bool collnet;
  };
  for (const Want w : {Want{"nvls", "NVLS", false}, Want{"nvls_tree", "NVLSTree", false},
                       Want{"collnet_direct", "CollNetDirect", true}, Want{"collnet_chain", "CollNetChain", true}}) {
    const auto a = ncclNativeAlgorithm(w.ours);
    ASSERT_TRUE(a) << w.ours;
    EXPECT_EQ(a->ncclAlgo, w.theirs);
    EXPECT_EQ(a->collnet, w.collnet);
    const auto vars = ncclAlgorithmEnvironment(*a);
    ASSERT_EQ(vars.size(), w.collnet ? 2u : 1u);
    EXPECT_EQ(vars[0], (std::pair<std::string, std::string>{"NCCL_ALGO", w.theirs}));
    if (w.collnet) {
      EXPECT_EQ(vars[1], (std::pair<std::string, std::string>{"NCCL_COLLNET_ENABLE", "1"}));
    }
  }
  for (const char* other : {"ring", "tree", "nccl", "hierarchical", "NVLS"}) EXPECT_FALSE(ncclNativeAlgorithm(other));
}

TEST(HostNcclAlgorithms, EveryAlgorithmWithSwitchOpsHasOne) {
  // The nccl backend cannot issue switch ops: each such algorithm must name NCCL's implementation.
  int n = 0;
  for (const AlgorithmInfo& a : algorithms()) {
    if (!a.traits.needsSwitchReduction) continue;
    EXPECT_TRUE(ncclNativeAlgorithm(a.name)) << a.name;
    ++n;
  }
  EXPECT_EQ(n, 4);
}

TEST(HostNcclAlgorithms, ScopedEnvironmentRestoresWhatWasThere) {
  ::setenv("NCCL_ALGO", "Ring", 1);   // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("NCCL_COLLNET_ENABLE");  // NOLINT(concurrency-mt-unsafe)
  {
    const ScopedEnvironment scope(ncclAlgorithmEnvironment(*ncclNativeAlgorithm("collnet_chain")));
    EXPECT_EQ(env("NCCL_ALGO"), "CollNetChain");
    EXPECT_EQ(env("NCCL_COLLNET_ENABLE"), "1");
  }
  EXPECT_EQ(env("NCCL_ALGO"), "Ring");
  EXPECT_EQ(env("NCCL_COLLNET_ENABLE"), "<unset>");
  ::unsetenv("NCCL_ALGO");  // NOLINT(concurrency-mt-unsafe)
  {
    const ScopedEnvironment scope({{"NCCL_ALGO", "NVLS"}, {"NCCL_ALGO", "NVLSTree"}});
    EXPECT_EQ(env("NCCL_ALGO"), "NVLSTree");
  }
  EXPECT_EQ(env("NCCL_ALGO"), "<unset>");
}

}  // namespace
}  // namespace collbench::nccl
