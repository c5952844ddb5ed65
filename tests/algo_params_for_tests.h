#pragma once
// Test-side grouping of ranks into hosts for the algorithms that use it (hierarchical, nvls_tree, collnet_*; ring and
// ring_bidir, whose channels rotate over each host's ranks): L ranks per host with L the largest of 4, 3, 2 dividing
// n (1 otherwise), hosts interleaved (rank r on host r % H) so that grouping is not contiguous.
#include <string_view>

#include "collbench/algorithms.h"

namespace collbench::testing {

inline AlgoParams paramsFor(std::string_view algorithm, int n, AlgoParams p = {}) {
  if (algorithm != "hierarchical" && algorithm != "ring" && algorithm != "ring_bidir" && algorithm != "nvls_tree" &&
      algorithm != "collnet_direct" && algorithm != "collnet_chain") {
    return p;
  }
  const int local = n % 4 == 0 ? 4 : n % 3 == 0 ? 3 : n % 2 == 0 ? 2 : 1;
  const int hosts = n / local;
  p.rankHost.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) p.rankHost[static_cast<std::size_t>(r)] = r % hosts;
  return p;
}

}  // namespace collbench::testing
