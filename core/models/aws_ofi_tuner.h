#pragma once
// aws-ofi-nccl's region tuner: the (algorithm, protocol) AWS's network plugin makes NCCL take on p5 instances.
//
// The plugin's library carries a tuner that NCCL 2.28 loads from it when NCCL_TUNER_PLUGIN does not name another
// (src/plugin/tuner.cc: the tuner library, else the net plugin's), and AWS's containers name it explicitly. On p5 and
// p5e it divides the (message size, rank count) plane into polygons, one (algorithm, protocol) each, drawn on a log2
// scale from AWS's measurements, and gives the first polygon holding a call cost 0, so that NCCL takes it
// (aws/aws-ofi-nccl src/tuner/nccl_ofi_regions.cpp, the same p5 polygons from v1.14.0 to v1.21).
#include <cstddef>
#include <functional>
#include <optional>
#include <utility>

#include "collbench/nccl_model.h"
#include "collbench/types.h"

namespace collbench {

/// The pair the p5 region tuner gives `collective` of `bytes` (NCCL's size: the per-rank buffer of all-reduce) on
/// `nranks` ranks over `nodes` nodes: the first of its polygons, in its order, that holds the point (on an edge counts)
/// and whose pair `available` says NCCL offers under the caller's NCCL_ALGO / NCCL_PROTO (NCCL marks the others
/// "ignore" in the cost table the tuner sees, and the tuner passes over them). None where the tuner leaves NCCL's
/// choice: 2 nodes or fewer (nccl_ofi_regions.cpp: "not well defined" there), ranks per node other than 8 (the 1 and 2
/// per node polygons are not carried: the shipped p5 systems fill their nodes), a collective it has no polygons for, a
/// point in none of them.
std::optional<std::pair<NcclAlgorithm, NcclProtocol>> awsOfiP5TunerChoice(
    Collective collective, std::size_t bytes, int nranks, int nodes,
    const std::function<bool(NcclAlgorithm, NcclProtocol)>& available);

}  // namespace collbench
