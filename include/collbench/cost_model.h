#pragma once
/// Closed-form alpha-beta-gamma cost model of every collbench algorithm over a Topology, and NCCL's own tuning
/// model of its ring and tree algorithms with the LL, LL128 and Simple protocols.
///
/// The model (DESIGN.md "Cost model and selector"):
/// - A message of m bytes between two ranks takes alpha + m * beta on its route: alpha = the sum of the route's
///   link latencies, 1/beta = the route's bottleneck bandwidth shared by the flows that use it at the same time
///   (each directed link's capacity divided by the number of concurrent flows on it, the max-min fair share when
///   the link is the bottleneck). A reduction or copy of m bytes takes m * gamma, gamma = 1 / reduce_GBps of the
///   rank's node (0 = free). Ranks on one node exchange through memory at that rate. These are the simulator's
///   semantics (simulator/sim_backend.h), so on a flat topology the closed forms equal simulated times.
/// - Link classes: a flow between two ranks of one host is "intra", between hosts "inter". Every estimate carries
///   its critical path split into alpha counts, beta bytes and gamma bytes per class (CostTerms), which is what
///   `collbench calibrate` fits by least squares.
/// - A topology with memory tiers (Topology::memoryTiers) is costed per call on its tier's rates (topologyForCall),
///   as the simulator runs it.
/// - Each algorithm is a sequence of phases of concurrent flows taken from its generator (core/algorithms/*.cc):
///   ring steps follow the step recurrence t(r+1, s+1) = max(t(r, s) + reduce, t(r+1, s)) + d(r+1) (data and
///   connection order), pipelined algorithms (tree, chain broadcast/reduce) are fill + (chunks - 1) x the busiest
///   connection or reducer per chunk.
///
/// Cost: O(n) routes per distinct phase pattern (ring: one; recursive doubling, Rabenseifner: log2 n; tree: n
/// edges), so 8192 ranks estimate in milliseconds; direct is O(n^2) flows up to kDirectExactMaxRanks and a
/// per-rank-link bound above.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/topology.h"
#include "collbench/types.h"

namespace collbench {

/// Link classes of the model: between ranks of one host, and between hosts.
enum class LinkClassKind { Intra = 0, Inter = 1 };
inline constexpr int kLinkClasses = 2;
/// "intra", "inter".
std::string_view toString(LinkClassKind k);

/// A time and its critical path in model terms: us == calls * overhead + sum_c alphaCount[c] * alpha_c +
/// betaBytes[c] / beta_c (in bytes per us, i.e. GB/s * 1e3) + gammaBytes / gamma (likewise), where (alpha_c, beta_c)
/// are the class's route latency and bottleneck bandwidth and overhead the model's fixed cost per call
/// (CostModel::callOverheadUs). On a topology whose routes of one class all have the same alpha and beta (flat,
/// calibrated ones) the identity is exact; calibration fits the parameters from it.
struct CostTerms {
  double us = 0;
  double calls = 0;  ///< fixed per-call overheads on the critical path: 1 for one call of a collbench algorithm
  double alphaCount[kLinkClasses] = {0, 0};
  double betaBytes[kLinkClasses] = {0, 0};
  double gammaBytes = 0;

  CostTerms& operator+=(const CostTerms& o);
  CostTerms operator+(const CostTerms& o) const;
  CostTerms operator*(double k) const;
  /// The larger of two (the critical path follows it); ties keep `a`.
  static const CostTerms& max(const CostTerms& a, const CostTerms& b) { return b.us > a.us ? b : a; }
};

/// One link class as the model sees it for a rank count: the route between the first two ranks of that class.
struct LinkClassCost {
  bool present = false;
  double alphaUs = 0;   ///< sum of link latencies along the route
  double betaGBps = 0;  ///< bottleneck bandwidth along the route (alone on it)
};

struct CostSummary {
  int ranks = 0;
  int hosts = 0;
  int ranksPerHost = 0;  ///< 0 when hosts hold different numbers of ranks (hierarchical then unsupported)
  LinkClassCost cls[kLinkClasses];
  double gammaGBps = 0;  ///< slowest reduce_GBps among the ranks' nodes; 0 = free
};

struct Estimate {
  bool supported = true;
  std::string note;  ///< why unsupported, or which phase dominates
  CostTerms terms;   ///< terms.us is the estimated time of one call, in microseconds
  double seconds() const { return terms.us * 1e-6; }
};

/// Rank counts up to which direct all-reduce is costed flow by flow (n(n-1) routes); above, by its per-rank links.
inline constexpr int kDirectExactMaxRanks = 256;
/// Rank counts up to which ring phases run the exact step recurrence (O(n^2) per round); above, its closed form.
inline constexpr int kRingRecurrenceMaxRanks = 1024;

class CostModel {
 public:
  /// Models ranks 0..nranks-1 of `topology` (nranks <= 0: all). Throws Error{InvalidArgument} when the topology has
  /// fewer ranks or callOverheadUs < 0. `callOverheadUs`: a fixed cost of every call of a collbench algorithm (NCCL's
  /// baseLat analogue: starting the call on every rank and seeing it finish; on the host backends waking the rank
  /// threads or processes), which topologies do not describe: 0 unless fitted (`collbench calibrate`).
  CostModel(Topology topology, int nranks, double callOverheadUs = 0);
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;

  /// The model of callers without a topology: flatTopology(nranks, kDefaultFlatGBps, kDefaultFlatLatencyUs), one
  /// host per rank, free reductions. Only the shape matters there (the selector's table corrects the scale).
  static CostModel defaultFlat(int nranks);

  int nranks() const;
  double callOverheadUs() const;
  const Topology& topology() const;
  const CostSummary& summary() const;
  /// Host index of each rank (AlgoParams::rankHost for hierarchical).
  const std::vector<int>& rankHost() const;

  /// Estimated time of `algorithm` for `spec` (spec.nranks must equal nranks()). Native algorithms (nccl, gloo_*,
  /// mpi), hierarchical on hosts of unequal size and unknown names are `supported = false` with a note, not errors.
  Estimate estimate(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Default flat network of CostModel::defaultFlat: one 400 Gb/s-class port (50 GB/s) and 1 us per link, the
/// "flat" generator's defaults (topologies/README.md).
inline constexpr double kDefaultFlatGBps = 50;
inline constexpr double kDefaultFlatLatencyUs = 1;

/// Builds a two-class topology from fitted parameters (what `collbench calibrate` writes): `hosts` hosts of
/// `ranksPerHost` ranks; each rank has an "intra" link to its host's switch (latency alpha_intra / 2, bandwidth
/// beta_intra) and, with more than one host, an "inter" link to a fabric switch (alpha_inter / 2, beta_inter), so
/// that a route inside a host costs (alpha_intra, beta_intra) and one between hosts (alpha_inter, beta_inter).
/// Ranks are `kind` nodes (gpu or cpu) with reduce_GBps = gammaGBps (0 = free). Throws Error{InvalidArgument} for
/// non-positive sizes or bandwidths, or inter latency below intra latency (intra routes must stay inside hosts).
Topology classTopology(const std::string& name, int hosts, int ranksPerHost, const LinkClassCost& intra,
                       const LinkClassCost& inter, double gammaGBps, NodeKind kind = NodeKind::Gpu);

}  // namespace collbench
