#pragma once
/// Host (CPU) backends: ranks as threads over shared memory ("host"); registered by registerHostBackends().
/// With Gloo (COLLBENCH_HAVE_GLOO), also one rank per process over Gloo's TCP transport ("gloo", gloo_backend.h);
/// registered by registerGlooBackend().
#include <memory>

#include "collbench/backend.h"

namespace collbench::host {

/// Threads-as-ranks executor: one persistent thread per rank; a receive reads straight from the sender's buffer
/// (one copy or one fused reduction per transfer), so each rank's own thread does its reductions.
std::unique_ptr<Backend> makeThreadsBackend(int nranks);

void registerHostBackends();

#ifdef COLLBENCH_HAVE_GLOO
/// Registers "gloo": its world comes from BackendOptions (rank, world, addresses, ...; see process_world.h), which
/// the CLI fills from the cluster resolver.
void registerGlooBackend();
#endif

}  // namespace collbench::host
