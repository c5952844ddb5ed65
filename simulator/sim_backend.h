#pragma once
/// The SimGrid simulator: the "sim" backend, and the richer interface `collbench sim` and `sweep` use.
/// This header does not include SimGrid (only simulator/*.cc do).
///
/// What is simulated (DESIGN.md "Simulator"):
/// - The platform is the Topology: one SPLITDUPLEX link per topology link (bandwidth_GBps per direction, capped by a
///   switch's switch_GBps port limit), switches are routing points only (non-blocking: no false contention), routes
///   are Router's. A transfer goes from the sender's node to the receiver's node along that route.
/// - Each matched Send/Recv(Reduce) pair is one transfer. It starts when the send op and the receive op are both
///   ready (all their deps finished: rendezvous) and the previous transfer of the same (src, dst, channel)
///   connection has finished (connections are FIFO: a later transfer never overtakes or overlaps an earlier one).
///   The send completes when the transfer does; a RecvReduce then reduces `bytes` on the receiver at its
///   reduce_GBps before completing.
/// - Reduce and Copy ops cost bytes / reduce_GBps on the rank's node (a copy is a memory-bound kernel like a
///   reduction; a Copy whose source and destination are the same range is free). reduce_GBps 0 means infinitely
///   fast. Concurrent reductions on one node share its rate. Ranks on the same node (several ranks on one cpu) have
///   no link between them: their transfers are memory copies at that rate too.
/// - Switch ops (schedule.h) are performed by the switch of their group (validateOnTopology: the switch nearest to
///   every member; one that cannot reduce or multicast is an Error{InvalidSchedule} naming the rank, the op and the
///   switch). Each leg is a flow between a member's node and the switch along Router's path; where members reach
///   the switch through another switch that reduces and multicasts, shared with another member (a rail over several
///   leaves under a spine: SHARP's aggregation tree), their legs end there and one leg joins it to the next such
///   switch above, shared likewise, or to the group's switch.
///   The legs of one op stream together (cut-through, as NVLS's multimem instructions): a SwitchReduce sends every
///   member's bytes up once the member and the root are ready, and the reduced bytes down to the root once every
///   contribution has started, through the switch's reduction port toward the root (reduce_GBps, shared by the
///   reductions delivered there); non-roots complete when every contribution is in, the root when the reduced bytes
///   have arrived too. A Multicast sends the root's bytes up once it is ready and a copy down to each member once the
///   root and that member are ready (at link rate: replication is not reduction); a member completes when its copy has
///   arrived and the root's bytes have all gone up. One NVLS all-reduce loop of B bytes on n ranks (link L, latency a,
///   reduction S) is 2a + max(B / L, B / (n min(L, S))) + B / L (tests/sim/test_sim_switch.cc). The exact and fluid
///   methods time switch ops: schedules with them are simulated op by op, or on the fluid network in fluid mode and,
///   past kExactFallbackBudget, in auto and aggregated modes (README.md). On the timeline a SwitchReduce is a reduce
///   span and a Multicast a receive from its root.
/// - Protocols (Schedule::protocol, AlgoParams::protocol; NCCL 2.28's, the rule in collbench/wire_rule.h, shared with
///   the cost model): each network transfer takes the protocol's per-step latency on its route's path class (NVLink
///   when every link is of class "nvlink", the network when a link is of neither "nvlink" nor "pcie", else PCIe:
///   ncclStepLatencyUs, NCCL's Ring row) or its route's latency, whichever is larger (NCCL's step latency includes the
///   wire), once both sides are ready, on a network path plus the system's network latency beyond NCCL's
///   (WireRule::net: the hop's, and the receiver's read for a transfer of GPU memory longer than one packet), then
///   carries bytes / payload efficiency (ncclProtocolEfficiency: LL 2x, LL128 128/120x, Simple 1x); the call pays the
///   launch floor once (ncclBaseLatencyUs): every op starts that much later. A schedule without a protocol is timed
///   without these on ranks that are not GPUs of a known arch (CPU ranks and generic topologies keep their closed
///   forms), and on GPU ranks of a known arch as the nccl backend runs it, NCCL's point-to-point rule: each transfer LL
///   up to kNcclP2pLLThresholdBytes, Simple above, with the floor of the slowest of them. Same-node memory copies,
///   reductions and switch ops carry their bytes unchanged (NCCL runs NVLS and CollNet with Simple only, payload 1),
///   but a switch op's legs through an in-host NVSwitch move at the share of the links' and the reduction port's rates
///   NCCL's NVLS reaches (WireRule::switchShare, NcclModelParams::nvlsFraction 0.686: one 8 x H100 node's NVLS at 1
///   GiB simulated at 628 GB/s busbw at the full rates, 433 at the share, 466 measured); a schedule with switch ops
///   pays NCCL's NVLS latency (25 us on NVLink) once instead of a smaller floor, as NCCL's model charges NVLS per call
///   rather than per step. NCCL's per-channel LL bandwidth cap (tuning.cc llMaxBw) is not modelled. Nor is NCCL's
///   pipelining of a connection's steps (NCCL_STEPS slots in flight): a schedule's transfers on one connection follow
///   each other, each paying its latency, so a latency-bound ring over several hosts pays the network latency on every
///   step where NCCL's model pays it on the 2 (nodes - 1) steps that cross hosts. In every method alike, so the methods
///   still agree (tests/sim/test_sim_aggregation.cc); closed forms in tests/sim/test_sim_protocol.cc.
/// - Network models: CM02 (default; max-min fair sharing, time = latency + bytes / share, TCP window bound off,
///   cross-traffic off: exact alpha-beta where nothing is shared) and LV08 (SimGrid's calibrated TCP model: latency
///   x13.01, bandwidth x0.97, RTT-weighted sharing, 4 MiB window). `crossTraffic` adds SimGrid's reverse-direction
///   acknowledgement flows (0.05 of the bandwidth) to either model.
/// - The simulator is deterministic: one simulated execution is the result (iterations and warmup are ignored by
///   the backend). Buffers are never touched.
///
/// Scale (SimResult::method says which was used):
/// - "exact": every transfer and reduction is its own SimGrid activity.
/// - "aggregated": the dependency graph is evaluated batch by batch (a batch is every transfer that became ready once
///   the previous batch finished: a ring step, a butterfly round, a direct all-to-all). Within a batch, flows that
///   share a directed link form a contention group; each distinct group (start offsets, sizes, link parameters,
///   sharing structure) is simulated once in SimGrid and its per-flow times are reused for every identical group.
///   The result is exact (equal to "exact") when the assumptions it checks hold: no two batches use a link at the
///   same time, and no two reductions overlap on a node. Otherwise SimResult::exact is false and `note` says where.
/// - "ring-model": ring all-reduce without building the schedule (the same aggregated evaluation, streamed step by
///   step), for rank counts whose schedule would not fit in memory. simulator/README.md has the details.
/// - "extrapolated": pipelined algorithms (tree, chain broadcast/reduce) with many chunks: the same schedule with a
///   window of chunks of the same size is simulated and timed round by round; the real time adds the mean per-round
///   increment of the window's second half for each further chunk (equal to the full simulation where the pipeline
///   is periodic; an estimate where the increments wander). Windows beyond op by op's budget run on the fluid
///   network: `tree` on the tree model ("tree-model" when it covers the whole call), other pipelines as "fluid".
/// - "fluid" (SimMode::Fluid, CM02 without cross-traffic): the dependency graph timed by an event-driven fluid model
///   without SimGrid: CM02's latency phase and sharing penalties, each flow at its smallest weighted share of its links
///   (max-min's redistribution of what a flow bottlenecked elsewhere leaves is not done). Equal to op by op where no
///   link is shared at once; otherwise an estimate, never marked exact, whose error against op by op is measured in
///   tests/sim (test_sim_aggregation.cc, FluidVsExact: 0.5-2.4 % on trees, 5.4 % on an oversubscribed fat tree).
/// The method never depends on SimConfig::timeline; a data-free method's spans come from simulating the schedule
/// (SimResult::spansMethod).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/nccl_model.h"
#include "collbench/topology.h"
#include "collbench/wire_rule.h"

namespace collbench::sim {

enum class NetworkModel { CM02, LV08 };
/// "CM02", "LV08".
std::string_view toString(NetworkModel m);
/// Case-insensitive; throws Error{InvalidArgument} naming the value and the accepted names.
NetworkModel parseNetworkModel(std::string_view s);

enum class SimMode { Auto, Exact, Aggregated, Fluid };
std::string_view toString(SimMode m);
SimMode parseSimMode(std::string_view s);

/// Auto mode simulates op by op up to kAlwaysExactTransfers transfers. Above, it aggregates, and falls back to op by op
/// when the aggregated result cannot be proved exact and there are at most exactTransferLimit transfers. Where the
/// connections with a transfer ready at the start times all transfers exceed kExactFallbackBudget, it runs the fluid
/// method first (where that applies: CM02 without cross-traffic). Op by op
/// costs 1-3 us of host time per transfer where flows interact little (a ring) and up to ~150 us where one
/// contention system spans the machine (a pipelined tree on 64 ranks), so the limits are counts of transfers that
/// stay within seconds in the bad case.
inline constexpr std::size_t kAlwaysExactTransfers = 20000;
inline constexpr std::size_t kDefaultExactTransferLimit = 100000;
/// The fallback also needs transfers x ranks <= this: SimGrid scans its list of in-flight actor-less comms at each
/// completion, so op by op costs grow with concurrency (Rabenseifner on 4096 ranks of a fat tree: ~0.5 ms/transfer).
inline constexpr double kExactFallbackBudget = 2e7;
/// Transfers the tree model evaluates for one call (0.2-0.6 us each here): the whole pipeline when it fits (the fluid
/// method's result), else the longest window that does, extrapolated. A round's increment varies by +-15 % on NCCL's
/// host tree over rails (flows meeting on a host's NIC drift against each other), so a window's period is an
/// estimate: 1 GiB at 1024 GPUs against the whole pipeline (one channel 35873 us; four channels, the selector's choice
/// there, 9341 us), the least window (50 rounds) reads +1.3 / -0.2 %, this budget's 366 / 91 rounds -0.04 / -0.5 %
/// (61 rounds, a budget of 1 M: -1.6 %); `--algo auto` there took 0.55 / 0.99 / 1.56 s with budgets of 1 / 1.5 /
/// 2 M (1 s is the target). Past the budget, one channel in four of each tree now stands for the others where the
/// rails allow (simulator/engine.h representTreeChannels): four channels at 1024 GPUs run whole (9434 us, +1.0 %),
/// and `--algo auto` there takes 0.64 s.
inline constexpr std::size_t kDefaultTreeModelTransfers = 1500000;

struct SimConfig {
  NetworkModel model = NetworkModel::CM02;
  bool crossTraffic = false;
  SimMode mode = SimMode::Auto;
  std::size_t exactTransferLimit = kDefaultExactTransferLimit;
  /// The tree model's budget (kDefaultTreeModelTransfers); a lower one makes it extrapolate from its least window.
  std::size_t treeModelTransfers = kDefaultTreeModelTransfers;
  /// Record one span per op (SimResult::spans) for --timeline.
  bool timeline = false;
  /// The NCCL environment (NCCL_ALGO, NCCL_PROTO, ...) under which algorithm "nccl" is emulated; nullopt: this
  /// process's, read at the call.
  std::optional<NcclEnv> ncclEnv = std::nullopt;
  /// The NCCL time model's parameters for algorithm "nccl" (a `collbench calibrate --model nccl` overlay applied to
  /// the topology's system: ncclModelFromCalibration); nullopt: the model's defaults.
  std::optional<NcclModelParams> ncclModel = std::nullopt;
  /// GPUs one host thread launches each call on, for algorithm "nccl" (NcclSystem::gpusPerThread; nccl-tests -g).
  int gpusPerThread = 1;
  /// The NCCL release whose choice algorithm "nccl" emulates (NcclEnv::version; a log's NCCL).
  int ncclVersion = kNcclVersionEmulated;
};

enum class SpanKind : std::uint8_t { Send, Recv, Reduce, Copy };
std::string_view toString(SpanKind k);

/// One op (or the reduction part of a RecvReduce) on the simulated clock, in seconds from the collective's start.
struct Span {
  int rank = 0;
  int op = 0;  ///< index in the rank's program
  int peer = -1;
  int channel = 0;
  SpanKind kind = SpanKind::Send;
  std::uint64_t bytes = 0;
  double start = 0, end = 0;
};

struct SimResult {
  double seconds = 0;         ///< simulated time of one execution
  std::string method;         ///< "exact", "aggregated", "fluid", "ring-model", "hierarchical-model", "extrapolated",
                              ///< "tree-model", "nccl-model"
  bool exact = true;          ///< false when an aggregated model could not prove it equals op-by-op simulation
  std::string note;           ///< why not exact, or how the value was extrapolated
  std::size_t ops = 0;        ///< schedule ops represented
  std::size_t transfers = 0;  ///< matched send/receive pairs represented
  std::size_t simulatedActivities = 0;  ///< SimGrid comms and executions actually run
  std::size_t patterns = 0;             ///< distinct contention groups simulated (aggregated methods)
  double wallSeconds = 0;               ///< host time, fork and platform construction included
  std::size_t peakRssBytes = 0;         ///< peak resident memory of the process that simulated (the child)
  double cpuSeconds = 0;                ///< user + system time of the process that simulated
  std::vector<Span> spans;              ///< when SimConfig::timeline
  /// When the method is data-free (ring-model, extrapolated) and a timeline was asked for, the spans come from a
  /// simulation of the schedule: its method and total time (which may differ from `seconds` where either is
  /// approximate). Empty when the spans are this method's own.
  std::string spansMethod;
  double spansSeconds = 0;
};

/// A topology plus simulation settings; each run() is independent (own SimGrid engine in a forked child process,
/// since SimGrid allows one engine per process; set COLLBENCH_SIM_INPROCESS=1 to run in-process, once, for
/// profiling).
class Simulator {
 public:
  /// Simulates ranks 0..nranks-1 of the topology (nranks <= 0: all of them). Throws Error{InvalidArgument} when the
  /// topology has fewer ranks.
  Simulator(Topology topology, int nranks, SimConfig config = {});

  int nranks() const { return nranks_; }
  const Topology& topology() const { return topo_; }
  const SimConfig& config() const { return config_; }

  /// One simulated execution of `s`. Throws Error{InvalidArgument} when s has another rank count,
  /// Error{InvalidSchedule} when it does not match or deadlocks.
  SimResult run(const Schedule& s) const;
  /// Simulates `algorithm` for `spec` (spec.nranks must equal nranks()), building the schedule when it is small
  /// enough and using the data-free models (ring-model, extrapolated) when it is not.
  SimResult runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params = {}) const;
  /// What NCCL 2.28 would run for `spec` on this topology (algorithm "nccl": ncclChoose on the topology's NcclSystem
  /// under SimConfig::ncclEnv); runAlgorithm(spec, "nccl") takes its predicted time (method "nccl-model"), or with
  /// SimMode::Exact simulates the choice as a schedule (runNcclChoice).
  NcclChoice ncclChoice(const CollectiveSpec& spec) const;

 private:
  /// NCCL's choice through the IR: the registered algorithm of its pattern (Ring "ring", Tree "tree", NVLS "nvls",
  /// NVLSTree "nvls_tree", CollNetDirect "collnet_direct", CollNetChain "collnet_chain", PAT "pat") with the choice's
  /// channels, protocol and (where the generator reads it) chunk, simulated by the auto policy's method; the note
  /// says "NCCL 2.28: <choice>, simulated as <algorithm> ...". Error{Unsupported} naming the algorithm where none is
  /// registered. `params` gives the ranks' hosts (the topology's when empty).
  SimResult runNcclChoice(const CollectiveSpec& spec, const NcclChoice& choice, const AlgoParams& params) const;

  Topology topo_;
  int nranks_;
  SimConfig config_;
  /// The wire rule's view of the ranks, found once (WireRule::of): GPUs of a known arch (NCCL's point-to-point rule
  /// applies without a protocol), and the network's latency beyond NCCL's step latency.
  bool gpuRanks_ = false;
  NetworkLatency netLatency_;
};

/// loadTopology(nameOrPath), then applyOverride for each of the ';'-separated assignments (empty ones ignored);
/// "params.<name>=<value>" assignments set a generator document's parameters before it generates (loadTopology with
/// params), so a what-if can vary a fabric's size or oversubscription.
Topology loadTopologyWithOverrides(const std::string& nameOrPath, const std::string& overrides);

/// The NCCL model parameters of the calibration file `path` (collbench-nccl-calibration) for the first `nranks` ranks
/// of `topology`: the overlay carries to any node count of the calibrated system. Throws Error{InvalidArgument}
/// naming `what` (the flag or option) and the file when it cannot be read or parsed, or is for another system.
NcclModelParams ncclModelFromCalibration(const std::string& path, const Topology& topology, int nranks,
                                         std::string_view what);

/// Writes a Chrome trace (JSON object format, opened by chrome://tracing and ui.perfetto.dev): one process per
/// rank, one thread lane per concurrent send, receive or compute span, times in microseconds.
void writeTimeline(std::ostream& out, const SimResult& r, const std::string& title);

/// The "sim" backend. Options: "topology" (name or path; default kDefaultTopology), "model" (CM02 | LV08),
/// "set" ("k=v;k=v" topology overrides), "crosstraffic" (0 | 1), "mode" (auto | exact | aggregated), "nccl_env"
/// ("NCCL_ALGO=Ring NCCL_MIN_CTAS=24": NCCL variables over the process's, for the native algorithm "nccl"),
/// "nccl_calibration" (a calibration file of the NCCL model for "nccl"). nranks <= the topology's ranks (<= 0: all).
std::unique_ptr<Backend> makeSimBackend(int nranks, const BackendOptions& options);
inline constexpr const char* kDefaultTopology = "dgx-h100-8x1";

void registerSimBackend();

}  // namespace collbench::sim
