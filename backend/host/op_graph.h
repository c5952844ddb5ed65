#pragma once
/// One rank's op DAG as both host executors (threads and Gloo processes) walk it: built once per schedule, then a
/// fresh ReadyOps per execution hands out the ops whose deps are done.
///
///   OpGraph g(prog.ops);                 // once per schedule and rank
///   ReadyOps ready(g);                   // once per execution (or ready.reset() to reuse one)
///   while (ready.any()) { int i = ready.pop(); ...run op i...; ready.complete(i); }
///
/// complete(i) may also come later, out of order (an op that was posted and finishes after others): ops become
/// ready as soon as their last dep completes.
#include <cstddef>
#include <span>
#include <vector>

#include "collbench/schedule.h"

namespace collbench::host {

/// Runs a local op (Copy or Reduce) on its resolved buffers, as both host executors do: a Copy whose source and
/// destination are the same range is free; a Reduce folds `src` into `dst` in place. `elemSize` is the element size
/// (1 for barriers).
void runLocalOp(const Op& op, std::byte* dst, const std::byte* src, DType dtype, ReduceOp rop, std::size_t elemSize);

class OpGraph {
 public:
  OpGraph() = default;
  explicit OpGraph(const std::vector<Op>& ops);

  std::size_t size() const { return indegree_.size(); }
  /// Number of deps of op i.
  int indegree(int i) const { return indegree_[static_cast<std::size_t>(i)]; }
  /// Ops that list op i among their deps.
  std::span<const int> dependents(int i) const {
    const auto iu = static_cast<std::size_t>(i);
    return {dependents_.data() + offsets_[iu], dependents_.data() + offsets_[iu + 1]};
  }
  /// Ops without deps, in program order.
  const std::vector<int>& roots() const { return roots_; }

 private:
  friend class ReadyOps;
  std::vector<int> indegree_;
  std::vector<std::size_t> offsets_;  // CSR: dependents of op i are dependents_[offsets_[i] .. offsets_[i+1])
  std::vector<int> dependents_;
  std::vector<int> roots_;
};

/// Per-execution countdown of unfinished deps. pop() hands out ready ops in program order among those that became
/// ready together (roots first, in order), which is the order the Gloo executor posts transfers in.
class ReadyOps {
 public:
  explicit ReadyOps(const OpGraph& g);
  /// Starts over (a new execution) without allocating.
  void reset();
  bool any() const { return !ready_.empty(); }
  int pop() {
    const int i = ready_.back();
    ready_.pop_back();
    return i;
  }
  /// Marks op i finished; its dependents whose deps are now all finished become ready.
  void complete(int i);
  /// Ops completed so far.
  std::size_t done() const { return done_; }
  bool finished() const { return done_ == graph_->size(); }

 private:
  const OpGraph* graph_;
  std::vector<int> remaining_;
  std::vector<int> ready_;  // a stack
  std::size_t done_ = 0;
};

}  // namespace collbench::host
