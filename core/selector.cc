#include "collbench/selector.h"

#include <fmt/format.h>

#include "collbench/algorithms.h"

namespace collbench {

Choice chooseAlgorithm(const CollectiveSpec& spec) {
  if (spec.kind == Collective::AllReduce) {
    const std::size_t bytes = spec.count * spec.elementSize();
    if (bytes <= kSmallMessageBytes && spec.nranks > 2) {
      return {"recursive_doubling", fmt::format("{} B <= {} B: latency-bound, log2(n) steps", bytes, kSmallMessageBytes)};
    }
    return {"ring", "bandwidth-bound: ring moves the minimum 2(n-1)/n of the data per rank"};
  }
  const auto names = algorithmNames(spec.kind);
  return {names.front(), "only algorithm for this collective"};
}

}  // namespace collbench
