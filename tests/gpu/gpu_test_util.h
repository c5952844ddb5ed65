#pragma once
// Device requirements of GPU tests: skip with the reason (cudaGetDeviceCount's error, or too few devices).
#include <gtest/gtest.h>

#include "collbench/backends/nccl.h"

/// Skips the calling test unless at least `n` CUDA devices are visible.
#define COLLBENCH_REQUIRE_GPUS(n)                                                                       \
  do {                                                                                                  \
    const ::collbench::nccl::DeviceProbe& probe_ = ::collbench::nccl::probeDevices();                   \
    if (probe_.count == 0) GTEST_SKIP() << probe_.reason;                                               \
    if (probe_.count < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << probe_.count; \
  } while (0)
