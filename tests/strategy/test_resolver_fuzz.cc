// Resolver robustness: mutated TF_CONFIG documents and Slurm hostlists end in a resolver or a collbench::Error
// with a one-line message, never another exception or a crash.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace collbench::strategy
