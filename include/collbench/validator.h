#pragma once
/// Proves a schedule is well formed before anything runs it.
#include "collbench/schedule.h"

namespace collbench {

struct ValidateOptions {
  /// Also check hazards (unordered conflicting accesses) when input and output alias, NCCL in-place style.
  bool inPlace = false;
  /// The hazard check is quadratic; skip it above this many ops (matching and deadlock checks always run).
  std::size_t hazardCheckMaxOps = 20000;
};

/// Checks: deps point to earlier ops; ranges are in bounds of the spec's input/output and the rank's scratch;
/// reduction ranges are whole elements; every send has a matching receive of equal size on the same channel;
/// the program completes under rendezvous semantics (no deadlock); no two accesses to overlapping bytes where one
/// writes are unordered. Throws Error{InvalidSchedule} whose message names the rank, the op index and the peer.
void validate(const Schedule& s, const ValidateOptions& opt = {});

}  // namespace collbench
