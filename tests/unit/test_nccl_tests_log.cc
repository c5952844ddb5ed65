// nccl-tests log parser: the sample logs in tests/unit/data (2.19 single node, 2.13 two nodes under MPI with NCCL
// INFO noise, 2.19 with per-iteration columns, srun --label and mpirun --tag-output prefixes), the CSV form of
// tests/data/realdata, and the rejection of garbage with one-line messages.
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
  EXPECT_EQ(log.nGpus, 2);
  EXPECT_EQ(log.gpusPerThread(), 1);  // collbench's header counts ranks there, not one thread's GPUs
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

TEST(NcclTestsLog, ReadsSrunLabelledLog) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("all_reduce_perf_2.17_srun_label.log"), "srun.log");
  EXPECT_EQ(log.version, "2.17.1");
  EXPECT_EQ(log.ncclVersion, "2.26.2");  // NCCL's INFO line wins over nccl-library=22602 (read first)
  EXPECT_EQ(log.program, "all_reduce_perf_mpi");
  ASSERT_TRUE(log.collective);
  EXPECT_EQ(*log.collective, Collective::AllReduce);
  EXPECT_EQ(log.nranks, 16);
  EXPECT_EQ(log.hosts, (std::vector<std::string>{"gpu-node-01", "gpu-node-02"}));
  ASSERT_EQ(log.rows.size(), 9u);  // task 9's INFO line inside the table is skipped
  EXPECT_EQ(log.rows.front().bytes, 8u);
  EXPECT_DOUBLE_EQ(log.rows.front().outOfPlace.timeUs, 25.10);
  EXPECT_DOUBLE_EQ(log.rows.front().inPlace.timeUs, 25.02);
  EXPECT_EQ(log.rows.back().bytes, 524288u);
  EXPECT_DOUBLE_EQ(log.rows.back().outOfPlace.timeUs, 71.66);
  EXPECT_EQ(log.rows[5].line, 35);  // line numbers count the prefixed lines as given
  EXPECT_EQ(log.outOfBounds, 0);
}

TEST(NcclTestsLog, ReadsMpirunTaggedLog) {
  const NcclTestsLog log = parseNcclTestsLog(dataFile("all_reduce_perf_mpirun_tag_output.log"), "mpi.log");
  EXPECT_EQ(log.nranks, 4);
  EXPECT_EQ(log.nnodes(), 1);
  EXPECT_EQ(log.ncclVersion, "");
  ASSERT_EQ(log.rows.size(), 3u);  // rank 3's stderr WARN between the rows is skipped
  EXPECT_EQ(log.rows[1].bytes, 2048u);
  EXPECT_DOUBLE_EQ(log.rows[1].outOfPlace.timeUs, 11.52);
  EXPECT_DOUBLE_EQ(log.rows[2].inPlace.timeUs, 11.84);
  ASSERT_TRUE(log.avgBusBwGBps);
  EXPECT_DOUBLE_EQ(*log.avgBusBwGBps, 0.1432);
}

TEST(NcclTestsLog, LauncherPrefixes) {
  EXPECT_EQ(stripLauncherPrefix("0: # nThread 1"), " # nThread 1");
  EXPECT_EQ(stripLauncherPrefix(" 12:         1024"), "         1024");
  EXPECT_EQ(stripLauncherPrefix("[1,0]<stdout>:# Rank"), "# Rank");
  EXPECT_EQ(stripLauncherPrefix("[12,345]<stderr>: NCCL WARN"), " NCCL WARN");
  // Not prefixes: a table row, an NCCL INFO line of a numeric host, a malformed tag.
  EXPECT_EQ(stripLauncherPrefix("        1024           256"), "        1024           256");
  EXPECT_EQ(stripLauncherPrefix("10-0-0-1:123:456 [0] NCCL INFO"), "10-0-0-1:123:456 [0] NCCL INFO");
  EXPECT_EQ(stripLauncherPrefix("[1,0]<stdin>:x"), "[1,0]<stdin>:x");
  EXPECT_EQ(stripLauncherPrefix("[a,0]<stdout>:x"), "[a,0]<stdout>:x");
}

TEST(NcclTestsLog, ReadsRealdataCsv) {
  const std::string text = dataFile("../../data/realdata/h100x16-2node-ib400-nvlstree-ncclTests309-A.csv");
  const NcclTestsLog log = parseNcclTestsLog(text, "a.csv");
  EXPECT_TRUE(log.csv);
  EXPECT_EQ(log.nranks, 16);  // "# gpu_count: 16 (8 per node, 1 GPU per MPI rank)"
  EXPECT_EQ(log.nnodes(), 2);
  EXPECT_EQ(log.ncclVersion, "2.26.2");
  EXPECT_FALSE(log.collective);
  ASSERT_EQ(log.rows.size(), 32u);
  EXPECT_EQ(log.rows.front().bytes, 8u);
  EXPECT_EQ(log.rows.front().count, 2u);
  EXPECT_EQ(log.rows.front().type, "float");
  EXPECT_DOUBLE_EQ(log.rows.front().outOfPlace.timeUs, 68.52);
  EXPECT_DOUBLE_EQ(log.rows.front().inPlace.timeUs, 24.70);
  EXPECT_EQ(log.rows.front().outOfPlace.wrong, -1);
  EXPECT_EQ(log.rows.back().bytes, 17179869184u);
  EXPECT_DOUBLE_EQ(log.rows.back().outOfPlace.busbwGBps, 469.21);
  EXPECT_EQ(log.rows.front().line, 17);
}

TEST(NcclTestsLog, CsvGpusPerThreadAndVersionFromItsHeader) {
  const std::string rows = "bytes,count,type,time_us_oop,algbw_oop,busbw_oop\n1024,256,float,10.5,0.10,0.18\n";
  // Oracle's A100 table: no "# command:", the -g of its other comments.
  EXPECT_EQ(parseNcclTestsLog("# gpu_count: 8 (single process, -g 8)\n" + rows, "a.csv").nGpus, 8);
  EXPECT_EQ(parseNcclTestsLog("# env_vars: none; command ./all_reduce_perf -b 64 -t 1 -g 8\n" + rows, "b.csv").nGpus,
            8);
  // The command wins over a note that mentions another run's -g; the first -g of the notes otherwise.
  EXPECT_EQ(parseNcclTestsLog("# command: mpirun -np 8 ./all_reduce_perf -b 8 -g 1\n"
                              "# notes: the same host's -g 8 table is elsewhere\n" +
                                  rows,
                              "c.csv")
                .nGpus,
            1);
  EXPECT_EQ(parseNcclTestsLog("# launch: --ngpus 4\n# notes: -g 2\n" + rows, "d.csv").nGpus, 4);
  EXPECT_EQ(parseNcclTestsLog("# command: all_reduce_perf -b 8 -e 1G\n" + rows, "e.csv").nGpus, 0);  // unknown
  // A header that gives the bare version.
  EXPECT_EQ(parseNcclTestsLog("# nccl_version: 2.26.2+cuda12.8 (printed)\n" + rows, "f.csv").ncclVersion, "2.26.2");
  EXPECT_EQ(parseNcclTestsLog("# nccl_version: not printed (2.20.3 in the container)\n" + rows, "g.csv").ncclVersion,
            "");
  EXPECT_EQ(parseNcclTestsLog("# command: all_reduce_perf -b 8 -e 1G\n" + rows, "h.csv").gpusPerThread(), 1);
  const NcclTestsLog real = parseNcclTestsLog(dataFile("../../data/realdata/a100x8-ring-ocitutorials-ja.csv"), "o");
  EXPECT_EQ(real.nGpus, 8);
  EXPECT_EQ(real.nranks, 8);
}

TEST(NcclTestsLog, CsvWithoutGpuCountAndWithPrefix) {
  const std::string text =
      "0: # a table\n"
      "0: bytes,count,type,time_us_oop,algbw_oop,busbw_oop\n"
      "0: 1024,256,float,10.5,0.10,0.18\n"
      "0: 2048,512,float,11.0,0.19,0.33\n";
  const NcclTestsLog log = parseNcclTestsLog(text, "p.csv");
  EXPECT_EQ(log.nranks, 0);  // the caller's -g decides
  ASSERT_EQ(log.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(log.rows[1].outOfPlace.timeUs, 11.0);
  EXPECT_DOUBLE_EQ(log.rows[1].inPlace.timeUs, 11.0);  // no in-place columns: the out-of-place half
}

TEST(NcclTestsLog, RejectsBadCsv) {
  const std::string header = "bytes,count,type,time_us_oop,algbw_oop,busbw_oop,time_us_ip,algbw_ip,busbw_ip\n";
  expectRejected("bytes,count,type\n1,2,float\n", {"bad.log:1", "CSV header", "no 'time_us_oop' column"});
  expectRejected(header + "8,2,float,13.67,0.00,0.00,13.03,0.00\n",
                 {"bad.log:2", "CSV row", "expected 9 comma-separated columns, found 8"});
  expectRejected(header + "8,2,float,13.67,0.00,0.00,13.03,0.00,0.00\n16,4,float,x,0.00,0.00,13.07,0.00,0.00\n",
                 {"bad.log:3", "out-of-place time (us)", "'x'"});
  expectRejected(header + "-8,2,float,13.67,0.00,0.00,13.03,0.00,0.00\n", {"bad.log:2", "bytes", "-8"});
  expectRejected(header, {"no result rows"});
}

// A CSV header's stated counts must be counts: a bad one is named with its value, not read as "no rank count".
TEST(NcclTestsLog, CsvCountsThatAreNotCountsAreNamed) {
  const std::string rows = "bytes,count,type,time_us_oop,algbw_oop,busbw_oop\n1024,256,float,10.5,0.10,0.18\n";
  const auto message = [&](const std::string& head) {
    try {
      parseNcclTestsLog("# a table\n" + head + "\n" + rows, "c.csv");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("# gpu_count: abc (8 MPI ranks)"),
            "c.csv:2: # gpu_count: must start with a count in [1, 16777216] (got 'abc')");
  EXPECT_EQ(message("# gpu_count: -8"), "c.csv:2: # gpu_count: must start with a count in [1, 16777216] (got '-8')");
  EXPECT_EQ(message("# gpu_count: 0"), "c.csv:2: # gpu_count: must start with a count in [1, 16777216] (got '0')");
  EXPECT_EQ(message("# gpu_count: 99999999999"),
            "c.csv:2: # gpu_count: must start with a count in [1, 16777216] (got '99999999999')");
  EXPECT_EQ(message("# gpu_count:"), "c.csv:2: # gpu_count: must start with a count in [1, 16777216] (got '')");
  EXPECT_EQ(message("# node_count: two"),
            "c.csv:2: # node_count: must start with a count in [1, 16777216] (got 'two')");
  // What real headers say still reads.
  EXPECT_EQ(parseNcclTestsLog("# gpu_count: 16 (8 per node)\n# node_count: 2 (hosts a, b)\n" + rows, "ok.csv").nranks,
            16);
}

// Inside a result table, a line that is an attempt at a row (it starts with a number, or is colon-free text half
// numbers) is parsed and its error named; NCCL's INFO/WARN lines and other tools' messages are skipped.
TEST(NcclTestsLog, GarbledRowsInsideATableAreErrors) {
  const std::string header =
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw "
      " #wrong\n";
  const std::string good =
      "        1024           256     float     sum      -1    15.00    0.07    0.12       0    15.0    0.07    0.12  "
      "     0\n";
  expectRejected(header + good + "   garbage row here 1 2 3\n" + good,
                 {"bad.log:3", "row", "expected 9 or 13 columns, found 6", "garbage row here 1 2 3"});
  expectRejected(header + good + "-16  4  float  sum  -1  13.00  0.00  0.00  0  13.07  0.00  0.00  0\n",
                 {"bad.log:3", "size (B)", "must be a non-negative integer", "'-16'"});
  expectRejected(header + "[1,0]<stdout>:-16  4  float  sum  -1  13.00  0.00  0.00  0  13.07  0.00  0.00  0\n",
                 {"bad.log:2", "size (B)", "'-16'"});
  expectRejected(header + ".5  4  float  sum  -1  13.00  0.00  0.00  0  13.07  0.00  0.00  0\n",
                 {"bad.log:2", "size (B)", "'.5'"});
  // Not rows: NCCL's debug lines, MPI's and the shell's messages, banners.
  const NcclTestsLog log =
      parseNcclTestsLog(header + good +
                            "node-a:7713:7790 [3] NCCL WARN Cuda failure 'out of memory' (ignored)\n"
                            "--------------------------------------------------------------\n"
                            "WARNING: There was an error initializing an OpenFabrics device.\n"
                            "[node1:01234] 1 more process has sent help message help-mpi.txt\n"
                            "mpirun noticed that process rank 0 with PID 0 on node x exited\n" +
                            good,
                        "ok.log");
  EXPECT_EQ(log.rows.size(), 2u);
}

TEST(NcclTestsLog, ReadFileErrorsNameThePath) {
  try {
    readNcclTestsLog("/nonexistent/dir/run.log");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read nccl-tests log '/nonexistent/dir/run.log': no such file");
  }
}

TEST(NcclTestsLog, CrLfLogsParse) {
  std::string text = dataFile("all_reduce_perf_2.19_dgx_h100.log");
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(parseNcclTestsLog(crlf, "crlf.log").rows.size(), 25u);
}

}  // namespace
}  // namespace collbench
