#pragma once
/// `collbench calibrate --model nccl`: fits the open parameters of the NCCL time model (NcclModelParams,
/// nccl_model.h) of one system to nccl-tests logs, and the overlay record that carries them to any node count of that
/// system (format "collbench-nccl-calibration", docs/calibration-nccl.schema.json, docs/calibration-nccl.md).
///
/// Typical use:
///   const Topology topo = loadTopology("dgx-h100-ib400");
///   NcclCalibration cal = calibrateNccl(topo, {{readNcclTestsLog("2node.csv"), "2node.csv", NcclEnv{}, {}}});
///   writeTextFile("h100.cal.json", toJson(cal).dump(2), "-o");
///   ...
///   NcclSystem sys = ncclSystemOf(topo, 64);                 // any node count of the system
///   applyNcclCalibration(readNcclCalibration("h100.cal.json"), sys);
///   ncclChoose(sys, Collective::AllReduce, bytes, 64).predictedUs;
///
/// The fit. Every row of every log is predicted as NCCL's choice for the call on the first `ranks` ranks of the
/// topology (ncclChoose with the log's NCCL environment; the choice itself does not depend on the parameters, its
/// predicted time does). The residual of a row is log(predicted) - log(measured), so that 8 B and 8 GiB weigh alike;
/// the fit minimises their sum of squares (L2) or of absolute values (L1: iteratively reweighted, robust to single
/// hiccups of a table) by Levenberg-Marquardt in coordinates scaled to each parameter's bounds, every step projected
/// back into the bounds. Bounds are physical: an efficiency in [kNcclMinEfficiency, 1], a latency or depth within
/// [kNcclPriorLow, kNcclPriorHigh] x its prior (a zero prior: [0, kNcclPriorHigh x a reference latency]), so no fit
/// is ever an unbounded link or a free call.
///
/// Identifiability. The Jacobian of the residuals is taken at the prior and again at the fit, one column per parameter
/// in NcclParam's order. A column whose RMS is under kNcclFlatRms (moving the parameter across its whole range changes
/// no row: a one-node log and the network), or that fewer than kNcclMinSupportRows rows depend on, is not identified; a
/// column that the earlier identified columns explain to within kNcclSeparableTol of its norm (two constant latencies
/// on logs of one node count, NVLS and NVLSTree fractions where NVLSTree's NVLink stage is the bottleneck) is not
/// separable from them. Such parameters keep their prior, and the record says so ("not identified by these logs: kept
/// at prior <value>").
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/calibrate.h"
#include "collbench/fidelity.h"
#include "collbench/nccl_model.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "collbench/types.h"

namespace collbench {

/// The open parameters the fit may move, in the order identifiability is decided: a parameter the logs cannot
/// separate from an earlier one keeps its prior. Bandwidths first, the protocols' before the links' (where a link's
/// fraction shows only in LL/LL128 rows, the protocol is what limits them); of the two constant latencies, which logs
/// of one node count cannot tell apart, the network hop before the launch floor: what a multi-node log adds to NCCL's
/// latency is taken as the network's (it carries to other node counts through the hop count), and a one-node log, where
/// the hop column is flat, fits the launch floor. Last what few rows show: the LL proxy queue per channel (multi-node
/// LL rows at several channel counts), ring Simple's fill over P2P read (one-node Ampere rows) and the network's read
/// of a message longer than a packet (multi-node Simple rows whose messages are 8 KiB .. a chunk, on EFA under p4d's
/// protocol).
enum class NcclParam {
  Ll128Rate,
  LlRate,
  NvlinkFraction,
  NvlsFraction,
  NvlsTreeFraction,
  NvlsPipelineDepth,
  NetFraction,
  NetHopExtraUs,
  LaunchExtraUs,
  NetChannelUs,
  P2pReadFillSlices,
  NetReadUs
};
inline constexpr int kNcclParamCount = 12;
inline constexpr NcclParam kNcclParams[kNcclParamCount] = {NcclParam::Ll128Rate,         NcclParam::LlRate,
                                                           NcclParam::NvlinkFraction,    NcclParam::NvlsFraction,
                                                           NcclParam::NvlsTreeFraction,  NcclParam::NvlsPipelineDepth,
                                                           NcclParam::NetFraction,       NcclParam::NetHopExtraUs,
                                                           NcclParam::LaunchExtraUs,     NcclParam::NetChannelUs,
                                                           NcclParam::P2pReadFillSlices, NcclParam::NetReadUs};

/// JSON keys: "ll128_rate", "ll_rate", "nvlink_fraction", "nvls_fraction", "nvls_tree_fraction", "nvls_pipeline_depth",
/// "net_fraction", "net_hop_extra_us", "launch_extra_us", "net_channel_us", "p2p_read_fill_slices", "net_read_us".
/// Parsing throws
/// Error{InvalidArgument} naming the value.
std::string_view toString(NcclParam p);
NcclParam parseNcclParam(std::string_view s);

/// The entry of `m` that `p` sets on a system of `arch` and `nic` (per-arch and per-NIC-kind tables).
double& ncclParamRef(NcclModelParams& m, NcclParam p, GpuArch arch, NicKind nic);
double ncclParamOf(const NcclModelParams& m, NcclParam p, GpuArch arch, NicKind nic);

/// Lowest efficiency a fit may give: below a third of line rate a link is misconfigured (a fallback path, PCIe
/// instead of NVLink), which a calibration must not absorb into a number.
inline constexpr double kNcclMinEfficiency = 0.3;
/// Latencies, depths and protocol rates move within [0.5, 3] x their prior (the bounds).
inline constexpr double kNcclPriorLow = 0.5, kNcclPriorHigh = 3.0;
/// Reference of a latency whose prior is 0: NCCL's NET hwLatency of one LL ring step (tuning.cc, 2.7 us) for the hop
/// and for the proxy's cost per LL channel (at most one network step's latency per channel: 0 .. 8.1 us),
/// NCCL's ring LL base latency (tuning.cc baseLat, 6.6 us) for the launch floor; one slice for P2P read's fill on GPUs
/// whose model has none (0 .. 3 slices).
inline constexpr double kNcclHopRefUs = 2.7, kNcclLaunchRefUs = 6.6, kNcclFillRefSlices = 1.0;
/// Identifiability thresholds on Jacobian columns (d residual / d parameter over its whole bound range): flat below
/// an RMS of 0.5% of log-time; not separable when the earlier columns explain all but 5% of its norm (|cos| > 0.9987).
inline constexpr double kNcclFlatRms = 0.005, kNcclSeparableTol = 0.05;
/// A parameter is fitted only where at least kNcclMinSupportRows fitted rows depend on it, each moving by at least
/// kNcclSupportShift of its log-time over the parameter's range: one or two rows (the two LL128 sizes of a table)
/// would let it absorb their noise, and it would carry that to every other size and node count.
inline constexpr int kNcclMinSupportRows = 3;
inline constexpr double kNcclSupportShift = 0.05;
inline constexpr int kNcclCalibrateMaxIterations = 100;

struct NcclParamBounds {
  double lower = 0, upper = 0;
  bool operator==(const NcclParamBounds&) const = default;
};
/// The bounds of `p` around `prior` (see the constants above).
NcclParamBounds ncclParamBounds(NcclParam p, double prior);

/// One log to fit or predict: the table, its file (for messages), the NCCL environment it ran under (NCCL_ALGO,
/// NCCL_PROTO, NCCL_MIN_CTAS, ... as parseNcclEnv reads them; the raw variables are kept for the record).
struct NcclCalibrationLog {
  NcclTestsLog log;
  std::string source;
  std::map<std::string, std::string> envVars;
};

struct NcclCalibrationOptions {
  CalibrationLoss loss = CalibrationLoss::L2;
  int holdOutEvery = 0;  ///< hold out every k-th row of each log (k >= 2; 0: none; 1 or negative: Error)
  int maxIterations = kNcclCalibrateMaxIterations;
  int ranks = 0;  ///< -g: the rank count of logs that do not state one
  Collective defaultCollective = Collective::AllReduce;
  std::string topology;   ///< the name or file the topology came from (recorded)
  NcclModelParams prior;  ///< where the fit starts, and the centre of the latency bounds
};

/// One parameter after the fit.
struct NcclParamFit {
  NcclParam param = NcclParam::NvlinkFraction;
  double value = 0, prior = 0;
  NcclParamBounds bounds;
  bool identified = false;
  std::string note;  ///< "" when fitted inside its bounds; else why it kept its prior or sits at a bound
  bool operator==(const NcclParamFit&) const = default;
};

/// One row of a log with the prior's and the fit's prediction.
struct NcclCalibrationRow {
  std::string log;
  int line = 0, ranks = 0, nodes = 0;
  std::size_t bytes = 0;
  double measuredUs = 0, priorUs = 0, fittedUs = 0;
  std::string choice;  ///< NCCL's choice, "NVLSTree/Simple x16"
  bool heldOut = false;
  bool operator==(const NcclCalibrationRow&) const = default;
};

/// The calibration of one system (format "collbench-nccl-calibration", version 1): what applyNcclCalibration needs
/// (arch, NIC kind, parameters) and how it was obtained (logs, errors before and after, notes).
struct NcclCalibration {
  static constexpr std::string_view kFormat = "collbench-nccl-calibration";
  static constexpr int kVersion = 1;
  std::string tool, commandLine;
  std::string topology, topologyFingerprint;
  GpuArch arch = GpuArch::Hopper;
  NicKind nicKind = NicKind::InfiniBand;
  int gpusPerNode = 0;
  std::vector<NcclParamFit> params;  ///< every NcclParam, in its order
  std::vector<NcclCalibrationRow> rows;
  CalibrationErrors priorFit, fit, heldOut;  ///< |relative error| of the fitted rows (prior, fit) and the held-out
  int iterations = 0;
  std::vector<std::string> notes;
  bool operator==(const NcclCalibration&) const = default;
};

/// Fits. Throws Error{InvalidArgument} for no usable rows, a log whose collective, rank count or environment is
/// unusable (naming the log), a log with more ranks than the topology, and for degenerate fits, which are refused
/// rather than written: no parameter identified by the logs ("... identify none of the NCCL model's open parameters
/// ..."), or an identified parameter pinned at a bound that is not a zero latency ("degenerate fit: <param> at its
/// upper bound ...": the logs ask for more than line rate, or a third of it, or latencies beyond 3x the prior; the
/// topology is likely not the system the logs ran on).
NcclCalibration calibrateNccl(const Topology& topology, const std::vector<NcclCalibrationLog>& logs,
                              const NcclCalibrationOptions& options = {});

/// The model parameters of `c` (defaults elsewhere): the entries for its arch and NIC kind set to the fitted values.
NcclModelParams ncclModelParams(const NcclCalibration& c);
/// Sets `sys.model` from `c`. Throws Error{InvalidArgument} when the system is not the calibrated one: "calibration
/// '<source>' is for <arch>/<nic> GPUs, the topology's are <arch>/<nic>".
void applyNcclCalibration(const NcclCalibration& c, NcclSystem& sys, std::string_view source = "calibration");

/// Predicts every row of `log` with `params` on the topology (ncclChoose under the log's environment) and compares:
/// the fidelity table of `collbench fidelity` (fidelity.h), algorithm = NCCL's choice.
FidelityLog predictNcclLog(const Topology& topology, const NcclModelParams& params, const NcclCalibrationLog& log,
                           const NcclCalibrationOptions& options = {});

/// Reader and writer (records.h conventions): Error{InvalidArgument} "<source>: <field path>: <problem>".
NcclCalibration parseNcclCalibration(std::string_view text, std::string_view source = "calibration");
nlohmann::json toJson(const NcclCalibration& c);
/// readTextFile + parseNcclCalibration.
NcclCalibration readNcclCalibration(const std::string& path);

}  // namespace collbench
