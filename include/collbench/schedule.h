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
/// - Switch ops: a reduction or a multicast performed by a switch of the network (NVLS on an NVSwitch, SHARP on a
///   fabric switch), for the ranks of one switch group (`group` indexes Schedule::switchGroups; `peer` is the op's
///   root, a member of the group):
///   SwitchReduce: root's dst <- (op) over every member m of m's src    (the root pulls: NVLS multimem.ld_reduce)
///   Multicast:    every member's dst <- root's src                     (the root pushes: NVLS multimem.st)
///   Every member issues every op of its groups, even where it neither reads nor writes (a SwitchReduce on a non-root
///   reads its src and writes nothing; a Multicast on a non-root writes its dst and reads nothing). Switch ops match
///   like sends: the k-th op of (group, channel) on one member matches the k-th of that (group, channel) on every
///   other member, and matched ops agree on kind, root and bytes. Example, an all-reduce of 2 chunks on ranks {0, 1}
///   of group 0 (chunk c owned by rank c), identical on both ranks:
///     0: switch_reduce root 0 src in+0 dst out+0      1: switch_reduce root 1 src in+C dst out+C
///     2: multicast root 0 src out+0 dst out+0 deps 0  3: multicast root 1 src out+C dst out+C deps 1
///   Wrong: rank 1 issuing the two switch_reduce ops in the other order (root 1 first) matches rank 0's root-0 op
///   with its root-1 op, which the validator rejects. Completion: a SwitchReduce completes on a non-root once the
///   switch has read every member's src, on the root once the reduced bytes are in its dst; a Multicast completes on
///   each member once its dst is written (on the root, also once its src has been read). Only backends that model or
///   drive such a switch run them (sim, nccl); the host backends refuse them with Error{Unsupported}.
/// - Avg is executed as Sum; backends divide the final output by nranks (`Schedule::needsAvgScale`).
/// - Protocol (`Schedule::protocol`): the wire protocol NCCL would move the bytes with (LL, LL128, Simple), one per
///   schedule as NCCL uses one per call. It is timing only: the simulator charges each transfer the protocol's payload
///   efficiency (LL carries 4 data bytes per 8, LL128 120 per 128) and per-step latency on its path, and the call the
///   launch floor (simulator/sim_backend.h, "Protocols"); the host and GPU backends execute the same data movement
///   whatever it says.
///   Absent: the backend's default (the simulator: no protocol cost on CPU ranks, NCCL's point-to-point choice on GPU
///   ranks).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "collbench/types.h"

namespace collbench {

enum class OpKind { Send, Recv, RecvReduce, Copy, Reduce, SwitchReduce, Multicast };
enum class BufferKind { Input, Output, Scratch };
/// NCCL's wire protocols, in NCCL's order (NCCL_PROTO_LL = 0, LL128, SIMPLE).
enum class Protocol { LL, LL128, Simple };

std::string_view toString(OpKind k);
std::string_view toString(BufferKind b);
/// "LL", "LL128", "Simple" (NCCL_PROTO's spellings).
std::string_view toString(Protocol p);
/// Case-insensitive; throws Error{InvalidArgument} "unknown protocol '<s>' (available: LL, LL128, Simple)".
Protocol parseProtocol(std::string_view s);

struct BufRef {
  BufferKind buffer = BufferKind::Input;
  std::size_t offset = 0;
  bool operator==(const BufRef&) const = default;
};

struct Op {
  OpKind kind = OpKind::Copy;
  int peer = -1;  ///< other rank for Send/Recv/RecvReduce, the root for switch ops, -1 for local ops
  BufRef src;     ///< read range (Send, Copy, Reduce, RecvReduce; SwitchReduce on every member, Multicast on the root)
  BufRef dst;  ///< written range (Recv, RecvReduce, Copy, Reduce; SwitchReduce on the root, Multicast on every member)
  std::size_t bytes = 0;
  std::vector<int> deps;
  int channel = 0;
  int group = -1;  ///< switch ops: index into Schedule::switchGroups; -1 otherwise

  bool isComm() const { return kind == OpKind::Send || kind == OpKind::Recv || kind == OpKind::RecvReduce; }
  bool isSwitch() const { return kind == OpKind::SwitchReduce || kind == OpKind::Multicast; }
  /// Whether the op reads src / writes dst on some rank (for switch ops, readsOn/writesOn say on which).
  bool reads() const { return kind != OpKind::Recv; }
  bool writes() const { return kind != OpKind::Send; }
  /// Whether the op, issued by `rank`, reads its src / writes its dst there.
  bool readsOn(int rank) const { return kind == OpKind::Multicast ? rank == peer : reads(); }
  bool writesOn(int rank) const { return kind == OpKind::SwitchReduce ? rank == peer : writes(); }
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
  /// Switch groups (Op::group): the member ranks of each, ascending. Empty when no op is performed by a switch.
  std::vector<std::vector<int>> switchGroups;
  /// The wire protocol the transfers use (timing only, see above); nullopt: the backend's default.
  std::optional<Protocol> protocol = std::nullopt;

  std::size_t totalOps() const;
  /// Some op is performed by a switch (only backends with such a switch run the schedule).
  bool usesSwitch() const { return !switchGroups.empty(); }
  /// Avg is run as Sum; the output ranges that hold reduced values are divided by nranks afterwards.
  bool needsAvgScale() const { return spec.op == ReduceOp::Avg && spec.reduces(); }
  /// Bytes of the output that hold the result on `rank` (0 on non-root ranks of reduce).
  std::size_t resultBytes(int rank) const;
};

/// Global id of a matched send/recv pair, as computed by matchSchedule().
struct Match {
  int srcRank, srcOp, dstRank, dstOp;
};
/// One switch op performed once for its group: the k-th op of (group, channel) on every member.
struct SwitchMatch {
  int group = 0, channel = 0;
  std::vector<int> ops;  ///< op index on each member, in the order of Schedule::switchGroups[group]
};
/// Pairs every Send with the Recv/RecvReduce of the same (src, dst, channel) in program order, and every switch op
/// with the ops of the other members of its group (SwitchMatch). Throws Error{InvalidSchedule} naming ranks and op
/// indices on unmatched ops, size mismatches, and switch ops outside their group or disagreeing with their match.
/// `opMatch[rank][op]` is the index into `matches` for comm ops, into `switchMatches` for switch ops, -1 for local
/// ops.
struct Matching {
  std::vector<Match> matches;
  std::vector<std::vector<int>> opMatch;
  std::vector<SwitchMatch> switchMatches;
};
Matching matchSchedule(const Schedule& s);

/// Throws Error{Unsupported} when `s` has switch ops: `backend` executes data movement itself and has no switch
/// that reduces or multicasts. The message tells where such schedules run.
void requireNoSwitchOps(const Schedule& s, std::string_view backend);

/// Human-readable listing for `collbench plan --dump`.
std::string dump(const Schedule& s);

}  // namespace collbench
