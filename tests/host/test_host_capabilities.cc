// What backend/host's register functions declare: the registry's capabilities agree with the backends' instances.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/backends/host.h"
#include "collbench/error.h"
#include "collbench/reference.h"

namespace collbench {
namespace {

TEST(HostCapabilities, HostRunsEveryRankAsACpuThreadAndMovesData) {
  host::registerHostBackends();
  const BackendCapabilities caps = backendCapabilities("host");
  EXPECT_EQ(caps.device, DeviceKind::Cpu);
  EXPECT_EQ(caps.ranksPerProcess, RanksPerProcess::All);
  EXPECT_FALSE(caps.sharedDevice);
  EXPECT_TRUE(caps.nativeAlgorithms.empty());
  EXPECT_TRUE(caps.defaultTopology.empty());
  EXPECT_EQ(caps.movesData, makeBackend("host", 2)->movesData());
  EXPECT_TRUE(caps.movesData);
}

TEST(HostCapabilities, HostRefusesSwitchOps) {
  // NVLS reduces in the NVSwitch: threads over shared memory have no such switch and must say where it runs.
  const CollectiveSpec spec{Collective::AllReduce, 4, 1024, DType::F32};
  const RankBufferSet bufs(spec, false);
  try {
    host::makeThreadsBackend(4)->run(buildSchedule(spec, "nvls"), bufs.views(), {});
    FAIL() << "the host backend ran switch ops";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_EQ(std::string(e.what()),
              "algorithm 'nvls' needs a switch that reduces (NVLS/SHARP), which backend 'host' does not have; run it "
              "on --backend sim or nccl");
  }
}

#ifdef COLLBENCH_HAVE_GLOO
TEST(HostCapabilities, GlooRunsOneRankPerProcessAndGloosOwnAllReduces) {
  host::registerGlooBackend();
  const BackendCapabilities caps = backendCapabilities("gloo");
  EXPECT_EQ(caps.device, DeviceKind::Cpu);
  EXPECT_EQ(caps.ranksPerProcess, RanksPerProcess::One);
  EXPECT_TRUE(caps.movesData);
  const std::vector<std::string> expected = {"gloo_ring", "gloo_ring_chunked", "gloo_halving_doubling", "gloo_bcube"};
  EXPECT_EQ(caps.nativeAlgorithms, expected);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), host::kGlooNativeAlgorithms.begin(),
                         host::kGlooNativeAlgorithms.end()));
}
#endif

}  // namespace
}  // namespace collbench
