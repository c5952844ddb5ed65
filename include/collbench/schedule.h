#pragma once
/// The schedule IR: what one collective does on every rank, as plain data that every backend executes.
///
/// Semantics (shared by the validator, the host executor and the simulator):
/// - Each rank has an ordered list of ops; `deps` are indices of earlier ops of the same rank. An op may start when
///   all its deps have finished; ops with no path between them may run concurrently.
/// - Send/Recv/RecvReduce between a pair (src rank, dst rank, channel) match in program order (MPI non-overtaking).
///   A matched pair completes together (rendezvous): the sender's source must stay unchanged until then.
/// - Copy:       dst <- src                    (local)
///   Reduce:     dst <- dst (op) src           (local)
///   Send:       peer receives bytes at src
///   Recv:       dst <- incoming
///   RecvReduce: dst <- src (op) incoming      (src and dst may be the same range)
/// - Avg is executed as Sum; backends divide the final output by nranks (`Schedule::needsAvgScale`).
#include <cstddef>
#include <string>
#include <vector>

#include "collbench/types.h"

namespace collbench {

enum class OpKind { Send, Recv, RecvReduce, Copy, Reduce };
enum class BufferKind { Input, Output, Scratch };

std::string_view toString(OpKind k);
std::string_view toString(BufferKind b);

struct BufRef {
  BufferKind buffer = BufferKind::Input;
  std::size_t offset = 0;
  bool operator==(const BufRef&) const = default;
};

struct Op {
  OpKind kind = OpKind::Copy;
  int peer = -1;  ///< other rank for Send/Recv/RecvReduce, -1 for local ops
  BufRef src;     ///< read range (Send, Copy, Reduce, RecvReduce)
  BufRef dst;     ///< written range (Recv, RecvReduce, Copy, Reduce)
  std::size_t bytes = 0;
  std::vector<int> deps;
  int channel = 0;

  bool isComm() const { return kind == OpKind::Send || kind == OpKind::Recv || kind == OpKind::RecvReduce; }
  bool reads() const { return kind != OpKind::Recv; }
  bool writes() const { return kind != OpKind::Send; }
};

struct RankProgram {
  std::vector<Op> ops;
  std::size_t scratchBytes = 0;
};

struct Schedule {
  CollectiveSpec spec;
  std::string algorithm;
  std::vector<RankProgram> ranks;
  /// A library's own collective (nccl, gloo_*, mpi): no ops; only the backend wrapping that library runs it.
  bool native = false;

  std::size_t totalOps() const;
  /// Avg is run as Sum; the output ranges that hold reduced values are divided by nranks afterwards.
  bool needsAvgScale() const { return spec.op == ReduceOp::Avg && spec.reduces(); }
  /// Bytes of the output that hold the result on `rank` (0 on non-root ranks of reduce).
  std::size_t resultBytes(int rank) const;
};

/// Global id of a matched send/recv pair, as computed by matchSchedule().
struct Match {
  int srcRank, srcOp, dstRank, dstOp;
};
/// Pairs every Send with the Recv/RecvReduce of the same (src, dst, channel) in program order.
/// Throws Error{InvalidSchedule} naming ranks and op indices on unmatched ops or size mismatches.
/// `opMatch[rank][op]` is the index into `matches` for comm ops, -1 for local ops.
struct Matching {
  std::vector<Match> matches;
  std::vector<std::vector<int>> opMatch;
};
Matching matchSchedule(const Schedule& s);

/// Human-readable listing for `collbench plan --dump`.
std::string dump(const Schedule& s);

}  // namespace collbench
