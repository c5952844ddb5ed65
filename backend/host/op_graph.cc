#include "op_graph.h"

#include <cstring>

#include "collbench/reduce.h"

namespace collbench::host {

void runLocalOp(const Op& op, std::byte* dst, const std::byte* src, DType dtype, ReduceOp rop, std::size_t elemSize) {
  if (op.kind == OpKind::Copy) {
    if (dst != src) std::memcpy(dst, src, op.bytes);
  } else {
    reduceElements(dtype, rop, dst, dst, src, op.bytes / elemSize);
  }
}

OpGraph::OpGraph(const std::vector<Op>& ops) {
  const std::size_t n = ops.size();
  indegree_.assign(n, 0);
  offsets_.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    indegree_[i] = static_cast<int>(ops[i].deps.size());
    for (int d : ops[i].deps) ++offsets_[static_cast<std::size_t>(d) + 1];
    if (ops[i].deps.empty()) roots_.push_back(static_cast<int>(i));
  }
  for (std::size_t i = 0; i < n; ++i) offsets_[i + 1] += offsets_[i];
  dependents_.resize(offsets_[n]);
  std::vector<std::size_t> fill(offsets_.begin(), offsets_.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d : ops[i].deps) dependents_[fill[static_cast<std::size_t>(d)]++] = static_cast<int>(i);
  }
}

ReadyOps::ReadyOps(const OpGraph& g)
    : graph_(&g), remaining_(g.indegree_), ready_(g.roots_.rbegin(), g.roots_.rend()) {}

void ReadyOps::reset() {
  remaining_ = graph_->indegree_;
  ready_.assign(graph_->roots_.rbegin(), graph_->roots_.rend());
  done_ = 0;
}

void ReadyOps::complete(int i) {
  ++done_;
  for (int d : graph_->dependents(i)) {
    if (--remaining_[static_cast<std::size_t>(d)] == 0) ready_.push_back(d);
  }
}

}  // namespace collbench::host
