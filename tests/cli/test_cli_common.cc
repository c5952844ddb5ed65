// The CLI's shared helpers: comma-separated list flags (errors name the flag and the bad item), the per-process rank
// rule read from backend capabilities, and one list error end to end.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_runner.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "error_of.h"
#include "world_options.h"

namespace collbench {
namespace {

using testing::errorOf;

TEST(CliLists, SplitSkipsEmptyItems) {
  EXPECT_EQ(cli::splitList("a,b,,c,"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(cli::splitList("one"), (std::vector<std::string>{"one"}));
  EXPECT_TRUE(cli::splitList("").empty());
  EXPECT_TRUE(cli::splitList(",,").empty());
}

TEST(CliLists, IntegersParseInOrder) {
  EXPECT_EQ(cli::parseIntList("--channels", "1,2,4", 1), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(cli::parseIntList("-g/--ranks", "16", 1), (std::vector<int>{16}));
  EXPECT_EQ(cli::parseIntItem("--x", "0", 0), 0);
}

TEST(CliLists, BadIntegerNamesTheFlagAndTheItem) {
  EXPECT_EQ(errorOf([] { cli::parseIntList("--channels", "1,x,4", 1); }), "--channels: 'x' is not an integer >= 1");
  EXPECT_EQ(errorOf([] { cli::parseIntList("-g/--ranks", "2,0", 1); }), "-g/--ranks: '0' is not an integer >= 1");
  EXPECT_EQ(errorOf([] { cli::parseIntList("--channels", "2.5", 1); }), "--channels: '2.5' is not an integer >= 1");
  EXPECT_EQ(errorOf([] { cli::parseIntList("--channels", "99999999999", 1); }),
            "--channels: '99999999999' is not an integer >= 1");
  EXPECT_EQ(errorOf([] { cli::parseIntItem("-g/--ranks", "some", 1, " or 'all'"); }),
            "-g/--ranks: 'some' is not an integer >= 1 or 'all'");
  EXPECT_EQ(errorOf([] { cli::parseIntList("--channels", ",", 1); }), "--channels: empty list");
}

TEST(CliLists, SizesParseWithUnitsAndBadOnesNameTheFlagAndTheItem) {
  EXPECT_EQ(cli::parseBytesList("--chunks", "0,128K,2M"),
            (std::vector<std::size_t>{0, std::size_t{128} << 10, std::size_t{2} << 20}));
  const std::string bad = errorOf([] { cli::parseBytesList("--chunks", "128K,12Q"); });
  EXPECT_NE(bad.find("invalid --chunks '12Q'"), std::string::npos) << bad;
  EXPECT_EQ(errorOf([] { cli::parseBytesList("--chunks", ""); }), "--chunks: empty list");
}

TEST(CliLists, TuneRejectsABadChannelListInOneLine) {
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "collbench_cli_common_bad_channels.json";
  std::filesystem::remove(out);
  const testing::CliResult r =
      testing::runCli(fmt::format("tune --backend sim -g 2 --channels 1,two -o {}", out.string()));
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--channels: 'two' is not an integer >= 1"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CliLists, SweepsRefuseWhatTheyCannotRunBeforeStarting) {
  // Each of these once crashed, ran away or was quietly replaced: now one line naming the flag, exit 2, no output.
  const std::filesystem::path tmp = std::filesystem::temp_directory_path();
  const std::string out = (tmp / "collbench_cli_common_refused.json").string();
  const std::string same = (tmp / "collbench_cli_common_same.conf").string();
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {"plan --channels 1000000000 --algo ring",
            "--channels: 1000000000 channels: at most 64 (NCCL's MAXCHANNELS)"},
           {"sim --channels 65 --algo ring --bytes 8", "--channels: 65 channels: at most 64"},
           {"perf --backend sim --channels 65 -b 8 -e 8", "--channels: 65 channels: at most 64"},
           {"tune -g 2 -b 8 -e 8 --channels 1,128 -o " + out, "--channels: 128 channels: at most 64"},
           {"tune -g 2 -b 8 -e 8 --nccl-channels 99 -o " + out, "--nccl-channels: 99 channels: at most 64"},
           {"sim --algo ring --chunk-bytes 1 --bytes 1T",
            "chunks of 1 B cut the call's 1099511627776 B into more than 16777216 pipeline chunks"},
           {"perf --backend sim --algo ring --chunk-bytes 1 -b 1G -e 1G",
            "chunks of 1 B cut the call's 1073741824 B into more than 16777216 pipeline chunks"},
           {"perf -f inf -b 8 -e 8", "-f/--stepfactor must be at least 1 (1 = off: sizes step by -i), got inf"},
           {"sweep -b 8 -e 64 -f inf", "-f/--stepfactor must be a finite number > 1, got inf"},
           {"sweep -b 8 -e 64 -f 1.1", "-f/--stepfactor 1.1 does not grow -b/--minbytes 8 (it rounds back to 8 B)"},
           {"perf -b 8 -e 64 -f 1.1", "-f/--stepfactor 1.1 does not grow -b/--minbytes 8 (it rounds back to 8 B)"},
           {"tune -g 2 -b 8 -e 8 -f inf -o " + out, "-f/--stepfactor must be a finite number > 1, got inf"},
           {"tune -g 2 -b 8 -e 8 --backend host -T -5 -o " + out,
            "-T/--timeout must be a finite number of seconds > 0, got -5"},
           {"tune -g 2 -b 8 -e 8 -n -1 -o " + out, "-n/--iters must be at least 1, got -1"},
           {"tune -g 2 -b 8 -e 8 -w -1 -o " + out, "-w/--warmup_iters must be >= 0, got -1"},
           {"tune -g 2 -b 8 -e 8 --repeats 0 -o " + out, "--repeats must be at least 1, got 0"},
           {"tune -g 2 -b 8 -e 8 --prune nan -o " + out, "--prune must be 0 (off) or a finite ratio >= 1, got nan"},
           {"tune --backend sim --topology dgx-h100-8x1 -g 8 -b 8 -e 8 -o " + same + " --export nccl-tuner " + same,
            "-o/--output and --export-file name the same file"},
           {"regret --topology dgx-h100-8x1 -g 3 -b 8 -e 4 -f 2", "sizes must satisfy 0 < -b (8) <= -e (4)"},
           {"plan --backend bogus", "unknown backend 'bogus'"},
           {"plan -g 100000000", "-g/--ranks 100000000: at most 1048575 ranks without --topology"},
           {"regret --topology dgx-h100-8x1 -g 3 -f nan", "-f/--stepfactor must be a finite number > 1, got nan"},
           {"regret --topology dgx-h100-8x1 --max-worst -1", "--max-worst must be 0 (off) or a finite ratio, got -1"},
           {"regret --topology dgx-h100-8x1 --max-geomean nan",
            "--max-geomean must be 0 (off) or a finite ratio, got nan"},
       }) {
    std::filesystem::remove(out);
    std::filesystem::remove(same);
    const testing::CliResult r = testing::runCli(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << ": " << r.err;
    EXPECT_EQ(testing::countLines(r.err), 1) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
    EXPECT_FALSE(std::filesystem::exists(same)) << c.args;
  }
}

/// An environment with only `vars` set.
strategy::EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(CliProcessMode, OneRankPerProcessFollowsTheRegisteredCapabilities) {
  auto factory = [](int, const BackendOptions&) -> std::unique_ptr<Backend> { return nullptr; };
  BackendCapabilities all, one, launched;
  one.ranksPerProcess = RanksPerProcess::One;
  launched.ranksPerProcess = RanksPerProcess::OneWhenLaunched;
  registerBackend("cli_test_all", "test", factory, all);
  registerBackend("cli_test_one", "test", factory, one);
  registerBackend("cli_test_launched", "test", factory, launched);
  const auto alone = envOf({});
  const auto twoWorkers =
      envOf({{"TF_CONFIG",
              R"({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}})"}});
  EXPECT_FALSE(cli::oneRankPerProcess("cli_test_all", twoWorkers));
  EXPECT_TRUE(cli::oneRankPerProcess("cli_test_one", alone));
  EXPECT_FALSE(cli::oneRankPerProcess("cli_test_launched", alone));
  EXPECT_TRUE(cli::oneRankPerProcess("cli_test_launched", twoWorkers));
  EXPECT_FALSE(cli::oneRankPerProcess("no_such_backend", twoWorkers));  // e.g. tune's "model"
}

}  // namespace
}  // namespace collbench
