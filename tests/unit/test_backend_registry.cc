// The backend registry: capabilities registered with a factory come back from backendCapabilities() field for field,
// and an unknown name is one InvalidArgument naming the registered backends.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"

namespace collbench {
namespace {

/// A backend that only exists to be registered: nothing in these tests runs it.
class IdleBackend final : public Backend {
 public:
  explicit IdleBackend(int n) : n_(n) {}
  std::string_view name() const override { return "registry_test_gpu"; }
  int nranks() const override { return n_; }
  RunResult run(const Schedule&, const Buffers&, const RunOptions&) override { return {}; }

 private:
  int n_;
};

BackendFactory idleFactory() {
  return [](int n, const BackendOptions&) { return std::make_unique<IdleBackend>(n); };
}

TEST(BackendRegistry, CapabilitiesComeBackAsRegistered) {
  BackendCapabilities caps;
  caps.device = DeviceKind::Gpu;
  caps.ranksPerProcess = RanksPerProcess::OneWhenLaunched;
  caps.movesData = true;
  caps.sharedDevice = true;
  caps.defaultTopology = "dgx-h100-8x1";
  caps.nativeAlgorithms = {"lib_ring", "lib_tree"};
  registerBackend("registry_test_gpu", "test", idleFactory(), caps);

  const BackendCapabilities got = backendCapabilities("registry_test_gpu");
  EXPECT_EQ(got.device, DeviceKind::Gpu);
  EXPECT_EQ(got.ranksPerProcess, RanksPerProcess::OneWhenLaunched);
  EXPECT_TRUE(got.movesData);
  EXPECT_TRUE(got.sharedDevice);
  EXPECT_EQ(got.defaultTopology, "dgx-h100-8x1");
  EXPECT_EQ(got.nativeAlgorithms, (std::vector<std::string>{"lib_ring", "lib_tree"}));
  EXPECT_EQ(backendNativeAlgorithms("registry_test_gpu"), got.nativeAlgorithms);
  const auto found = findBackendCapabilities("registry_test_gpu");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->device, DeviceKind::Gpu);
  EXPECT_EQ(makeBackend("registry_test_gpu", 3)->nranks(), 3);
}

TEST(BackendRegistry, WithoutCapabilitiesABackendIsCpuWithEveryRankInOneProcess) {
  registerBackend("registry_test_plain", "test", idleFactory());
  const BackendCapabilities got = backendCapabilities("registry_test_plain");
  EXPECT_EQ(got.device, DeviceKind::Cpu);
  EXPECT_EQ(got.ranksPerProcess, RanksPerProcess::All);
  EXPECT_TRUE(got.movesData);
  EXPECT_FALSE(got.sharedDevice);
  EXPECT_TRUE(got.defaultTopology.empty());
  EXPECT_TRUE(got.nativeAlgorithms.empty());
}

TEST(BackendRegistry, ASecondRegistrationReplacesTheCapabilities) {
  BackendCapabilities simulated;
  simulated.device = DeviceKind::Simulated;
  simulated.movesData = false;
  registerBackend("registry_test_again", "test", idleFactory(), simulated);
  registerBackend("registry_test_again", "test", idleFactory());
  EXPECT_EQ(backendCapabilities("registry_test_again").device, DeviceKind::Cpu);
  EXPECT_TRUE(backendCapabilities("registry_test_again").movesData);
}

TEST(BackendRegistry, UnknownNameIsOneErrorNamingTheRegisteredBackends) {
  registerBackend("registry_test_plain", "test", idleFactory());
  EXPECT_FALSE(findBackendCapabilities("no_such_backend").has_value());
  try {
    backendCapabilities("no_such_backend");
    FAIL() << "no error for an unknown backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown backend 'no_such_backend' (available: "), std::string::npos) << what;
    EXPECT_NE(what.find("registry_test_plain"), std::string::npos) << what;
  }
  EXPECT_THROW(backendNativeAlgorithms("no_such_backend"), Error);
}

}  // namespace
}  // namespace collbench
