// Timing one schedule for `collbench tune` and `collbench regret` (tuning.h).
#include <algorithm>
#include <vector>

#include "collbench/reference.h"
#include "collbench/tuning.h"

namespace collbench {

std::vector<AlgoParams> sweepConfigs(Collective c, std::string_view algorithm, const std::vector<std::size_t>& chunks,
                                     const std::vector<int>& channels, const std::vector<int>& rankHost) {
  const ParamSpace ps = paramSpace(c, algorithm);
  const std::vector<std::size_t> cs = ps.chunk && !chunks.empty() ? chunks : std::vector<std::size_t>{0};
  const std::vector<int> hs = ps.channels && !channels.empty() ? channels : std::vector<int>{1};
  std::vector<AlgoParams> out;
  for (std::size_t chunk : cs) {
    for (int ch : hs) out.push_back(AlgoParams{chunk, ch, rankHost});
  }
  return out;
}

double measureUs(Backend& backend, const Schedule& s, const MeasureOptions& o) {
  if (!backend.movesData()) {
    Buffers none(static_cast<std::size_t>(s.spec.nranks));
    return backend.run(s, none, RunOptions{1, 0, o.timeoutSeconds}).seconds * 1e6;
  }
  RankBufferSet bufs(s.spec, /*inPlace=*/false);
  bufs.fill();
  std::vector<double> times;
  for (int k = 0; k < std::max(o.repeats, 1); ++k) {
    // Warm-up only before the first repetition: the buffers and the backend's threads stay warm after it.
    const RunOptions ro{std::max(o.iterations, 1), k == 0 ? o.warmup : 0, o.timeoutSeconds};
    times.push_back(backend.run(s, bufs.views(), ro).seconds * 1e6);
  }
  return *std::min_element(times.begin(), times.end());
}

}  // namespace collbench
