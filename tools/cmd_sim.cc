// `collbench sim`: one collective on a simulated topology: time, algbw, busbw, and optionally a Perfetto timeline.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/tuning.h"
#include "collbench/units.h"
#include "commands.h"
#include "perf_runner.h"
#include "schedule_cli.h"
#include "sim_backend.h"

namespace collbench::cli {

void addSimCommand(CLI::App& app, int& exitCode) {
  struct Args {
    std::string topology = sim::kDefaultTopology, collective = "all_reduce", algo = "auto", bytes = "32M";
    std::string dtype = "float", op = "sum", chunk = "0", model = "CM02", mode = "auto", timeline, schedule, proto;
    std::string ncclCalibration;
    std::vector<std::string> sets;
    int ranks = 0, root = 0, channels = 1;
    bool crossTraffic = false, force = false, json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("sim", "simulate one collective on a topology (SimGrid): time, algbw, busbw");
  cmd->add_option("--topology", a->topology, "topology file or shipped name")->default_str(sim::kDefaultTopology);
  cmd->add_option("--collective", a->collective, "all_reduce | reduce_scatter | all_gather | broadcast | reduce")
      ->default_str("all_reduce");
  cmd->add_option("--algo", a->algo, "algorithm name or auto")->default_str("auto");
  cmd->add_option("--bytes", a->bytes, "message size as nccl-tests counts it (K/M/G suffixes)")->default_str("32M");
  CLI::Option* ranksOpt = cmd->add_option("-g,--ranks", a->ranks, "ranks to use (default: all of the topology's)");
  cmd->add_option("-d,--datatype", a->dtype, "float | double | half | bfloat16 | int32 | int64")->default_str("float");
  cmd->add_option("-o,--op", a->op, "sum | prod | min | max | avg")->default_str("sum");
  cmd->add_option("-r,--root", a->root, "root rank for broadcast and reduce")->default_str("0");
  cmd->add_option("--channels", a->channels, "parallel channels")->default_str("1");
  cmd->add_option("--chunk-bytes", a->chunk, "pipeline chunk size (0 = algorithm default)")->default_str("0");
  addProtoOption(cmd, a->proto);
  cmd->add_option("--model", a->model, "network model: CM02 (max-min, exact alpha-beta) | LV08 (calibrated TCP)")
      ->default_str("CM02");
  cmd->add_flag("--crosstraffic", a->crossTraffic, "add SimGrid's reverse acknowledgement flows");
  cmd->add_option("--mode", a->mode, "auto | exact | aggregated | fluid (see sim_backend.h)")->default_str("auto");
  cmd->add_option("--set", a->sets, "topology override k=v, e.g. link.nic.bandwidth_GBps=50 (repeatable)");
  cmd->add_option("--nccl-calibration", a->ncclCalibration,
                  "for --algo nccl: the NCCL model's parameters from `collbench calibrate --model nccl -o FILE`");
  cmd->add_option("--timeline", a->timeline, "write a Chrome-trace/Perfetto JSON of every op");
  cmd->add_flag("--force", a->force, "overwrite an existing --timeline file");
  cmd->add_flag("--json", a->json, "print the result as JSON");
  cmd->add_option("--schedule", a->schedule,
                  "simulate this schedule file (docs/schedule-format.md): its collective and ranks; a file in chunks "
                  "at --bytes");
  const ScheduleFlags flags{cmd->get_option("--algo"),     cmd->get_option("--collective"), ranksOpt,
                            cmd->get_option("--datatype"), cmd->get_option("--op"),         cmd->get_option("--root")};
  const CLI::Option* bytesOpt = cmd->get_option("--bytes");
  cmd->callback([a, ranksOpt, flags, bytesOpt, &exitCode] {
    if (ranksOpt->count() > 0 && a->ranks < 1) {
      throw Error(
          Errc::InvalidArgument,
          fmt::format("-g/--ranks must be >= 1, got {} (omit it to use all of the topology's ranks)", a->ranks));
    }
    checkOutputFile(a->timeline, a->force, "--timeline");
    const std::optional<Protocol> protocol = parseProtoFlag(a->proto);
    std::optional<ScheduleFile> file;  // --schedule: the file decides the collective and the ranks
    if (!a->schedule.empty()) {
      file = loadScheduleFlags(a->schedule, flags,
                               CollectiveSpec{parseCollective(a->collective), a->ranks, 0, parseDType(a->dtype),
                                              parseReduceOp(a->op), a->root});
      const CollectiveSpec& fs = file->schedule.spec;
      a->ranks = fs.nranks;
      a->collective = toString(fs.kind);
      a->dtype = toString(fs.dtype);
      a->op = toString(fs.op);
      a->root = fs.root;
    }
    std::string overrides;
    for (const std::string& s : a->sets) overrides += s + ";";
    Topology topo = sim::loadTopologyWithOverrides(a->topology, overrides);
    sim::SimConfig cfg;
    cfg.model = sim::parseNetworkModel(a->model);
    cfg.crossTraffic = a->crossTraffic;
    cfg.mode = sim::parseSimMode(a->mode);
    cfg.timeline = !a->timeline.empty();
    if (!a->ncclCalibration.empty()) {
      cfg.ncclModel = sim::ncclModelFromCalibration(a->ncclCalibration, topo, a->ranks, "--nccl-calibration");
    }
    const std::string fp = fingerprint(topo), topoName = topo.name;
    const sim::Simulator simulator(std::move(topo), a->ranks, cfg);
    const int n = simulator.nranks();

    CollectiveSpec spec;
    spec.kind = parseCollective(a->collective);
    if (spec.kind == Collective::Barrier) throw Error(Errc::InvalidArgument, "sim does not time barrier (no bytes)");
    spec.nranks = n;
    spec.dtype = parseDType(a->dtype);
    spec.op = parseReduceOp(a->op);
    spec.root = a->root;
    const std::size_t bytes = parseBytes(a->bytes, "--bytes");
    // A schedule file in bytes runs at its own size (instantiate refuses another --bytes).
    const bool fileSize = file && file->chunks == 0 && bytesOpt->count() == 0;
    spec.count = fileSize ? file->schedule.spec.count : countForBytes(spec.kind, n, bytes, spec.dtype);
    AlgoParams params;
    params.chunkBytes = parseBytes(a->chunk, "--chunk-bytes");
    params.channels = checkChannels("--channels", a->channels);
    params.rankHost = rankHosts(simulator.topology(), n);
    params.protocol = protocol;
    checkSpec(spec, params);
    // --algo auto chooses as `perf --backend sim` does: the topology's tuning table, else its cost model.
    Choice choice;
    if (file) {
      choice = Choice{file->schedule.algorithm, "from --schedule " + a->schedule};
    } else {
      // The selector (its cost model holds the fabric's routes: 1.6 GB at 131072 GPUs) is gone before the simulation.
      const FoundTuningTable found =
          a->algo == "auto" ? findTuningTable("", &simulator.topology(), "sim") : FoundTuningTable{};
      const Selector selector(
          SelectorOptions{&simulator.topology(), found.table ? &*found.table : nullptr, "sim", "auto", found.path});
      const Plan plan =
          planCall(selector, spec, CallConfig{a->algo, params.chunkBytes, params.channels, protocol}, params.rankHost);
      choice = plan.choice;
      params = plan.params;
    }

    sim::SimResult r;
    if (file) {
      Schedule s = instantiate(*file, spec);  // validated when read
      if (protocol) s.protocol = protocol;    // --proto overrides the file's
      r = simulator.run(s);
    } else {
      r = simulator.runAlgorithm(spec, choice.algorithm, params);
    }
    const std::size_t rowBytes = std::max(spec.inputBytes(), spec.outputBytes());
    const double algbw = r.seconds > 0 ? static_cast<double>(rowBytes) / r.seconds / 1e9 : 0;
    const double busbw = algbw * busBandwidthFactor(spec.kind, n);
    if (a->json) {
      SimRecord doc;
      doc.tool = toolName();
      doc.commandLine = commandLine();
      doc.topology = topoName;
      doc.topologyFingerprint = fp;
      doc.model = sim::toString(cfg.model);
      doc.collective = toString(spec.kind);
      doc.algorithm = choice.algorithm;
      doc.ranks = n;
      doc.bytes = rowBytes;
      doc.count = spec.count;
      doc.datatype = toString(spec.dtype);
      doc.timeUs = r.seconds * 1e6;
      doc.algbwGBps = algbw;
      doc.busbwGBps = busbw;
      doc.method = r.method;
      doc.exact = r.exact;
      doc.note = r.note;
      doc.ops = r.ops;
      doc.transfers = r.transfers;
      doc.simulatedActivities = r.simulatedActivities;
      doc.wallSeconds = r.wallSeconds;
      doc.spansMethod = r.spansMethod;
      doc.spansTimeUs = r.spansMethod.empty() ? 0 : r.spansSeconds * 1e6;
      fmt::print("{}\n", toJson(doc).dump(2));
    } else {
      fmt::print("# collbench {} sim: {} {} on {} ranks of {} ({}), {}\n", COLLBENCH_VERSION, toString(spec.kind),
                 choice.algorithm, n, topoName, fp, sim::toString(cfg.model));
      fmt::print("size      {} B ({} x {}, {})\n", rowBytes, rowBytes / spec.elementSize(), toString(spec.dtype),
                 spec.reduces() ? toString(spec.op) : "no reduction");
      fmt::print("time      {:.3f} us\n", r.seconds * 1e6);
      fmt::print("algbw     {:.2f} GB/s\n", algbw);
      fmt::print("busbw     {:.2f} GB/s\n", busbw);
      fmt::print("method    {}{}{}\n", r.method, r.exact ? "" : " (approximate)", r.note.empty() ? "" : ": " + r.note);
      fmt::print("work      {} ops, {} transfers, {} SimGrid activities, {:.3f} s wall\n", r.ops, r.transfers,
                 r.simulatedActivities, r.wallSeconds);
    }
    if (!a->timeline.empty()) {
      std::ofstream f(a->timeline);
      if (!f) throw Error(Errc::InvalidArgument, fmt::format("cannot write timeline file '{}'", a->timeline));
      sim::writeTimeline(
          f, r, fmt::format("{} {} {} ranks {} B on {}", toString(spec.kind), choice.algorithm, n, rowBytes, topoName));
      if (isatty(STDERR_FILENO)) fmt::print(stderr, "timeline: {} spans written to {}\n", r.spans.size(), a->timeline);
      if (!r.spansMethod.empty() && !a->json) {
        fmt::print("timeline  spans from the schedule simulated {} ({:.3f} us; the time above is {})\n", r.spansMethod,
                   r.spansSeconds * 1e6, r.method);
      }
    }
    exitCode = 0;
  });
}

}  // namespace collbench::cli
