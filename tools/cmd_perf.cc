// `collbench perf <collective>`: nccl-tests' flags, defaults and table on any backend.
#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <memory>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"
#include "schedule_cli.h"

namespace collbench::cli {

namespace {

/// `perf --backends`: what --backend and --algo accept in this build.
void printBackends(std::FILE* out) {
  std::fprintf(out, "backends (--backend):\n");
  for (const auto& [name, summary] : backendNames()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), summary.c_str());
    const auto natives = backendNativeAlgorithms(name);
    if (!natives.empty())
      std::fprintf(out, "  %-10s native algorithms: %s\n", "", fmt::format("{}", fmt::join(natives, ", ")).c_str());
  }
  std::fprintf(out, "algorithms (--algo; auto asks the selector; native ones run only on the backend named):\n");
  for (const auto& a : algorithms()) {
    if (a.collective == Collective::Barrier) continue;
    std::fprintf(out, "  %-14s %-22s %s\n", std::string(toString(a.collective)).c_str(), a.name.c_str(),
                 a.summary.c_str());
  }
}

/// --schedule FILE and the flags it decides.
struct PerfScheduleArgs {
  std::string path;
  ScheduleFlags flags;
  const CLI::Option* minBytes = nullptr;
  const CLI::Option* maxBytes = nullptr;
};

/// The file decides the collective, ranks, dtype, op, root and algorithm name; a file in bytes, unless -b/-e say
/// otherwise, the size.
void applyScheduleFile(const PerfScheduleArgs& s, PerfConfig& c) {
  const CollectiveSpec flags{c.collective, c.ranks, 0, parseDType(c.datatype), parseReduceOp(c.op), c.root};
  auto file = std::make_shared<const ScheduleFile>(loadScheduleFlags(s.path, s.flags, flags));
  const CollectiveSpec& fs = file->schedule.spec;
  c.collective = fs.kind;
  c.ranks = fs.nranks;  // a process backend's world is checked against it by instantiate()
  c.datatype = toString(fs.dtype);
  c.op = toString(fs.op);
  c.root = fs.root;
  c.algo = file->schedule.algorithm;
  if (file->chunks == 0 && s.minBytes->count() == 0) c.minBytes = ownSizeBytes(*file);
  if (file->chunks == 0 && s.maxBytes->count() == 0) c.maxBytes = ownSizeBytes(*file);
  c.scheduleFile = std::move(file);
}

}  // namespace

void addPerfCommand(CLI::App& app, int& exitCode) {
  auto cfg = std::make_shared<PerfConfig>();
  auto sizes = std::make_shared<std::array<std::string, 3>>(std::array<std::string, 3>{"32M", "32M", "1M"});
  auto chunk = std::make_shared<std::string>("0");
  auto proto = std::make_shared<std::string>();
  auto factor = std::make_shared<double>(1);
  auto listBackends = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("perf", "nccl-tests compatible collective benchmark (table and -J JSON)");
  auto collective = std::make_shared<std::string>("all_reduce");
  cmd->add_option("collective", *collective, "all_reduce | reduce_scatter | all_gather | broadcast | reduce")
      ->default_str("all_reduce");
  cmd->add_option("-b,--minbytes", (*sizes)[0], "minimum size to start with (K/M/G suffixes)")->default_str("32M");
  cmd->add_option("-e,--maxbytes", (*sizes)[1], "maximum size to end at")->default_str("32M");
  cmd->add_option("-i,--stepbytes", (*sizes)[2], "fixed increment between sizes")->default_str("1M");
  cmd->add_option("-f,--stepfactor", *factor, "multiplication factor between sizes (1 = off: step by -i)")
      ->default_val(1);
  CLI::Option* ngpus =
      cmd->add_option("-g,--ngpus", cfg->ranks, "number of ranks (process backends: the launched world)")
          ->default_val(1);
  cmd->add_option("-n,--iters", cfg->iters, "timed iterations per size")->default_val(20);
  cmd->add_option("-w,--warmup_iters", cfg->warmup, "untimed iterations before")->default_val(1);
  cmd->add_option("-c,--check", cfg->check, "check results (0/1)")->default_val(1);
  cmd->add_option("-o,--op", cfg->op, "sum | prod | min | max | avg")->default_val("sum");
  cmd->add_option("-d,--datatype", cfg->datatype, "float | double | half | bfloat16 | int32 | int64")
      ->default_val("float");
  cmd->add_option("-r,--root", cfg->root, "root rank for broadcast and reduce")->default_val(0);
  cmd->add_option("-a,--average", cfg->average, "time reported across ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->default_val(1);
  cmd->add_option("-z,--blocking", cfg->blocking, "1: wait for each collective before starting the next")
      ->default_val(0);
  cmd->add_option("-T,--timeout", cfg->timeoutSeconds, "seconds a rank waits for a peer before failing")
      ->default_val(kDefaultTimeoutSeconds);
  cmd->add_option("-J,--output_file", cfg->outputFile, "write results, config and environment as JSON");
  cmd->add_flag("--force", cfg->force, "overwrite an existing -J file");
  cmd->add_option("--backend", cfg->backend, "backend (default host; list them with --backends)");
  cmd->add_flag("--backends", *listBackends, "list the backends built in, and the algorithms of each collective");
  cmd->add_option("--algo", cfg->algo, "algorithm name or auto")->default_val("auto");
  cmd->add_option("--topology", cfg->topology, "topology file or shipped name (simulator)");
  cmd->add_option("--nccl-calibration", cfg->ncclCalibration,
                  "sim backend, --algo nccl: the NCCL model's parameters from `collbench calibrate --model nccl -o "
                  "FILE` (any node count of the calibrated system)");
  cmd->add_option("--nccl-version", cfg->ncclVersion,
                  "sim backend, --algo nccl: the NCCL release (MAJOR.MINOR.PATCH) whose choice is emulated "
                  "(default 2.28)");
  cmd->add_option("--channels", cfg->channels, "parallel channels")->default_val(1);
  cmd->add_option("--tuning", cfg->tuningFile, "tuning table for --algo auto (default $COLLBENCH_TUNING_FILE)");
  cmd->add_option("--chunk-bytes", *chunk, "pipeline chunk size (0 = algorithm default)")->default_str("0");
  addProtoOption(cmd, *proto);
  auto sched = std::make_shared<PerfScheduleArgs>();
  cmd->add_option("--schedule", sched->path,
                  "run this schedule file (docs/schedule-format.md): its collective and ranks; a file in bytes at its "
                  "own size, one in chunks at every size of the sweep");
  sched->flags = {cmd->get_option("--algo"),     cmd->get_option("collective"), ngpus,
                  cmd->get_option("--datatype"), cmd->get_option("--op"),       cmd->get_option("--root")};
  sched->minBytes = cmd->get_option("--minbytes");
  sched->maxBytes = cmd->get_option("--maxbytes");
  cmd->callback([cfg, sizes, chunk, proto, factor, collective, listBackends, ngpus, sched, &exitCode] {
    if (*listBackends) {
      printBackends(stdout);
      return;
    }
    PerfConfig c = *cfg;
    c.ranksGiven = ngpus->count() > 0;
    c.collective = parseCollective(*collective);
    c.minBytes = parseBytes((*sizes)[0], "-b/--minbytes");
    c.maxBytes = parseBytes((*sizes)[1], "-e/--maxbytes");
    c.stepBytes = parseBytes((*sizes)[2], "-i/--stepbytes");
    c.chunkBytes = parseBytes(*chunk, "--chunk-bytes");
    c.protocol = parseProtoFlag(*proto);
    checkChannels("--channels", c.channels);
    if (!sched->path.empty()) applyScheduleFile(*sched, c);
    // nccl-tests: -f 1 (the default) is "off", sizes then step by -i; a factor below 1 would never reach -e.
    if (!(*factor >= 1) || !std::isfinite(*factor)) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("-f/--stepfactor must be at least 1 (1 = off: sizes step by -i), got {}", *factor));
    }
    c.stepFactor = *factor;
    checkFactorGrows(c.minBytes, c.maxBytes, c.stepFactor);
    if (c.minBytes > c.maxBytes) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("-b/--minbytes {} is larger than -e/--maxbytes {}", c.minBytes, c.maxBytes));
    }
    if (c.stepFactor <= 1 && c.stepBytes == 0 && c.minBytes < c.maxBytes) {
      throw Error(Errc::InvalidArgument, "-i/--stepbytes must be greater than 0 when -b < -e and -f is 1");
    }
    if (c.ranks < 1) throw Error(Errc::InvalidArgument, fmt::format("-g/--ngpus must be at least 1, got {}", c.ranks));
    if (c.iters < 0) throw Error(Errc::InvalidArgument, fmt::format("-n/--iters must be >= 0, got {}", c.iters));
    if (c.warmup < 0)
      throw Error(Errc::InvalidArgument, fmt::format("-w/--warmup_iters must be >= 0, got {}", c.warmup));
    if (c.check != 0 && c.check != 1)
      throw Error(Errc::InvalidArgument, fmt::format("-c/--check must be 0 or 1, got {}", c.check));
    if (c.average < 0 || c.average > 3) {
      throw Error(Errc::InvalidArgument, fmt::format("-a/--average must be 0..3, got {}", c.average));
    }
    if (c.blocking != 0 && c.blocking != 1)
      throw Error(Errc::InvalidArgument, fmt::format("-z/--blocking must be 0 or 1, got {}", c.blocking));
    if (!(c.timeoutSeconds > 0))
      throw Error(Errc::InvalidArgument, fmt::format("-T/--timeout must be > 0, got {}", c.timeoutSeconds));
    if (c.collective == Collective::Barrier)
      throw Error(Errc::InvalidArgument, "perf does not time barrier (no bytes)");
    parseDType(c.datatype);
    parseReduceOp(c.op);
    c.commandLine = commandLine();
    exitCode = runPerf(c, stdout);
  });
}

}  // namespace collbench::cli
