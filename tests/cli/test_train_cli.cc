// `collbench train` with bad input: requests larger than the machine (model sizes, replica threads) and bad
// --data-files are refused with one line and exit 2 before the header is printed or any worker starts.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;

bool hasTrain() { return runCli("train --help").exitCode == 0; }

/// One error line starting with `want`, exit 2, nothing on stdout (no header: nothing started).
void expectBadInput(const std::string& args, const std::string& want) {
  const CliResult r = runCli(args);
  EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(testing::countLines(r.err), 1) << args << ": " << r.err;
  EXPECT_EQ(r.err.rfind("collbench: error: " + want, 0), 0u) << args << ": " << r.err;
}

TEST(TrainCli, ModelLargerThanMemoryIsRefusedBeforeAllocating) {
  if (!hasTrain()) GTEST_SKIP() << "this build has no `collbench train` (strategy library absent)";
  // 3 copies x 4 bytes x 1024 examples x 1e11 features: 1117.59 TiB of examples, more than any machine.
  expectBadInput("train --steps 1 --features 100000000000",
                 "--features 100000000000 --hidden 0 --classes 4 --examples 1024 -b/--global-batch 64 on 1 replica: "
                 "training needs about 1191.80 TiB of memory (1117.59 TiB of examples, 4.37 TiB of weights and "
                 "gradients, 69.85 TiB of activations), more than the ");
  expectBadInput("train --steps 1 --hidden 100000000000 -n 2",
                 "--features 16 --hidden 100000000000 --classes 4 --examples 1024 -b/--global-batch 64 on 2 "
                 "replicas: training needs about ");
  const CliResult r = runCli("train --steps 1 --hidden 100000000000");
  EXPECT_NE(r.err.find("more than the "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.substr(r.err.size() - 11), " available\n") << r.err;
}

TEST(TrainCli, ReplicaThreadsAreBounded) {
  if (!hasTrain()) GTEST_SKIP() << "this build has no `collbench train` (strategy library absent)";
  const std::string bound = "more than the 4096 it runs (a thread each; the host backend's bound on ranks)\n";
  for (const auto& [args, flags] : {
           std::pair<std::string, std::string>{"-n 100000", "-n/--local-replicas 100000: 100000"},
           {"--workers 100000", "--workers 100000: 100000"},
           {"--workers 64 -n 128", "--workers 64 x -n/--local-replicas 128: 8192"},
       }) {
    const std::string cmd = "train --steps 1 " + args;
    expectBadInput(cmd, flags + " replicas in this process, " + bound);
  }
}

/// A folder of --data-files for one test, removed at the end.
class DataFiles {
 public:
  explicit DataFiles(const std::string& test)
      : dir_(std::filesystem::temp_directory_path() / fmt::format("collbench_train_cli_{}_{}", test, ::getpid())) {
    std::filesystem::create_directories(dir_);
  }
  ~DataFiles() { std::filesystem::remove_all(dir_); }
  DataFiles(const DataFiles&) = delete;
  DataFiles& operator=(const DataFiles&) = delete;
  std::string operator()(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

const char* const kTrainOnFiles = "train --steps 1 --features 2 --classes 2 --global-batch 2 --data-files ";

TEST(TrainCli, BadDataFileContentsAreRefusedBeforeTheWorkersStart) {
  if (!hasTrain()) GTEST_SKIP() << "this build has no `collbench train` (strategy library absent)";
  const DataFiles file("content");
  const std::string train = kTrainOnFiles;
  const std::string good = file("good.csv", "1,2,0\n3,4,1\n");
  const std::string shortRows = file("short.csv", "# x1 x2 label\n1,2,0\n3,4\n");
  const std::string badLabel = file("label.csv", "1,2,0\n\n1,2,7\n");
  const std::string fraction = file("fraction.csv", "1,2,0.5\n");
  const std::string notNumber = file("nan.csv", "1,x,0\n");
  // The first file is good: the second is checked too, before any worker reads either.
  expectBadInput(
      train + good + " " + shortRows,
      fmt::format("--data-files: file '{}' line 3: 2 numbers, but 2 features and a label need 3\n", shortRows));
  expectBadInput(train + badLabel,
                 fmt::format("--data-files: file '{}' line 3: label 7 is not a class in 0..1\n", badLabel));
  expectBadInput(train + fraction,
                 fmt::format("--data-files: file '{}' line 1: label 0.5 is not a class in 0..1\n", fraction));
  expectBadInput(train + notNumber, fmt::format("--data-files: file '{}' line 1: \"x\" is not a number\n", notNumber));
}

TEST(TrainCli, MissingEmptyOrDirectoryDataFilesAreRefused) {
  if (!hasTrain()) GTEST_SKIP() << "this build has no `collbench train` (strategy library absent)";
  const DataFiles file("files");
  const std::string train = kTrainOnFiles;
  const std::string empty = file("empty.csv", "# nothing\n\n");
  const std::string missing = file.dir() + "/missing.csv";
  expectBadInput(train + missing, fmt::format("--data-files: cannot open file '{}'\n", missing));
  expectBadInput(train + empty,
                 fmt::format("--data-files: file '{}' holds no examples (only blank lines and '#' comments)\n", empty));
  expectBadInput(train + file.dir(), fmt::format("--data-files: file '{}' is a directory\n", file.dir()));
}

}  // namespace
}  // namespace collbench
