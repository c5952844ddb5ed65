#pragma once
// A wake-up word for threads that poll shared state: waiters sleep in the kernel (Linux futex) with a timeout
// instead of burning a core, which matters when ranks outnumber cores.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace collbench::host {

/// One step of a busy-wait loop: lets the core know (pause on x86), which saves power and a sibling hyperthread's
/// cycles and avoids the memory-order mis-speculation penalty when the awaited store lands.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class WakeWord {
 public:
  std::uint32_t observe() const { return value_.load(std::memory_order_acquire); }
  /// Bumps the word and wakes sleepers; cheap when nobody sleeps.
  void notify();
  /// Sleeps until the word differs from `seen` or `timeout` passes; returns at once if it already differs.
  void waitFor(std::uint32_t seen, std::chrono::nanoseconds timeout);

 private:
  std::atomic<std::uint32_t> value_{0};
  std::atomic<std::uint32_t> sleepers_{0};
};

/// Waits until done(): polls it for `spin`, then polls it with a sched_yield() between polls for `yieldSpin`, then
/// sleeps on `word` in slices of `slice` (whoever makes done() true must notify `word` afterwards). A short spin
/// catches a peer that is running on another core (a handoff takes well under a microsecond); yielding stays awake
/// for a slower peer without keeping a runnable thread off the core (waking from a futex costs far more than a
/// handoff on a VM); sleeping after it hands the core over when the peer is not running, which, with more runnable
/// threads than cores, is what lets the peer run at all.
template <class Done>
void spinThenWait(WakeWord& word, std::chrono::nanoseconds spin, std::chrono::nanoseconds yieldSpin,
                  std::chrono::nanoseconds slice, Done done) {
  constexpr int kPausesPerPoll = 16;
  if (done()) return;
  if (spin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + spin;
    do {
      for (int i = 0; i < kPausesPerPoll; ++i) cpuRelax();
      if (done()) return;
    } while (std::chrono::steady_clock::now() < until);
  }
  if (yieldSpin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + yieldSpin;
    do {
      std::this_thread::yield();
      if (done()) return;
    } while (std::chrono::steady_clock::now() < until);
  }
  for (;;) {
    const std::uint32_t seen = word.observe();
    if (done()) return;
    word.waitFor(seen, slice);
  }
}

}  // namespace collbench::host
