// `collbench plan`: builds a schedule, validates it and prints a summary or the whole op list.
#include <memory>
#include <optional>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/nccl_model.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "collbench/validator.h"
#include "commands.h"
#include "schedule_cli.h"

namespace collbench::cli {

namespace {

/// The summary lines of a validated schedule.
void printPlan(const Schedule& s, const Choice& choice, bool inPlace) {
  std::size_t sent = 0, maxOps = 0;
  for (const auto& r : s.ranks) {
    maxOps = std::max(maxOps, r.ops.size());
    for (const auto& op : r.ops) sent += op.kind == OpKind::Send ? op.bytes : 0;
  }
  fmt::print("{}\nalgorithm: {} ({})\nops: {} total, at most {} per rank; bytes sent: {} total\nvalid: yes{}\n",
             describe(s.spec), s.algorithm, choice.reason, s.totalOps(), maxOps, sent, inPlace ? " (in place)" : "");
}

/// `plan --schedule FILE`: the file's schedule (a file in chunks at --bytes, one in bytes at its size unless --bytes
/// is given) with the summary and, with --dump, the ops.
Schedule planFromFile(const std::string& path, const ScheduleFlags& flags, CollectiveSpec spec,
                      const std::string& bytes, bool bytesGiven, bool inPlace) {
  const ScheduleFile file = loadScheduleFlags(path, flags, spec);
  spec = file.schedule.spec;
  if (file.chunks > 0 || bytesGiven) {
    spec.count = countForBytes(spec.kind, spec.nranks, parseBytes(bytes, "--bytes"), spec.dtype);
  }
  Schedule s = instantiate(file, spec);
  validate(s, ValidateOptions{inPlace});
  printPlan(s, Choice{s.algorithm, fmt::format("from --schedule {}", path)}, inPlace);
  return s;
}

/// `plan --algo nccl --topology T`: NCCL 2.28's emulated choice on the topology's system (NCCL_* environment
/// applies) and its cost table: every algorithm x protocol with NCCL's estimate and the predicted time.
void printNcclChoice(const Topology& topo, const CollectiveSpec& spec) {
  const NcclSystem sys = ncclSystemOf(topo, spec.nranks);
  const NcclChoice c = ncclChoose(sys, spec, ncclEnvFromProcess());
  fmt::print(
      "nccl choice: {}\n  {}\n  threads {}, chunk {} B, slice {} B; NCCL's estimate {:.2f} us, predicted {:.2f} us\n",
      ncclChoiceSummary(c), c.reason, c.threads, c.chunkBytes, c.sliceBytes, c.ncclUs, c.predictedUs);
  fmt::print("system: {} x {} {} GPUs, NVLink {} GB/s{}{}, {} NIC(s) x {} GB/s {}\n", sys.nodes, sys.gpusPerNode,
             toString(sys.arch), sys.nvlinkGBps, sys.nvswitch ? ", NVSwitch" : "", sys.nvls ? " (NVLS)" : "",
             sys.nicsPerNode, sys.nicGBps, toString(sys.nicKind));
  fmt::print("  {:<14} {:<8} {:>14} {:>14}\n", "algorithm", "protocol", "nccl_est_us", "predicted_us");
  for (const NcclCandidate& k : c.candidates) {
    const bool chosen = k.algorithm == c.algorithm && k.protocol == c.protocol;
    const auto us = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.2f}", v); };
    fmt::print("{} {:<14} {:<8} {:>14} {:>14}\n", chosen ? "*" : " ", toString(k.algorithm), toString(k.protocol),
               us(k.ncclUs), us(k.predictedUs));
  }
}

}  // namespace

void addPlanCommand(CLI::App& app, int& exitCode) {
  struct Args {
    std::string collective = "all_reduce", algo = "auto", bytes = "1M", chunk = "0", dtype = "float", op = "sum";
    std::string proto;
    std::string topology, tuning, schedule, scheduleOut;
    int ranks = 4, root = 0, channels = 1;
    bool dump = false, inPlace = false, force = false;
    std::string backend;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("plan", "build, validate and show the schedule of one collective");
  cmd->add_option("collective", a->collective,
                  "all_reduce | reduce_scatter | all_gather | broadcast | reduce | barrier");
  cmd->add_option("--algo", a->algo, "algorithm name or auto")->default_val("auto");
  cmd->add_option("-g,--ranks", a->ranks, "number of ranks")->default_val(4);
  cmd->add_option(
         "--bytes", a->bytes,
         "message size as nccl-tests counts it (K/M/G; all_gather and reduce_scatter: the whole output, resp. input)")
      ->default_val("1M");
  cmd->add_option("-d,--datatype", a->dtype, "element type")->default_val("float");
  cmd->add_option("-o,--op", a->op, "reduction")->default_val("sum");
  cmd->add_option("-r,--root", a->root, "root rank")->default_val(0);
  cmd->add_option("--channels", a->channels, "parallel channels")->default_val(1);
  cmd->add_option("--chunk-bytes", a->chunk, "pipeline chunk (0 = default)")->default_val("0");
  addProtoOption(cmd, a->proto);
  cmd->add_option("--topology", a->topology, "topology (gives hierarchical its hosts)");
  cmd->add_option("--tuning", a->tuning,
                  "tuning table for --algo auto (default $COLLBENCH_TUNING_FILE, else the topology's shipped table in "
                  "$COLLBENCH_TUNING_PATH or reports/tuning)");
  cmd->add_option("--backend", a->backend, "prefer the table section measured on this backend");
  cmd->add_flag("--dump", a->dump, "print every op of every rank");
  cmd->add_flag("--in-place", a->inPlace, "validate for in-place buffers");
  cmd->add_option("--schedule", a->schedule,
                  "show this schedule file (docs/schedule-format.md) instead of a generated schedule; a file in chunks "
                  "at --bytes");
  cmd->add_option("--schedule-out", a->scheduleOut, "write the schedule as a schedule file (JSON, in bytes)");
  cmd->add_flag("--force", a->force, "overwrite an existing --schedule-out file");
  const ScheduleFlags flags{cmd->get_option("--algo"),     cmd->get_option("collective"), cmd->get_option("--ranks"),
                            cmd->get_option("--datatype"), cmd->get_option("--op"),       cmd->get_option("--root")};
  const CLI::Option* bytesOpt = cmd->get_option("--bytes");
  cmd->callback([a, flags, bytesOpt, &exitCode] {
    checkScheduleOut(a->scheduleOut, a->force);
    if (a->topology.empty() && a->ranks > kMaxFlatRanks) {
      throw Error(Errc::InvalidArgument, fmt::format("-g/--ranks {}: at most {} ranks without --topology (the flat "
                                                     "topology plan models them on)",
                                                     a->ranks, kMaxFlatRanks));
    }
    if (!a->backend.empty()) backendCapabilities(a->backend);  // an unknown name is refused, naming the known ones
    const std::optional<Protocol> protocol = parseProtoFlag(a->proto);
    CollectiveSpec spec;
    spec.kind = parseCollective(a->collective);
    spec.nranks = a->ranks;
    spec.dtype = parseDType(a->dtype);
    spec.op = parseReduceOp(a->op);
    spec.root = a->root;
    if (!a->schedule.empty()) {
      Schedule s = planFromFile(a->schedule, flags, spec, a->bytes, bytesOpt->count() > 0, a->inPlace);
      if (protocol) s.protocol = protocol;  // --proto overrides the file's
      if (a->dump) fmt::print("{}", dump(s));
      if (!a->scheduleOut.empty()) writeScheduleFile(toScheduleFile(s, commandLine()), a->scheduleOut);
      exitCode = 0;
      return;
    }
    spec.count = spec.kind == Collective::Barrier
                     ? 0
                     : countForBytes(spec.kind, spec.nranks, parseBytes(a->bytes, "--bytes"), spec.dtype);
    AlgoParams params{parseBytes(a->chunk, "--chunk-bytes"), checkChannels("--channels", a->channels), {}, protocol};
    std::optional<Topology> topo;
    if (!a->topology.empty()) topo = loadTopology(a->topology);
    if (topo) params.rankHost = rankHosts(*topo, a->ranks);
    checkSpec(spec, params);
    // --tuning, else COLLBENCH_TUNING_FILE, else the topology's shipped table (findTuningTable).
    const FoundTuningTable found =
        a->algo == "auto" ? findTuningTable(a->tuning, topo ? &*topo : nullptr, a->backend.empty() ? "sim" : a->backend)
                          : FoundTuningTable{};
    const Choice choice =
        a->algo == "auto"
            ? chooseAlgorithm(spec, SelectorOptions{topo ? &*topo : nullptr, found.table ? &*found.table : nullptr,
                                                    a->backend, "auto", found.path})
            : Choice{a->algo, "forced by --algo"};
    if (a->algo == "auto" && params.chunkBytes == 0 && params.channels == 1) {  // the selector's unless given
      params.chunkBytes = choice.chunkBytes;
      params.channels = choice.channels;
    }
    admitSchedule(spec, findAlgorithm(spec.kind, choice.algorithm), params, kScheduleBytesPerTransfer,
                  "plan a smaller call (the simulator times this one without its schedule)");
    const Schedule s = buildSchedule(spec, choice.algorithm, params);
    validate(s, ValidateOptions{a->inPlace});
    // Before any output: a native algorithm has no ops to write.
    if (!a->scheduleOut.empty()) writeScheduleFile(toScheduleFile(s, commandLine()), a->scheduleOut);
    printPlan(s, choice, a->inPlace);
    if (a->algo == "auto") fmt::print("tuning table: {}\n", found.describe());
    if (a->algo == kNcclNativeAlgorithm && topo) printNcclChoice(*topo, spec);
    if (!choice.ranking.empty()) {  // --algo auto: what the choice rests on and what came next
      fmt::print("choice: {} ({}), chunk {} B, channels {}\n", choice.algorithm, choice.source, choice.chunkBytes,
                 choice.channels);
      for (std::size_t i = 0; i < choice.ranking.size() && i < 3; ++i) {
        const Alternative& r = choice.ranking[i];
        fmt::print("  {} {:<20} chunk {:>10} B  channels {:>2}  {:>12.3f} us\n",
                   i == 0   ? "chosen:   "
                   : i == 1 ? "runner-up:"
                            : "then:     ",
                   r.algorithm, r.chunkBytes, r.channels, r.predictedUs);
      }
      const std::vector<Alternative> tried = trialCandidates(choice);
      if (tried.size() > 1) {
        std::string names;
        for (const Alternative& t : tried) names += (names.empty() ? "" : ", ") + t.algorithm;
        fmt::print("on a backend that moves data, perf first times {} (within {:g}x) and runs the fastest\n", names,
                   kTrialSpread);
      }
    }
    if (a->dump) fmt::print("{}", dump(s));
    exitCode = 0;
  });
}

}  // namespace collbench::cli
