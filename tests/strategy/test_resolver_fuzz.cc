// Resolver robustness: mutated TF_CONFIG documents, Slurm hostlists and task counts, Slurm and MPI launcher
// environments and host:port addresses end in a resolver or a collbench::Error with a one-line message, never
// another exception, a crash or a huge allocation.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/strategy/cluster_resolver.h"
#include "fuzz_mutator.h"

namespace collbench::strategy {
namespace {

using testing::survives;

TEST(ResolverFuzz, TfConfig) {
  const std::vector<std::string> seeds = {
      R"({"cluster": {"worker": ["host1:2222", "host2:2222", "host3:2222"]}, "task": {"type": "worker", "index": 1}})",
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:2", "w:3"], "ps": ["p:4"]}, "task": {"type": "chief", "index": 0}, "rpc_layer": "grpc"})",
      R"({"cluster": {"worker": ["[::1]:80"], "evaluator": ["e:9"]}, "task": {"type": "evaluator", "index": "0"}})",
  };
  testing::Mutator m(42);
  int parsed = 0;
  const int cases = testing::fuzzCases();
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives(
        [](const std::string& s) {
          TFConfigClusterResolver r(s);
          (void)r.numWorkers();
          try {
            (void)r.rank();
          } catch (const Error&) {
            // a ps task has no rank: an Error is the right answer
          }
        },
        input, i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

TEST(ResolverFuzz, SlurmHostlist) {
  const std::vector<std::string> seeds = {"gpu[01-04,07],cpu3", "a[1-2]b[3-4]", "node[001-128]", "x,y,z"};
  testing::Mutator m(99);
  const int cases = testing::fuzzCases();
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    survives([](const std::string& s) { expandSlurmHostlist(s); }, input, i);
  }
}

TEST(ResolverFuzz, SlurmTasksPerNode) {
  const std::vector<std::string> seeds = {"2(x3),1", "1", "8(x128)", "4,4,2(x2)"};
  testing::Mutator m(77);
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([](const std::string& s) { parseSlurmTasksPerNode(s); }, input, i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

using Env = std::map<std::string, std::string>;

/// Mutates the value of one or two variables of `env`, or drops one: a launcher environment gone wrong.
Env mutateEnv(testing::Mutator& m, Env env) {
  const std::size_t edits = 1 + m.pick(2);
  for (std::size_t e = 0; e < edits && !env.empty(); ++e) {
    auto it = std::next(env.begin(), static_cast<std::ptrdiff_t>(m.pick(env.size())));
    if (m.pick(8) == 0) {
      env.erase(it);
    } else {
      it->second = m.mutate(it->second);
    }
  }
  return env;
}

std::string describe(const Env& env) {
  std::string out;
  for (const auto& [k, v] : env) out += k + "=" + v + " ";
  return out;
}

/// Everything a resolver derives, so that a bad value surfaces here rather than in a later use.
void exercise(const ClusterResolver& r) {
  (void)r.numWorkers();
  (void)r.isChief();
  (void)r.leaderAddress();
  (void)r.master();
  (void)r.taskAddress();
  (void)r.rank();
}

template <typename Make>
void fuzzEnvironments(std::uint64_t seed, const std::vector<Env>& seeds, Make&& make) {
  for (const Env& e : seeds) ASSERT_TRUE(survives([&](const std::string&) { exercise(*make(e)); }, describe(e), -1));
  testing::Mutator m(seed);
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i) {
    const Env env = mutateEnv(m, seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([&](const std::string&) { exercise(*make(env)); }, describe(env), i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

TEST(ResolverFuzz, SlurmEnvironment) {
  const std::vector<Env> seeds = {
      {{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "7"},
       {"SLURM_JOB_NODELIST", "gpu[01-03],cpu3"},
       {"SLURM_TASKS_PER_NODE", "2(x3),1"},
       {"SLURM_LOCALID", "1"}},
      {{"SLURM_PROCID", "1"},
       {"SLURM_STEP_NODELIST", "s[1-2]"},
       {"SLURM_STEP_NUM_TASKS", "2"},
       {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}},
      {{"SLURM_PROCID", "2"}, {"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_NTASKS_PER_NODE", "2"}},
      {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "5"}, {"SLURM_JOB_NODELIST", "a,b"}},
  };
  fuzzEnvironments(4242, seeds,
                   [](const Env& e) { return std::make_unique<SlurmClusterResolver>(environmentFromMap(e)); });
}

TEST(ResolverFuzz, MpiEnvironment) {
  const std::vector<Env> seeds = {
      {{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "8"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
       {"COLLBENCH_MASTER_ADDR", "node1:29500"}},
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}},
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"COLLBENCH_MASTER_ADDR", "[::1]:80"}},
  };
  fuzzEnvironments(4343, seeds,
                   [](const Env& e) { return std::make_unique<MpiClusterResolver>(environmentFromMap(e)); });
}

TEST(ResolverFuzz, HostPort) {
  const std::vector<std::string> seeds = {"host1:2222", "[::1]:80", "10.0.0.1:65535", "a-b.c_d:1"};
  testing::Mutator m(8080);
  const int cases = testing::fuzzCases();
  int parsed = 0;
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<std::size_t>(i) % seeds.size()]);
    parsed += survives([](const std::string& s) { parseHostPort(s, "fuzz"); }, input, i);
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, cases);
}

}  // namespace
}  // namespace collbench::strategy
