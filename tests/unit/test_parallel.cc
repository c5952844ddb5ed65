// Sweeps over cores and a cluster (include/collbench/parallel.h): shard blocks cover a grid once and in order, the
// launcher variables map to shards, worker processes return results in item order and report failures.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "collbench/error.h"
#include "collbench/parallel.h"
#include "error_of.h"

namespace collbench {
namespace {

using testing::errorOf;

EnvLookup envOf(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    const auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Shard, BlocksCoverTheGridOnceInOrder) {
  for (std::size_t total : {0u, 1u, 5u, 7u, 64u, 1000u}) {
    for (int n : {1, 2, 3, 7, 16}) {
      std::size_t next = 0;
      for (int k = 1; k <= n; ++k) {
        const auto [begin, end] = Shard{k, n}.range(total);
        EXPECT_EQ(begin, next) << k << "/" << n << " of " << total;
        EXPECT_LE(end - begin, total / static_cast<std::size_t>(n) + 1);  // balanced to one point
        next = end;
      }
      EXPECT_EQ(next, total) << n << " shards of " << total;
    }
  }
  EXPECT_EQ(Shard{}.range(9), (std::pair<std::size_t, std::size_t>{0, 9}));
  EXPECT_EQ((Shard{2, 3}.range(7)), (std::pair<std::size_t, std::size_t>{2, 4}));  // floor(7/3), floor(14/3)
}

TEST(Shard, ParsesKOfNAndRefusesTheRestInOneLine) {
  EXPECT_EQ(parseShard("3/8"), (Shard{3, 8}));
  EXPECT_EQ(parseShard("1/1"), (Shard{1, 1}));
  EXPECT_EQ(parseShard("3/8").toString(), "3/8");
  EXPECT_EQ(errorOf([] { parseShard("0/4"); }), "--shard '0/4': K must be in 1..N and N >= 1");
  EXPECT_EQ(errorOf([] { parseShard("5/4"); }), "--shard '5/4': K must be in 1..N and N >= 1");
  EXPECT_EQ(errorOf([] { parseShard("2/0"); }), "--shard '2/0': K must be in 1..N and N >= 1");
  EXPECT_EQ(errorOf([] { parseShard("-1/4"); }), "--shard '-1/4': K must be in 1..N and N >= 1");
  for (const char* bad : {"2", "a/4", "2/4x", "/4", "2/", ""}) {
    EXPECT_EQ(errorOf([&] { parseShard(bad); }),
              fmt::format("--shard '{}': expected K/N (this job's part K of N, e.g. 2/8) or auto", bad));
  }
}

TEST(Shard, AutoReadsTheLaunchersRank) {
  // mpirun (Open MPI): rank r of s is shard r+1 of s.
  EXPECT_EQ(parseShard("auto", envOf({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}})), (Shard{3, 4}));
  // MPICH / Intel MPI (Hydra).
  EXPECT_EQ(shardFromEnvironment(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}})), (Shard{1, 2}));
  // srun -n 8.
  EXPECT_EQ(shardFromEnvironment(envOf({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}})), (Shard{8, 8}));
  // sbatch --array=1-4: task 3 (its step is one task, SLURM_PROCID 0 of 1).
  EXPECT_EQ(shardFromEnvironment(envOf({{"SLURM_ARRAY_TASK_ID", "3"},
                                        {"SLURM_ARRAY_TASK_MIN", "1"},
                                        {"SLURM_ARRAY_TASK_COUNT", "4"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"}})),
            (Shard{3, 4}));
  // --array=0-3 counts from 0.
  EXPECT_EQ(shardFromEnvironment(
                envOf({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_COUNT", "4"}})),
            (Shard{1, 4}));
  // mpirun inside a Slurm allocation: the MPI rank wins.
  EXPECT_EQ(shardFromEnvironment(envOf({{"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"}})),
            (Shard{2, 2}));
  EXPECT_EQ(errorOf([] { shardFromEnvironment(envOf({})); }),
            "--shard auto: no launcher rank in the environment (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
            "SLURM_ARRAY_TASK_ID); give --shard K/N");
  EXPECT_EQ(errorOf([] {
              shardFromEnvironment(envOf({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}}));
            }),
            "--shard auto: PMI_RANK '4' is not in 0..3 (PMI_SIZE=4)");
  EXPECT_EQ(errorOf([] {
              shardFromEnvironment(envOf({{"OMPI_COMM_WORLD_RANK", "0"}}));
            }),
            "--shard auto: OMPI_COMM_WORLD_RANK=0 needs OMPI_COMM_WORLD_SIZE set to a positive count, got ''");
}

TEST(Shard, PathPlaceholderTakesK) {
  EXPECT_EQ(shardPath("tune.{shard}.json", Shard{3, 8}), "tune.3.json");
  EXPECT_EQ(shardPath("{shard}/{shard}.json", Shard{12, 16}), "12/12.json");
  EXPECT_EQ(shardPath("plain.json", Shard{2, 2}), "plain.json");
}

TEST(Jobs, DefaultIsTheCoresWithoutDataAndOneWithIt) {
  EXPECT_GE(defaultJobs(), 1);
  EXPECT_EQ(resolveJobs(std::nullopt, kModelBackend), defaultJobs());
  EXPECT_EQ(resolveJobs(3, kModelBackend), 3);
  // A name no backend registered in this binary is taken as moving data: never run in parallel.
  EXPECT_EQ(resolveJobs(std::nullopt, "host"), 1);
  EXPECT_EQ(resolveJobs(1, "host"), 1);
  EXPECT_EQ(errorOf([] { resolveJobs(2, "host"); }),
            "-j/--jobs 2: backend 'host' moves data, and configurations timed at once would disturb each other's "
            "times (use -j 1; --shard K/N splits the grid over separate machines)");
  EXPECT_EQ(errorOf([] { resolveJobs(0, kModelBackend); }), "-j/--jobs must be >= 1, got 0");
}

TEST(RunInProcesses, ResultsComeBackInItemOrderFromWorkers) {
  std::vector<std::size_t> items(23);
  std::iota(items.begin(), items.end(), 100);
  const std::string parent = std::to_string(::getpid());
  auto work = [](std::size_t i) {
    ::usleep(static_cast<useconds_t>((i * 7919) % 5 * 200));  // unequal costs: completion order differs
    return fmt::format("{}:{}", i * i, ::getpid());
  };
  std::vector<std::size_t> progressed;
  const std::vector<std::string> out =
      runInProcesses(items, work, ParallelOptions{3, [&](std::size_t done, std::size_t total, std::size_t index) {
                                                    EXPECT_EQ(total, items.size());
                                                    EXPECT_EQ(done, progressed.size() + 1);
                                                    progressed.push_back(index);
                                                  }});
  ASSERT_EQ(out.size(), items.size());
  std::set<std::string> pids;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const std::size_t colon = out[k].find(':');
    EXPECT_EQ(out[k].substr(0, colon), std::to_string(items[k] * items[k]));
    pids.insert(out[k].substr(colon + 1));
  }
  EXPECT_EQ(pids.count(parent), 0u);  // every item ran in a worker
  EXPECT_GE(pids.size(), 2u);
  EXPECT_LE(pids.size(), 3u);
  EXPECT_EQ(std::set<std::size_t>(progressed.begin(), progressed.end()),
            std::set<std::size_t>(items.begin(), items.end()));
  // -j 1 runs here, in order.
  const std::vector<std::string> seq = runInProcesses(
      items, [](std::size_t i) { return std::to_string(i * i); }, ParallelOptions{1});
  for (std::size_t k = 0; k < items.size(); ++k) EXPECT_EQ(seq[k], out[k].substr(0, out[k].find(':')));
}

TEST(RunInProcesses, AWorkersErrorKeepsItsCodeAndMessage) {
  const std::vector<std::size_t> items{0, 1, 2, 3, 4, 5};
  try {
    runInProcesses(
        items,
        [](std::size_t i) -> std::string {
          if (i == 4) throw Error(Errc::Unsupported, "point 4 cannot run");
          return "ok";
        },
        ParallelOptions{2});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::Unsupported);
    EXPECT_STREQ(e.what(), "point 4 cannot run");
  }
}

TEST(RunInProcesses, AWorkerThatDiesIsNamed) {
  const std::vector<std::size_t> items{0, 1, 2};
  try {
    runInProcesses(
        items,
        [](std::size_t i) -> std::string {
          if (i == 1) ::_exit(7);
          return "ok";
        },
        ParallelOptions{2});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::BackendError);
    EXPECT_NE(std::string(e.what()).find("exited with status 7 while running grid point 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace collbench
