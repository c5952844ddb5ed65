// `--schedule FILE` and `--schedule-out FILE` as users run them: plan writes what it generated and reads it back, the
// hand-written example (examples/schedules/bidir-ring-4.json) runs with no wrong element on host threads and gloo
// processes and simulates in the time of the equivalent generated schedule, and bad files or flags exit 2 with one
// line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"

namespace collbench {
namespace {

using nlohmann::json;
using testing::CliResult;
using testing::runCli;
using testing::tableRows;

const std::string kExample =
    (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "examples" / "schedules" / "bidir-ring-4.json").string();

std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".json");
}

std::filesystem::path writeTemp(const std::string& name, const std::string& text) {
  const auto p = temp(name);
  std::ofstream(p) << text;
  return p;
}

/// The example with one textual replacement (the first occurrence of `from`).
std::string mutated(const std::string& from, const std::string& to) {
  std::string text = testing::slurp(kExample);
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

/// The op listing of `plan --dump` (from its "# schedule" line).
std::string dumpPart(const std::string& out) {
  const auto at = out.find("# schedule ");
  return at == std::string::npos ? "" : out.substr(at);
}

/// `collbench ARGS` exits 2 before any output with the one line "collbench: error: MESSAGE".
void expectRefused(const std::string& args, const std::string& message) {
  const CliResult r = runCli(args);
  EXPECT_EQ(r.exitCode, 2) << args;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err, "collbench: error: " + message + "\n") << args;
}

/// What rank 0 printed under `collbench launch` (its "[rank 0] " prefix removed); other ranks print no table.
std::string rankZeroLines(const std::string& out) {
  std::istringstream in(out);
  std::string table;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[rank 0] ", 0) == 0) table += line.substr(9) + "\n";
  }
  return table;
}

/// Every data row has 0 wrong elements in both halves; returns the row count.
std::size_t expectNoWrong(const std::string& out) {
  const auto rows = tableRows(out);
  for (const auto& row : rows) {
    EXPECT_EQ(row.size(), 13u) << out;
    if (row.size() != 13u) continue;
    EXPECT_EQ(row[8], "0") << out;   // out-of-place #wrong
    EXPECT_EQ(row[12], "0") << out;  // in-place #wrong
  }
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  return rows.size();
}

TEST(ScheduleCli, PlanWritesWhatItGeneratedAndReadsItBack) {
  for (const std::string args :
       {"all_reduce --algo ring -g 4 --bytes 64K --channels 2", "all_reduce --algo tree -g 5 --bytes 1M",
        "all_reduce --algo hierarchical -g 16 --bytes 256K --topology h100-4x8-rail"}) {
    SCOPED_TRACE(args);
    const auto out = temp("plan_out");
    std::filesystem::remove(out);
    const CliResult gen = runCli(fmt::format("plan {} --dump --schedule-out {}", args, out.string()));
    ASSERT_EQ(gen.exitCode, 0) << gen.err;
    const CliResult back = runCli(fmt::format("plan --schedule {} --dump", out.string()));
    ASSERT_EQ(back.exitCode, 0) << back.err;
    EXPECT_FALSE(dumpPart(gen.out).empty());
    EXPECT_EQ(dumpPart(back.out), dumpPart(gen.out));
    EXPECT_NE(back.out.find("valid: yes"), std::string::npos);
    const json doc = json::parse(testing::slurp(out));
    EXPECT_EQ(doc["format"], "collbench-schedule");
    EXPECT_NE(doc["command"].get<std::string>().find("--schedule-out"), std::string::npos);
    // An existing file is kept unless --force.
    expectRefused(fmt::format("plan {} --schedule-out {}", args, out.string()),
                  fmt::format("--schedule-out '{}' exists; pass --force to overwrite it", out.string()));
    EXPECT_EQ(runCli(fmt::format("plan {} --schedule-out {} --force", args, out.string())).exitCode, 0);
    std::filesystem::remove(out);
  }
}

TEST(ScheduleCli, NativeAlgorithmsHaveNoScheduleToWrite) {
  const auto out = temp("plan_native");
  std::filesystem::remove(out);
  expectRefused("plan all_reduce --algo nccl --schedule-out " + out.string(),
                "algorithm 'nccl' is a library's own call: it has no ops to write");
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A schedule larger than the machine is refused before it is built (it used to fill the memory: 20 GB within three
// minutes for a tree on 131072 ranks).
TEST(ScheduleCli, PlanRefusesSchedulesLargerThanTheMachine) {
  const CliResult r = runCli("plan all_reduce --algo ring -g 65536 --bytes 1G");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("collbench: error: all_reduce(n=65536, count=268435456, float, sum, root=0) with 'ring' on 1 "
                        "channel: its schedule (8589803520 transfers) would need about ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("; plan a smaller call (the simulator times this one without its schedule)\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ScheduleCli, ExampleRunsOnHostThreadsWithNoWrongElement) {
  // 32 B (8 floats, one per chunk) .. 4 MiB: every size of the sweep divides into the file's 8 chunks.
  const CliResult r = runCli("perf --backend host --schedule " + kExample + " -b 32 -e 4M -f 8 -n 2 -w 1");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(expectNoWrong(r.out), 6u);  // 32, 256, 2K, 16K, 128K, 1M
  EXPECT_NE(r.out.find("perf all_reduce: backend host, 4 ranks, algorithm bidir_ring"), std::string::npos) << r.out;
  // -J names the file as each row's reason.
  const auto out = temp("perf_json");
  std::filesystem::remove(out);
  ASSERT_EQ(runCli("perf --backend host --schedule " + kExample + " -b 64K -e 64K -n 1 -J " + out.string()).exitCode,
            0);
  const json doc = json::parse(testing::slurp(out));
  EXPECT_EQ(doc["config"]["algorithm"], "bidir_ring");
  EXPECT_EQ(doc["results"][0]["algorithm_reason"], "from --schedule " + kExample);
  EXPECT_EQ(doc["wrong_total"], 0);
  std::filesystem::remove(out);
  // The file decides the op: another one on the command line is refused.
  expectRefused(
      "perf --backend host --schedule " + kExample + " -b 1K -e 1K -o max",
      fmt::format("--op max disagrees with the schedule file '{}' (op sum); drop --op or use another file", kExample));
}

// The check behind "0 wrong" is live: a schedule that passes every structural check but receives instead of
// reducing (rank 0 drops rank 3's contribution to chunk 3) is run, and its wrong elements are counted.
TEST(ScheduleCli, WrongScheduleIsCaughtByTheResultCheck) {
  const auto path = writeTemp(
      "wrong_sum",
      mutated(
          R"({"kind": "recv_reduce", "peer": 3, "src": {"buffer": "input", "chunk": 3}, "dst": {"buffer": "output", "chunk": 3}, "chunk_count": 1})",
          R"({"kind": "recv", "peer": 3, "dst": {"buffer": "output", "chunk": 3}, "chunk_count": 1})"));
  const CliResult r = runCli("perf --backend host --schedule " + path.string() + " -b 1K -e 1K -n 1 -w 0");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  const auto rows = tableRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  // Chunk 3 (32 of the 256 floats) is wrong on every rank: rank 0 reduced it last and gathered it to all.
  EXPECT_EQ(rows[0][8], std::to_string(4 * 32));
  EXPECT_EQ(rows[0][12], std::to_string(4 * 32));
  std::filesystem::remove(path);
}

TEST(ScheduleCli, ExampleRunsOnGlooProcessesWithNoWrongElement) {
  const CliResult r = runCli(fmt::format("launch -n 4 -- {} perf --backend gloo --schedule {} -b 32 -e 1M -f 32 -n 2",
                                         COLLBENCH_CLI, kExample));
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_EQ(expectNoWrong(rankZeroLines(r.out)), 4u);  // 32 B, 1K, 32K, 1M
  EXPECT_NE(r.out.find("[rank 0] # nThread 1 nGpus 4"), std::string::npos) << r.out;
  // The world must be the file's: 3 processes are refused by each of them.
  const CliResult three = runCli(
      fmt::format("launch -n 3 -- {} perf --backend gloo --schedule {} -b 1K -e 1K -n 1", COLLBENCH_CLI, kExample));
  EXPECT_EQ(three.exitCode, 2);
  EXPECT_NE((three.out + three.err).find("collective.nranks: the file is for 4 ranks; this run has 3"),
            std::string::npos)
      << three.err;
}

double simTimeUs(const std::string& args) {
  const CliResult r = runCli("sim --json " + args);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  return r.exitCode == 0 ? json::parse(r.out)["time_us"].get<double>() : -1;
}

TEST(ScheduleCli, ExampleSimulatesAsTheGeneratedTwoChannelRing) {
  // On one NVSwitch node every GPU has its own full-duplex link to the switch, so two counter-rotating rings load
  // each link direction as two same-direction channels of the generated ring do: per step, every GPU sends two
  // chunks of input/8 and receives two. The two schedules must simulate to the same time.
  for (const std::string bytes : {"64K", "16M"}) {
    SCOPED_TRACE(bytes);
    const double file = simTimeUs("--topology dgx-h100-8x1 --schedule " + kExample + " --bytes " + bytes);
    const double ring =
        simTimeUs("--topology dgx-h100-8x1 -g 4 --algo ring --channels 2 --mode exact --bytes " + bytes);
    EXPECT_GT(file, 0);
    EXPECT_NEAR(file, ring, 1e-6 * ring);
  }
  expectRefused("sim --schedule " + kExample + " --bytes 1000",
                fmt::format("{}: chunks: 8 chunks do not divide the input of size 1000 B (250 float elements); run "
                            "sizes whose input element count is a multiple of 8",
                            kExample));
  expectRefused(
      "sim --schedule " + kExample + " --algo ring",
      fmt::format("--algo cannot be used with --schedule: the schedule file '{}' is the algorithm", kExample));
}

TEST(ScheduleCli, BytesFileRunsAtItsOwnSize) {
  const auto file = temp("ring_bytes");
  std::filesystem::remove(file);
  ASSERT_EQ(runCli("plan all_reduce --algo ring -g 3 --bytes 12K --schedule-out " + file.string()).exitCode, 0);
  const CliResult r = runCli("perf --backend host --schedule " + file.string() + " -n 1");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  ASSERT_EQ(expectNoWrong(r.out), 1u);
  EXPECT_EQ(tableRows(r.out)[0][0], "12288");
  expectRefused("perf --backend host --schedule " + file.string() + " -b 4K -e 4K -n 1",
                fmt::format("{}: collective.count: a file in bytes runs only at its own size, 3072 elements (12288 B), "
                            "not at 1024 elements (4096 B); write offsets in chunks to run at several sizes",
                            file.string()));
  expectRefused("perf --backend host --schedule " + file.string() + " -g 4",
                fmt::format("--ngpus 4 disagrees with the schedule file '{}' (nranks 3); drop --ngpus or use another "
                            "file",
                            file.string()));
  std::filesystem::remove(file);
}

TEST(ScheduleCli, BadFilesAreOneLineAndExit2) {
  struct Case {
    std::string name, text, message;
  };
  const std::string rank0op0 =
      R"({"kind": "send", "peer": 1, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1})";
  const std::vector<Case> cases = {
      {"unknown_field", mutated("\"chunks\": 8", "\"chunks\": 8, \"chunk\": 8"),
       "chunk: unknown field (known: algorithm, chunks, collective, command, description, format, "
       "protocol, ranks, switch_groups, tool, version)"},
      {"bad_peer",
       mutated(rank0op0, R"({"kind": "send", "peer": 9, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1})"),
       "ranks[0].ops[0].peer: 9 is not a rank (0..3)"},
      {"bad_buffer",
       mutated(rank0op0, R"({"kind": "send", "peer": 1, "src": {"buffer": "in", "chunk": 0}, "chunk_count": 1})"),
       "ranks[0].ops[0].src.buffer: \"in\" is not a buffer (input, output, scratch)"},
      {"out_of_bounds",
       mutated(rank0op0, R"({"kind": "send", "peer": 1, "src": {"buffer": "input", "chunk": 7}, "chunk_count": 2})"),
       "ranks[0].ops[0].src.chunk: chunks [7, 9) of the input are out of bounds (it has 8 chunks)"},
      {"unmatched_send",
       mutated(rank0op0, R"({"kind": "send", "peer": 2, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1})"),
       "ranks[0].ops[0]: rank 0 op 0 (send to rank 2, channel 0) has no matching receive on rank 2 (checked with one "
       "float element per chunk)"},
      {"bad_dep",
       mutated(rank0op0,
               R"({"kind": "send", "peer": 1, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1, "deps": [0]})"),
       "ranks[0].ops[0].deps[0]: 0 is not an earlier op: op 0 of rank 0 has none"},
      {"wrong_type", mutated("\"nranks\": 4", "\"nranks\": \"4\""),
       "collective.nranks: expected an integer, got string \"4\""},
      {"missing_field", mutated("\"algorithm\": \"bidir_ring\",", ""), "algorithm: missing required field"},
      {"bad_json", mutated("\"chunks\": 8,", "\"chunks\": 8,,"),
       "malformed JSON at line 7, column 15 (byte 549): syntax error"},
      {"wrong_format", mutated("collbench-schedule", "collbench-trace"),
       "format: expected \"collbench-schedule\", got \"collbench-trace\""},
      {"bytes_in_chunk_file", mutated("\"chunk_count\": 1}", "\"bytes\": 4}"),
       "ranks[0].ops[0].bytes: this file counts chunks (top-level chunks is set): write chunk_count"},
      {"reduce_scatter_output", mutated("\"all_reduce\"", "\"reduce_scatter\""),
       "ranks[0].ops[1].dst.chunk: chunks [3, 4) of the output are out of bounds (it has 2 chunks)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto path = writeTemp("bad_" + c.name, c.text);
    for (const std::string cmd : {"plan --schedule", "sim --schedule", "perf --backend host --schedule"}) {
      const CliResult r = runCli(fmt::format("{} {}", cmd, path.string()));
      EXPECT_EQ(r.exitCode, 2) << cmd << ": " << r.err;
      EXPECT_EQ(testing::countLines(r.err), 1) << cmd << ": " << r.err;
      EXPECT_EQ(r.err.rfind(fmt::format("collbench: error: {}: {}", path.string(), c.message), 0), 0u)
          << cmd << ": " << r.err;
      EXPECT_EQ(r.out, "") << cmd;
    }
    std::filesystem::remove(path);
  }
}

// docs/schedule.schema.json describes what the reader accepts: the example and what plan writes validate against
// it, and files the reader refuses for a schema-visible reason do not. Uses Python's jsonschema where installed.
TEST(ScheduleSchema, ExampleAndPlanOutputValidate) {
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with jsonschema is not installed (apt-get install python3-jsonschema)";
  }
  const std::string schema = (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "docs" / "schedule.schema.json").string();
  const auto validate = [&](const std::string& doc) {
    const std::string cmd = fmt::format(
        "python3 -c \"import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
        "jsonschema.Draft202012Validator.check_schema(s); "
        "errs = list(jsonschema.Draft202012Validator(s).iter_errors(json.load(open(sys.argv[2])))); "
        "sys.exit(1 if errs else 0)\" {} {}",
        schema, doc);
    return std::system(cmd.c_str());
  };
  const auto written = temp("schema_plan");
  std::filesystem::remove(written);
  ASSERT_EQ(runCli("plan broadcast --algo ring -g 3 -r 1 --bytes 1M --schedule-out " + written.string()).exitCode, 0);
  EXPECT_EQ(validate(kExample), 0);
  EXPECT_EQ(validate(written.string()), 0);
  const auto peerless =
      writeTemp("schema_peerless",
                mutated(R"({"kind": "send", "peer": 1, "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1})",
                        R"({"kind": "send", "src": {"buffer": "input", "chunk": 0}, "chunk_count": 1})"));
  const auto mixed = writeTemp("schema_mixed", mutated("\"chunk_count\": 1}", "\"bytes\": 4}"));
  EXPECT_NE(validate(peerless.string()), 0);
  EXPECT_NE(validate(mixed.string()), 0);
  EXPECT_EQ(runCli("plan --schedule " + peerless.string()).exitCode, 2);
  EXPECT_EQ(runCli("plan --schedule " + mixed.string()).exitCode, 2);
  for (const auto& p : {written, peerless, mixed}) std::filesystem::remove(p);
}

TEST(ScheduleSchema, SwitchOpsValidate) {
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with jsonschema is not installed (apt-get install python3-jsonschema)";
  }
  const std::string schema = (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "docs" / "schedule.schema.json").string();
  const auto written = temp("schema_nvls");
  std::filesystem::remove(written);
  ASSERT_EQ(runCli("plan all_reduce --algo nvls -g 4 --bytes 64K --schedule-out " + written.string()).exitCode, 0);
  const std::string cmd = fmt::format(
      "python3 -c \"import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
      "sys.exit(1 if list(jsonschema.Draft202012Validator(s).iter_errors(json.load(open(sys.argv[2])))) else 0)\" "
      "{} {}",
      schema, written.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  // And the file runs on the simulator, refused by the host backend.
  EXPECT_EQ(runCli("sim --schedule " + written.string()).exitCode, 0);
  const CliResult host = runCli("perf --backend host --schedule " + written.string());
  EXPECT_EQ(host.exitCode, 2);
  EXPECT_NE(host.err.find("needs a switch that reduces (NVLS/SHARP)"), std::string::npos) << host.err;
  std::filesystem::remove(written);
}

}  // namespace
}  // namespace collbench
