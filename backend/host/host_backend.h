#pragma once
/// Host (CPU) backends: ranks as threads over shared memory ("host"); registered by registerHostBackends().
#include <memory>

#include "collbench/backend.h"

namespace collbench::host {

/// Threads-as-ranks executor: one persistent thread per rank; a receive reads straight from the sender's buffer
/// (one copy or one fused reduction per transfer), so each rank's own thread does its reductions.
std::unique_ptr<Backend> makeThreadsBackend(int nranks);

void registerHostBackends();

}  // namespace collbench::host
