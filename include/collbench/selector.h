#pragma once
/// Algorithm choice for `--algo auto`.
#include <string>

#include "collbench/types.h"

namespace collbench {

struct Choice {
  std::string algorithm;
  std::string reason;  ///< what the choice rests on, for `collbench plan` and run headers
};

/// Fallback rule until a tuning table is loaded: latency-bound all-reduce (at most kSmallMessageBytes) uses
/// recursive doubling, larger ones the bandwidth-optimal ring; other collectives their only algorithm.
Choice chooseAlgorithm(const CollectiveSpec& spec);

/// Below this, all-reduce cost is dominated by per-step latency: log2(n) steps beat 2(n-1). 64 KiB is where
/// MPICH switches from recursive doubling to Rabenseifner (MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE default 2 KiB is
/// for its own cost model; NCCL's tree/ring crossover on one node is of the order of 64 KiB-1 MiB).
inline constexpr std::size_t kSmallMessageBytes = 64 * 1024;

}  // namespace collbench
