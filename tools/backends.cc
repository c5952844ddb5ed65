// Composition root: the only place that knows which backend libraries are linked in.
#include "collbench/backends/host.h"
#include "commands.h"
#ifdef COLLBENCH_HAVE_SIM
#include "sim_backend.h"
#endif
#ifdef COLLBENCH_HAVE_NCCL
#include "collbench/backends/nccl.h"
#include "world_options.h"
#endif

namespace collbench::cli {

void registerLinkedBackends() {
  host::registerHostBackends();
#ifdef COLLBENCH_HAVE_GLOO
  host::registerGlooBackend();
#endif
#ifdef COLLBENCH_HAVE_SIM
  sim::registerSimBackend();
#endif
#ifdef COLLBENCH_HAVE_NCCL
  nccl::registerNcclBackends(exchangeNcclId);  // one rank per process: the id travels through our store
#endif
}

}  // namespace collbench::cli
