// Google Benchmark driver: the machine's cross-core handoff, the floor under every small host collective. Two threads
// pinned to CPUs 0 and 1 pass a counter back and forth (handoff/0: one cache line each way), or the second thread
// also copies a block the first one wrote (handoff/65536: the block crosses the cores). Time per iteration = one
// round trip (with the first thread's write of the block). Run it with repetitions to see whether the machine has
// modes:
//   build/release/bench/bench_handoff --benchmark_repetitions=40 --benchmark_min_time=0.5
// On this project's 2-vCPU VM a first version of this probe (median round trip, the peer also copying 16 KiB within
// its own cache) read 0.23-0.25 us, then 0.60-0.65 us from one second to the next in one process; such modes last
// seconds to hours (by where the hypervisor runs the vCPUs), and host collectives of a few KiB, and the ranking of
// algorithms up to a few MiB, follow them (README, "Choosing algorithms"). This benchmark read 0.77-0.85 us per round
// trip for 40 s in the slow mode.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kCacheLine = 64;

bool pinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

void handoff(benchmark::State& state) {
  if (std::thread::hardware_concurrency() < 2) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> sent(bytes), received(bytes);
  alignas(kCacheLine) std::atomic<std::uint64_t> ping{0};
  alignas(kCacheLine) std::atomic<std::uint64_t> pong{0};
  alignas(kCacheLine) std::atomic<bool> stop{false};
  std::thread peer([&] {
    pinToCpu(1);
    std::uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t v = ping.load(std::memory_order_acquire);
      if (v == seen) continue;
      seen = v;
      std::memcpy(received.data(), sent.data(), bytes);
      pong.store(v, std::memory_order_release);
    }
  });
  cpu_set_t before;
  pthread_getaffinity_np(pthread_self(), sizeof before, &before);
  if (!pinToCpu(0)) state.SkipWithError("cannot pin to CPU 0");
  std::uint64_t k = 0;
  for (auto _ : state) {
    ++k;
    std::memset(sent.data(), static_cast<int>(k & 0xff), bytes);  // written here, so the peer's copy pulls it over
    ping.store(k, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != k) {
    }
  }
  stop.store(true);
  peer.join();
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  benchmark::DoNotOptimize(received.data());
  if (bytes > 0) {
    state.counters["GBps"] =
        benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
  }
}

BENCHMARK(handoff)->Arg(0)->Arg(64 * 1024)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
