#include <fmt/format.h>
#include <gtest/gtest.h>

#include "collbench/strategy/communication_options.h"
#include "collbench/strategy/multi_worker_mirrored_strategy.h"
#include "test_support.h"

namespace collbench::strategy {
namespace {

using CI = CommunicationImplementation;
using testing::expectError;
using testing::expectInvalid;

TEST(CommunicationOptions, DefaultsAreTfs) {
  CommunicationOptions o;
  EXPECT_EQ(o.bytesPerPack, 0);
  EXPECT_FALSE(o.timeoutSeconds.has_value());
  EXPECT_EQ(o.implementation, CI::Auto);
  EXPECT_EQ(o.describe(), "CommunicationOptions(bytes_per_pack=0, timeout_seconds=None, implementation=AUTO)");
  o.validate();
}

TEST(CommunicationOptions, ParseIsCaseInsensitive) {
  EXPECT_EQ(parseCommunicationImplementation("ring"), CI::Ring);
  EXPECT_EQ(parseCommunicationImplementation("NCCL"), CI::Nccl);
  EXPECT_EQ(parseCommunicationImplementation("Auto"), CI::Auto);
  EXPECT_EQ(toString(CI::Ring), "RING");
  expectInvalid([] { parseCommunicationImplementation("mpi"); }, {"\"mpi\"", "AUTO, RING, NCCL"});
}

TEST(CommunicationOptions, LegacyEnumIsTheSameEnum) {
  // TF: CollectiveCommunication is an alias of CommunicationImplementation.
  static_assert(std::is_same_v<CollectiveCommunication, CommunicationImplementation>);
  testing::LogCapture log;
  detail::resetWarnOnceForTesting();
  EXPECT_EQ(legacyCommunicationOptions(CollectiveCommunication::Ring).implementation, CI::Ring);
  EXPECT_EQ(legacyCommunicationOptions(CollectiveCommunication::Nccl).implementation, CI::Nccl);
  // The whole text, once for both calls (TF's warn_once deprecation).
  EXPECT_EQ(log.countWarnings(
                "MultiWorkerMirroredStrategy(communication=CollectiveCommunication) (from MultiWorkerMirroredStrategy) "
                "is deprecated and will be removed in a future version. Instructions for updating: use "
                "communication_options=CommunicationOptions(implementation=CommunicationImplementation)"),
            1)
      << log.text();
  EXPECT_EQ(log.countWarnings("deprecated"), 1) << log.text();
}

TEST(CommunicationOptions, DefaultTimeoutIsSixtySecondsOrTheEnvironment) {
  // Stricter than TF (no timeout): collectives never hang (issue #8); COLLBENCH_TIMEOUT_SECONDS overrides.
  EXPECT_EQ(defaultTimeoutSeconds(environmentFromMap({})), 60.0);
  EXPECT_EQ(defaultTimeoutSeconds(environmentFromMap({{"COLLBENCH_TIMEOUT_SECONDS", ""}})), 60.0);
  EXPECT_EQ(defaultTimeoutSeconds(environmentFromMap({{"COLLBENCH_TIMEOUT_SECONDS", "7.5"}})), 7.5);
  EXPECT_EQ(timeoutSecondsFromEnvironment(environmentFromMap({})), std::nullopt);
  for (const char* bad : {"abc", "0", "-1", "5s", "inf", "nan"}) {
    expectInvalid(
        [&] {
          defaultTimeoutSeconds(environmentFromMap({{"COLLBENCH_TIMEOUT_SECONDS", bad}}));
        },
        {fmt::format("COLLBENCH_TIMEOUT_SECONDS=\"{}\" is not a positive number of seconds", bad)});
  }
}

TEST(CommunicationOptions, PerCallImplementationUsesTheDeviceFactsNotTheStrategysChoice) {
  // GPU replicas with an nccl backend, strategy RING: a call asking for NCCL gets it. (The engine used to pass
  // "the strategy's choice used nccl" as "an nccl backend is available", making this call fail as Unsupported.)
  const ImplementationChoice ring =
      resolveImplementation(CI::Ring, /*gpuReplicas=*/true, /*ncclBackendAvailable=*/true);
  ASSERT_FALSE(ring.useNcclBackend);
  ImplementationChoice c = implementationForCall(ring, CI::Nccl, true, true);
  EXPECT_EQ(c.effective, CI::Nccl);
  EXPECT_TRUE(c.useNcclBackend);
  // A call asking for what the strategy asked for gets the strategy's resolution, reason included.
  const ImplementationChoice autoGpu = resolveImplementation(CI::Auto, true, true);
  c = implementationForCall(autoGpu, CI::Auto, true, true);
  EXPECT_EQ(c.effective, CI::Nccl);
  EXPECT_EQ(c.reason, autoGpu.reason);
  EXPECT_EQ(implementationForCall(autoGpu, CI::Ring, true, true).effective, CI::Ring);
  // Without an nccl backend an NCCL call on GPUs is unsupported; on CPU replicas NCCL runs RING.
  expectError([&] { implementationForCall(resolveImplementation(CI::Ring, true, false), CI::Nccl, true, false); },
              Errc::Unsupported, {"nccl backend"});
  EXPECT_EQ(implementationForCall(resolveImplementation(CI::Auto, false, true), CI::Nccl, false, true).effective,
            CI::Ring);
}

TEST(CommunicationOptions, ValidationNamesTheField) {
  expectInvalid([] { CommunicationOptions{-1, std::nullopt, CI::Auto}.validate(); }, {"bytes_per_pack", "-1"});
  expectInvalid([] { CommunicationOptions{0, 0.0, CI::Auto}.validate(); }, {"timeout_seconds", "0"});
  expectInvalid([] { CommunicationOptions{0, -2.0, CI::Auto}.validate(); }, {"timeout_seconds", "-2"});
  CommunicationOptions{1 << 20, 30.0, CI::Ring}.validate();
}

TEST(CommunicationOptions, MergeOverridesOnlyNonDefaults) {
  const CommunicationOptions base{4096, 10.0, CI::Ring};
  EXPECT_EQ(base.merge({}), base);
  const CommunicationOptions m = base.merge({0, 3.0, CI::Auto});
  EXPECT_EQ(m.bytesPerPack, 4096);
  EXPECT_EQ(m.timeoutSeconds, 3.0);
  EXPECT_EQ(m.implementation, CI::Ring);
  EXPECT_EQ(base.merge({16, std::nullopt, CI::Nccl}), (CommunicationOptions{16, 10.0, CI::Nccl}));
}

TEST(CommunicationOptions, ResolveImplementation) {
  ImplementationChoice c = resolveImplementation(CI::Auto, false, true);
  EXPECT_EQ(c.effective, CI::Ring);
  EXPECT_FALSE(c.useNcclBackend);
  EXPECT_NE(c.reason.find("AUTO chose collbench schedules"), std::string::npos) << c.reason;
  c = resolveImplementation(CI::Auto, true, true);
  EXPECT_EQ(c.effective, CI::Nccl);
  EXPECT_TRUE(c.useNcclBackend);
  c = resolveImplementation(CI::Auto, true, false);
  EXPECT_EQ(c.effective, CI::Ring);
  // TF: NCCL applies only to GPU all-reduce; CPU replicas use RING.
  c = resolveImplementation(CI::Nccl, false, false);
  EXPECT_EQ(c.effective, CI::Ring);
  EXPECT_NE(c.reason.find("replicas are CPU"), std::string::npos) << c.reason;
  expectError([] { resolveImplementation(CI::Nccl, true, false); }, Errc::Unsupported, {"NCCL", "nccl backend"});
  EXPECT_EQ(resolveImplementation(CI::Ring, true, true).effective, CI::Ring);
}

}  // namespace
}  // namespace collbench::strategy
