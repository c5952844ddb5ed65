// Direct all-reduce: every rank owns block r; an all-to-all reduce-scatter (each rank sends block j straight to
// rank j, which folds the n-1 arrivals) followed by an all-to-all all-gather. One step of latency each way, n-1
// concurrent flows per rank: the algorithm of choice on full-bandwidth switches for small n.
#include "builder.h"
#include "generators.h"

namespace collbench::algo {

Schedule directAllReduce(const CollectiveSpec& spec, const AlgoParams&) {
  ScheduleBuilder b(spec, "direct");
  const int n = spec.nranks;
  const auto nu = static_cast<std::size_t>(n);
  const Partition blocks{spec.count, nu};
  auto at = [&](int j) { return blocks.offset(static_cast<std::size_t>(j)); };
  auto len = [&](int j) { return blocks.size(static_cast<std::size_t>(j)); };
  for (int r = 0; r < n; ++r) {
    const std::size_t mine = len(r);
    b.needScratch(r, (nu - 1) * mine);
    OpId acc = b.copy(r, in(at(r)), out(at(r)), mine, {});
    std::vector<OpId> sentInput(nu, kNoOp);
    // Staggered peer order (r+1, r+2, ...) so that no rank is everybody's first destination.
    for (int d = 1; d < n; ++d) {
      const int j = (r + d) % n;
      sentInput[static_cast<std::size_t>(j)] = b.send(r, j, in(at(j)), len(j), {});
    }
    for (int d = 1; d < n; ++d) {
      const int j = mod(r - d, n);
      const BufRef slot = scratch(static_cast<std::size_t>(d - 1) * mine);
      const OpId got = b.recv(r, j, slot, mine, {});
      acc = b.reduce(r, slot, out(at(r)), mine, {acc, got});
    }
    for (int d = 1; d < n; ++d) b.send(r, (r + d) % n, out(at(r)), mine, {acc});
    for (int d = 1; d < n; ++d) {
      const int j = mod(r - d, n);
      // The input block j (possibly aliasing the output) must have left before block j arrives.
      b.recv(r, j, out(at(j)), len(j), {sentInput[static_cast<std::size_t>(j)]});
    }
  }
  return b.finish();
}

}  // namespace collbench::algo
