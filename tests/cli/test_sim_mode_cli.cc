// `--mode` on the simulator's commands: the fluid network as a user runs it, and its refusals.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;

// The fluid network models CM02 without cross-traffic only: anything else is one line and exit 2, as is an unknown
// mode, on sim and on sweep.
TEST(SimModeCli, FluidRefusalsAreOneLineExitTwo) {
  const std::string lv08 =
      "collbench: error: mode fluid: needs the CM02 network model without cross-traffic (got model LV08)\n";
  const std::string unknown =
      "collbench: error: unknown simulation mode 'fluidx' (available: auto, exact, aggregated, fluid)\n";
  for (const auto& [args, want] :
       {std::pair{"sim --topology pcie-4gpu --algo ring --bytes 1M --mode fluid --model LV08", lv08},
        std::pair{"sim --topology pcie-4gpu --algo ring --bytes 1M --mode fluidx", unknown},
        std::pair{"sweep --topology pcie-4gpu --sizes 1M --algo ring --mode fluidx", unknown}}) {
    SCOPED_TRACE(args);
    const CliResult r = runCli(args);
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_EQ(r.err, want);
  }
}

// A tree run on the fluid network names its method; with equal chunks the whole call runs on the tree model, which
// equals the fluid method on the built schedule (tests/sim/test_sim_aggregation.cc, TreeModel).
TEST(SimModeCli, FluidTreeRunsOnTheTreeModel) {
  const CliResult r = runCli("sim --topology h100-4x8-rail -g 16 --algo tree --channels 2 --bytes 4G --mode fluid");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("tree-model"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace collbench
