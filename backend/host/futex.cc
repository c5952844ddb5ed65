#include "futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace collbench::host {
namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex word must be a plain 32-bit word");

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, timeout, nullptr, 0);
}

}  // namespace

void WakeWord::notify() {
  value_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futex(&value_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

void WakeWord::waitFor(std::uint32_t seen, std::chrono::nanoseconds timeout) {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (value_.load(std::memory_order_seq_cst) == seen) {
    const auto ns = timeout.count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex(&value_, FUTEX_WAIT_PRIVATE, seen, &ts);
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace collbench::host
