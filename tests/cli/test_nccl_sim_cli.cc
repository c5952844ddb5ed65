// `--algo nccl` on the sim backend: NCCL 2.28's emulated choice on the topology's system, timed by the NCCL model
// (collbench/nccl_model.h), through perf (-J rows and header), the NCCL_* environment, `plan`, and --algo auto on GPU
// systems.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;

bool hasSim() { return runCli("sim --bytes 8 -g 2").exitCode == 0; }

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("collbench_nccl_sim_{}_{}", ::getpid(), name)).string();
}

/// The -J rows of `perf --backend sim --algo nccl` on `topology` with `ranks`, 1 KiB .. 1 GiB by x32.
nlohmann::json perfRows(const std::string& topology, int ranks) {
  const std::string json = tempPath(topology + ".json");
  std::filesystem::remove(json);
  const CliResult r = runCli(
      fmt::format("perf --backend sim --topology {} -g {} --algo nccl -b 1K -e 1G -f 32 -J {}", topology, ranks, json));
  EXPECT_EQ(r.exitCode, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(testing::slurp(json));
  std::filesystem::remove(json);
  return doc.at("results");
}

/// Sets an environment variable for the test's lifetime (the CLI runs as a child and inherits it).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

// `collbench sim` and `collbench sweep` reach the same emulated NCCL as perf (Simulator::runAlgorithm), under the
// process's NCCL variables.
TEST(NcclSimCli, SimAndSweepTimeNcclAsPerfDoes) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const NcclSystem sys = ncclSystemOf(loadTopology("dgx-h100-ib400"), 16);
  const NcclChoice c = ncclChoose(sys, Collective::AllReduce, std::size_t{1} << 30, 16, ncclEnvFromProcess());
  const CliResult sim = runCli("sim --topology dgx-h100-ib400 -g 16 --bytes 1G --algo nccl --json");
  ASSERT_EQ(sim.exitCode, 0) << sim.err;
  const nlohmann::json doc = nlohmann::json::parse(sim.out);
  EXPECT_NEAR(doc.at("time_us").get<double>(), c.predictedUs, 1e-6 * c.predictedUs);
  EXPECT_EQ(doc.at("method"), "nccl-model");
  EXPECT_EQ(doc.at("note"), ncclChoiceSummary(c));
  const std::string json = tempPath("sweep.json");
  std::filesystem::remove(json);
  const CliResult sweep =
      runCli(fmt::format("sweep --topology dgx-h100-ib400 -g 16 --sizes 1G --algo nccl --json {}", json));
  ASSERT_EQ(sweep.exitCode, 0) << sweep.err;
  const nlohmann::json rows = nlohmann::json::parse(testing::slurp(json)).at("rows");
  std::filesystem::remove(json);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_NEAR(rows[0].at("time_us").get<double>(), c.predictedUs, 1e-6 * c.predictedUs);
  // A forced protocol reaches sim as it reaches NCCL: through the environment.
  ScopedEnv proto("NCCL_PROTO", "LL");
  const CliResult ll = runCli("sim --topology dgx-h100-ib400 -g 16 --bytes 1G --algo nccl --json");
  ASSERT_EQ(ll.exitCode, 0) << ll.err;
  EXPECT_NE(nlohmann::json::parse(ll.out).at("note").get<std::string>().find("/LL,"), std::string::npos) << ll.out;
}

TEST(NcclSimCli, TimeIsTheModelsPredictionForNcclsChoice) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const NcclSystem sys = ncclSystemOf(loadTopology("dgx-h100-ib400"), 16);
  const nlohmann::json rows = perfRows("dgx-h100-ib400", 16);
  ASSERT_EQ(rows.size(), 5u);  // 1 KiB, 32 KiB, 1 MiB, 32 MiB, 1 GiB
  for (const auto& row : rows) {
    const std::size_t bytes = row.at("size").get<std::size_t>();
    SCOPED_TRACE(bytes);
    const NcclChoice c = ncclChoose(sys, Collective::AllReduce, bytes, 16, ncclEnvFromProcess());
    EXPECT_EQ(row.at("algorithm"), "nccl");
    EXPECT_NEAR(row.at("out_of_place").at("time_us").get<double>(), c.predictedUs, 1e-6 * c.predictedUs);
    EXPECT_EQ(row.at("algorithm_reason"), ncclChoiceSummary(c));
  }
  // SHARP on the fabric switches is not used by default (NCCL_COLLNET_ENABLE=0); 1 GiB on two NVLS nodes: NVLSTree.
  EXPECT_EQ(rows.back().at("algorithm_reason").get<std::string>().rfind("NCCL 2.28: NVLSTree/Simple, ", 0), 0u)
      << rows.back().at("algorithm_reason");
}

TEST(NcclSimCli, EnvironmentForcesTheChoice) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const nlohmann::json dflt = perfRows("dgx-h100-ib400", 16);
  nlohmann::json ring;
  {
    const ScopedEnv env("NCCL_ALGO", "Ring");
    ring = perfRows("dgx-h100-ib400", 16);
  }
  ASSERT_EQ(ring.size(), dflt.size());
  const std::string big = ring.back().at("algorithm_reason");
  EXPECT_EQ(big.rfind("NCCL 2.28: Ring/Simple, ", 0), 0u) << big;
  EXPECT_NE(dflt.back().at("algorithm_reason"), big);
  // Ring at 1 GiB over 2 nodes is slower than NVLSTree: the in-switch reduction halves the NVLink traffic.
  EXPECT_GT(ring.back().at("out_of_place").at("time_us").get<double>(),
            dflt.back().at("out_of_place").at("time_us").get<double>());
  for (const auto& row : ring) EXPECT_EQ(row.at("algorithm_reason").get<std::string>().find("NVLS"), std::string::npos);
  // An older NCCL's choice, named by its release: 2.19 estimates ring LL at a quarter of the ring's bandwidth
  // (tuning.cc), so at 2 MiB on 8 x A100 it takes LL128 where 2.28 takes LL.
  const CliResult v219 =
      runCli("perf --backend sim --topology dgx-a100-8x1 -g 8 --algo nccl -b 2M -e 2M --nccl-version 2.19.3 -c 0");
  ASSERT_EQ(v219.exitCode, 0) << v219.err;
  EXPECT_NE(v219.out.find("algorithm nccl (Ring/LL128, 24 channels)"), std::string::npos) << v219.out;
  const CliResult v228 = runCli("perf --backend sim --topology dgx-a100-8x1 -g 8 --algo nccl -b 2M -e 2M -c 0");
  ASSERT_EQ(v228.exitCode, 0) << v228.err;
  EXPECT_NE(v228.out.find("algorithm nccl (Ring/LL, 24 channels)"), std::string::npos) << v228.out;
  const ScopedEnv bad("NCCL_PROTO", "bogus");
  const CliResult r = runCli("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo nccl -b 1M -e 1M");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("NCCL_PROTO=bogus"), std::string::npos) << r.err;
}

// A configuration `tune --export nccl-tuner` wrote, loaded the way NCCL loads it (NCCL's example tuner plugin and
// NCCL_TUNER_CONFIG_FILE), makes perf run each size with its rule's algorithm, protocol and channels, in the time the
// table measured for it (the simulator measured each candidate under such a rule).
TEST(NcclSimCli, AnExportedTunerConfigurationRunsUnderNcclsExampleTuner) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const std::string conf = tempPath("exported.conf"), table = tempPath("exported.json"), rows = tempPath("tuned.json");
  const CliResult tune =
      runCli(fmt::format("tune --backend sim --topology dgx-h100-8x1 -g 8 -b 1K -e 1M -f 16 "
                         "--nccl-channels 2,8 --export nccl-tuner --export-file {} -o {} --force",
                         conf, table));
  ASSERT_EQ(tune.exitCode, 0) << tune.err;
  const nlohmann::json winners = nlohmann::json::parse(testing::slurp(table)).at("sections").at(0).at("entries");
  nlohmann::json tuned;
  {
    const ScopedEnv plugin("NCCL_TUNER_PLUGIN", "libnccl-tuner-example.so");
    const ScopedEnv file("NCCL_TUNER_CONFIG_FILE", conf.c_str());
    const CliResult r = runCli(
        fmt::format("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo nccl -b 1K -e 1M -f 16 -J {}", rows));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    tuned = nlohmann::json::parse(testing::slurp(rows)).at("results");
  }
  ASSERT_EQ(tuned.size(), winners.size());
  for (std::size_t i = 0; i < tuned.size(); ++i) {
    const nlohmann::json& best = winners[i].at("candidates").at(0);
    const NcclAlgorithm a = parseNcclAlgorithm(best.at("algorithm").get<std::string>());
    const NcclProtocol p = parseNcclProtocol(best.at("protocol").get<std::string>());
    EXPECT_EQ(tuned[i].at("algorithm_reason"), fmt::format("NCCL 2.28 under the NCCL example tuner: {}/{}, {} channels",
                                                           toString(a), toString(p), best.at("channels").get<int>()));
    const double measured = best.at("time_us").get<double>();
    EXPECT_NEAR(tuned[i].at("out_of_place").at("time_us").get<double>(), measured, 1e-9 * measured);
  }
  const ScopedEnv plugin("NCCL_TUNER_PLUGIN", "libnccl-tuner-example.so");
  const ScopedEnv missing("NCCL_TUNER_CONFIG_FILE", "/nonexistent/tuner.conf");
  const CliResult r = runCli("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo nccl -b 1M -e 1M");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("NCCL_TUNER_CONFIG_FILE=/nonexistent/tuner.conf: cannot read it"), std::string::npos) << r.err;
  for (const std::string& f : {conf, table, rows}) std::filesystem::remove(f);
}

TEST(NcclSimCli, HeaderNamesTheChoicePerSize) {
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  const CliResult r = runCli("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo nccl -b 8 -e 1G -f 1024");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string header = r.out.substr(0, r.out.find('\n'));
  EXPECT_NE(header.find("algorithm nccl (Ring/LL, 1 channel 8 B..8 KiB; "), std::string::npos) << header;
  EXPECT_NE(header.find("; NVLS/Simple, 16 channels 8 MiB..8 MiB)"), std::string::npos) << header;
}

TEST(NcclSimCli, PlanPrintsNcclsChoiceAndCandidates) {
  const CliResult r = runCli("plan --algo nccl --topology dgx-h100-8x1 -g 8 --bytes 1G");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("nccl choice: NCCL 2.28: NVLS/Simple, 16 channels (runner-up Ring/Simple +"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("system: 1 x 8 hopper GPUs, NVLink 450 GB/s, NVSwitch (NVLS)"), std::string::npos) << r.out;
  // Every algorithm x protocol, the chosen one starred; what the system lacks (CollNet) has no estimate.
  const NcclChoice c =
      ncclChoose(ncclSystemOf(loadTopology("dgx-h100-8x1"), 8), Collective::AllReduce, std::size_t{1} << 30, 8);
  EXPECT_NE(r.out.find(fmt::format("* NVLS           Simple   {:>14.2f} {:>14.2f}", c.ncclUs, c.predictedUs)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  CollnetDirect  LL                    -              -"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  Ring           LL128"), std::string::npos) << r.out;
}

TEST(NcclSimCli, AutoChoosesNcclOnGpuSystemsOnly) {
  // dgx-h100-8x1's GPUs name their arch: NCCL's NVLS at 1 GiB beats every collbench schedule (and the tuning table).
  const CliResult gpu = runCli("plan --topology dgx-h100-8x1 -g 8 --bytes 1G");
  ASSERT_EQ(gpu.exitCode, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("algorithm: nccl (NCCL's model on topology dgx-h100-8x1: NCCL 2.28: NVLS/Simple"),
            std::string::npos)
      << gpu.out;
  // h100-4x8-rail names no arch: the choice is among collbench's schedules as before.
  const CliResult plain = runCli("plan --topology h100-4x8-rail -g 8 --bytes 1G");
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_EQ(plain.out.find("algorithm: nccl"), std::string::npos) << plain.out;
  // A backend that cannot run NCCL's collective never gets it.
  const CliResult host = runCli("plan --topology dgx-h100-8x1 -g 8 --bytes 1G --backend host");
  ASSERT_EQ(host.exitCode, 0) << host.err;
  EXPECT_EQ(host.out.find("algorithm: nccl"), std::string::npos) << host.out;
}

TEST(NcclSimCli, PlanAndSimReadBytesAsNcclTestsDoes) {
  // all_gather and reduce_scatter count --bytes as nccl-tests does (the whole output, resp. input: 256 MiB over 8
  // ranks is 8 Mi floats per rank) in plan as in sim, so plan explains the call sim times; plan read it per rank.
  if (!hasSim()) GTEST_SKIP() << "built without SimGrid";
  for (const char* collective : {"all_gather", "reduce_scatter"}) {
    SCOPED_TRACE(collective);
    const CliResult plan = runCli(fmt::format("plan {} --topology dgx-h100-8x1 -g 8 --bytes 256M", collective));
    ASSERT_EQ(plan.exitCode, 0) << plan.err;
    EXPECT_EQ(plan.out.rfind(fmt::format("{}(n=8, count=8388608, float", collective), 0), 0u) << plan.out;
    const CliResult sim =
        runCli(fmt::format("sim --collective {} --topology dgx-h100-8x1 -g 8 --bytes 256M --json", collective));
    ASSERT_EQ(sim.exitCode, 0) << sim.err;
    EXPECT_EQ(nlohmann::json::parse(sim.out)["count"], 8388608) << sim.out;
  }
}

}  // namespace
}  // namespace collbench
