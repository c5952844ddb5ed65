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
