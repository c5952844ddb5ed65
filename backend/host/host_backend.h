#pragma once
/// Host (CPU) backends: ranks as threads over shared memory ("host"); registered by registerHostBackends().
/// With Gloo (COLLBENCH_HAVE_GLOO), also one rank per process over Gloo's TCP transport ("gloo", gloo_backend.h);
/// registered by registerGlooBackend().
#include <memory>

#include "collbench/backend.h"

namespace collbench::host {

/// Threads-as-ranks executor: ranks run on `threads` persistent threads (0: min(nranks, cores)), rank r on thread
/// r % threads, which steps its ranks in turn; a receive reads straight from the sender's buffer (one copy or one
/// fused reduction per transfer), done by the receiving rank's thread.
std::unique_ptr<Backend> makeThreadsBackend(int nranks, int threads = 0);

void registerHostBackends();

#ifdef COLLBENCH_HAVE_GLOO
/// Registers "gloo": its world comes from BackendOptions (rank, world, addresses, ...; see process_world.h), which
/// the CLI fills from the cluster resolver.
void registerGlooBackend();
#endif

}  // namespace collbench::host
