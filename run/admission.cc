// Admission: requests larger than the machine are refused with one line before anything is allocated.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "collbench/error.h"
#include "collbench/run.h"
#include "collbench/units.h"

namespace collbench {
namespace {

std::string bytesText(double bytes) {
  return bytes >= 1.8e19 ? fmt::format("{:.3g} B", bytes) : formatBytes(static_cast<std::size_t>(bytes));
}

}  // namespace

double availableMemoryBytes() {
  // MemAvailable: what the kernel can hand out without swapping (page cache it can drop included); sysconf's
  // available pages leave the cache out and understate it by gigabytes on a machine that has read large files.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<double>(::sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

void admitBuffers(const CollectiveSpec& spec, int localRank, std::string_view request, double scratchBytes) {
  const double ranksHere = localRank < 0 ? spec.nranks : 1;
  // Out of place: an input and an output per rank (the larger of the two in place, which perf also runs).
  const double need =
      ranksHere * (static_cast<double>(spec.inputBytes()) + static_cast<double>(spec.outputBytes())) + scratchBytes;
  const double available = availableMemoryBytes();
  if (need <= available) return;
  throw Error(
      Errc::InvalidArgument,
      fmt::format("{}: {} {} on {} rank{} needs {} of buffers in this process ({} input + {} output per "
                  "rank{}{}), more than the {} of memory available; use smaller sizes or --backend sim",
                  request, toString(spec.kind),
                  bytesText(static_cast<double>(std::max(spec.inputBytes(), spec.outputBytes()))), spec.nranks,
                  spec.nranks == 1 ? "" : "s", bytesText(need), bytesText(static_cast<double>(spec.inputBytes())),
                  bytesText(static_cast<double>(spec.outputBytes())),
                  localRank < 0 ? fmt::format(" x {} ranks", spec.nranks) : "",
                  scratchBytes > 0 ? fmt::format(", + {} of the schedule's scratch", bytesText(scratchBytes)) : "",
                  bytesText(available)));
}

void admitSchedule(const CollectiveSpec& spec, const AlgorithmInfo& algo, const AlgoParams& params,
                   double bytesPerTransfer, std::string_view hint) {
  const std::size_t transfers = estimateTransfers(algo, spec, params);
  const double need = static_cast<double>(transfers) * bytesPerTransfer;
  const double available = availableMemoryBytes();
  if (need <= available) return;
  throw Error(
      Errc::InvalidArgument,
      fmt::format("{} with '{}' on {} channel{}: its schedule ({} transfers) would need about {}, more than the "
                  "{} available; {}",
                  describe(spec), algo.name, params.channels, params.channels == 1 ? "" : "s", transfers,
                  bytesText(need), bytesText(available), hint));
}

}  // namespace collbench
