#pragma once
/// The public face of backend/host (library collbench_host): the CPU backends, registered by the composition root.
/// - "host": ranks as threads over shared memory; registered by registerHostBackends().
/// - "gloo" (with Gloo, COLLBENCH_HAVE_GLOO): one rank per process over Gloo's TCP transport; registered by
///   registerGlooBackend().
#include <array>
#include <memory>
#include <string_view>

#include "collbench/backend.h"
#include "process_world.h"

namespace collbench::host {

/// Threads-as-ranks executor: ranks run on `threads` persistent threads (0: min(nranks, cores)), rank r on thread
/// r % threads, which steps its ranks in turn; a receive reads straight from the sender's buffer (one copy or one
/// fused reduction per transfer), done by the receiving rank's thread.
std::unique_ptr<Backend> makeThreadsBackend(int nranks, int threads = 0);

void registerHostBackends();

#ifdef COLLBENCH_HAVE_GLOO
/// The native algorithms of the "gloo" backend: Gloo's own all-reduce (see makeGlooBackend).
inline constexpr std::array<std::string_view, 4> kGlooNativeAlgorithms = {"gloo_ring", "gloo_ring_chunked",
                                                                          "gloo_halving_doubling", "gloo_bcube"};

/// The process backend "gloo": each process runs ONE rank of the world (nranks() is the world size) and executes
/// collbench schedules over Gloo's TCP transport with unbound buffers. Buffers passed to run() hold one entry, this
/// process's rank (an entry per rank of the world is accepted too; only this rank's is used).
///
/// Call-order contract: every process of the world calls run() with the same schedule (same spec, algorithm and
/// parameters) in the same order. Each collective carries a header (sequence number, spec and schedule
/// fingerprint) that the receiver checks before it accepts data, so a mismatched call fails with Error naming both
/// ranks and what differs, rather than producing wrong data:
///   correct:  rank 0: run(ring(count=1000))   rank 1: run(ring(count=1000))
///   error:    rank 0: run(ring(count=1000))   rank 1: run(ring(count=2000))
///             -> "... called different collectives: rank 0: count 1000; rank 1: count 2000"
///
/// Faults never hang: a peer that dies makes every survivor throw Error{PeerFailure} naming the dead rank (its
/// connection closes, and survivors pass the news on); a peer that stops responding fails the wait after the
/// timeout with Error{Timeout} naming it; a task missing at rendezvous is named in the error.
///
/// Schedules named gloo_ring, gloo_ring_chunked, gloo_halving_doubling and gloo_bcube (native, no ops) run Gloo's
/// own all-reduce on the output buffer (the input is copied there first when the call is out of place, inside the
/// timed region, since those algorithms work in place): peer baselines measured in the same harness.
///
/// Rendezvous (store, transport connections, hello handshake) happens here; throws Error naming the missing or
/// refused task when it cannot complete within the world's timeout.
std::unique_ptr<Backend> makeGlooBackend(const ProcessWorld& world);

/// Registers "gloo": its world comes from BackendOptions (rank, world, addresses, ...; see process_world.h), which
/// the CLI fills from the cluster resolver.
void registerGlooBackend();
#endif

}  // namespace collbench::host
