// `collbench workload`: the collective trace of data-parallel training steps of a known model, from its
// architecture (gradient sizes) and a FLOP count at a given GPU throughput (compute gaps).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/run.h"
#include "collbench/units.h"
#include "collbench/workload.h"
#include "commands.h"
#ifdef COLLBENCH_HAVE_STRATEGY
#include "collbench/strategy/packing.h"
#endif

namespace collbench::cli {

namespace {

struct WorkloadArgs {
  std::string model;
  std::string dtype = "float";
  std::string bytesPerPack = "0";
  int worldSize = 8;
  int localReplicas = 0;
  int batch = 0;
  int seqLen = 0;
  int steps = 3;
  double tflops = WorkloadOptions::kDefaultTflops;
  std::string topology = "none";
  std::string output;
  bool force = false;
};

/// Peak memory of `collbench workload` per event written: the trace, its JSON tree and its text (GNU time: llama-7b
/// --bytes-per-pack 1K, 58200 events 0.19 GB, 582000 events 1.46 GB, about 2.5 KB an event; the file takes 387 B).
constexpr double kBytesPerEvent = 2600;

/// "12 GiB"; sizes beyond size_t (a refused request can ask for more) in scientific notation.
std::string bytesText(double bytes) {
  return bytes >= 1.8e19 ? fmt::format("{:.3g} B", bytes) : formatBytes(static_cast<std::size_t>(bytes));
}

/// TF's grouping (strategy::packValues: reversed list, a new pack once the current one exceeds bytes_per_pack).
PackFunction packing(std::int64_t bytesPerPack, DType dtype) {
#ifdef COLLBENCH_HAVE_STRATEGY
  return [bytesPerPack, dtype](const std::vector<std::size_t>& bytes) {
    std::vector<strategy::PackInput> in;
    for (std::size_t b : bytes) in.push_back(strategy::PackInput{dtype, b});
    std::vector<std::vector<std::size_t>> out;
    for (const strategy::Pack& p : strategy::packValues(in, bytesPerPack)) out.push_back(p.indices);
    return out;
  };
#else
  (void)dtype;
  if (bytesPerPack != 0) {
    throw Error(Errc::Unsupported, "--bytes-per-pack needs the strategy library, which this build lacks");
  }
  return onePack;
#endif
}

void run(const WorkloadArgs& a) {
  const Model m = buildModel(a.model, a.seqLen);
  WorkloadOptions o;
  try {
    o.dtype = parseDType(a.dtype);
  } catch (const Error& e) {
    throw Error(Errc::InvalidArgument, fmt::format("--dtype: {}", e.what()));
  }
  o.worldSize = a.worldSize;
  o.localReplicas = a.localReplicas;
  o.topology = a.topology;
  o.batchPerReplica = a.batch;
  o.steps = a.steps;
  o.tflops = a.tflops;
  o.bytesPerPack = static_cast<std::int64_t>(parseBytes(a.bytesPerPack, "--bytes-per-pack"));
  o.tool = std::string("collbench ") + COLLBENCH_VERSION;
  o.command = commandLine();
  checkOutputFile(a.output, a.force, "-o/--output");
  const PackFunction pack = packing(o.bytesPerPack, o.dtype);
  // The trace holds a collective per pack and step: refuse one larger than the memory available before building it.
  std::vector<std::size_t> bytes;
  for (const ModelTensor* t : m.tensors()) bytes.push_back(t->elements() * dtypeSize(o.dtype));
  const std::size_t packsPerStep = pack(bytes).size();
  const double events = static_cast<double>(a.steps) * static_cast<double>(packsPerStep);
  if (const double available = availableMemoryBytes(); events * kBytesPerEvent > available) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--steps {} x {} packs a step (--bytes-per-pack {}) = {:.0f} collectives: the trace "
                            "needs about {} of memory, more than the {} available; record fewer steps or larger "
                            "packs",
                            a.steps, packsPerStep, printable(a.bytesPerPack), events,
                            bytesText(events * kBytesPerEvent), bytesText(available)));
  }
  const Trace t = workloadTrace(m, o, pack);
  if (a.output.empty()) {
    std::fputs((toJson(t) + "\n").c_str(), stdout);
    return;
  }
  writeTrace(t, a.output);
  const int batch = a.batch ? a.batch : defaultBatch(m);
  const WorkloadStepTimes st = stepTimes(m, batch, o.tflops);
  std::size_t packs = 0;
  for (const TraceEvent& e : t.events) packs += e.step == 0;
  const std::size_t gradBytes = m.parameters() * dtypeSize(o.dtype);
  std::printf("# collbench workload %s: %s\n", m.name.c_str(), m.description.c_str());
  std::printf("parameters:          %zu\n", m.parameters());
  std::printf("gradient bytes/step: %zu (%s, %s)\n", gradBytes, formatBytes(gradBytes).c_str(),
              std::string(toString(o.dtype)).c_str());
  std::printf("packs/step:          %zu (bytes_per_pack %lld)\n", packs, static_cast<long long>(o.bytesPerPack));
  std::printf("forward FLOPs/%-6s %.4g\n", (m.sampleUnit + ":").c_str(), m.forwardFlopsPerSample());
  std::printf("batch per replica:   %d %s%s\n", batch, m.sampleUnit.c_str(),
              m.sequenceLength ? fmt::format("s of {} tokens", m.sequenceLength).c_str() : "s");
  std::printf("compute/step:        %.6f s (forward %.6f s, backward %.6f s at %g TFLOP/s)\n",
              st.forwardSeconds + st.backwardSeconds, st.forwardSeconds, st.backwardSeconds, o.tflops);
  std::printf("world size:          %d (%d workers x %d local replicas)\n", t.worldSize, t.topology.workers,
              t.topology.localReplicas);
  std::printf("events:              %zu written to %s\n", t.events.size(), a.output.c_str());
}

}  // namespace

void addWorkloadCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<WorkloadArgs>();
  CLI::App* cmd = app.add_subcommand(
      "workload", "write the collective trace of training a known model (gradient sizes from its architecture)");
  std::string models;
  for (const std::string& n : modelNames()) models += (models.empty() ? "" : " | ") + n;
  cmd->add_option("--model", a->model, models)->required();
  cmd->add_option("--dtype", a->dtype, std::string("gradient dtype: ") + kGradientDTypes)->default_val("float");
  cmd->add_option("--bytes-per-pack", a->bytesPerPack,
                  "TF CommunicationOptions.bytes_per_pack (K/M/G suffixes; 0 = one pack)")
      ->default_str("0");
  cmd->add_option("--world-size", a->worldSize, "replicas in sync")->default_val(8);
  cmd->add_option("--local-replicas", a->localReplicas, "replicas per worker (0 = all on one worker)")->default_val(0);
  cmd->add_option("--batch", a->batch, "samples per replica per step (0 = the model's default)")->default_val(0);
  cmd->add_option("--seq-len", a->seqLen, "tokens per sequence (0 = the model's context)")->default_val(0);
  cmd->add_option("--steps", a->steps, "training steps to record")->default_val(3);
  cmd->add_option("--tflops", a->tflops, "achieved TFLOP/s of one GPU (not peak)")
      ->default_val(WorkloadOptions::kDefaultTflops);
  cmd->add_option("--topology", a->topology, "topology name recorded in the trace (the replay's default)")
      ->default_val("none");
  cmd->add_option("-o,--output", a->output, "trace file (default: the trace on stdout)");
  cmd->add_flag("--force", a->force, "overwrite an existing output file");
  cmd->callback([a, &exitCode] {
    run(*a);
    exitCode = 0;
  });
}

}  // namespace collbench::cli
