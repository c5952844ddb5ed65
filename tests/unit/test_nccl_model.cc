// NCCL 2.28's choice emulation (collbench/nccl_model.h): environment parsing, selection rules, and the time model
// against six real nccl-tests all_reduce_perf tables (tests/data/realdata/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/nccl_model.h"

namespace collbench {
namespace {

// ---- Systems of the real tables, by hand (datasheets: NVLink4 18 x 25 GB/s, NVLink3 12 x 25 GB/s, NDR 400 Gb/s
// = 50 GB/s, EFA 100 Gb/s = 12.5 GB/s per interface) ----

NcclSystem dgxH100(int nodes = 1) {
  NcclSystem s;
  s.arch = GpuArch::Hopper;
  s.nodes = nodes;
  s.gpusPerNode = 8;
  s.nvlinkGBps = 450;
  s.nvswitch = true;
  s.nvls = true;
  s.nicsPerNode = 8;
  s.nicGBps = 50;
  s.nicKind = NicKind::InfiniBand;
  return s;
}

NcclSystem dgxA100() {
  NcclSystem s;
  s.arch = GpuArch::Ampere;
  s.nodes = 1;
  s.gpusPerNode = 8;
  s.nvlinkGBps = 300;
  s.nvswitch = true;
  s.nvls = false;
  s.nicsPerNode = 8;
  s.nicGBps = 25;  // 8 x 200 Gb/s HDR
  return s;
}

NcclSystem awsP5(int nodes = 2) {
  NcclSystem s = dgxH100(nodes);
  s.nicsPerNode = 32;
  s.nicGBps = 12.5;
  s.nicKind = NicKind::Efa2;
  return s;
}

NcclSystem awsP4de(int nodes = 2) {
  NcclSystem s = dgxA100();
  s.nodes = nodes;
  s.nicsPerNode = 4;
  s.nicGBps = 12.5;
  s.nicKind = NicKind::Efa;
  return s;
}

// ---- Real tables ----

struct Row {
  std::size_t bytes;
  double timeUs;
};

std::vector<Row> readTable(const std::string& file) {
  const std::string path = std::string(COLLBENCH_SOURCE_DIR) + "/tests/data/realdata/" + file;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("bytes", 0) == 0) continue;
    std::stringstream ss(line);
    std::string bytes, count, type, time;
    std::getline(ss, bytes, ',');
    std::getline(ss, count, ',');
    std::getline(ss, type, ',');
    std::getline(ss, time, ',');
    rows.push_back({std::stoull(bytes), std::stod(time)});
  }
  return rows;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct RealTable {
  const char* file;
  NcclSystem sys;
  int nranks;
  std::map<std::string, std::string> env;
  double maxMedian, maxP90;
};

class RealTables : public ::testing::TestWithParam<RealTable> {};

TEST_P(RealTables, PredictedTimeWithinTargets) {
  const RealTable& t = GetParam();
  const std::vector<Row> rows = readTable(t.file);
  ASSERT_GE(rows.size(), 10u);
  const NcclEnv env = parseNcclEnv(t.env);
  std::vector<double> err;
  for (const Row& r : rows) {
    const NcclChoice c = ncclChoose(t.sys, Collective::AllReduce, r.bytes, t.nranks, env);
    err.push_back(std::abs(c.predictedUs - r.timeUs) / r.timeUs);
    std::printf("%12zu real %9.1f pred %9.1f err %5.1f%% %s\n", r.bytes, r.timeUs, c.predictedUs, 100 * err.back(),
                c.reason.c_str());
  }
  const double median = quantile(err, 0.5), p90 = quantile(err, 0.9);
  std::printf("%s: median %.1f%% p90 %.1f%%\n", t.file, 100 * median, 100 * p90);
  EXPECT_LE(median, t.maxMedian) << t.file;
  EXPECT_LE(p90, t.maxP90) << t.file;
}

INSTANTIATE_TEST_SUITE_P(
    NcclTests, RealTables,
    ::testing::Values(RealTable{"h100x8-nvls-dgxcbench.csv", dgxH100(), 8, {}, 0.10, 0.25},
                      RealTable{"a100x8-ring-ocitutorials-ja.csv", dgxA100(), 8, {}, 0.10, 0.25},
                      RealTable{"h100x16-2node-ib400-nvlstree-ncclTests309-A.csv", dgxH100(2), 16, {}, 0.10, 0.25},
                      RealTable{"h100x16-2node-ib400-ring-ncclTests309-G.csv",
                                dgxH100(2),
                                16,
                                {{"NCCL_ALGO", "Ring"}, {"NCCL_MIN_CTAS", "24"}},
                                0.10,
                                0.25},
                      RealTable{"h100x16-2node-efa-p5-awsome.csv", awsP5(), 16, {}, 0.10, 0.25},
                      RealTable{"a100x16-2node-efa-p4de-awsome.csv", awsP4de(), 16, {}, 0.10, 0.25}));

}  // namespace
}  // namespace collbench
