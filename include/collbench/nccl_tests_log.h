#pragma once
/// Parser of nccl-tests stdout (NVIDIA/nccl-tests 2.x: all_reduce_perf, all_gather_perf, ...) and of the same table
/// as `collbench perf` prints it, for `collbench calibrate`.
///
/// What is read (shared/reference/nccl-tests-conventions.md, nccl-tests src/util.cu):
///   # nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809        (2.17+; optional)
///   # Collective test starting: all_reduce_perf                               (2.17+; optional)
///   # nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ...
///   #  Rank  0 Group  0 Pid  4242 on    dgx-a01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
///   #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
///   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us) ...
///          1024           256     float     sum      -1    10.12    0.10    0.18       0    10.05 ...
///   # Out of bounds values : 0 OK
///   # Avg bus bandwidth    : 123.456
/// Rows hold size, count, type, redop, root, then out-of-place and in-place (time, algbw, busbw, #wrong), with four
/// more per-iteration columns per half when the header has i_min (-I 1) and an optional trailing timestamp. #wrong is
/// "N/A" without checking. Other lines (NCCL INFO/WARN output, launcher noise) are skipped. The collective comes
/// from "Collective test starting", the "# collbench ... perf <collective>:" header, or the caller.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "collbench/types.h"

namespace collbench {

struct NcclTestsHalf {
  double timeUs = 0;
  double algbwGBps = 0, busbwGBps = 0;
  long long wrong = -1;  ///< -1: N/A
};

struct NcclTestsRow {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string type, redop;
  int root = -1;
  NcclTestsHalf outOfPlace, inPlace;
  int line = 0;  ///< 1-based line in the log
};

struct NcclTestsLog {
  std::string version;  ///< "2.19.6" when the log says
  std::string program;  ///< "all_reduce_perf", or "collbench perf all_reduce"
  std::optional<Collective> collective;
  std::string algorithm;  ///< collbench logs: the algorithm of the header ("auto", "ring", ...); "" for nccl-tests
  int nThread = 0, nGpus = 0;
  std::size_t minBytes = 0, maxBytes = 0;
  int warmupIters = 0, iters = 0;
  int nranks = 0;                  ///< "# Rank" lines (or nThread x nGpus when there are none)
  std::vector<std::string> hosts;  ///< distinct host names of the rank lines, in order of appearance
  int nnodes() const { return hosts.empty() ? 1 : static_cast<int>(hosts.size()); }
  std::vector<NcclTestsRow> rows;
  std::optional<double> avgBusBwGBps;
  long long outOfBounds = -1;  ///< "# Out of bounds values" (-1: absent)
};

/// Parses `text`; `source` names the file in messages. Throws Error{InvalidArgument} "<source>:<line>: <field>:
/// <problem> (got '<value>')" for a row that does not parse (wrong column count, non-numbers, negative or
/// non-finite times), and "<source>: no nccl-tests result table ..." when there is no header or no row.
NcclTestsLog parseNcclTestsLog(const std::string& text, const std::string& source);

/// The collective of an nccl-tests program name (all_reduce_perf -> AllReduce; reduce_scatter_perf, all_gather_perf,
/// broadcast_perf, reduce_perf); nullopt for the others (alltoall_perf, sendrecv_perf, ...).
std::optional<Collective> collectiveOfProgram(const std::string& program);

}  // namespace collbench
