// Issue #11 as a user runs it: `collbench tune` (table with provenance, refusal to overwrite, NCCL tuner export that
// parses back to the table's choices), `plan --algo auto` explaining the choice, `perf --algo auto` following the
// table, COLLBENCH_ALGO forcing, `regret` on a held-out grid and `calibrate` recovering a known network from perf
// JSON. Small simulator sweeps only: the whole suite runs in seconds.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_runner.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "commands.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;
using testing::slurp;

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / fmt::format("tune_cli_{}_{}", ::getpid(), name);
}

/// One small table shared by the tests: dgx-h100-8x1 at 2 and 4 ranks, 1K, 8K, 64K.
class TuneCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    table_ = temp("table.json");
    std::filesystem::remove(table_);
    const CliResult r = runCli(fmt::format(
        "tune --backend sim --topology dgx-h100-8x1 -g 2,4 -b 1K -e 64K -f 8 --chunks 0,128K --channels 1,2 -o {}",
        table_.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  }
  static void TearDownTestSuite() { std::filesystem::remove(table_); }
  static std::filesystem::path table_;
};
std::filesystem::path TuneCli::table_;

TEST_F(TuneCli, TableCarriesProvenanceAndEveryPoint) {
  const auto doc = nlohmann::json::parse(slurp(table_));
  EXPECT_EQ(doc["format"], "collbench-tuning");
  const auto& p = doc["provenance"];
  EXPECT_EQ(p["backend"], "sim");
  EXPECT_EQ(p["topology"], "dgx-h100-8x1");
  EXPECT_EQ(p["topology_fingerprint"].get<std::string>().size(), 16u);
  EXPECT_NE(p["tool"].get<std::string>().find("collbench "), std::string::npos);
  EXPECT_NE(p["command_line"].get<std::string>().find("tune --backend sim"), std::string::npos);
  EXPECT_FALSE(p["host"].get<std::string>().empty());
  EXPECT_EQ(p["date"].get<std::string>().size(), 20u);  // 2026-01-01T00:00:00Z
  const TuningTable t = loadTuningTable(table_.string());
  ASSERT_EQ(t.sections.size(), 1u);
  EXPECT_EQ(t.sections[0].fingerprint, p["topology_fingerprint"]);
  EXPECT_EQ(t.sections[0].entries.size(), 6u);  // {2, 4} ranks x {1K, 8K, 64K}
  for (const TuningEntry& e : t.sections[0].entries) {
    EXPECT_GE(e.candidates.size(), 4u) << e.nranks << " " << e.bytes;
    for (std::size_t i = 1; i < e.candidates.size(); ++i) EXPECT_LE(e.candidates[i - 1].timeUs, e.candidates[i].timeUs);
  }
}

TEST_F(TuneCli, RefusesToOverwriteWithoutForce) {
  const std::string before = slurp(table_);
  const std::string cmd = fmt::format(
      "tune --backend sim --topology dgx-h100-8x1 -g 2 -b 1K -e 1K --chunks 0 --channels 1 -o {}", table_.string());
  const CliResult r = runCli(cmd);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("exists; pass --force"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(table_), before);
  const auto other = temp("forced.json");
  std::filesystem::copy_file(table_, other, std::filesystem::copy_options::overwrite_existing);
  const CliResult f = runCli(
      fmt::format("tune --backend sim --topology dgx-h100-8x1 -g 2 -b 1K -e 1K --chunks 0 --channels 1 -o {} --force",
                  other.string()));
  EXPECT_EQ(f.exitCode, 0) << f.err;
  EXPECT_EQ(loadTuningTable(other.string()).sections[0].entries.size(), 1u);
  std::filesystem::remove(other);
}

// --passes on the simulator: its times do not vary, so one pass is the table; a bad count is one error line, exit 2.
TEST_F(TuneCli, PassesOnTheSimulatorGiveTheOnePassTable) {
  const auto passes = temp("passes.json");
  std::filesystem::remove(passes);
  const CliResult r = runCli(
      fmt::format("tune --backend sim --topology dgx-h100-8x1 -g 2,4 -b 1K -e 64K -f 8 --chunks 0,128K --channels 1,2 "
                  "--passes 3 -o {}",
                  passes.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const TuningTable one = loadTuningTable(table_.string()), three = loadTuningTable(passes.string());
  ASSERT_EQ(three.sections.size(), 1u);
  ASSERT_EQ(three.sections[0].entries.size(), one.sections[0].entries.size());
  for (std::size_t i = 0; i < one.sections[0].entries.size(); ++i) {
    const auto &a = one.sections[0].entries[i].candidates, &b = three.sections[0].entries[i].candidates;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].algorithm, b[k].algorithm);
      EXPECT_DOUBLE_EQ(a[k].timeUs, b[k].timeUs);
    }
  }
  std::filesystem::remove(passes);
  const CliResult bad = runCli(fmt::format("tune --backend sim -g 2 --passes 0 -o {}", passes.string()));
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--passes must be >= 1, got 0"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(passes));
}

TEST_F(TuneCli, NcclTunerExportParsesBackToTheTableChoices) {
  const auto csv = temp("nccl_tuner.conf"), tbl = temp("nccl_table.json");
  std::filesystem::remove(csv);
  std::filesystem::remove(tbl);
  const CliResult r =
      runCli(fmt::format("tune --backend sim --topology dgx-h100-8x1 -g 8 -b 1K -e 16M -f 16 --nccl-channels 2,16 "
                         "--export nccl-tuner {} -o {}",
                         csv.string(), tbl.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  const std::string text = slurp(csv);
  EXPECT_NE(text.find("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"),
            std::string::npos);
  const std::vector<NcclTunerRule> rules = parseNcclTunerCsv(text, csv.string());
  ASSERT_FALSE(rules.empty());
  const TuningTable t = loadTuningTable(tbl.string());
  const TuningSection* s = t.find(t.provenance.topologyFingerprint, kLibraryNccl);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->entries.size(), 4u);  // 1K, 16K, 256K, 4M
  std::set<std::string> protocols;
  for (const TuningEntry& e : s->entries) {
    const TuningCandidate& best = e.candidates.front();
    const NcclTunerRule* rule = matchNcclTunerRule(rules, e.collective, e.bytes, e.nnodes, e.nranks);
    ASSERT_NE(rule, nullptr) << e.bytes;
    EXPECT_EQ(rule->algorithm, best.algorithm) << e.bytes;
    EXPECT_EQ(rule->protocol, best.protocol) << e.bytes;
    EXPECT_EQ(rule->channels, best.channels) << e.bytes;
    protocols.insert(best.protocol);
    for (const TuningCandidate& k : e.candidates) {
      // What NCCL offers on one NVLS node (no network: no CollNet; PAT is for one GPU per node).
      EXPECT_TRUE(k.algorithm == "ring" || k.algorithm == "tree" || k.algorithm == "nvls") << k.algorithm;
      EXPECT_TRUE(k.protocol == "ll" || k.protocol == "ll128" || k.protocol == "simple");
    }
  }
  // LL wins small all-reduces and NVLS Simple (NVSwitch reduction) large ones, as in NCCL on an H100 node.
  EXPECT_EQ(s->entries.front().candidates.front().protocol, "ll");
  EXPECT_EQ(s->entries.back().candidates.front().algorithm, "nvls");
  EXPECT_EQ(s->entries.back().candidates.front().protocol, "simple");
  // Every size maps to a rule (0 .. SIZE_MAX covered without gaps).
  for (std::size_t b : {std::size_t{0}, std::size_t{3000}, std::size_t{1} << 30}) {
    EXPECT_NE(matchNcclTunerRule(rules, Collective::AllReduce, b, 1, 8), nullptr) << b;
  }
  // --from re-exports an existing table, and refuses to overwrite the CSV without --force.
  const CliResult again = runCli(fmt::format("tune --from {} --export nccl-tuner {}", tbl.string(), csv.string()));
  EXPECT_NE(again.exitCode, 0);
  EXPECT_NE(again.err.find("exists; pass --force"), std::string::npos) << again.err;
  const CliResult forced =
      runCli(fmt::format("tune --from {} --export nccl-tuner {} --force", tbl.string(), csv.string()));
  EXPECT_EQ(forced.exitCode, 0) << forced.err;
  EXPECT_EQ(parseNcclTunerCsv(slurp(csv), csv.string()).size(), rules.size());
  std::filesystem::remove(csv);
  std::filesystem::remove(tbl);
}

TEST_F(TuneCli, PlanAutoExplainsTableRowModelAndRunnerUp) {
  const TuningTable t = loadTuningTable(table_.string());
  const TuningEntry* e = t.sections[0].find(Collective::AllReduce, 4, 8192);
  ASSERT_NE(e, nullptr);
  const CliResult at =
      runCli(fmt::format("plan all_reduce -g 4 --bytes 8K --topology dgx-h100-8x1 --tuning {}", table_.string()));
  ASSERT_EQ(at.exitCode, 0) << at.err;
  EXPECT_NE(at.out.find(fmt::format("choice: {} (table)", e->candidates.front().algorithm)), std::string::npos)
      << at.out;
  EXPECT_NE(at.out.find("fastest measured at n=4"), std::string::npos) << at.out;
  // The runner-up is the fastest other algorithm (the table also holds other configurations of the chosen one).
  const auto other = std::find_if(e->candidates.begin(), e->candidates.end(), [&](const TuningCandidate& c) {
    return c.algorithm != e->candidates.front().algorithm;
  });
  ASSERT_NE(other, e->candidates.end());
  EXPECT_NE(at.out.find("runner-up: " + other->algorithm), std::string::npos) << at.out;
  // Between table points: interpolated, and the reason names the enclosing points.
  const CliResult mid =
      runCli(fmt::format("plan all_reduce -g 3 --bytes 24K --topology dgx-h100-8x1 --tuning {}", table_.string()));
  ASSERT_EQ(mid.exitCode, 0) << mid.err;
  EXPECT_NE(mid.out.find("(interpolated)"), std::string::npos) << mid.out;
  EXPECT_NE(mid.out.find("n=2..4"), std::string::npos) << mid.out;
  EXPECT_NE(at.out.find(fmt::format("tuning table: {} (--tuning)", table_.string())), std::string::npos) << at.out;
  // No table (pcie-4gpu ships none): the cost model, with its estimate and runner-up.
  const CliResult model = runCli("plan all_reduce -g 4 --bytes 8K --topology pcie-4gpu");
  ASSERT_EQ(model.exitCode, 0) << model.err;
  EXPECT_NE(model.out.find("(model)"), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("cost model on topology pcie-4gpu"), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("runner-up:"), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("tuning table: none (no shipped table for topology pcie-4gpu)"), std::string::npos)
      << model.out;
}

TEST_F(TuneCli, AutoFindsTheShippedTableUnlessItIsStale) {
  const std::string shipped =
      (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "reports" / "tuning" / "dgx-h100-8x1.sim.json").string();
  const CliResult found = runCli("plan all_reduce -g 8 --bytes 1M --topology dgx-h100-8x1");
  ASSERT_EQ(found.exitCode, 0) << found.err;
  EXPECT_NE(found.out.find(fmt::format("tuning table: {} (shipped table for dgx-h100-8x1)", shipped)),
            std::string::npos)
      << found.out;
  EXPECT_NE(found.out.find("choice: "), std::string::npos);
  EXPECT_NE(found.out.find(" (table)"), std::string::npos) << found.out;  // 8 ranks, 1 MiB: a table point
  // COLLBENCH_TUNING_FILE comes before the shipped table.
  ::setenv("COLLBENCH_TUNING_FILE", table_.c_str(), 1);
  const CliResult env = runCli("plan all_reduce -g 4 --bytes 8K --topology dgx-h100-8x1");
  ::unsetenv("COLLBENCH_TUNING_FILE");
  EXPECT_NE(env.out.find(fmt::format("tuning table: {} (COLLBENCH_TUNING_FILE)", table_.string())), std::string::npos)
      << env.out;
  // A table on COLLBENCH_TUNING_PATH measured on another version of the topology (other fingerprint) is skipped.
  const auto dir = temp("tuning_path");
  std::filesystem::create_directories(dir);
  {
    TuningTable stale = loadTuningTable(table_.string());
    for (TuningSection& sec : stale.sections) sec.fingerprint = "0000000000000000";
    std::ofstream(dir / "dgx-h100-8x1.sim.json") << toJson(stale);
  }
  ::setenv("COLLBENCH_TUNING_PATH", dir.c_str(), 1);
  const CliResult skipped = runCli("plan all_reduce -g 8 --bytes 1M --topology dgx-h100-8x1");
  const CliResult none = runCli("plan all_reduce -g 4 --bytes 8K --topology pcie-4gpu");
  ::unsetenv("COLLBENCH_TUNING_PATH");
  EXPECT_NE(skipped.out.find(fmt::format("tuning table: {} (shipped", shipped)), std::string::npos) << skipped.out;
  std::filesystem::copy_file(dir / "dgx-h100-8x1.sim.json", dir / "pcie-4gpu.sim.json");
  ::setenv("COLLBENCH_TUNING_PATH", dir.c_str(), 1);
  const CliResult staleOnly = runCli("plan all_reduce -g 4 --bytes 8K --topology pcie-4gpu");
  ::unsetenv("COLLBENCH_TUNING_PATH");
  EXPECT_NE(staleOnly.out.find("has no section for fingerprint"), std::string::npos) << staleOnly.out;
  EXPECT_NE(staleOnly.out.find("(model)"), std::string::npos) << staleOnly.out;
  std::filesystem::remove_all(dir);
}

/// The committed tables (reports/tuning/) describe the current topology files, simulator and algorithms: their
/// fingerprints match the topologies, a few points re-simulated give the times they hold, and the NCCL tuner file is
/// the export of its table. A failure means a table is stale: rerun the command line in its provenance.
TEST(ShippedTuningTables, MatchTheCurrentTopologiesAndSimulator) {
  const std::filesystem::path dir = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "reports" / "tuning";
  int checked = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".json" || f.path().filename().string().find("regret") != std::string::npos) continue;
    const std::string name = f.path().filename().string();
    const TuningTable t = loadTuningTable(f.path().string());
    const std::string regenerate = "stale: regenerate with `" + t.provenance.commandLine + "`";
    for (const TuningSection& sec : t.sections) {
      if (sec.topology.empty()) continue;  // measured without a topology (host backends): nothing to compare
      EXPECT_EQ(sec.fingerprint, fingerprint(loadTopology(sec.topology))) << name << " " << regenerate;
      if (sec.backend != "sim" || sec.library != kLibraryCollbench) continue;
      // Re-simulate, at the largest rank count and the first one spread over several hosts (if any), the sizes
      // nearest 4 KiB and 64 MiB: every configuration's time must be the table's.
      std::set<int> ranks;
      int multiHost = 0, largest = 0;
      for (const TuningEntry& e : sec.entries) {
        largest = std::max(largest, e.nranks);
        if (e.nnodes > 1 && e.nnodes < e.nranks && (multiHost == 0 || e.nranks < multiHost)) multiHost = e.nranks;
      }
      ranks.insert(largest);
      if (multiHost) ranks.insert(multiHost);
      for (int n : ranks) {
        for (std::size_t want : {std::size_t{4096}, std::size_t{64} << 20}) {
          const TuningEntry* e = nullptr;
          for (const TuningEntry& x : sec.entries) {
            if (x.nranks != n || x.collective != Collective::AllReduce) continue;
            auto dist = [&](std::size_t b) {
              return std::abs(std::log(static_cast<double>(b) / static_cast<double>(want)));
            };
            if (!e || dist(x.bytes) < dist(e->bytes)) e = &x;
          }
          ASSERT_NE(e, nullptr) << name << " n=" << n;
          std::set<std::size_t> chunks;
          std::set<int> channels;
          for (const TuningCandidate& k : e->candidates) {
            chunks.insert(k.chunkBytes);
            channels.insert(k.channels);
          }
          const auto out = temp("resim.json");
          std::filesystem::remove(out);
          const CliResult r = runCli(fmt::format(
              "tune --backend sim --topology {} -g {} -b {} -e {} --chunks {} "
              "--channels {} -o {}",
              sec.topology, n, e->bytes, e->bytes, fmt::join(chunks, ","), fmt::join(channels, ","), out.string()));
          ASSERT_EQ(r.exitCode, 0) << r.err;
          const TuningTable now = loadTuningTable(out.string());
          std::filesystem::remove(out);
          const TuningEntry* fresh = now.sections.at(0).find(Collective::AllReduce, n, e->bytes);
          ASSERT_NE(fresh, nullptr);
          for (const TuningCandidate& k : e->candidates) {
            bool found = false;
            for (const TuningCandidate& x : fresh->candidates) {
              if (x.algorithm != k.algorithm || x.chunkBytes != k.chunkBytes || x.channels != k.channels) continue;
              found = true;
              EXPECT_NEAR(x.timeUs, k.timeUs, 1e-6 * k.timeUs)
                  << name << " n=" << n << " " << e->bytes << " B " << k.algorithm << " chunk " << k.chunkBytes << " x"
                  << k.channels << ": " << regenerate;
            }
            EXPECT_TRUE(found) << name << ": " << k.algorithm << " chunk " << k.chunkBytes << " x" << k.channels
                               << " is no longer swept: " << regenerate;
          }
          ++checked;
        }
      }
    }
    // An NCCL tuner file next to a table with NCCL sections is that table's export.
    if (t.find(t.provenance.topologyFingerprint, kLibraryNccl)) {
      std::string conf = f.path().string();
      conf.replace(conf.find(".nccl.sim.json"), std::string(".nccl.sim.json").size(), ".nccl-tuner.conf");
      ASSERT_TRUE(std::filesystem::exists(conf)) << conf;
      const std::vector<NcclTunerRule> shipped = parseNcclTunerCsv(slurp(conf), conf);
      const std::vector<NcclTunerRule> derived = ncclTunerRules(t);
      ASSERT_EQ(shipped.size(), derived.size()) << conf << " is not the export of " << name << ": " << regenerate;
      for (std::size_t i = 0; i < shipped.size(); ++i) {
        EXPECT_EQ(shipped[i].algorithm, derived[i].algorithm) << conf << " line " << i;
        EXPECT_EQ(shipped[i].protocol, derived[i].protocol) << conf << " line " << i;
        EXPECT_EQ(shipped[i].channels, derived[i].channels) << conf << " line " << i;
        EXPECT_EQ(shipped[i].minBytes, derived[i].minBytes) << conf << " line " << i;
        EXPECT_EQ(shipped[i].maxBytes, derived[i].maxBytes) << conf << " line " << i;
      }
    }
  }
  EXPECT_GE(checked, 6);  // dgx-h100-8x1 (n=8) and h100-4x8-rail (n=32, n=9) at two sizes each
}

TEST_F(TuneCli, ForcedByEnvironmentOrFlag) {
  ::setenv("COLLBENCH_ALGO", "all_reduce:direct", 1);
  const CliResult env =
      runCli(fmt::format("plan all_reduce -g 4 --bytes 8K --topology dgx-h100-8x1 --tuning {}", table_.string()));
  ::unsetenv("COLLBENCH_ALGO");
  ASSERT_EQ(env.exitCode, 0) << env.err;
  EXPECT_NE(env.out.find("algorithm: direct (forced by COLLBENCH_ALGO=all_reduce:direct"), std::string::npos)
      << env.out;
  const CliResult flag = runCli("plan all_reduce -g 4 --bytes 8K --algo ring");
  ASSERT_EQ(flag.exitCode, 0) << flag.err;
  EXPECT_NE(flag.out.find("algorithm: ring (forced by --algo)"), std::string::npos) << flag.out;
  ::setenv("COLLBENCH_ALGO", "no_such_algorithm", 1);
  const CliResult bad = runCli("plan all_reduce -g 4 --bytes 8K");
  ::unsetenv("COLLBENCH_ALGO");
  EXPECT_NE(bad.exitCode, 0);
  EXPECT_NE(bad.err.find("no_such_algorithm"), std::string::npos) << bad.err;
}

TEST_F(TuneCli, PerfAutoRunsTheTableChoice) {
  const auto out = temp("perf.json");
  std::filesystem::remove(out);
  const CliResult r = runCli(fmt::format(
      "perf all_reduce --backend sim --topology dgx-h100-8x1 -g 4 -b 1K -e 64K -f 8 --algo auto --tuning {} -J {}",
      table_.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const auto doc = nlohmann::json::parse(slurp(out));
  std::filesystem::remove(out);
  const TuningTable t = loadTuningTable(table_.string());
  ASSERT_EQ(doc["results"].size(), 3u);
  for (const auto& row : doc["results"]) {
    const TuningEntry* e = t.sections[0].find(Collective::AllReduce, 4, row["size"].get<std::size_t>());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(row["algorithm"], e->candidates.front().algorithm) << row.dump();
    EXPECT_EQ(row["chunk_bytes"], e->candidates.front().chunkBytes) << row.dump();
    EXPECT_EQ(row["channels"], e->candidates.front().channels) << row.dump();
    EXPECT_NE(row["algorithm_reason"].get<std::string>().find("fastest measured"), std::string::npos);
    // The simulator is deterministic: the run takes the time the table measured.
    EXPECT_NEAR(row["out_of_place"]["time_us"].get<double>(), e->candidates.front().timeUs,
                1e-6 * e->candidates.front().timeUs);
  }
}

TEST_F(TuneCli, RegretOnHeldOutRanksAndSizes) {
  const auto out = temp("regret.json");
  std::filesystem::remove(out);
  const CliResult r = runCli(
      fmt::format("regret --backend sim --topology dgx-h100-8x1 --tuning {} --chunks 0,128K --channels 1,2 -J {}",
                  table_.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("# points 2  worst"), std::string::npos) << r.out;  // n=3 x {2896, 23168} (midpoints)
  const auto doc = nlohmann::json::parse(slurp(out));
  std::filesystem::remove(out);
  EXPECT_EQ(doc["format"], "collbench-regret");
  ASSERT_EQ(doc["rows"].size(), 2u);
  double worst = 1;
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["nranks"], 3);
    EXPECT_GE(row["regret"].get<double>(), 1.0);
    EXPECT_NEAR(row["regret"].get<double>(),
                row["chosen"]["time_us"].get<double>() / row["best"]["time_us"].get<double>(), 1e-9);
    EXPECT_NE(row["chosen"]["source"], "table");
    worst = std::max(worst, row["regret"].get<double>());
  }
  EXPECT_DOUBLE_EQ(doc["summary"]["worst"].get<double>(), worst);
  EXPECT_LE(worst, 1.10);
  // --max-worst turns a bound into the exit code.
  const CliResult gate =
      runCli(fmt::format("regret --backend sim --topology dgx-h100-8x1 --tuning {} -g 3 -b 3K -e 3K "
                         "--max-worst 0.5",
                         table_.string()));
  EXPECT_EQ(gate.exitCode, 1) << gate.err;
}

// On hardware the sweep's best is re-timed against the chosen: the row reports that run and keeps the sweep's.
TEST(RegretCli, HostRowsReportTheConfirmationAndTheSweep) {
  const auto table = temp("host_table.json"), out = temp("host_regret.json");
  std::filesystem::remove(table);
  std::filesystem::remove(out);
  const CliResult tune = runCli(
      fmt::format("tune --backend host -g 2 -b 4K -e 64K -f 16 --chunks 0 --channels 1,2 --repeats 2 --passes 2 -o {}",
                  table.string()));
  ASSERT_EQ(tune.exitCode, 0) << tune.err;
  const CliResult r =
      runCli(fmt::format("regret --backend host --tuning {} -g 2 --chunks 0 --channels 1,2 "
                         "--repeats 2 -J {}",
                         table.string(), out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("sweep_regret"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("timed again together"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(slurp(out));
  ASSERT_EQ(doc["rows"].size(), 1u);  // 16 KiB, between the table's two sizes
  const auto& row = doc["rows"][0];
  EXPECT_EQ(row["bytes"], 16384);
  const double chosen = row["chosen"]["time_us"], best = row["best"]["time_us"];
  const double sweepChosen = row["sweep"]["chosen_us"], sweepBest = row["sweep"]["best_us"];
  EXPECT_GT(best, 0);
  EXPECT_LE(best, chosen);
  EXPECT_LE(sweepBest, sweepChosen);
  EXPECT_NEAR(row["regret"].get<double>(), chosen / best, 1e-9);
  EXPECT_NEAR(row["sweep"]["regret"].get<double>(), sweepChosen / sweepBest, 1e-9);
  // The table's choice alone, before perf's trial, is reported beside it and timed in the same runs.
  const double tableUs = row["table_choice"]["time_us"];
  EXPECT_LE(best, tableUs);
  EXPECT_NEAR(row["table_regret"].get<double>(), tableUs / best, 1e-9);
  EXPECT_GE(doc["summary"]["table_worst"].get<double>(), 1.0);
  EXPECT_NE(r.out.find("# the table's choices alone: worst "), std::string::npos) << r.out;
  // Without a confirmation (the sweep's best was the chosen and the table's choice) the sweep's times stand.
  if (sweepChosen == sweepBest && row["sweep"]["table_us"].get<double>() == sweepBest) {
    EXPECT_DOUBLE_EQ(chosen, sweepChosen);
  }
  std::filesystem::remove(table);
  std::filesystem::remove(out);
}

/// A host table at 2 ranks, 4 KiB and 64 KiB: direct fastest, tree `treeFactor` x slower, recursive doubling 5x.
std::filesystem::path hostTable(const std::string& name, double treeFactor) {
  TuningTable t;
  TuningSection s;
  s.backend = "host";
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{65536}}) {
    const double us = 2.0 * static_cast<double>(bytes) / 4096;
    s.entries.push_back(
        {Collective::AllReduce,
         2,
         1,
         bytes,
         {{"direct", "", 0, 1, us}, {"tree", "", 0, 1, treeFactor * us}, {"recursive_doubling", "", 0, 1, 5 * us}}});
  }
  t.sections.push_back(s);
  auto path = temp(name);
  std::ofstream(path) << toJson(t);
  return path;
}

// perf --algo auto on a backend that moves data times the table's choice against algorithms predicted within 2x
// (kTrialSpread) and runs the fastest; a runner-up further off is not tried.
TEST(TrialCli, PerfAutoTriesNearTiedAlgorithmsOnHardware) {
  for (const double treeFactor : {1.2, 3.0}) {
    const auto table = hostTable("host_near_ties.json", treeFactor), out = temp("near_ties_perf.json");
    std::filesystem::remove(out);
    const CliResult r = runCli(fmt::format(
        "perf --backend host -g 2 -b 4K -e 64K -f 4 -n 2 --algo auto --tuning {} -J {}", table.string(), out.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
    const auto doc = nlohmann::json::parse(slurp(out));
    ASSERT_EQ(doc["results"].size(), 3u);  // 4K, 16K (between the table's sizes), 64K
    for (const auto& row : doc["results"]) {
      const std::string reason = row["algorithm_reason"];
      EXPECT_EQ(row["out_of_place"]["wrong"], 0) << row.dump();
      if (treeFactor < kTrialSpread) {
        EXPECT_NE(reason.find("trial of 2 near-tied candidates on this machine: "), std::string::npos) << reason;
        EXPECT_NE(reason.find("the table's choice was direct"), std::string::npos) << reason;
        EXPECT_TRUE(row["algorithm"] == "direct" || row["algorithm"] == "tree") << row.dump();
        EXPECT_EQ(reason.find("recursive_doubling"), std::string::npos) << reason;  // 5x: not tried
      } else {
        EXPECT_EQ(reason.find("near-tied"), std::string::npos) << reason;
        EXPECT_EQ(row["algorithm"], "direct") << reason;
      }
    }
    // plan names what perf will try.
    const CliResult plan = runCli(fmt::format("plan -g 2 --bytes 16K --backend host --tuning {}", table.string()));
    ASSERT_EQ(plan.exitCode, 0) << plan.err;
    EXPECT_EQ(plan.out.find("perf first times direct, tree (within 2x)") != std::string::npos,
              treeFactor < kTrialSpread)
        << plan.out;
    std::filesystem::remove(table);
    std::filesystem::remove(out);
  }
}

// A time budget cuts the rounds where all of them would take long: every round lasts a millisecond at least, so 2000
// rounds would take 2 s or more; a 20 ms budget leaves a few dozen (kMinBudgetRounds at least).
TEST(RunnerBudget, StopsTheRoundsAtTheBudget) {
  cli::registerLinkedBackends();
  OwnedRunner timer("host", 2, {}, RunnerOptions{});
  const CollectiveSpec spec{Collective::AllReduce, 2, (1u << 20) / 4, DType::F32};
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> us =
      timer.runner->times(spec, {Plan{Choice{"ring", ""}, AlgoParams{}}, Plan{Choice{"direct", ""}, AlgoParams{}}},
                          MeasureOptions{1, 0, 1, 30}, 2000, 0.02);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.5);
  ASSERT_EQ(us.size(), 2u);
  EXPECT_GT(us[0], 0);
  EXPECT_GT(us[1], 0);
}

TEST(CalibrateCli, RecoversASimulatedNetworkFromPerfJson) {
  // A known two-class network: 2 hosts x 2 ranks, intra 3 us / 20 GB/s, inter 8 us / 5 GB/s, reductions 40 GB/s.
  const auto topo = temp("truth.json");
  {
    std::ofstream f(topo);
    f << R"({"format": "collbench-topology", "version": 1, "name": "truth", "description": "test",
             "generator": "multi_node", "params": {"nodes": 2, "gpus_per_node": 2}})";
  }
  std::vector<std::string> inputs;
  for (const char* algo : {"ring", "recursive_doubling"}) {
    const auto out = temp(std::string("perf_") + algo + ".json");
    std::filesystem::remove(out);
    const CliResult r =
        runCli(fmt::format("perf all_reduce --backend sim --topology {} -g 4 -b 1K -e 16M -f 4 --algo {} "
                           "-n 1 -w 0 -J {}",
                           topo.string(), algo, out.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    inputs.push_back(out.string());
  }
  const auto cal = temp("calibrated.json"), fit = temp("fit.json");
  std::filesystem::remove(cal);
  std::filesystem::remove(fit);
  const CliResult r =
      runCli(fmt::format("calibrate {} {} -o {} -J {} --verify-sim", inputs[0], inputs[1], cal.string(), fit.string()));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("# model held-out: median"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# calibrated simulator held-out: median"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(slurp(fit));
  EXPECT_GT(doc["held_out"]["count"].get<int>(), 4);
  EXPECT_LT(doc["held_out"]["median"].get<double>(), 0.10) << r.out;
  for (const auto& s : doc["samples"]) {
    if (!s["held_out"].get<bool>()) continue;
    EXPECT_NEAR(s["sim_us"].get<double>(), s["measured_us"].get<double>(), 0.10 * s["measured_us"].get<double>())
        << s.dump();
  }
  // The written topology loads and refuses to be overwritten.
  const CliResult again = runCli(fmt::format("calibrate {} -o {}", inputs[0], cal.string()));
  EXPECT_NE(again.exitCode, 0);
  EXPECT_NE(again.err.find("exists; pass --force"), std::string::npos) << again.err;
  const auto other = temp("other.json");
  std::filesystem::remove(other);
  for (const char* bad : {"0", "two", "2x"}) {
    const CliResult r2 = runCli(fmt::format("calibrate {} -o {} --memory-tiers {}", inputs[0], other.string(), bad));
    EXPECT_EQ(r2.exitCode, 2) << bad;
    EXPECT_NE(r2.err.find(fmt::format("--memory-tiers: '{}' is not auto or a number >= 1", bad)), std::string::npos)
        << r2.err;
  }
  EXPECT_FALSE(std::filesystem::exists(other));
  const CliResult show = runCli(fmt::format("topo check {}", cal.string()));
  EXPECT_EQ(show.exitCode, 0) << show.err << show.out;
  for (const auto& p : {topo, cal, fit}) std::filesystem::remove(p);
  for (const auto& p : inputs) std::filesystem::remove(p);
}

TEST(CalibrateCli, ThisVmsShippedRunsPredictHeldOutSizesWithinTenPercent) {
  // Measured on this project's 2-vCPU VM (reports/calibration/README.md): the host backend (8 runs of a 1.41x sweep,
  // recursive doubling, robust loss) and Gloo over loopback (6 runs of a 2x sweep). The calibrated simulator, memory
  // tiers and all, predicts the sizes the fit did not see within 10% median error.
  const std::string runs = std::string(COLLBENCH_SOURCE_DIR) + "/reports/calibration/runs/";
  struct Case {
    std::string prefix;
    int files;
    std::size_t tiers;
  };
  for (const Case& c : {Case{"host-rd-", 8, 3}, Case{"gloo-", 6, 0}}) {
    std::string inputs;
    for (int k = 1; k <= c.files; ++k) inputs += fmt::format(" {}{}{}.json", runs, c.prefix, k);
    const auto cal = temp(c.prefix + "cal.json"), fit = temp(c.prefix + "fit.json");
    std::filesystem::remove(cal);
    std::filesystem::remove(fit);
    const CliResult r =
        runCli(fmt::format("calibrate{} --loss l1 -o {} -J {} --verify-sim", inputs, cal.string(), fit.string()));
    ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
    const auto doc = nlohmann::json::parse(slurp(fit));
    EXPECT_GE(doc["held_out"]["count"].get<int>(), 8) << c.prefix;
    EXPECT_LE(doc["held_out"]["median"].get<double>(), 0.10) << r.out;
    EXPECT_LE(doc["sim_held_out"]["median"].get<double>(), 0.10) << r.out;
    EXPECT_EQ(doc["params"]["memory_tiers"].size(), c.tiers) << r.out;
    EXPECT_EQ(loadTopology(cal.string()).memoryTiers.size(), c.tiers);
    std::filesystem::remove(cal);
    std::filesystem::remove(fit);
  }
}

}  // namespace
}  // namespace collbench
