// `collbench perf` as a user runs it: the nccl-tests table and JSON of real runs, size sequences, busbw factors,
// result checking, and bad flags.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_runner.h"
#include "collbench/backend.h"
#include "collbench/backends/host.h"
#include "collbench/reference.h"
#include "commands.h"
#include "perf_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;
using testing::tableRows;

std::filesystem::path tempFile(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".json");
}

nlohmann::json runJson(const std::string& args) {
  const auto path = tempFile("perf");
  std::filesystem::remove(path);
  const CliResult r = runCli(args + " -J " + path.string());
  EXPECT_EQ(r.exitCode, 0) << r.err << r.out;
  const auto doc = nlohmann::json::parse(testing::slurp(path));
  std::filesystem::remove(path);
  return doc;
}

TEST(PerfCli, TableHasNcclTestsShape) {
  const CliResult r = runCli("perf all_reduce --backend host -b 1K -e 64K -f 2 -g 3 -n 2 -w 1");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("# nThread 1 nGpus 3 minBytes 1024 maxBytes 65536 step: 2(factor)"), std::string::npos);
  EXPECT_NE(r.out.find("#  Rank  2 Group  0 Pid"), std::string::npos);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos);
  EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos);
  const auto rows = tableRows(r.out);
  ASSERT_EQ(rows.size(), 7u);  // 1K, 2K, ..., 64K
  std::size_t size = 1024;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 13u);
    EXPECT_EQ(std::stoul(row[0]), size);
    EXPECT_EQ(std::stoul(row[1]), size / 4);
    EXPECT_EQ(row[2], "float");
    EXPECT_EQ(row[3], "sum");
    EXPECT_EQ(row[4], "-1");
    EXPECT_EQ(row[8], "0");   // out-of-place #wrong
    EXPECT_EQ(row[12], "0");  // in-place #wrong
    size *= 2;
  }
}

std::vector<std::size_t> sizesOf(const nlohmann::json& doc) {
  std::vector<std::size_t> sizes;
  for (const auto& row : doc["results"]) sizes.push_back(row["size"]);
  return sizes;
}

TEST(PerfCli, NvlsRunsOnTheSimulatorOnlyWhereTheSwitchReduces) {
  const CliResult host = runCli("perf --backend host -g 4 --algo nvls -b 1M -e 1M");
  EXPECT_EQ(host.exitCode, 2);
  EXPECT_EQ(host.out, "");
  EXPECT_EQ(host.err,
            "collbench: error: --algo nvls needs a switch that reduces (NVLS/SHARP), which backend 'host' does not "
            "have; run it on --backend sim or nccl\n");
  const CliResult a100 = runCli("perf --backend sim --topology dgx-a100-8x1 -g 8 --algo nvls -b 1M -e 1M");
  EXPECT_EQ(a100.exitCode, 2);
  EXPECT_EQ(a100.out, "");
  EXPECT_NE(a100.err.find("switch n0.nvsw of group 0 cannot reduce"), std::string::npos) << a100.err;
  // On dgx-h100-8x1 NVLS beats the ring at 1 GiB (real 8 x H100: ~480 vs ~370 GB/s busbw).
  const CliResult nvls = runCli("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo nvls -b 1G -e 1G");
  const CliResult ring = runCli("perf --backend sim --topology dgx-h100-8x1 -g 8 --algo ring -b 1G -e 1G");
  ASSERT_EQ(nvls.exitCode, 0) << nvls.err;
  ASSERT_EQ(ring.exitCode, 0) << ring.err;
  const auto nvlsRows = tableRows(nvls.out), ringRows = tableRows(ring.out);
  ASSERT_EQ(nvlsRows.size(), 1u);
  ASSERT_EQ(ringRows.size(), 1u);
  EXPECT_GT(std::stod(nvlsRows[0][7]), std::stod(ringRows[0][7]));  // busbw, out of place
}

TEST(PerfCli, StepBytesSequence) {
  const auto doc = runJson("perf --backend host -b 1000 -e 5000 -i 1000 -g 2 -n 1 -w 0");
  EXPECT_EQ(sizesOf(doc), (std::vector<std::size_t>{1000, 2000, 3000, 4000, 5000}));
}

TEST(PerfCli, StepFactorOneIsOffAsInNcclTests) {
  // nccl-tests scripts pass "-f 1 -i 1M": a factor of 1 means "step by -i", not an error.
  const auto doc = runJson("perf --backend host -b 1000 -e 3000 -f 1 -i 1000 -g 2 -n 1 -w 0");
  EXPECT_EQ(sizesOf(doc), (std::vector<std::size_t>{1000, 2000, 3000}));
  EXPECT_EQ(doc["config"]["stepfactor"], 1.0);
  // -i is ignored once -f multiplies, as in nccl-tests.
  EXPECT_EQ(sizesOf(runJson("perf --backend host -b 1000 -e 9000 -f 3 -i 1 -g 2 -n 1 -w 0")),
            (std::vector<std::size_t>{1000, 3000, 9000}));
}

struct FactorCase {
  const char* collective;
  int n;
  double factor;
};

TEST(PerfCli, BusBandwidthFactorsAndJson) {
  for (const FactorCase& c :
       {FactorCase{"all_reduce", 4, 2.0 * 3 / 4}, FactorCase{"reduce_scatter", 4, 3.0 / 4},
        FactorCase{"all_gather", 3, 2.0 / 3}, FactorCase{"broadcast", 3, 1.0}, FactorCase{"reduce", 2, 1.0}}) {
    const auto doc = runJson(
        fmt::format("perf {} --backend host -b 4K -e 16K -f 4 -g {} -n 2 -w 1 -r {}", c.collective, c.n, c.n - 1));
    EXPECT_EQ(doc["collective"], c.collective);
    EXPECT_EQ(doc["config"]["ranks"], c.n);
    EXPECT_TRUE(doc["environment"].contains("cpu"));
    ASSERT_EQ(doc["results"].size(), 2u) << c.collective;
    for (const auto& row : doc["results"]) {
      for (const char* half : {"out_of_place", "in_place"}) {
        const auto& h = row[half];
        const double algbw = h["algbw_GBps"].get<double>();
        const double busbw = h["busbw_GBps"].get<double>();
        const double us = h["time_us"].get<double>();
        EXPECT_GT(us, 0);
        EXPECT_NEAR(algbw, static_cast<double>(row["size"]) / (us * 1e-6) / 1e9, 1e-9 * algbw);
        EXPECT_NEAR(busbw, algbw * c.factor, 1e-12 * busbw) << c.collective;
        EXPECT_EQ(h["wrong"], 0);
      }
      const std::size_t size = row["size"];
      if (std::string(c.collective) == "all_gather" || std::string(c.collective) == "reduce_scatter") {
        // Per-rank counts rounded down to 16-byte multiples; size is the total over ranks.
        EXPECT_EQ(size % (16 * static_cast<std::size_t>(c.n)), 0u);
      }
    }
  }
}

TEST(PerfCli, ReduceScatterAlignsCounts) {
  // 4 KiB over 3 ranks: 1024 floats -> 341 per rank -> rounded down to 340 (16-byte multiple) -> 1020 total.
  const auto doc = runJson("perf reduce_scatter --backend host -b 4K -e 4K -g 3 -n 1 -w 0");
  EXPECT_EQ(doc["results"][0]["count"], 1020);
  EXPECT_EQ(doc["results"][0]["size"], 4080);
}

/// A host backend that damages one output element after every run: the checker must see exactly it.
class CorruptingBackend final : public Backend {
 public:
  explicit CorruptingBackend(int n) : inner_(host::makeThreadsBackend(n)) {}
  std::string_view name() const override { return "corrupting"; }
  int nranks() const override { return inner_->nranks(); }
  RunResult run(const Schedule& s, const Buffers& bufs, const RunOptions& opt) override {
    RunResult r = inner_->run(s, bufs, opt);
    if (s.spec.count > 3) static_cast<float*>(bufs[1].output)[3] += 1.0f;
    return r;
  }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(PerfCli, WrongResultIsCountedAndFailsTheRun) {
  registerBackend("corrupting", "test",
                  [](int n, const BackendOptions&) { return std::make_unique<CorruptingBackend>(n); });
  cli::PerfConfig c;
  c.backend = "corrupting";
  c.ranks = 2;
  c.minBytes = c.maxBytes = 4096;
  c.iters = 1;
  std::FILE* out = std::tmpfile();
  const int rc = cli::runPerf(c, out);
  std::rewind(out);
  std::string text;
  for (int ch; (ch = std::fgetc(out)) != EOF;) text += static_cast<char>(ch);
  std::fclose(out);
  EXPECT_EQ(rc, 1);
  const auto rows = tableRows(text);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][8], "1");
  EXPECT_EQ(rows[0][12], "1");
  EXPECT_NE(text.find("# Out of bounds values : 2 FAILED"), std::string::npos) << text;
}

struct BadFlag {
  const char* args;
  const char* message;
};

TEST(PerfCli, BadFlagsExitTwoWithOneLine) {
  for (const BadFlag& b : {
           BadFlag{"perf -b 2M -e 1M", "-b/--minbytes 2097152 is larger than -e/--maxbytes 1048576"},
           BadFlag{"perf -d bogus", "unknown datatype 'bogus'"},
           BadFlag{"perf -o bogus", "unknown op 'bogus'"},
           BadFlag{"perf bogus", "unknown collective 'bogus'"},
           BadFlag{"perf -f 0", "-f/--stepfactor must be at least 1 (1 = off: sizes step by -i), got 0"},
           BadFlag{"perf -f 0.5", "-f/--stepfactor must be at least 1 (1 = off: sizes step by -i), got 0.5"},
           BadFlag{"perf -g 0", "-g/--ngpus must be at least 1, got 0"},
           BadFlag{"perf --backend bogus", "unknown backend 'bogus'"},
           BadFlag{"perf -b 1Q", "invalid -b/--minbytes '1Q'"},
           BadFlag{"perf -a 7", "-a/--average must be 0..3, got 7"},
           BadFlag{"perf --algo nope -b 8 -e 8", "unknown algorithm 'nope' for all_reduce"},
           BadFlag{"perf -r 5 broadcast -g 2 -b 8 -e 8", "-r/--root 5 is not a rank of 2 (0..1)"},
           BadFlag{"perf -r -1 reduce -g 2 -b 8 -e 8", "-r/--root -1 is not a rank of 2 (0..1)"},
           BadFlag{"perf -n abc", "--iters = abc"},
           BadFlag{"perf --nccl-version 2.19.3 -b 8 -e 8",
                   "--nccl-version 2.19.3: the emulated NCCL release is for "
                   "--backend sim, not 'host'"},
           BadFlag{"perf --backend sim --nccl-version 2.19 -b 8 -e 8",
                   "--nccl-version: expected MAJOR.MINOR.PATCH, got '2.19'"},
       }) {
    const CliResult r = runCli(b.args);
    EXPECT_EQ(r.exitCode, 2) << b.args;
    EXPECT_EQ(testing::countLines(r.err), 1) << b.args << ": " << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("collbench: error: ", 0), 0u) << r.err;
  }
}

/// Flags that need the world, the backend or the -J path: rejected before the header, in one line.
TEST(PerfCli, EarlyValidationPrintsNothingButOneErrorLine) {
  const std::string nowhere = "/nonexistent-collbench-dir/run.json";
  std::vector<BadFlag> cases = {
      {"perf -b 8 -e 8 -J /nonexistent-collbench-dir/run.json",
       "-J/--output_file '/nonexistent-collbench-dir/run.json': directory '/nonexistent-collbench-dir' does not exist"},
      {"perf -b 8 -e 8 -g 2 --algo gloo_ring", "--algo gloo_ring is a peer library's own call"},
      {"perf -b 8 -e 8 -g 2 --algo nccl --backend host", "--algo nccl is a peer library's own call"},
      {"perf -b 8 -e 8 --algo mpi -d half", "--algo mpi: -d/--datatype half is not one the MPI driver reduces"},
      {"perf -b 8 -e 8 --algo mpi --backend gloo", "drop --backend gloo"},
      {"perf broadcast -b 8 -e 8 --algo mpi", "--algo mpi measures MPI_Allreduce only (all_reduce), not broadcast"},
      {"perf -b 8 -e 8 --algo mpi --channels 2", "--algo mpi: --topology, --channels and --chunk-bytes"},
      {"perf -b 8 -e 8 --algo mpi -J /nonexistent-collbench-dir/run.json", "-J/--output_file"},
      // Admission: requests larger than the machine are refused before anything is allocated or started.
      {"perf --backend host -g 2 -b 512G -e 512G",
       "-e/--maxbytes 512 GiB: all_reduce 512 GiB on 2 ranks needs 2 TiB of buffers in this process"},
      {"perf --backend host -g 100000 -b 1K -e 1K", "-g/--ngpus 100000: backend 'host' runs at most 4096 ranks"},
      {"perf -b 8 -e 8 -n 0", "-n/--iters must be >= 1, got 0"},
  };
#ifdef COLLBENCH_HAVE_GLOO
  cases.push_back({"perf -b 8 -e 8 -g 2 --algo gloo_ring",
                   "run it as: collbench launch -n N -- collbench perf --backend gloo --algo gloo_ring"});
  cases.push_back({"perf -b 8 -e 8 --backend gloo", "--backend gloo runs one rank per process and found no cluster"});
#endif
  ::unsetenv("TF_CONFIG");
  for (const BadFlag& b : cases) {
    const CliResult r = runCli(b.args);
    EXPECT_EQ(r.exitCode, 2) << b.args << ": " << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << b.args << ": " << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << b.args << ": output before the error";
  }
  EXPECT_FALSE(std::filesystem::exists(nowhere));
}

#ifdef COLLBENCH_HAVE_GLOO
TEST(PerfCli, GpusFlagMustMatchTheLaunchedWorld) {
  // A world of two processes as collbench launch describes it; the check comes before any rendezvous.
  ::setenv("TF_CONFIG", R"({"cluster":{"worker":["127.0.0.1:1","127.0.0.1:2"]},"task":{"type":"worker","index":1}})",
           1);
  const CliResult r = runCli("perf --backend gloo -g 3 -b 8 -e 8");
  ::unsetenv("TF_CONFIG");
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("-g/--ngpus 3 differs from the 2 processes launched"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}
#endif

TEST(PerfCli, JsonIntoAnUnwritableDirectoryFailsBeforeTheSweep) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  const auto dir = std::filesystem::temp_directory_path() / ("collbench_ro_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const CliResult r = runCli("perf -b 8 -e 8 -J " + (dir / "x.json").string());
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("cannot create files in"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(PerfCli, HeaderNamesTheAlgorithmOfEveryRow) {
  const auto path = tempFile("header");
  std::filesystem::remove(path);
  const CliResult r = runCli("perf --backend host -g 4 -b 8 -e 16M -f 64 -n 1 -w 0 -c 0 -J " + path.string());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const auto doc = nlohmann::json::parse(testing::slurp(path));
  std::filesystem::remove(path);
  std::set<std::string> chosen;
  for (const auto& row : doc["results"]) chosen.insert(row["algorithm"].get<std::string>());
  ASSERT_FALSE(chosen.empty());
  const std::string header = r.out.substr(0, r.out.find('\n'));
  if (chosen.size() == 1) {
    EXPECT_NE(header.find("algorithm " + *chosen.begin() + " (auto)"), std::string::npos) << header;
  } else {
    EXPECT_NE(header.find("algorithm auto ("), std::string::npos) << header;
    for (const auto& a : chosen) EXPECT_NE(header.find(a + " "), std::string::npos) << a << ": " << header;
  }
  EXPECT_EQ(doc["config"]["algorithm"], "auto");
  // Every rank of the threads backend is a thread of this one process.
  EXPECT_NE(r.out.find("device  3 [host] cpu thread"), std::string::npos) << r.out;
  const auto forced = runCli("perf --backend host -g 2 -b 8 -e 8 -n 1 --algo tree");
  EXPECT_NE(forced.out.find(", algorithm tree\n"), std::string::npos) << forced.out;
}

TEST(PerfCli, BackendsListsWhatThisBuildRuns) {
  const CliResult r = runCli("perf --backends");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const auto& [name, summary] : std::vector<std::pair<std::string, std::string>>{{"host", "CPU threads"}}) {
    EXPECT_NE(r.out.find("  " + name), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(summary), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("all_reduce     rabenseifner  "), std::string::npos) << r.out;
#ifdef COLLBENCH_HAVE_GLOO
  EXPECT_NE(r.out.find("native algorithms: gloo_ring, gloo_ring_chunked, gloo_halving_doubling, gloo_bcube"),
            std::string::npos)
      << r.out;
#endif
  EXPECT_NE(runCli("perf --help").out.find("--backends"), std::string::npos);
}

TEST(PerfCli, JsonEnvironmentNamesGpuDriverAndNcclOrNull) {
  const auto doc = runJson("perf --backend host -b 8 -e 8 -n 1");
  const auto& env = doc["environment"];
  for (const char* key : {"gpu", "driver", "nccl_version"}) {
    ASSERT_TRUE(env.contains(key)) << key;
    EXPECT_TRUE(env[key].is_null() || env[key].is_string()) << key << ": " << env[key];
  }
  // A build with the nccl backend knows NCCL's version without a GPU (ncclGetVersion needs no device).
  if (runCli("perf --backends").out.find("  nccl ") != std::string::npos) {
    ASSERT_TRUE(env["nccl_version"].is_string()) << env;
    const std::string version = env["nccl_version"].get<std::string>();
    EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2) << env;  // "2.28.9"
  }
  if (env["gpu"].is_string()) {
    EXPECT_GE(env["gpu_count"].get<int>(), 1) << env;
  }
}

TEST(PerfCli, RefusesToOverwriteJsonWithoutForce) {
  const auto path = tempFile("existing");
  { std::ofstream(path) << "precious"; }
  const CliResult r = runCli("perf --backend host -b 8 -e 8 -n 1 -J " + path.string());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("exists; pass --force"), std::string::npos) << r.err;
  EXPECT_EQ(testing::slurp(path), "precious");
  const CliResult forced = runCli("perf --backend host -b 8 -e 8 -n 1 --force -J " + path.string());
  EXPECT_EQ(forced.exitCode, 0) << forced.err;
  EXPECT_NE(testing::slurp(path).find("collbench-perf"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(PlanCli, DumpsAndValidates) {
  const CliResult r = runCli("plan all_reduce --algo rabenseifner -g 6 --bytes 4K --dump --in-place");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("algorithm: rabenseifner"), std::string::npos);
  EXPECT_NE(r.out.find("valid: yes (in place)"), std::string::npos);
  EXPECT_NE(r.out.find("rank 5 ("), std::string::npos);
}

TEST(TopoCli, BadTopologyFilesExitTwoWithOneLine) {
  const std::filesystem::path dir = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "tests/cli/topo_bad_inputs";
  int cases = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const CliResult r = runCli("topo check " + f.path().string());
    EXPECT_EQ(r.exitCode, 2) << f.path();
    EXPECT_EQ(testing::countLines(r.err), 1) << f.path() << ": " << r.err;
    EXPECT_NE(r.err.find(f.path().filename().string()), std::string::npos) << "message names the file: " << r.err;
    ++cases;
  }
  EXPECT_GE(cases, 6);
}

}  // namespace
}  // namespace collbench
