#pragma once
// The nccl-tests style sweep behind `collbench perf`, shared with tests through its printed table and JSON.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collbench/algorithms.h"
#include "collbench/backend.h"
#include "collbench/records.h"
#include "collbench/schedule_file.h"
#include "collbench/tuning.h"

namespace collbench::cli {

struct PerfConfig {
  Collective collective = Collective::AllReduce;
  // nccl-tests defaults (shared/reference/nccl-tests-conventions.md).
  std::size_t minBytes = 32u << 20;
  std::size_t maxBytes = 32u << 20;
  std::size_t stepBytes = 1u << 20;
  double stepFactor = 1;
  int ranks = 1;
  bool ranksGiven = false;  ///< -g was on the command line (process backends check it against the launched world)
  int iters = 20;
  int warmup = 1;
  int check = 1;
  std::string op = "sum";
  std::string datatype = "float";
  int root = 0;
  int average = 1;
  int blocking = 0;
  double timeoutSeconds = kDefaultTimeoutSeconds;
  std::string outputFile;
  bool force = false;
  std::string backend;  ///< empty: "host"
  std::string algo = "auto";
  std::string topology;
  std::string ncclCalibration;  ///< sim backend: the NCCL model's calibration file for --algo nccl
  std::string ncclVersion;      ///< sim backend: the NCCL release whose choice --algo nccl emulates ("" 2.28)
  int channels = 1;
  std::size_t chunkBytes = 0;
  std::optional<Protocol> protocol;  ///< --proto (timing only: the simulator's wire protocol)
  std::string commandLine;
  std::string tuningFile;  ///< --tuning: table for --algo auto (else $COLLBENCH_TUNING_FILE)
  /// --schedule: every row runs this file's schedule (instantiate) instead of a generated one; algo names it.
  std::shared_ptr<const ScheduleFile> scheduleFile;
};

/// Sizes as nccl-tests walks them: multiply by stepFactor when > 1, else add stepBytes.
std::vector<std::size_t> sizeSequence(const PerfConfig& c);
/// Error{InvalidArgument} "-f/--stepfactor <f> does not grow -b/--minbytes <lo> ..." when a factor above 1 leaves
/// the first of sizes -b .. -e where it is (8 x 1.1 rounds back to 8): the sweep would stop at its first size.
void checkFactorGrows(std::size_t minBytes, std::size_t maxBytes, double factor);
/// tune's and regret's sizes: -b (`minBytes`) up to -e (`maxBytes`) by -f (`factor`); Error{InvalidArgument} naming the
/// flag unless 0 < -b <= -e and -f is a finite number above 1.
std::vector<std::size_t> factorSizes(std::size_t minBytes, std::size_t maxBytes, double factor);
/// tune's and regret's measurement flags: -n/--iters and --repeats at least 1, -w/--warmup_iters at least 0,
/// -T/--timeout a finite number of seconds above 0; Error{InvalidArgument} naming the flag otherwise.
MeasureOptions measureOptions(int iters, int warmup, int repeats, double timeoutSeconds);

/// Runs the sweep, prints the table to `out`; returns the process exit code (1 if any #wrong > 0). Everything a user
/// can get wrong (flags, -J path, an algorithm the backend cannot run, the world of a process backend) throws
/// Error{InvalidArgument or Unsupported} before the first line is printed.
int runPerf(const PerfConfig& c, std::FILE* out);

/// Writes c.outputFile through the collbench-perf record (records.h): `r` holds the run's backend, world, topology,
/// rows and totals; the config, command line and environment are filled in from `c` and this machine.
void writePerfJson(const PerfConfig& c, PerfRun r);

}  // namespace collbench::cli
