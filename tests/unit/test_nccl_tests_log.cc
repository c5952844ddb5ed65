// nccl-tests log parser: the sample logs in tests/unit/data (2.19 single node, 2.13 two nodes under MPI with NCCL
// INFO noise, 2.19 with per-iteration columns) and the rejection of garbage with one-line messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "collbench/error.h"
#include "collbench/nccl_tests_log.h"

namespace collbench {
namespace {

std::string dataFile(const std::string& name) {
  std::ifstream f(std::filesystem::path(COLLBENCH_SOURCE_DIR) / "tests/unit/data" / name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void expectRejected(const std::string& text, const std::vector<std::string>& parts) {
  try {
    parseNcclTestsLog(text, "bad.log");
    ADD_FAILURE() << "accepted:\n" << text.substr(0, 300);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), Errc::InvalidArgument);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(NcclTestsLog, ReadsSingleNode219) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("all_reduce_perf_2.19_dgx_h100.log"), "dgx.log");
  EXPECT_EQ(log.version, "2.19.6");
  EXPECT_EQ(log.program, "all_reduce_perf");
  ASSERT_TRUE(log.collective);
  EXPECT_EQ(*log.collective, Collective::AllReduce);
  EXPECT_EQ(log.nThread, 1);
  EXPECT_EQ(log.nGpus, 8);
  EXPECT_EQ(log.minBytes, 8u);
  EXPECT_EQ(log.maxBytes, 134217728u);
  EXPECT_EQ(log.warmupIters, 1);
  EXPECT_EQ(log.iters, 20);
  EXPECT_EQ(log.nranks, 8);
  EXPECT_EQ(log.nnodes(), 1);
  ASSERT_EQ(log.rows.size(), 25u);  // 8 B .. 128 MiB, factor 2
  EXPECT_EQ(log.rows.front().bytes, 8u);
  EXPECT_EQ(log.rows.front().count, 2u);
  EXPECT_EQ(log.rows.front().type, "float");
  EXPECT_EQ(log.rows.front().redop, "sum");
  EXPECT_EQ(log.rows.front().root, -1);
  EXPECT_EQ(log.rows.back().bytes, 134217728u);
  EXPECT_GT(log.rows.back().outOfPlace.timeUs, log.rows.front().outOfPlace.timeUs);
  EXPECT_EQ(log.rows.front().outOfPlace.wrong, 0);
  for (const auto& r : log.rows) {
    // busbw = algbw x 2(n-1)/n as printed (two decimals).
    if (r.outOfPlace.algbwGBps > 1) {
      EXPECT_NEAR(r.outOfPlace.busbwGBps / r.outOfPlace.algbwGBps, 1.75, 0.01);
    }
  }
  ASSERT_TRUE(log.avgBusBwGBps);
  EXPECT_GT(*log.avgBusBwGBps, 0);
  EXPECT_EQ(log.outOfBounds, 0);
}

TEST(NcclTestsLog, ReadsTwoNodeMpi213WithNcclNoise) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("all_reduce_perf_2.13_two_nodes.log"), "two.log");
  EXPECT_EQ(log.version, "");    // 2.13 prints no version line
  EXPECT_FALSE(log.collective);  // nor the program name
  EXPECT_EQ(log.nranks, 16);     // one "# Rank" line per MPI process
  EXPECT_EQ(log.nnodes(), 2);
  EXPECT_EQ(log.hosts, (std::vector<std::string>{"hostA01", "hostA02"}));
  EXPECT_EQ(log.warmupIters, 5);
  ASSERT_EQ(log.rows.size(), 21u);  // 1 KiB .. 1 GiB; the NCCL INFO line inside the table is skipped
  EXPECT_EQ(log.rows[3].bytes, 8192u);
}

TEST(NcclTestsLog, ReadsPerIterationColumns) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("reduce_scatter_perf_2.19_per_iteration.log"), "rs.log");
  ASSERT_TRUE(log.collective);
  EXPECT_EQ(*log.collective, Collective::ReduceScatter);
  ASSERT_EQ(log.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(log.rows[0].outOfPlace.timeUs, 14.21);
  EXPECT_NEAR(log.rows[0].inPlace.timeUs, 14.49, 1e-9);  // after the four i_* columns of the out-of-place half
  EXPECT_EQ(log.rows[2].bytes, 65536u);
  EXPECT_EQ(log.rows[2].count, 4096u);
}

TEST(NcclTestsLog, ReadsCollbenchPerfTables) {
  const std::string text =
      "# collbench 0.1.0 perf all_gather: backend host, 2 ranks, algorithm ring\n"
      "# nThread 1 nGpus 2 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 "
      "validation: 1 graph: 0\n"
      "#  Rank  0 Group  0 Pid    100 on       box device  0 [host] cpu thread\n"
      "#  Rank  1 Group  0 Pid    100 on       box device  1 [host] cpu thread\n"
      "#        size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong\n"
      "        1024           256     float    none      -1     3.10    0.33    0.17       0     3.00    0.34    0.17  "
      "     0\n"
      "        2048           512     float    none      -1     3.50    0.59    0.29     N/A     3.40    0.60    0.30  "
      "   N/A\n";
  const NcclTestsLog log = parseNcclTestsLog(text, "cb.txt");
  ASSERT_TRUE(log.collective);
  EXPECT_EQ(*log.collective, Collective::AllGather);
  EXPECT_EQ(log.algorithm, "ring");
  EXPECT_EQ(log.nranks, 2);
  ASSERT_EQ(log.rows.size(), 2u);
  EXPECT_EQ(log.rows[1].outOfPlace.wrong, -1);
}

TEST(NcclTestsLog, ProgramNames) {
  EXPECT_EQ(collectiveOfProgram("all_reduce_perf"), Collective::AllReduce);
  EXPECT_EQ(collectiveOfProgram("./build/all_gather_perf_mpi"), Collective::AllGather);
  EXPECT_EQ(collectiveOfProgram("broadcast_perf"), Collective::Broadcast);
  EXPECT_FALSE(collectiveOfProgram("alltoall_perf"));
  EXPECT_FALSE(collectiveOfProgram("sendrecv_perf"));
}

TEST(NcclTestsLog, RejectsGarbage) {
  expectRejected("", {"bad.log", "no nccl-tests result table"});
  expectRejected("hello world\nthis is not a log\n", {"no nccl-tests result table"});
  expectRejected("{\"format\": \"collbench-perf\"}", {"no nccl-tests result table"});
  const std::string header =
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong\n";
  expectRejected(header, {"no result rows"});
  expectRejected(header + "        1024           256     float     sum      -1    15.00    0.07\n",
                 {"bad.log:2", "row", "expected 9 or 13 columns", "found 7"});
  expectRejected(header +
                     "        1024           256     float     sum      -1    abc    0.07    0.12       0    15.0    "
                     "0.07    0.12       0\n",
                 {"bad.log:2", "out-of-place time (us)", "abc"});
  expectRejected(header +
                     "        1024           256     float     sum      -1    15.0    0.07    0.12       0    -3    "
                     "0.07    0.12       0\n",
                 {"in-place time (us)", "-3"});
  expectRejected(header +
                     "        1024           256     float     sum      -1    15.0    0.07    0.12     1.5    15    "
                     "0.07    0.12       0\n",
                 {"#wrong", "1.5"});
  expectRejected(header +
                     "        1e3           256     float     sum      -1    15.0    0.07    0.12       0    15    "
                     "0.07    0.12       0\n",
                 {"size (B)", "1e3"});
  expectRejected(header +
                     "        1024           256     float     sum      -1    inf    0.07    0.12       0    15    "
                     "0.07    0.12       0\n",
                 {"finite", "inf"});
  // Binary bytes in a row are escaped in the message: it stays one line.
  expectRejected(header + "        1024           256     float     sum      -1    1\n5    0.07\n", {"bad.log:2"});
  expectRejected(header +
                     "        1024           256     float     sum      -1    \x01\x02    0.07    0.12       0    15 "
                     "   0.07    0.12       0\n",
                 {"\\x01"});
}

TEST(NcclTestsLog, CrLfLogsParse) {
  std::string text = dataFile("all_reduce_perf_2.19_dgx_h100.log");
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(parseNcclTestsLog(crlf, "crlf.log").rows.size(), 25u);
}

}  // namespace
}  // namespace collbench
