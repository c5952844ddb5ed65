// `collbench merge SHARD... -o FILE`: the outputs of a grid's `--shard K/N` runs (tune tables, sweep and regret JSON)
// joined into what the unsharded run writes (include/collbench/merge.h).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "collbench/merge.h"
#include "collbench/records.h"
#include "commands.h"

namespace collbench::cli {

void addMergeCommand(CLI::App& app, int& exitCode) {
  struct Args {
    std::vector<std::string> inputs;
    std::string output;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "join the outputs of --shard K/N runs (tuning tables, sweep or regret JSON) into the unsharded one");
  cmd->add_option("shards", a->inputs, "every shard's output, in any order")->required();
  cmd->add_option("-o,--output", a->output, "the merged file")->required();
  cmd->add_flag("--force", a->force, "overwrite an existing output file");
  cmd->callback([a, &exitCode] {
    checkOutputFile(a->output, a->force, "-o/--output");
    std::string format;
    const std::string merged = mergeShardFiles(a->inputs, &format);
    writeTextFile(a->output, merged, "-o/--output");
    fmt::print("# merged {} shards ({}) into {}\n", a->inputs.size(), format, a->output);
    exitCode = 0;
  });
}

}  // namespace collbench::cli
