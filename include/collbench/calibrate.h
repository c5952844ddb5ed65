#pragma once
/// `collbench calibrate`: fits the cost model's alpha and beta per link class (intra-host, inter-host), gamma
/// (reduction rate) and a fixed per-call overhead to measured runs by least squares, and writes the network part as a
/// topology (classTopology) that the simulator and the cost model read.
///
/// The fit: for parameters p, every sample's model estimate is linear in u = (alpha_intra, alpha_inter,
/// 1/beta_intra, 1/beta_inter, 1/gamma, overhead) with the coefficients of its critical path (CostTerms), and the
/// critical path depends on p only through which flow or phase is slowest. So: evaluate the coefficients at p, solve
/// the non-negative least squares problem min sum w ((A u - t) / t)^2 (relative errors, so that 1 KiB and 1 GiB weigh
/// alike; w = 1 for the default L2 loss, the least squares; for L1, w = 1/|relative residual| at p,
/// iteratively reweighted, which a few disturbed measurements pull less), repeat from the new p until it stops
/// changing (or kCalibrateMaxIterations), keeping the best fit seen.
/// The per-call overhead (CostModel's callOverheadUs, NCCL's baseLat analogue) dominates host runs at small sizes
/// (waking the rank threads and seeing every rank finish). Topology files have no field for it: it is reported and
/// written to the fit JSON, and the calibrated simulator's times are simulated time + overhead.
/// Memory tiers (Topology::memoryTiers): rates inside a host depend on whether the call's working set fits in a
/// cache, which one alpha-beta-gamma cannot follow (measured on this project's 2-vCPU VM: 2-rank all-reduce moves
/// ~10 GB/s below 1 MiB and ~2 GB/s from 16 MiB up). With k tiers, the samples are split at k - 1 working-set bounds
/// and tier j's intra-host bandwidth and reduction rate are tier 0's times a fitted scale s_j; the bounds are chosen
/// among the geometric midpoints of neighbouring training working sets (each tier keeps at least
/// kCalibrateMinSizesPerTier of them) by the smallest training residual, the scales by alternating least squares
/// with the other parameters. The number of tiers is given, or chosen by the Bayesian information criterion
/// (n ln(RSS / n) + parameters x ln n) among 1..kCalibrateMaxMemoryTiers, so a network without cache levels keeps
/// one.
/// Parameters no sample depends on (inter-host on one host, gamma without reductions) keep their initial values and
/// are reported as not identified. Every `holdOutEvery`-th size of each series (collective, algorithm, ranks) is
/// left out of the fit and only predicted, so the error reported on it is honest.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "collbench/cost_model.h"
#include "collbench/nccl_tests_log.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "collbench/types.h"

namespace collbench {

struct CalibrationSample {
  Collective collective = Collective::AllReduce;
  std::string algorithm;
  int nranks = 1;
  int hosts = 1;          ///< ranks split evenly over hosts in rank order
  std::size_t bytes = 0;  ///< nccl-tests size
  DType dtype = DType::F32;
  std::size_t chunkBytes = 0;
  int channels = 1;
  double timeUs = 0;
  std::string origin;  ///< "file:line" or "file results[i]", for messages
  /// Read from an nccl-tests log (not a collbench table): NCCL chose its own algorithm and protocol per size.
  bool ncclTests = false;
};

/// The rows of a collbench-perf JSON document (`collbench perf -J`, any backend): out-of-place times, the row's
/// algorithm (the selector's pick under --algo auto) and its chunk/channels (row fields, else the config's). Hosts
/// come from config.topology when it names one (loadTopology), else `hosts`. Throws Error{InvalidArgument} naming the
/// field and the value for documents that are not collbench-perf version 1 or rows that are malformed.
std::vector<CalibrationSample> samplesFromPerfJson(const std::string& jsonText, const std::string& source,
                                                   int hosts = 1);
/// The rows of an nccl-tests log (out-of-place times). NCCL picks its own algorithm per size, so `algorithm` says
/// which collbench algorithm models the run (record logs with NCCL_ALGO=Ring NCCL_PROTO=Simple for "ring"). The
/// collective comes from the log, else `collective`; hosts from its rank lines. Throws Error{InvalidArgument} when
/// the log names no collective and none is given, or for an algorithm the collective does not have.
std::vector<CalibrationSample> samplesFromNcclTestsLog(const NcclTestsLog& log, const std::string& source,
                                                       const std::string& algorithm,
                                                       std::optional<Collective> collective = std::nullopt);

struct CalibrationParams {
  LinkClassCost intra{true, 1.0, 10.0};
  LinkClassCost inter{true, 5.0, 10.0};
  double gammaGBps = 10.0;    ///< 0 = free reductions
  double callOverheadUs = 0;  ///< fixed cost of one call (CostModel::callOverheadUs)
};

inline constexpr int kCalibrateMaxIterations = 30;
/// Bandwidth written for a class whose fitted 1/beta is 0 (no measurable transfer cost): effectively infinite.
inline constexpr double kCalibrateUnboundedGBps = 1e6;

/// What the fit minimises: the sum of squared relative errors (least squares, the default) or of absolute ones
/// (robust to a few disturbed measurements).
enum class CalibrationLoss { L1, L2 };

/// Most memory tiers the automatic choice tries: a cache that holds the call, the last-level cache, DRAM.
inline constexpr int kCalibrateMaxMemoryTiers = 3;
/// Distinct training working sets each tier needs: a tier of one size would fit it exactly and predict nothing.
inline constexpr int kCalibrateMinSizesPerTier = 2;

struct CalibrationOptions {
  CalibrationLoss loss = CalibrationLoss::L2;
  int holdOutEvery = 2;  ///< 0 or 1: no hold-out (fit on everything); negative: Error{InvalidArgument}
  int maxIterations = kCalibrateMaxIterations;
  std::string topologyName = "calibrated";
  NodeKind rankKind = NodeKind::Cpu;
  CalibrationParams initial;
  /// 0: choose 1..kCalibrateMaxMemoryTiers; 1: one set of rates for every size; k >= 2: k tiers (Error{InvalidArgument}
  /// when the training samples have fewer than k x kCalibrateMinSizesPerTier working sets).
  int memoryTiers = 0;
};

struct SampleFit {
  CalibrationSample sample;
  double predictedUs = 0;
  double relError = 0;  ///< (predicted - measured) / measured
  bool heldOut = false;
};

struct CalibrationResult {
  CalibrationParams params;  ///< tier 0's rates
  /// The fitted tiers (also in `topology`); empty with one tier.
  std::vector<MemoryTier> memoryTiers;
  /// alpha_intra, alpha_inter, beta_intra, beta_inter, gamma, call overhead: whether the samples determine it.
  bool identified[6] = {false, false, false, false, false, false};
  std::vector<SampleFit> fits;
  double fitMedian = 0, fitWorst = 0;          ///< |relative error| over the fitted samples
  double heldOutMedian = 0, heldOutWorst = 0;  ///< 0 when heldOutCount is 0 (print n/a)
  int heldOutCount = 0;
  int iterations = 0;
  Topology topology;  ///< classTopology of the fit, big enough for every sample
  std::vector<std::string> notes;
  /// Identified bandwidths the fit gave no cost (beta_intra, beta_inter: written as kCalibrateUnboundedGBps). On
  /// nccl-tests logs this is a degenerate fit, which `collbench calibrate` refuses to write: link classes cannot
  /// explain NCCL's own algorithms (--model nccl fits those).
  std::vector<std::string> unboundedBandwidths;
};

/// What `collbench calibrate` reads: collbench-perf JSON files (a '{' first) and nccl-tests logs or `collbench perf`
/// tables (the others), kept where their size is in [minBytes, maxBytes] (maxBytes 0: no limit).
struct CalibrationInput {
  std::vector<std::string> files;
  int hosts = 1;                         ///< hosts of perf runs without a topology (samplesFromPerfJson)
  std::string assumeAlgorithm = "ring";  ///< what models nccl-tests runs (samplesFromNcclTestsLog)
  std::optional<Collective> collective;  ///< of logs that do not say
  std::size_t minBytes = 0, maxBytes = 0;
  /// Every repeated measurement of a point (same collective, algorithm, ranks, hosts, size, type, chunk, channels);
  /// false: only the fastest of them (interference from other work only ever adds time, so the minimum is the
  /// measurement least disturbed by it).
  bool keepAll = false;
};
/// The samples of every file of `in`, in file order; errors of the readers above, and Error{InvalidArgument} "cannot
/// read '<file>'".
std::vector<CalibrationSample> readCalibrationSamples(const CalibrationInput& in);

/// Fits; throws Error{InvalidArgument} without usable samples (time > 0, bytes > 0, a schedule algorithm) or for a
/// negative holdOutEvery.
CalibrationResult calibrate(const std::vector<CalibrationSample>& samples, const CalibrationOptions& options = {});

/// The fit as a collbench-calibration record (records.h): parameters, tiers, errors, notes and every sample, without
/// the simulator's figures (sim_us, sim_held_out) and provenance, which the caller adds.
CalibrationRecord toRecord(const CalibrationResult& r);

/// The calibrated simulator on every fitted sample: each sample's schedule simulated on `topologyFile` (the written
/// calibration of `r`) by the first simulated backend linked in, plus the fitted call overhead (topologies carry
/// none), in us, in the order of r.fits. Throws Error{Unsupported} "--verify-sim: ..." without a simulator.
std::vector<double> simulateCalibration(const CalibrationResult& r, const std::string& topologyFile);
/// Adds the simulator's figures to `rec` (toRecord of `r`): sim_us per sample and the held-out errors.
void addSimulated(CalibrationRecord& rec, const CalibrationResult& r, const std::vector<double>& simUs);

}  // namespace collbench
