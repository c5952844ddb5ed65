// collbench-mpi-allreduce: Open MPI's MPI_Allreduce timed the way `collbench perf` times its schedules, printing the
// same nccl-tests table (rank 0 only), so that bench/compare.sh and `collbench perf --algo mpi` compare peer and
// ours from one kind of output. Start it with mpirun:
//   mpirun -np 4 --oversubscribe --allow-run-as-root collbench-mpi-allreduce -b 1M -e 256M -f 4
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/reduce.h"
#include "collbench/reference.h"
#include "collbench/types.h"
#include "collbench/units.h"

namespace {

using collbench::DType;
using collbench::ReduceOp;

struct Config {
  std::string minBytes = "32M", maxBytes = "32M", stepBytes = "1M";
  double stepFactor = 0;
  int iters = 20, warmup = 1, check = 1, average = 1;
  std::string datatype = "float", op = "sum";
};

MPI_Datatype mpiType(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    default:
      break;
  }
  throw collbench::Error(collbench::Errc::Unsupported,
                         fmt::format("MPI_Allreduce baseline runs float, double, int32, int64; not {}", toString(t)));
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;
    case ReduceOp::Prod:
      return MPI_PROD;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

std::string timeString(double us) {
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

int run(const Config& c) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const DType dtype = collbench::parseDType(c.datatype);
  const ReduceOp op = collbench::parseReduceOp(c.op);
  const MPI_Datatype mt = mpiType(dtype);
  const std::size_t minB = collbench::parseBytes(c.minBytes, "-b"), maxB = collbench::parseBytes(c.maxBytes, "-e"),
                    stepB = collbench::parseBytes(c.stepBytes, "-i");
  const std::size_t es = collbench::dtypeSize(dtype);
  std::FILE* out = rank == 0 ? stdout : nullptr;
  auto print = [&](const std::string& s) {
    if (out) std::fputs(s.c_str(), out);
  };
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  print(fmt::format("# collbench {} perf all_reduce: backend mpi, {} ranks, algorithm mpi (MPI_Allreduce)\n",
                    COLLBENCH_VERSION, n));
  print(fmt::format(
      "# nThread 1 nGpus {} minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} agg iters: 1 "
      "validation: {} graph: 0\n#\n# Using devices\n",
      n, minB, maxB, c.stepFactor > 1 ? fmt::format("{}(factor)", c.stepFactor) : fmt::format("{}(bytes)", stepB),
      c.warmup, c.iters, c.check));
  // Every rank's pid and host, gathered on rank 0 for the "Using devices" lines.
  const int pid = static_cast<int>(::getpid());
  std::vector<int> pids(static_cast<std::size_t>(n));
  std::vector<char> hosts(static_cast<std::size_t>(n) * sizeof host);
  MPI_Gather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Gather(host, sizeof host, MPI_CHAR, hosts.data(), sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r) {
    print(fmt::format("#  Rank {:2d} Group  0 Pid {:6d} on {:>10} device {:2d} [mpi] cpu process\n", r,
                      pids[static_cast<std::size_t>(r)], hosts.data() + static_cast<std::size_t>(r) * sizeof host, r));
  }
  print(fmt::format("#\n#{:>80}{:>40}\n", "out-of-place", "in-place"));
  print(fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                    "busbw", "#wrong"));
  print(fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                    "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""));
  const double factor = 2.0 * (n - 1) / n;
  double busSum = 0;
  int busRows = 0;
  long long wrongTotal = 0;
  for (std::size_t bytes = minB; bytes <= maxB;) {
    const std::size_t count = bytes / es;
    const collbench::CollectiveSpec spec{collbench::Collective::AllReduce, n, count, dtype, op, 0};
    const std::size_t rowBytes = count * es;
    std::vector<std::byte> in(std::max<std::size_t>(rowBytes, 1)), outBuf(std::max<std::size_t>(rowBytes, 1));
    auto fill = [&](std::byte* p) { collbench::fillRankInput(spec, rank, p); };
    std::string row =
        fmt::format("  {:10d}  {:12d}  {:>8}  {:>6}  {:6d}", rowBytes, count, toString(dtype), toString(op), -1);
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      fill(in.data());
      std::byte* dst = inPlace ? in.data() : outBuf.data();
      const void* src = inPlace ? MPI_IN_PLACE : static_cast<const void*>(in.data());
      auto once = [&] {
        MPI_Allreduce(src, dst, static_cast<int>(count), mt, mpiOp(op), MPI_COMM_WORLD);
        if (op == ReduceOp::Avg) collbench::divideElements(dtype, dst, count, n);
      };
      for (int i = 0; i < c.warmup; ++i) once();
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < c.iters; ++i) once();
      double t = c.iters ? (MPI_Wtime() - t0) / c.iters : 0.0;
      // nccl-tests -a: 0 rank 0's time, 1 mean, 2 min, 3 max.
      double agg = t;
      if (c.average == 1) {
        MPI_Allreduce(&t, &agg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        agg /= n;
      } else if (c.average == 2 || c.average == 3) {
        MPI_Allreduce(&t, &agg, 1, MPI_DOUBLE, c.average == 2 ? MPI_MIN : MPI_MAX, MPI_COMM_WORLD);
      } else {
        MPI_Bcast(&agg, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      }
      long long wrong = -1;
      if (c.check) {
        fill(in.data());
        once();
        long long mine = static_cast<long long>(collbench::countWrongOnRank(spec, rank, dst));
        MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        wrongTotal += wrong;
      }
      const double algbw = agg > 0 ? static_cast<double>(rowBytes) / agg / 1e9 : 0;
      const double busbw = algbw * factor;
      busSum += busbw;
      ++busRows;
      row += fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}", timeString(agg * 1e6), algbw, busbw,
                         wrong < 0 ? std::string("N/A") : std::to_string(wrong));
    }
    print(row + "\n");
    if (out) std::fflush(out);
    const std::size_t next =
        c.stepFactor > 1 ? static_cast<std::size_t>(static_cast<double>(bytes) * c.stepFactor) : bytes + stepB;
    if (next <= bytes) break;
    bytes = next;
  }
  print(fmt::format("# Out of bounds values : {} {}\n", wrongTotal, wrongTotal == 0 ? "OK" : "FAILED"));
  print(fmt::format("# Avg bus bandwidth    : {:g} \n#\n", busRows ? busSum / busRows : 0.0));
  return wrongTotal > 0 ? 1 : 0;
}

}  // namespace

// A function try block: setting up the options (CLI11 throws on a clash) may throw before the inner try.
int main(int argc, char** argv) try {
  MPI_Init(&argc, &argv);
  Config c;
  CLI::App app{"MPI_Allreduce baseline with nccl-tests flags and table (run under mpirun)", "collbench-mpi-allreduce"};
  app.add_option("-b,--minbytes", c.minBytes, "minimum size")->default_val("32M");
  app.add_option("-e,--maxbytes", c.maxBytes, "maximum size")->default_val("32M");
  app.add_option("-i,--stepbytes", c.stepBytes, "increment between sizes")->default_val("1M");
  app.add_option("-f,--stepfactor", c.stepFactor, "factor between sizes (> 1)");
  app.add_option("-n,--iters", c.iters, "timed iterations")->default_val(20);
  app.add_option("-w,--warmup_iters", c.warmup, "untimed iterations")->default_val(1);
  app.add_option("-c,--check", c.check, "check results")->default_val(1);
  app.add_option("-d,--datatype", c.datatype, "float | double | int32 | int64")->default_val("float");
  app.add_option("-o,--op", c.op, "sum | prod | min | max | avg")->default_val("sum");
  app.add_option("-a,--average", c.average, "0 rank 0, 1 mean, 2 min, 3 max")->default_val(1);
  int rc = 0;
  try {
    app.parse(argc, argv);
    rc = run(c);
  } catch (const CLI::ParseError& e) {
    rc = app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collbench-mpi-allreduce: error: %s\n", e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
} catch (...) {
  std::fprintf(stderr, "collbench-mpi-allreduce: internal error while setting up\n");
  MPI_Abort(MPI_COMM_WORLD, 3);
  return 3;
}
