// The "sim" backend through the registry, its errors, the timeline file, and the CLI paths (sim, perf --backend
// sim, sweep) as a user meets them: bad input gives one line on stderr and exit status 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/error.h"
#include "collbench/topology.h"
#include "sim_backend.h"

namespace collbench {
namespace {

class SimBackend : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim::registerSimBackend(); }
};

Schedule ring(int n, std::size_t count) {
  return buildSchedule(CollectiveSpec{Collective::AllReduce, n, count, DType::F32}, "ring");
}

TEST_F(SimBackend, DefaultTopologyIsOneDgxH100) {
  auto b = makeBackend("sim", 8);
  EXPECT_EQ(b->name(), "sim");
  EXPECT_EQ(b->nranks(), 8);
  EXPECT_FALSE(b->movesData());
  // Ring on one NVSwitch: 2(n-1) hops of alpha = 2 x 0.3 us and beta = 1 / 450 GB/s on blocks of count/8 floats,
  // plus n-1 reductions at 1100 GB/s (topologies/README.md). GPU ranks without a protocol are timed as NCCL's
  // point-to-point path runs the schedule: 4 MB blocks go Simple, a 3.4 us NVLink step latency per hop (which includes
  // the wire: it replaces alpha, the larger of the two) and an 8.4 us launch floor once (NCCL 2.28 tuning.cc;
  // collbench/wire_rule.h).
  const std::size_t count = 8 * 1000000;
  const RunResult r = b->run(ring(8, count), Buffers(8), RunOptions{});
  const double blk = 1000000.0 * 4;
  const double want = 8.4e-6 + 14 * (std::max(3.4e-6, 0.6e-6) + blk / 450e9) + 7 * blk / 1100e9;
  EXPECT_NEAR(r.seconds, want, 1e-6 * want);
  EXPECT_EQ(r.algorithm, "ring");
}

TEST_F(SimBackend, ManyRunsAndTopologiesInOneProcess) {
  auto a = makeBackend("sim", 4, {{"topology", "dgx-a100-8x1"}});
  auto h = makeBackend("sim", 4, {{"topology", "dgx-h100-8x1"}});
  const Schedule s = ring(4, 1 << 20);
  const double ta1 = a->run(s, Buffers(4), {}).seconds, th = h->run(s, Buffers(4), {}).seconds;
  const double ta2 = a->run(s, Buffers(4), {}).seconds;
  EXPECT_EQ(ta1, ta2);  // deterministic
  EXPECT_GT(ta1, th);   // NVLink3 is slower than NVLink4
}

TEST_F(SimBackend, OptionsAndOverrides) {
  const Schedule s = ring(8, 1 << 22);
  const double base = makeBackend("sim", 8)->run(s, Buffers(8), {}).seconds;
  const double slow = makeBackend("sim", 8, {{"set", "link.nvlink.bandwidth_GBps=225; node.gpu.reduce_GBps=550"}})
                          ->run(s, Buffers(8), {})
                          .seconds;
  // Halving the link and reduction rates doubles the bandwidth and reduction terms (the latencies, the protocol's
  // step latency and launch floor stay): 14 hops of a 2 MiB block at 450 GB/s and 7 reductions at 1100 GB/s.
  const double blk = (1 << 22) / 8 * 4.0;
  EXPECT_NEAR(slow - base, 14 * blk / 450e9 + 7 * blk / 1100e9, 1e-6 * slow);
  const double lv08 = makeBackend("sim", 8, {{"model", "LV08"}})->run(s, Buffers(8), {}).seconds;
  EXPECT_GT(lv08, base);
  EXPECT_THROW(makeBackend("sim", 8, {{"model", "CM03"}}), Error);
  EXPECT_THROW(makeBackend("sim", 8, {{"colour", "blue"}}), Error);
  EXPECT_THROW(makeBackend("sim", 8, {{"set", "link.nope.bandwidth_GBps=1"}}), Error);
  const auto optionError = [](const char* key, const char* value) {
    try {
      makeBackend("sim", 8, {{key, value}});
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(optionError("gpus_per_thread", "0"),
            "sim backend option gpus_per_thread: expected an integer >= 1, got '0'");
  EXPECT_EQ(optionError("gpus_per_thread", "8x"),
            "sim backend option gpus_per_thread: expected an integer >= 1, got '8x'");
  EXPECT_EQ(optionError("nccl_version", "2.26"),
            "sim backend option nccl_version: expected MAJOR.MINOR.PATCH, got '2.26'");
}

TEST_F(SimBackend, NcclTakesTheLaunchingThreadAndTheRelease) {
  // What `collbench fidelity` passes from a log: nccl-tests -g 8 and NCCL 2.26.2.
  const CollectiveSpec spec{Collective::AllReduce, 8, 256, DType::F32};
  const auto time = [&](const BackendOptions& o) {
    return makeBackend("sim", 8, o)->runAlgorithm(spec, "nccl", AlgoParams{}, {}).seconds;
  };
  const double one = time({{"topology", "dgx-a100-8x1"}});
  const NcclModelParams m;
  EXPECT_LT(one, (m.hostGroupUs + 8 * m.hostLaunchUs) * 1e-6);
  EXPECT_NEAR(time({{"topology", "dgx-a100-8x1"}, {"gpus_per_thread", "8"}}),
              (m.hostGroupUs + 8 * m.hostLaunchUs) * 1e-6,
              1e-12);  // one thread issuing 8 GPUs' launches paces a 256 B call
  EXPECT_DOUBLE_EQ(time({{"topology", "dgx-a100-8x1"}, {"nccl_version", "2.26.2"}}), one);  // no NVLS on one A100 node
}

TEST_F(SimBackend, Errors) {
  try {
    makeBackend("sim", 9);
    FAIL() << "9 ranks on an 8-GPU topology";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("8 ranks"), std::string::npos) << e.what();
  }
  try {
    makeBackend("sim", 2, {{"topology", "/nonexistent/topology.json"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidTopology);
  }
  auto b = makeBackend("sim", 2);
  EXPECT_THROW(b->run(ring(3, 100), Buffers(3), {}), Error);  // rank count differs
  const Schedule native = buildSchedule(CollectiveSpec{Collective::AllReduce, 2, 100, DType::F32}, "nccl");
  try {
    b->run(native, Buffers(2), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
  }
  // Each rank waits for the other's message before sending its own: a deadlock under rendezvous.
  Schedule dead;
  dead.spec = CollectiveSpec{Collective::AllReduce, 2, 1, DType::F32};
  dead.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    Op recv;
    recv.kind = OpKind::Recv;
    recv.peer = 1 - r;
    recv.bytes = 4;
    Op send = recv;
    send.kind = OpKind::Send;
    send.deps = {0};
    dead.ranks[static_cast<std::size_t>(r)].ops = {recv, send};
  }
  try {
    b->run(dead, Buffers(2), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::InvalidSchedule);
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

TEST(SimOverrides, GeneratorParametersAndFieldOverridesTogether) {
  // "params.<name>=<value>" regenerates a generated topology before the field overrides apply (sweep --set).
  const std::string file = std::string(COLLBENCH_SOURCE_DIR) + "/examples/whatif/h100-16k-rail-spine-2to1.json";
  const Topology t = sim::loadTopologyWithOverrides(file, " params.nodes = 4 ; link.nic.bandwidth_GBps=25;");
  EXPECT_EQ(t.ranks.size(), 32u);
  bool nic = false;
  for (const TopoLink& l : t.links) {
    if (l.linkClass != "nic") continue;
    nic = true;
    EXPECT_EQ(l.bandwidthGBps, 25.0) << l.a << " - " << l.b;
  }
  EXPECT_TRUE(nic);
  try {
    sim::loadTopologyWithOverrides("dgx-h100-8x1", "params.nodes=2");
    ADD_FAILURE() << "an explicit topology has no parameters";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "params.nodes: topology 'dgx-h100-8x1' is not generated (no \"generator\"): it has no parameters to set");
  }
}

TEST(SimTimeline, EveryOpOnNonOverlappingLanes) {
  const int n = 5;
  sim::SimConfig cfg;
  cfg.timeline = true;
  Topology t = flatTopology(n, 50, 1);
  for (TopoNode& node : t.nodes) node.reduceGBps = node.kind == NodeKind::Gpu ? 100 : 0;
  const Schedule s =
      buildSchedule(CollectiveSpec{Collective::AllReduce, n, 1 << 20, DType::F32}, "tree", AlgoParams{1 << 18, 2, {}});
  const sim::SimResult r = sim::Simulator(t, n, cfg).run(s);
  std::size_t reduces = 0;
  for (const auto& rp : s.ranks) {
    for (const Op& op : rp.ops) reduces += op.kind == OpKind::RecvReduce ? 1 : 0;
  }
  ASSERT_EQ(r.spans.size(), s.totalOps() + reduces);  // a RecvReduce is a receive span and a reduce span
  std::ostringstream os;
  sim::writeTimeline(os, r, "test");
  const nlohmann::json doc = nlohmann::json::parse(os.str());
  std::size_t complete = 0;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++complete;
    lanes[{e.at("pid").get<int>(), e.at("tid").get<int>()}].emplace_back(
        e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
  }
  EXPECT_EQ(complete, r.spans.size());
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-6) << "pid " << lane.first << " tid " << lane.second;
    }
  }
  EXPECT_NEAR(doc.at("otherData").at("simulated_seconds").get<double>(), r.seconds, 1e-15);
}

// ---- The CLI (built next to the tests; skipped when it is not there).
struct CliRun {
  int status;
  std::string out, err;
};

CliRun cli(const std::string& args) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "collbench-test-sim";
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  const int rc = std::system(fmt::format("{} {} >{} 2>{}", COLLBENCH_CLI, args, out, err).c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  return CliRun{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

class SimCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(COLLBENCH_CLI)) GTEST_SKIP() << "collbench binary not built: " << COLLBENCH_CLI;
    dir_ = std::filesystem::temp_directory_path() / fmt::format("collbench-sim-cli-{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST_F(SimCli, BadTopologyIsOneLineAndExitTwo) {
  const std::string bad = (dir_ / "bad.json").string();
  std::ofstream(bad) << R"({"format": "collbench-topology", "version": 1, "nodes": [], "links": [], "ranks": ["x"]})";
  for (const std::string& args :
       {fmt::format("sim --topology {}", bad), fmt::format("sim --topology {}/none.json", dir_.string()),
        fmt::format("perf --backend sim --topology {} -g 2", bad), fmt::format("sweep --topology {}", bad)}) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("collbench: error:"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty() || r.out.find("error") == std::string::npos) << r.out;
  }
  EXPECT_EQ(cli("sim --topology dgx-h100-8x1 -g 9").status, 2);
  EXPECT_EQ(cli("sim --model CM03").status, 2);
}

// Finite but absurd numbers (SimGrid used to abort on 1e308 GB/s; 1e300 us printed a 300-digit time) and -g 0 (which
// used to mean "all ranks") are refused with one line naming the field and the value.
TEST_F(SimCli, OutOfRangeValuesAreOneLineAndExitTwo) {
  const std::string src = std::string(COLLBENCH_SOURCE_DIR) + "/tests/cli/topo_bad_inputs/";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"sim --set link.nvlink.bandwidth_GBps=1e308", "bandwidth_GBps: bandwidth must be between"},
      {"sim --set link.nvlink.latency_us=1e300", "latency_us: latency must be at most"},
      {"sim --set node.gpu.reduce_GBps=1e300", "reduce_GBps: must be 0"},
      {"sweep --sizes 1M --set link.nvlink.bandwidth_GBps=1e-300", "(got 1e-300)"},
      {"sim --topology " + src + "huge_bandwidth.json", "links[0].bandwidth_GBps"},
      {"sim --topology " + src + "huge_latency.json", "links[1].latency_us"},
      {"sim --topology " + src + "huge_reduce.json", "nodes[0].reduce_GBps"},
      {"sim --topology " + src + "tiny_bandwidth.json", "links[0].bandwidth_GBps"},
      {"sim -g 0", "-g/--ranks must be >= 1, got 0"},
  };
  for (const auto& [args, part] : cases) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
  }
}

// Output paths are checked before anything is simulated: an unwritable one is exit 2 with no results printed.
TEST_F(SimCli, UnwritableOutputsFailBeforeSimulating) {
  const std::string missing = (dir_ / "no-such-dir" / "out").string();
  for (const std::string& args :
       {fmt::format("sim --bytes 1M --timeline {}.json", missing),
        fmt::format("sweep --sizes 1M --csv {}.csv", missing), fmt::format("sweep --sizes 1M --json {}.json", missing),
        fmt::format("sweep --sizes 1M --json {} --force", dir_.string()),
        fmt::format("sweep --sizes 1M --csv {0}/same --json {0}/same", dir_.string())}) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "same"));
}

// `topo check` prints what `topo show` summarises, one line per file.
TEST_F(SimCli, TopoCheckSummarisesEachFile) {
  const CliRun r = cli("topo check dgx-h100-8x1 fat-tree-k8");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out), 2u) << r.out;
  // 8 GPUs on one NVSwitch: 4 x 450 GB/s cross any balanced cut, GPU-switch-GPU is 2 hops. k = 8 fat tree: 128
  // hosts, full bisection 64 x 50 GB/s, host-edge-agg-core-agg-edge-host is 6 hops.
  EXPECT_NE(r.out.find("OK dgx-h100-8x1 (dgx-h100-8x1): 8 ranks, 1 hosts, bisection 1800 GB/s, diameter 2 hops"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("128 ranks, 128 hosts, bisection 3200 GB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("diameter 6 hops"), std::string::npos) << r.out;
}

// `topo show` names each server's GPUs, CPUs (where the file says: NCCL's tuning reads them) and NICs.
TEST_F(SimCli, TopoShowDescribesEachServer) {
  const CliRun p5 = cli("topo show aws-p5");
  ASSERT_EQ(p5.status, 0) << p5.err;
  EXPECT_NE(p5.out.find("per host     64 hosts: 8 GPUs (hopper), AMD CPUs, 8 NICs x 50 GB/s, in-switch reduction "
                        "(NVLS) 450 GB/s + multicast"),
            std::string::npos)
      << p5.out;
  const CliRun ib = cli("topo show dgx-h100-ib400");
  EXPECT_NE(ib.out.find("per host     64 hosts: 8 GPUs (hopper), Intel CPUs, 8 NICs x 50 GB/s"), std::string::npos)
      << ib.out;
  const CliRun generic = cli("topo show h100-4x8-rail");
  EXPECT_EQ(generic.out.find("CPUs"), std::string::npos) << generic.out;  // a file that does not say
}

TEST_F(SimCli, SimPrintsTimeAlgbwBusbwAndWritesATimeline) {
  const std::string tl = (dir_ / "t.json").string();
  const CliRun r =
      cli(fmt::format("sim --topology dgx-h100-8x1 --collective allreduce --algo ring --bytes 64M --timeline {}", tl));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* field : {"time", "algbw", "busbw", "exact"})
    EXPECT_NE(r.out.find(field), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no SimGrid chatter
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(tl));
  EXPECT_GT(doc.at("traceEvents").size(), 8u * 14u);
  EXPECT_EQ(cli(fmt::format("sim --bytes 1M --timeline {}", tl)).status, 2);  // exists, no --force
  EXPECT_EQ(cli(fmt::format("sim --bytes 1M --timeline {} --force", tl)).status, 0);
}

TEST_F(SimCli, PerfOnTheSimBackend) {
  // No --topology: the simulator's default (one DGX H100) is named in the header and the JSON.
  const std::string json = (dir_ / "perf.json").string();
  const CliRun r = cli(fmt::format("perf all_reduce --backend sim -g 8 -b 1M -e 4M -f 2 --algo ring -n 1 -J {}", json));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("backend sim, 8 ranks, topology dgx-h100-8x1, algorithm ring\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#  Rank  7 Group  0 Pid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[sim] simulated"), std::string::npos) << r.out;
  // Ring on one NVSwitch (as DefaultTopologyIsOneDgxH100): 14 hops of block / 450 GB/s, 7 reductions of a block at
  // 1100 GB/s, block = size / 8 (128 KiB and up: NCCL's point-to-point Simple, 3.4 us per hop, above the route's
  // 0.6 us, and an 8.4 us launch floor); busbw = algbw x 2(n-1)/n.
  auto ringSeconds = [](double size) {
    const double blk = size / 8;
    return 8.4e-6 + 14 * (std::max(3.4e-6, 0.6e-6) + blk / 450e9) + 7 * blk / 1100e9;
  };
  const double factor = 2.0 * 7 / 8;
  const auto rows = testing::tableRows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  double busSum = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), 13u) << r.out;
    const double size = static_cast<double>(std::size_t{1} << (20 + i));
    EXPECT_EQ(std::stod(row[0]), size);
    EXPECT_EQ(std::stod(row[1]), size / 4);
    EXPECT_EQ(row[2], "float");
    EXPECT_EQ(row[3], "sum");
    for (std::size_t at : {5u, 9u}) {  // out-of-place, in-place
      const double us = std::stod(row[at]), algbw = std::stod(row[at + 1]), busbw = std::stod(row[at + 2]);
      EXPECT_NEAR(us, ringSeconds(size) * 1e6, 0.05) << row[at];  // the table prints 2 decimals at most
      // Both columns are rounded to 2 decimals (and algbw comes from the unrounded time).
      EXPECT_NEAR(algbw, size / (us * 1e-6) / 1e9, 1e-3 * algbw + 0.01);
      EXPECT_NEAR(busbw, algbw * factor, 0.02);
      EXPECT_EQ(row[at + 3], "N/A");  // a simulator moves no data
      busSum += busbw;
    }
  }
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(doc.at("config").at("topology"), "dgx-h100-8x1");
  EXPECT_EQ(doc.at("config").at("backend"), "sim");
  EXPECT_EQ(doc.at("config").at("ranks"), 8);
  ASSERT_EQ(doc.at("results").size(), 3u);
  double jsonBusSum = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& row = doc.at("results")[i];
    const double size = static_cast<double>(std::size_t{1} << (20 + i));
    EXPECT_EQ(row.at("size"), std::size_t{1} << (20 + i));
    EXPECT_EQ(row.at("algorithm"), "ring");
    for (const char* half : {"out_of_place", "in_place"}) {
      const auto& h = row.at(half);
      const double us = h.at("time_us").get<double>();
      EXPECT_NEAR(us, ringSeconds(size) * 1e6, 1e-6 * us) << half;
      EXPECT_NEAR(h.at("algbw_GBps").get<double>(), size / (us * 1e3), 1e-9 * size / (us * 1e3));
      EXPECT_NEAR(h.at("busbw_GBps").get<double>(), h.at("algbw_GBps").get<double>() * factor, 1e-9);
      EXPECT_TRUE(h.at("wrong").is_null()) << h;
      jsonBusSum += h.at("busbw_GBps").get<double>();
    }
  }
  EXPECT_NEAR(doc.at("avg_busbw_GBps").get<double>(), jsonBusSum / 6, 1e-9);
  const std::string avgLine = "# Avg bus bandwidth    : ";
  ASSERT_NE(r.out.find(avgLine), std::string::npos);
  EXPECT_NEAR(std::stod(r.out.substr(r.out.find(avgLine) + avgLine.size())), busSum / 6, 0.01);
}

TEST_F(SimCli, SweepWritesCsvAndJson) {
  const std::string csv = (dir_ / "s.csv").string(), json = (dir_ / "s.json").string();
  const std::string args = fmt::format(
      "sweep --topology dgx-h100-8x1,dgx-a100-8x1 -g 4,all --sizes 1M,64M --algo ring,tree --set '' "
      "--set 'link.nvlink.bandwidth_GBps=100' --csv {} --json {}",
      csv, json);
  const CliRun r = cli(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::size_t rows = 2 * 2 * 2 * 2 * 2;
  EXPECT_EQ(lines(r.out), rows + 2) << r.out;  // title and header
  // Every row has the header's columns (fields are quoted where they hold a comma or a quote).
  auto columns = [](const std::string& line) {
    std::size_t n = 1;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++n;
    }
    return n;
  };
  std::ifstream f(csv);
  std::string header, line;
  ASSERT_TRUE(std::getline(f, header));
  EXPECT_NE(header.find(",wall_s,cpu_s"), std::string::npos) << header;
  std::size_t csvRows = 0;
  while (std::getline(f, line)) {
    ++csvRows;
    EXPECT_EQ(columns(line), columns(header)) << line;
  }
  EXPECT_EQ(csvRows, rows);
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(json));
  ASSERT_EQ(doc.at("rows").size(), rows);
  // The override halves... well, quarters NVLink: every overridden row is slower than its unmodified twin.
  std::map<std::string, double> time;
  for (const auto& row : doc.at("rows")) {
    time[fmt::format("{}/{}/{}/{}/{}", row.at("topology").get<std::string>(), row.at("set").get<std::string>(),
                     row.at("ranks").get<int>(), row.at("bytes").get<std::size_t>(),
                     row.at("algorithm").get<std::string>())] = row.at("time_us").get<double>();
  }
  for (const auto& [key, t] : time) {
    if (key.find("/link.nvlink") == std::string::npos) continue;
    std::string base = key;
    base.replace(base.find("link.nvlink.bandwidth_GBps=100"), std::string("link.nvlink.bandwidth_GBps=100").size(), "");
    ASSERT_TRUE(time.count(base)) << base;
    EXPECT_GT(t, time[base]) << key;
  }
  EXPECT_EQ(cli(args).status, 2);  // files exist
  EXPECT_EQ(cli(args + " --force").status, 0);
}

}  // namespace
}  // namespace collbench
