// `collbench replay TRACE --backend B`: runs a trace's collectives on a backend with the trace's compute gaps
// between them, optionally at another world size, and reports step time, exposed communication and scaling
// efficiency. Semantics: docs/trace-format.md "Replay".
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "cli_common.h"
#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/backend_info.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/reference.h"
#include "collbench/run.h"
#include "collbench/selector.h"
#include "collbench/topology.h"
#include "collbench/trace.h"
#include "collbench/units.h"
#include "commands.h"
#include "world_options.h"

namespace collbench::cli {

namespace {

enum class Scaling { Weak, Strong };
/// What the compute before each collective waits for: Trace = each event's `after` (version 2 traces; events without
/// one as Backward for workload traces, else None); None = the previous collective's end; Backward = its issue within
/// a step, its end at a step boundary.
enum class Overlap { Trace, None, Backward };

struct ReplayArgs {
  std::string trace;
  std::string backend;
  std::string topology;
  int worldSize = 0;
  std::string scaling = "weak";
  std::string overlap = "auto";
  std::string algo = "trace";
  int warmup = 1;
  std::string gaps = "wait";
  bool check = false;
  double timeoutSeconds = kDefaultTimeoutSeconds;
  std::string output;
  bool force = false;
};

struct ReplayEvent {
  const TraceEvent* recorded = nullptr;
  CollectiveSpec spec;
  std::string group;
  std::size_t bytes = 0;
  std::string algorithm;                       ///< what ran ("" when the group has one rank: nothing to communicate)
  double gap = 0;                              ///< compute before it, rescaled
  TraceAfter after = TraceAfter::PreviousEnd;  ///< what that compute waited for
  double issue = 0;                            ///< when the compute before it was done (the program issued it)
  double start = 0, end = 0;
  std::size_t wrong = 0;
};

struct StepStats {
  std::int64_t step = 0;
  double start = 0, end = 0;  ///< on the trace's clock
  double seconds = 0, compute = 0, comm = 0, exposed = 0;
};

bool rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

/// Per-rank element count of `bytes` in the CollectiveSpec convention (trace bytes are CollectiveSpec::inputBytes).
/// Step statistics from a timeline of (step, gap, start, end): a step ends when its last collective does and
/// starts where the previous step (or the collectives before the first step, or the origin) ended.
template <typename Get>
std::vector<StepStats> stepStats(std::size_t n, Get get) {
  std::vector<StepStats> out;
  double origin = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [step, gap, start, end] = get(i);
    if (step < 0) {
      origin = std::max(origin, end);
      continue;
    }
    if (out.empty() || out.back().step != step) {
      StepStats s;
      s.step = step;
      s.start = s.end = out.empty() ? origin : out.back().end;
      out.push_back(s);
    }
    StepStats& s = out.back();
    s.compute += gap;
    s.comm += end - start;
    s.end = std::max(s.end, end);
  }
  for (StepStats& s : out) {
    s.seconds = s.end - s.start;
    // The compute stream is one: whatever part of the step it was not computing, it waited for communication.
    s.exposed = std::max(0.0, s.seconds - s.compute);
  }
  return out;
}

/// The steady state: every step but the first when there are several (the first carries one-time costs: thread
/// start-up, first touch of buffers, connection set-up).
std::vector<StepStats> steady(const std::vector<StepStats>& v) {
  return std::vector<StepStats>(v.begin() + (v.size() > 1 ? 1 : 0), v.end());
}

/// The median step of the steady state, with its own compute, communication and exposed time, so that every figure
/// of the summary describes one step (compute + exposed = step) and a step that lost its CPU, or held one huge
/// collective, moves none of them. With an even count, the mean of the two middle steps (still additive).
StepStats medianStep(const std::vector<StepStats>& v) {
  std::vector<StepStats> x = steady(v);
  if (x.empty()) return {};
  std::stable_sort(x.begin(), x.end(), [](const StepStats& a, const StepStats& b) { return a.seconds < b.seconds; });
  const std::size_t n = x.size();
  if (n % 2) return x[n / 2];
  const StepStats &a = x[n / 2 - 1], &b = x[n / 2];
  StepStats m;
  m.step = a.step;
  m.seconds = 0.5 * (a.seconds + b.seconds);
  m.compute = 0.5 * (a.compute + b.compute);
  m.comm = 0.5 * (a.comm + b.comm);
  m.exposed = 0.5 * (a.exposed + b.exposed);
  return m;
}

double meanSeconds(const std::vector<StepStats>& v) {
  const std::vector<StepStats> x = steady(v);
  double sum = 0;
  for (const StepStats& s : x) sum += s.seconds;
  return x.empty() ? 0 : sum / static_cast<double>(x.size());
}

/// Host memory the kernel could give without swapping (MemAvailable), or the free pages where /proc has no such line.
std::string formatBytesD(double bytes) {
  return bytes >= 1.8e19 ? fmt::format("{:.3g} B", bytes) : formatBytes(static_cast<std::size_t>(bytes));
}

using Clock = std::chrono::steady_clock;
/// Waits shorter than this spin rather than sleep (Linux timer slack and wake-up take tens of microseconds).
constexpr auto kSpinBelow = std::chrono::microseconds(200);

class Replayer {
 public:
  Replayer(const ReplayArgs& a, Trace trace) : a_(a), trace_(std::move(trace)) {
    if (a_.scaling == "weak") {
      scaling_ = Scaling::Weak;
    } else if (a_.scaling == "strong") {
      scaling_ = Scaling::Strong;
    } else {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--scaling must be weak or strong, got '{}'", printable(a_.scaling)));
    }
    // auto: what each event says (version 2 traces). Version 1 traces say nothing: recordings of the strategy are
    // blocking (each gap starts when the previous collective ended) and workload traces model backward passes,
    // which keep computing while earlier gradients are all-reduced.
    if (a_.overlap == "auto") {
      const bool allSay = std::all_of(trace_.events.begin(), trace_.events.end(),
                                      [](const TraceEvent& e) { return e.after.has_value(); });
      inferred_ = trace_.backend == "workload" ? Overlap::Backward : Overlap::None;
      overlap_ = allSay ? Overlap::Trace : inferred_;
    } else if (a_.overlap == "none") {
      overlap_ = Overlap::None;
    } else if (a_.overlap == "backward") {
      overlap_ = Overlap::Backward;
    } else {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--overlap must be auto, none or backward, got '{}'", printable(a_.overlap)));
    }
    if (!(a_.timeoutSeconds > 0)) {
      throw Error(Errc::InvalidArgument, fmt::format("-T/--timeout must be > 0, got {}", a_.timeoutSeconds));
    }
    const std::optional<BackendCapabilities> caps = findBackendCapabilities(a_.backend);
    const bool simulated = caps && caps->device == DeviceKind::Simulated;
    if (!a_.topology.empty() && !simulated) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("--topology {} applies to --backend {} only ({} runs on this machine's own links); "
                              "remove it",
                              printable(a_.topology), simulatedBackendNames(), printable(a_.backend)));
    }
    if (trace_.events.empty()) {
      throw Error(Errc::InvalidArgument, fmt::format("{}: events: the trace has no collectives to replay", a_.trace));
    }
    if (std::none_of(trace_.events.begin(), trace_.events.end(), [](const TraceEvent& e) { return e.step >= 0; })) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{}: no event has a step >= 0 (only collectives before the first step): no step to time",
                              a_.trace));
    }
    world_ = a_.worldSize > 0 ? a_.worldSize : trace_.worldSize;
    // Process backends (gloo) run one rank per process, launched together (`collbench launch -n N -- collbench
    // replay ...`): the world comes from the cluster resolver and each process holds only its rank's buffers.
    processMode_ = oneRankPerProcess(a_.backend);
    if (processMode_) {
      processOptions_ = processWorldOptions();
      localRank_ = std::stoi(processOptions_.at("rank"));
      const int processes = std::stoi(processOptions_.at("world"));
      if (a_.worldSize > 0 && a_.worldSize != processes) {
        throw Error(Errc::InvalidArgument, fmt::format("--world-size {} but the {} backend's world has {} processes",
                                                       a_.worldSize, a_.backend, processes));
      }
      if (a_.worldSize == 0 && processes != trace_.worldSize) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("the trace has {0} replicas but the {1} world has {2} process{4}: launch {0} "
                                "(collbench launch -n {0} -- collbench replay {3} --backend {1}) or pass "
                                "--world-size {2} to rescale",
                                trace_.worldSize, a_.backend, processes, a_.trace, processes == 1 ? "" : "es"));
      }
      world_ = processes;
    }
    if (a_.worldSize < 0)
      throw Error(Errc::InvalidArgument, fmt::format("--world-size must be >= 1, got {}", a_.worldSize));
    // The backend's own bound on ranks (host: kMaxThreadRanks), before anything is planned or built: a world far
    // beyond it would spend minutes and gigabytes building schedules only to be refused for memory.
    if (caps) admitRanks(a_.backend, world_, a_.worldSize > 0 ? "--world-size" : a_.trace + ": world_size");
    local_ = trace_.topology.localReplicas;
    if (world_ % local_ != 0) {
      // The local groups keep their size (a worker's GPUs); a world that is not a whole number of workers is flat.
      local_ = 1;
    }
    workers_ = world_ / local_;
    computeScale_ = scaling_ == Scaling::Weak ? 1.0 : static_cast<double>(trace_.worldSize) / world_;
    if (a_.gaps == "wait") {
      waitGaps_ = true;
    } else if (a_.gaps == "skip") {
      waitGaps_ = false;
    } else {
      throw Error(Errc::InvalidArgument, fmt::format("--gaps must be wait or skip, got '{}'", printable(a_.gaps)));
    }
    if (a_.warmup < 0) throw Error(Errc::InvalidArgument, fmt::format("--warmup must be >= 0, got {}", a_.warmup));
    topology_ = a_.topology;
    if (topology_.empty() && simulated) {
      // A simulated recording names its topology; use it when it is one this build can find.
      try {
        resolveTopologyPath(trace_.topology.name);
        topology_ = trace_.topology.name;
      } catch (const Error&) {
      }
    }
  }

  void run() {
    checkMemory();
    const bool tty = ::isatty(STDERR_FILENO);
    events_.reserve(trace_.events.size());
    for (const TraceEvent& e : trace_.events) events_.push_back(plan(e));
    // Backends and schedules first, so that setup does not land inside the timed replay.
    for (const ReplayEvent& e : events_) {
      if (!e.algorithm.empty()) prepare(e);
    }
    const auto t0 = Clock::now();
    double compute = 0, commEnd = 0;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      if (tty && (i % 16 == 0 || i + 1 == events_.size())) {
        std::fprintf(stderr, "\rcollbench replay: %zu/%zu collectives", i + 1, events_.size());
      }
      ReplayEvent& e = events_[i];
      // The clock (docs/trace-format.md "Replay"): collectives run one at a time in trace order; the compute
      // before one starts when the previous collective ended (after previous_end: the program waited for it) or
      // when the previous one was issued (after previous_issue: backward went on computing), and the collective
      // starts once that compute is done and the previous collective has ended.
      e.after = afterOf(i);
      if (e.after == TraceAfter::PreviousEnd) compute = std::max(compute, commEnd);
      compute += e.gap;
      e.issue = compute;
      e.start = std::max(compute, commEnd);
      if (waitGaps_ && !e.algorithm.empty() && runnerFor(e.spec.nranks).backend().movesData()) {
        waitUntil(t0, e.start);
      }
      e.end = e.start + duration(e);
      commEnd = e.end;
    }
    if (tty) std::fprintf(stderr, "\n");
  }

  void print(std::FILE* out) const {
    const auto recorded = recordedSteps();
    const auto replayed = replayedSteps();
    std::fprintf(out,
                 "# collbench %s replay %s: %zu collectives, recorded on %s with %d replicas (%d x %d); replayed on "
                 "%s%s with %d replicas, %s scaling, overlap %s\n",
                 COLLBENCH_VERSION, a_.trace.c_str(), events_.size(),
                 trace_.backend.empty() ? "?" : trace_.backend.c_str(), trace_.worldSize, trace_.topology.workers,
                 trace_.topology.localReplicas, a_.backend.c_str(),
                 topology_.empty() ? "" : fmt::format(" ({})", topology_).c_str(), world_,
                 scaling_ == Scaling::Weak ? "weak" : "strong", overlapName());
    std::fprintf(out, "# %6s  %12s  %12s  %12s  %12s  %12s\n", "step", "recorded(s)", "replayed(s)", "compute(s)",
                 "comm(s)", "exposed(s)");
    for (std::size_t i = 0; i < replayed.size(); ++i) {
      const StepStats& r = replayed[i];
      const std::string rec =
          i < recorded.size() ? fmt::format("{:12.6f}", recorded[i].seconds) : fmt::format("{:>12}", "-");
      std::fprintf(out, "  %6lld  %s  %12.6f  %12.6f  %12.6f  %12.6f\n", static_cast<long long>(r.step), rec.c_str(),
                   r.seconds, r.compute, r.comm, r.exposed);
    }
    const Summary s = summary();
    const char* which = replayed.size() > 1 ? "the median step after the first" : "the only step";
    std::fprintf(out, "# step time (%s): recorded %.6f s, replayed %.6f s (%+.1f%%); mean %.6f s, %.6f s\n", which,
                 s.recordedStep, s.replayedStep, s.recordedStep > 0 ? 100 * (s.replayedStep / s.recordedStep - 1) : 0.0,
                 s.recordedMean, s.replayedMean);
    std::fprintf(out,
                 "# in that step: compute %.6f s, exposed communication %.6f s (%.1f%% of the step), communication "
                 "%.6f s\n",
                 s.compute, s.exposed, s.replayedStep > 0 ? 100 * s.exposed / s.replayedStep : 0.0, s.comm);
    std::fprintf(out, "# scaling efficiency vs 1 replica: %.3f (%s scaling: 1-replica step %.6f s, speedup %.2f)\n",
                 s.efficiency, scaling_ == Scaling::Weak ? "weak" : "strong", s.oneReplicaStep, s.speedup);
    if (wrong_ > 0) std::fprintf(out, "# wrong elements: %zu FAILED\n", wrong_);
  }

  ReplayRun toRecord() const {
    const Summary s = summary();
    ReplayRun r;
    r.tool = toolName();
    r.commandLine = commandLine();
    r.tracePath = a_.trace;
    r.traceWorldSize = trace_.worldSize;
    r.traceBackend = trace_.backend;
    r.traceTopology = trace_.topology.name;
    r.traceSimulated = trace_.simulated;
    r.traceCommand = trace_.command;
    r.backend = a_.backend;
    r.topology = topology_;
    r.worldSize = world_;
    r.workers = workers_;
    r.localReplicas = local_;
    r.scaling = scaling_ == Scaling::Weak ? "weak" : "strong";
    r.overlap = overlapName();
    r.algo = a_.algo;
    r.warmup = a_.warmup;
    r.recordedStepSeconds = s.recordedStep;
    r.stepSeconds = s.replayedStep;
    r.recordedMeanStepSeconds = s.recordedMean;
    r.meanStepSeconds = s.replayedMean;
    r.computeSeconds = s.compute;
    r.commSeconds = s.comm;
    r.exposedSeconds = s.exposed;
    r.oneReplicaStepSeconds = s.oneReplicaStep;
    r.efficiency = s.efficiency;
    r.speedup = s.speedup;
    r.wrong = wrong_;
    const auto steps = [](const std::vector<StepStats>& v) {
      std::vector<ReplayStepRecord> out;
      for (const StepStats& st : v) out.push_back({st.step, st.seconds, st.compute, st.comm, st.exposed});
      return out;
    };
    r.recordedSteps = steps(recordedSteps());
    r.steps = steps(replayedSteps());
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const ReplayEvent& e = events_[i];
      ReplayEventRecord j;
      j.index = i;
      j.kind = toString(e.spec.kind);
      j.bytes = e.bytes;
      j.dtype = toString(e.spec.dtype);
      if (e.spec.reduces()) j.op = toString(e.spec.op);
      j.group = e.group;
      j.nranks = e.spec.nranks;
      j.algorithm = e.algorithm;
      j.step = e.recorded->step;
      j.pack = e.recorded->pack;
      j.computeGapSeconds = e.gap;
      j.after = toString(e.after);
      j.issueSeconds = e.issue;
      j.startSeconds = e.start;
      j.endSeconds = e.end;
      j.recordedStartSeconds = e.recorded->startSeconds;
      j.recordedEndSeconds = e.recorded->endSeconds;
      j.recordedIssueSeconds = e.recorded->issueSeconds;
      r.events.push_back(std::move(j));
    }
    return r;
  }

  /// Wrong elements over every process (one all-reduce through the backend in process mode).
  std::size_t wrong() {
    if (!processMode_ || runners_.empty()) return wrong_;
    return static_cast<std::size_t>(runners_.begin()->second->runner->sumOverProcesses(static_cast<long long>(wrong_)));
  }
  /// Only rank 0 of a process backend prints and writes files.
  bool reports() const { return localRank_ <= 0; }

 private:
  struct Summary {
    double recordedStep = 0, replayedStep = 0, recordedMean = 0, replayedMean = 0, compute = 0, comm = 0, exposed = 0;
    double oneReplicaStep = 0, efficiency = 0, speedup = 0;
  };

  /// Every figure from one step, the median one (medianStep), so that they add up; the means of the step times
  /// beside them show how far outliers pull.
  Summary summary() const {
    const auto rec = recordedSteps();
    const auto rep = replayedSteps();
    const StepStats r = medianStep(rec), p = medianStep(rep);
    Summary s;
    s.recordedStep = r.seconds;
    s.replayedStep = p.seconds;
    s.recordedMean = meanSeconds(rec);
    s.replayedMean = meanSeconds(rep);
    s.compute = p.compute;
    s.comm = p.comm;
    s.exposed = p.exposed;
    // One replica communicates nothing: its step is the compute alone, of one replica's batch (weak) or of the whole
    // global batch (strong).
    s.oneReplicaStep = scaling_ == Scaling::Weak ? s.compute : s.compute * world_;
    if (s.replayedStep > 0) {
      s.speedup = s.oneReplicaStep / s.replayedStep;
      s.efficiency = scaling_ == Scaling::Weak ? s.speedup : s.speedup / world_;
    }
    return s;
  }

  const char* overlapName() const {
    return overlap_ == Overlap::Trace ? "trace" : overlap_ == Overlap::None ? "none" : "backward";
  }

  /// What the compute before event `i` waited for, under --overlap.
  TraceAfter afterOf(std::size_t i) const {
    const TraceEvent& e = *events_[i].recorded;
    Overlap mode = overlap_;
    if (mode == Overlap::Trace) {
      if (e.after) return *e.after;
      mode = inferred_;
    }
    if (mode == Overlap::None) return TraceAfter::PreviousEnd;
    const bool newStep = i == 0 || e.step != events_[i - 1].recorded->step;
    return newStep ? TraceAfter::PreviousEnd : TraceAfter::PreviousIssue;
  }

  std::vector<StepStats> recordedSteps() const {
    const auto& ev = trace_.events;
    return stepStats(ev.size(), [&](std::size_t i) {
      return std::tuple(ev[i].step, ev[i].computeGapSeconds, ev[i].startSeconds, ev[i].endSeconds);
    });
  }
  std::vector<StepStats> replayedSteps() const {
    return stepStats(events_.size(), [&](std::size_t i) {
      const ReplayEvent& e = events_[i];
      return std::tuple(e.recorded->step, e.gap, e.start, e.end);
    });
  }

  int groupSize(const std::string& group) const {
    if (group == kTraceGroupReplicas) return world_;
    if (group == kTraceGroupWorkers) return workers_;
    return local_;
  }

  ReplayEvent plan(const TraceEvent& e) {
    ReplayEvent r = shape(e);
    if (r.spec.nranks > 1) r.algorithm = chooseFor(e, r.spec);
    return r;
  }

  /// Event `e` at the replay's world size and scaling: its group, bytes, spec and gap (no backend involved).
  ReplayEvent shape(const TraceEvent& e) const {
    ReplayEvent r;
    r.recorded = &e;
    r.group = e.group;
    const int n = groupSize(e.group);
    r.bytes = e.bytes;
    // All-gather inputs are per-replica values, which shrink with the per-replica batch under strong scaling; the
    // other kinds carry model-sized buffers (gradients, variables) that do not depend on the replica count.
    if (e.kind == Collective::AllGather && scaling_ == Scaling::Strong) {
      const std::size_t es = dtypeSize(e.dtype), elements = e.bytes / es;
      r.bytes = static_cast<std::size_t>(std::llround(static_cast<double>(elements) * computeScale_)) * es;
    }
    // Trace bytes are a rank's input: the nccl-tests size is n times that for all-gather.
    const std::size_t size = e.kind == Collective::AllGather ? r.bytes * static_cast<std::size_t>(n) : r.bytes;
    r.spec =
        CollectiveSpec{e.kind,  n,    e.kind == Collective::Barrier ? 0 : countForBytes(e.kind, n, size, e.dtype, 1),
                       e.dtype, e.op, rooted(e.kind) ? std::min(e.root, n - 1) : 0};
    r.gap = e.computeGapSeconds * computeScale_;
    return r;
  }

  /// Each distinct collective keeps its buffers for the whole replay: every rank's input and output here, or this
  /// process's rank's alone. Checked for the whole trace before any backend, schedule or buffer is made, so that a
  /// trace too big for this machine is bad input naming the event rather than minutes of set-up and an allocation
  /// failure.
  void checkMemory() const {
    const std::optional<BackendCapabilities> caps = findBackendCapabilities(a_.backend);
    if (!caps || !caps->movesData) return;
    const double available = availableMemoryBytes();
    std::set<std::pair<std::string, int>> held;
    double heldBytes = 0;
    for (std::size_t i = 0; i < trace_.events.size(); ++i) {
      const ReplayEvent e = shape(trace_.events[i]);
      if (e.spec.nranks <= 1) continue;  // nothing to communicate: no buffers
      if (!held.insert(std::make_pair(describe(e.spec), e.spec.nranks)).second) continue;
      const double ranksHere = localRank_ < 0 ? e.spec.nranks : 1;
      const double need =
          ranksHere * (static_cast<double>(e.spec.inputBytes()) + static_cast<double>(e.spec.outputBytes()));
      if (heldBytes + need > available) {
        throw Error(
            Errc::InvalidArgument,
            fmt::format(
                "{}: events[{}]: a {} {} on {} rank{} needs {} of host buffers{}, more than the {} "
                "available here; replay it on --backend sim",
                a_.trace, i, formatBytes(e.bytes), toString(e.spec.kind), e.spec.nranks, e.spec.nranks == 1 ? "" : "s",
                formatBytesD(need),
                heldBytes > 0 ? fmt::format(" (besides {} for earlier collectives)", formatBytesD(heldBytes)) : "",
                formatBytesD(available)));
      }
      heldBytes += need;
    }
  }

  std::string chooseFor(const TraceEvent& e, const CollectiveSpec& spec) {
    // What `perf --algo auto` would choose on the same backend and topology (the trial aside).
    const auto chooseAlgorithm = [&](const CollectiveSpec& sp) {
      return runnerFor(sp.nranks).plan(sp, CallConfig{}).choice;
    };
    std::string want = a_.algo == "trace" ? e.algorithm : a_.algo;
    if (want.empty() || want == "auto") return chooseAlgorithm(spec).algorithm;
    try {
      const AlgorithmInfo& info = findAlgorithm(spec.kind, want);
      // A library's own call runs only on that library's backend: elsewhere the replay uses collbench's choice.
      if (info.native && want.rfind(a_.backend, 0) != 0) return chooseAlgorithm(spec).algorithm;
      return info.name;
    } catch (const Error&) {
      if (a_.algo != "trace") throw;  // the user named it: a typo must not silently run something else
      return chooseAlgorithm(spec).algorithm;
    }
  }

  Runner& runnerFor(int n) {
    auto it = runners_.find(n);
    if (it != runners_.end()) return *it->second->runner;
    if (processMode_ && n != world_) {
      throw Error(Errc::Unsupported,
                  fmt::format("a {}-rank group cannot run on the {} backend's world of {} processes (every process "
                              "takes part in each collective); replay this trace on host or sim",
                              n, a_.backend, world_));
    }
    BackendOptions opts = processOptions_;
    if (!topology_.empty()) opts["topology"] = topology_;
    const Topology* topo = topologyFor(n);
    RunnerOptions ro{topo, nullptr, "", localRank_, a_.timeoutSeconds};
    return *runners_.emplace(n, std::make_unique<OwnedRunner>(a_.backend, n, opts, ro)).first->second->runner;
  }

  /// The replay's topology when it has at least n ranks (hosts for hierarchical algorithms, the selector's model).
  const Topology* topologyFor(int n) {
    if (topology_.empty()) return nullptr;
    if (!topo_) topo_ = std::make_unique<Topology>(loadTopology(topology_));
    return static_cast<int>(topo_->ranks.size()) >= n ? topo_.get() : nullptr;
  }

  AlgoParams paramsFor(int n) {
    AlgoParams p;
    if (const Topology* topo = topologyFor(n)) p.rankHost = rankHosts(*topo, n);
    if (p.rankHost.empty()) {
      // Without a topology, replicas sit on their workers as in the trace: replica r on worker r / local.
      for (int r = 0; r < n; ++r) p.rankHost.push_back(n == world_ ? r / local_ : r);
    }
    return p;
  }

  void prepare(const ReplayEvent& e) {
    Runner& runner = runnerFor(e.spec.nranks);
    if (!runner.backend().movesData()) return;
    runner.schedule(e.spec, e.algorithm, paramsFor(e.spec.nranks));
    // Buffers are made once per distinct collective (checkMemory admitted them all).
    if (!prepared_.insert(std::make_pair(describe(e.spec), e.spec.nranks)).second) return;
    runner.buffers(e.spec);
  }

  /// Seconds the collective takes on the backend (0 for a one-rank group).
  double duration(ReplayEvent& e) {
    if (e.algorithm.empty()) return 0;
    const CollectiveSpec& s = e.spec;
    Runner& runner = runnerFor(s.nranks);
    const AlgoParams params = paramsFor(s.nranks);
    // A simulator returns the same time for the same collective: the runner simulates each distinct one once.
    if (!runner.backend().movesData()) return runner.simulate(s, e.algorithm, params);
    const Schedule& sched = runner.schedule(s, e.algorithm, params);
    const bool first = seen_.insert(&sched).second;
    ProcessBuffers& bufs = runner.buffers(s);
    if (a_.check) bufs.fill();
    const RunResult r =
        runner.backend().run(sched, bufs.views(), RunOptions{1, first ? a_.warmup : 0, a_.timeoutSeconds});
    if (a_.check) {
      e.wrong = bufs.countWrong();
      wrong_ += e.wrong;
    }
    // A collective is over when its slowest rank is done.
    return r.rankSeconds.empty() ? r.seconds : *std::max_element(r.rankSeconds.begin(), r.rankSeconds.end());
  }

  /// Lets the wall clock reach `at` seconds after `t0`, so that a real backend sits idle for the compute gaps as it
  /// did in the recording (idle workers go to sleep and take time to wake: back-to-back replay would be too fast).
  /// Spins for the last stretch: sleeping is too coarse for gaps of microseconds.
  static void waitUntil(Clock::time_point t0, double at) {
    const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
    if (const auto left = deadline - Clock::now(); left > kSpinBelow) std::this_thread::sleep_for(left - kSpinBelow);
    while (Clock::now() < deadline) {
    }
  }

  const ReplayArgs& a_;
  Trace trace_;
  Scaling scaling_ = Scaling::Weak;
  Overlap overlap_ = Overlap::None;
  Overlap inferred_ = Overlap::None;  ///< for events without `after` under --overlap auto
  int world_ = 1, local_ = 1, workers_ = 1;
  double computeScale_ = 1;
  bool waitGaps_ = true;
  bool processMode_ = false;
  int localRank_ = -1;  ///< this process's rank on a process backend, -1 when every rank is here
  BackendOptions processOptions_;
  std::string topology_;
  std::unique_ptr<Topology> topo_;
  std::vector<ReplayEvent> events_;
  std::map<int, std::unique_ptr<OwnedRunner>> runners_;  ///< one per group size
  std::set<std::pair<std::string, int>> prepared_;       ///< collectives whose buffers are held
  std::set<const Schedule*> seen_;                       ///< schedules run once (warm-up before the first run)
  std::size_t wrong_ = 0;
};

/// The flag that names the output file, in messages.
constexpr std::string_view kOutputFlag = "-J/--output";

int run(const ReplayArgs& a) {
  checkOutputFile(a.output, a.force, kOutputFlag);
  Replayer r(a, readTrace(a.trace));
  r.run();
  const std::size_t wrong = r.wrong();
  if (!r.reports()) return wrong > 0 ? 1 : 0;
  r.print(stdout);
  if (!a.output.empty()) writeTextFile(a.output, toJson(r.toRecord()).dump(2), kOutputFlag);
  return wrong > 0 ? 1 : 0;
}

}  // namespace

void addReplayCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "run a trace's collectives with its compute gaps on a backend (optionally at another world size)");
  cmd->add_option("trace", a->trace, "trace file (collbench train --trace, collbench workload)")->required();
  cmd->add_option("--backend", a->backend, "sim | host | gloo | nccl")->required();
  cmd->add_option("--topology", a->topology, "topology for --backend sim (default: the trace's, else the sim default)");
  cmd->add_option("--world-size", a->worldSize, "replicas to replay on (default: the trace's)")->default_val(0);
  cmd->add_option("--scaling", a->scaling,
                  "weak: per-replica work stays (gaps kept); strong: global batch stays (gaps x N/M)")
      ->default_val("weak");
  cmd->add_option("--overlap", a->overlap,
                  "auto (each event's `after`; version 1 traces: backward for workload traces, else none) | none "
                  "(compute waits for each collective) | backward (compute continues within a step)")
      ->default_val("auto");
  cmd->add_option("--algo", a->algo, "trace (the recorded algorithm where this backend has it) | auto | a name")
      ->default_val("trace");
  cmd->add_option("--warmup", a->warmup, "untimed runs of each distinct collective before its first timed one")
      ->default_val(1);
  cmd->add_option(
         "--gaps", a->gaps,
         "wait: real backends sit idle for the compute gaps in wall time (as recorded); skip: only on the clock")
      ->default_val("wait");
  cmd->add_flag("--check", a->check, "check results of real backends (exit 1 if any are wrong)");
  cmd->add_option("-T,--timeout", a->timeoutSeconds, "seconds a rank waits for a peer")
      ->default_val(kDefaultTimeoutSeconds);
  cmd->add_option("-J,--output", a->output, "write the replayed timeline and summary as JSON (collbench-replay)");
  cmd->add_flag("--force", a->force, "overwrite an existing -J file");
  cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

}  // namespace collbench::cli
