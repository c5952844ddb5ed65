// Every record the CLI writes (records.h) validates against its schema under docs/ and reads back through its reader,
// as docs/trace.schema.json is checked in test_replay_cli.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.h"
#include "collbench/nccl_calibration.h"
#include "collbench/records.h"

namespace collbench {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::runCli;
using testing::slurp;

class RecordsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("collbench_records_cli_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Runs `args`, which must succeed.
  void run(const std::string& args) const {
    const CliResult r = runCli(args);
    ASSERT_EQ(r.exitCode, 0) << args << "\n" << r.err;
  }

  /// 0 when `doc` validates against docs/<schema>.schema.json (Python's jsonschema, draft 2020-12), -1 when no
  /// validator is installed.
  static int validate(const std::string& schema, const std::string& doc) {
    if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) return -1;
    const std::string file = (fs::path(COLLBENCH_SOURCE_DIR) / "docs" / (schema + ".schema.json")).string();
    const std::string cmd = fmt::format(
        "python3 -c \"import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
        "jsonschema.Draft202012Validator.check_schema(s); "
        "errs = list(jsonschema.Draft202012Validator(s).iter_errors(json.load(open(sys.argv[2])))); "
        "[print(list(e.path), e.message, file=sys.stderr) for e in errs[:3]]; "
        "sys.exit(1 if errs else 0)\" {} {}",
        file, doc);
    return std::system(cmd.c_str()) == 0 ? 0 : 1;
  }

  fs::path dir_;
};

TEST_F(RecordsCli, ToolOutputsValidateAndReadBack) {
  const std::string source(COLLBENCH_SOURCE_DIR);
  const std::string perf = path("perf.json"), sim = path("sim.json"), sweep = path("sweep.json");
  const std::string regret = path("regret.json"), fit = path("fit.json"), trace = path("trace.json");
  const std::string replay = path("replay.json");
  run(fmt::format("perf all_reduce --backend sim --topology dgx-h100-8x1 -g 4 -b 1K -e 64K -f 4 -n 1 -w 0 -J {}",
                  perf));
  const CliResult s = runCli("sim --bytes 1M -g 4 --json");
  ASSERT_EQ(s.exitCode, 0) << s.err;
  std::ofstream(sim) << s.out;
  run(fmt::format("sweep --sizes 1K,1M --json {}", sweep));
  run(
      fmt::format("regret --backend sim --topology dgx-h100-8x1 --tuning {}/reports/tuning/dgx-h100-8x1.sim.json -g 3 "
                  "-b 3K -e 3K -J {}",
                  source, regret));
  run(
      fmt::format("calibrate {0}/reports/calibration/runs/host-ring-1.json {0}/reports/calibration/runs/host-rd-1.json "
                  "-o {1} -J {2}",
                  source, path("calibrated.json"), fit));
  const std::string ncal = path("nccl-calibration.json");
  run(fmt::format(
      "calibrate {}/tests/data/realdata/h100x8-nvls-dgxcbench.csv --model nccl --topology dgx-h100-ib400 -o {}", source,
      ncal));
  run(fmt::format("workload --model gpt2-xl --dtype half --bytes-per-pack 64M --steps 2 -o {}", trace));
  run(fmt::format("replay {} --backend sim -J {}", trace, replay));

  // Each reader takes what its writer wrote.
  const PerfRun p = readPerfRun(perf);
  EXPECT_EQ(p.backend, "sim");
  EXPECT_EQ(p.ranks, 4);
  EXPECT_EQ(p.rows.size(), 4u);  // 1K, 4K, 16K, 64K
  EXPECT_EQ(p.rows[3].size, 65536u);
  const SimRecord sr = parseSimRecord(slurp(sim), sim);
  EXPECT_EQ(sr.bytes, 1u << 20);
  EXPECT_GT(sr.timeUs, 0);
  const SweepRecord sw = parseSweepRecord(slurp(sweep), sweep);
  EXPECT_FALSE(sw.rows.empty());
  const RegretRecord rg = parseRegretRecord(slurp(regret), regret);
  ASSERT_EQ(rg.rows.size(), 1u);
  EXPECT_EQ(rg.rows[0].bytes, 3072u);
  EXPECT_GE(rg.rows[0].regret(), 1.0);
  const CalibrationRecord c = parseCalibrationRecord(slurp(fit), fit);
  EXPECT_FALSE(c.samples.empty());
  EXPECT_EQ(c.topologyFile, path("calibrated.json"));
  const NcclCalibration nc = readNcclCalibration(ncal);
  EXPECT_EQ(nc.arch, GpuArch::Hopper);
  EXPECT_EQ(nc.rows.size(), 32u);
  const ReplayRun rp = parseReplayRun(slurp(replay), replay);
  EXPECT_EQ(rp.worldSize, 8);
  EXPECT_EQ(rp.events.size(), 74u);  // 37 packs x 2 steps

  for (const auto& [schema, doc] : {std::pair{"perf", perf},
                                    {"sim", sim},
                                    {"sweep", sweep},
                                    {"regret", regret},
                                    {"calibration", fit},
                                    {"calibration-nccl", ncal},
                                    {"replay", replay}}) {
    const int v = validate(schema, doc);
    if (v < 0) GTEST_SKIP() << "python3 with jsonschema is not installed (apt-get install python3-jsonschema)";
    EXPECT_EQ(v, 0) << schema << ": " << doc;
  }
  // A broken document does not validate.
  std::ofstream(path("bad.json")) << R"({"format": "collbench-perf", "version": 1, "collective": "all_reduce",
    "config": {"backend": "sim", "ranks": 0, "datatype": "float", "op": "sum"}, "results": []})";
  EXPECT_EQ(validate("perf", path("bad.json")), 1);
}

// The shipped tuning tables are what the tuning schema describes.
TEST_F(RecordsCli, ShippedTuningTablesValidate) {
  int tables = 0;
  for (const auto& e : fs::directory_iterator(fs::path(COLLBENCH_SOURCE_DIR) / "reports" / "tuning")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json" || name.find(".regret.") != std::string::npos) continue;
    const int v = validate("tuning", e.path().string());
    if (v < 0) GTEST_SKIP() << "python3 with jsonschema is not installed";
    EXPECT_EQ(v, 0) << name;
    ++tables;
  }
  EXPECT_GE(tables, 4);
}

// Every command that writes a file refuses to overwrite one without --force, naming its flag.
TEST_F(RecordsCli, ExistingOutputsNeedForce) {
  const std::string existing = path("existing.json");
  std::ofstream(existing) << "{}\n";
  for (const auto& [args, flag] :
       {std::pair<std::string, std::string>{"perf --backend sim -g 2 -b 1K -e 1K -J {}", "-J/--output_file"},
        {"sim --bytes 1K -g 2 --timeline {}", "--timeline"},
        {"sweep --sizes 1K --json {}", "--json"},
        {"regret --backend sim --topology dgx-h100-8x1 -g 3 -b 3K -e 3K -J {}", "-J/--output_file"},
        {"workload --model gpt2-xl -o {}", "-o/--output"},
        {"topo gen ring --param n=4 -o {}", "-o/--output"}}) {
    const std::string cmd = fmt::format(fmt::runtime(args), existing);
    const CliResult r = runCli(cmd);
    EXPECT_EQ(r.exitCode, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find(fmt::format("{} '{}' exists; pass --force to overwrite it", flag, existing)),
              std::string::npos)
        << cmd << "\n"
        << r.err;
  }
  EXPECT_EQ(slurp(existing), "{}\n");
}

}  // namespace
}  // namespace collbench
