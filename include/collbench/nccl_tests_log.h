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
/// from "Collective test starting", the "# collbench ... perf <collective>:" header, or the caller. The NCCL version
/// comes from NCCL's "NCCL INFO NCCL version 2.26.2+cuda12.8" line or nccl-tests' "nccl-library=22602".
///
/// Logs are read as users paste them: each line may carry a launcher's prefix, which is removed first:
///   srun --label                 "0: ", " 12: "              (task id, right-aligned, colon, space)
///   mpirun --tag-output          "[1,0]<stdout>:", "[1,0]<stderr>: "   (job id, rank, stream; Open MPI 4 and 5)
///
/// The CSV form (shared/realdata) is read too: `#` comment lines, then a header line naming the columns
///   bytes,count,type,time_us_oop,algbw_oop,busbw_oop,time_us_ip,algbw_ip,busbw_ip   (optional: redop, root,
///   wrong_oop, wrong_ip; other columns are ignored; the in-place half defaults to the out-of-place one)
/// then one row per size. Comment lines "# gpu_count: 16 (...)", "# node_count: 2 (...)" and
/// "# nccl_version: NCCL version 2.26.2+cuda12.8 ..." (or "2.26.2+cuda12.8 ...") give the rank count, node count and
/// NCCL version; the "-g N" or "--ngpus N" of a "# command: ..." comment gives nGpus, else the first such of another
/// "# <field>: ..." comment.
#include <algorithm>
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
  std::string version;      ///< nccl-tests' version, "2.19.6", when the log says
  std::string ncclVersion;  ///< NCCL's, "2.26.2", when the log says
  bool csv = false;         ///< read from the CSV form
  std::string program;      ///< "all_reduce_perf", or "collbench perf all_reduce"
  std::optional<Collective> collective;
  std::string algorithm;       ///< collbench logs: the algorithm of the header ("auto", "ring", ...); "" for nccl-tests
  int nThread = 0, nGpus = 0;  ///< nGpus: GPUs one thread drives (a CSV's "-g N" in a comment quoting the command)
  std::size_t minBytes = 0, maxBytes = 0;
  int warmupIters = 0, iters = 0;
  int nranks = 0;  ///< "# Rank" lines (or nThread x nGpus when there are none; a CSV's gpu_count); 0: unknown
  std::vector<std::string> hosts;  ///< distinct host names of the rank lines, in order of appearance
  int nodes = 0;                   ///< a CSV's "# node_count:" (0: not given)
  int nnodes() const { return !hosts.empty() ? static_cast<int>(hosts.size()) : nodes > 0 ? nodes : 1; }
  /// GPUs one thread launched each call on: nccl-tests' nGpus (1 when unknown); 1 for `collbench perf` logs, whose
  /// header's nGpus is the rank count.
  int gpusPerThread() const { return program.rfind("collbench", 0) == 0 ? 1 : std::max(1, nGpus); }
  std::vector<NcclTestsRow> rows;
  std::optional<double> avgBusBwGBps;
  long long outOfBounds = -1;  ///< "# Out of bounds values" (-1: absent)
};

/// Parses `text`; `source` names the file in messages. Throws Error{InvalidArgument} "<source>:<line>: <field>:
/// <problem> (got '<value>')" for a row that does not parse (wrong column count, non-numbers, negative or
/// non-finite times), and "<source>: no nccl-tests result table ..." when there is no header or no row.
/// Line numbers count the lines of `text` as given (prefixes included).
NcclTestsLog parseNcclTestsLog(const std::string& text, const std::string& source);
/// Reads `path` and parses it (the path is the source); a file that cannot be read is Error{InvalidArgument}
/// "cannot read nccl-tests log '<path>': <reason>".
NcclTestsLog readNcclTestsLog(const std::string& path);

/// The collective of an nccl-tests program name (all_reduce_perf -> AllReduce; reduce_scatter_perf, all_gather_perf,
/// broadcast_perf, reduce_perf); nullopt for the others (alltoall_perf, sendrecv_perf, ...).
std::optional<Collective> collectiveOfProgram(const std::string& program);

/// `line` without a leading srun --label or mpirun --tag-output prefix (unchanged when it has none).
std::string stripLauncherPrefix(const std::string& line);

}  // namespace collbench
