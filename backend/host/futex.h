#pragma once
// A wake-up word for threads that poll shared state: waiters sleep in the kernel (Linux futex) with a timeout
// instead of burning a core, which matters when ranks outnumber cores.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace collbench::host {

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

}  // namespace collbench::host
