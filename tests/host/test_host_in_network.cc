// The host backends refuse the in-network all-reduces (their schedules have switch ops) with Error{Unsupported}
// saying where they run.
#include <gtest/gtest.h>

#include <string>

#include "collbench/algorithms.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reference.h"

namespace collbench {
namespace {

TEST(HostInNetwork, ThreadsBackendRefusesSwitchOps) {
  const CollectiveSpec spec{Collective::AllReduce, 4, 1024, DType::F32};
  const RankBufferSet bufs(spec, false);
  for (const std::string a : {"nvls_tree", "collnet_direct", "collnet_chain"}) {
    const Schedule s = buildSchedule(spec, a, AlgoParams{0, 1, {0, 0, 1, 1}});
    try {
      host::makeThreadsBackend(4)->run(s, bufs.views(), {});
      FAIL() << a << " ran on threads";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::Unsupported);
      EXPECT_EQ(std::string(e.what()), "algorithm '" + a +
                                           "' needs a switch that reduces (NVLS/SHARP), which backend 'host' does "
                                           "not have; run it on --backend sim or nccl");
    }
  }
}

}  // namespace
}  // namespace collbench
