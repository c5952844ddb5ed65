// Backend's one default: a backend that moves no data times an algorithm by running its schedule.
#include "collbench/backend.h"

namespace collbench {

RunResult Backend::runAlgorithm(const CollectiveSpec& spec, std::string_view algorithm, const AlgoParams& params,
                                const RunOptions& opt) {
  const Schedule s = buildSchedule(spec, algorithm, params);
  return run(s, Buffers(static_cast<std::size_t>(spec.nranks)), opt);
}

}  // namespace collbench
