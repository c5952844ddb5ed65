// The buffers a process holds for a call, and sums over the processes of a one-rank-per-process backend.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "collbench/run.h"

namespace collbench {

ProcessBuffers::ProcessBuffers(const CollectiveSpec& spec, bool inPlace, int localRank)
    : spec_(spec), rank_(localRank) {
  if (localRank < 0) {
    all_.emplace(spec, inPlace);
    return;
  }
  local_ = true;
  inBytes_ = spec.inputBytes();
  outBytes_ = spec.outputBytes();
  if (inPlace) {
    allocBytes_ = std::max(inBytes_, outBytes_);
    out_ = allocatePageAligned(allocBytes_);
    localViews_ = {
        RankBuffers{out_.get() + spec.inPlaceInputOffset(localRank), out_.get() + spec.inPlaceOutputOffset(localRank)}};
  } else {
    in_ = allocatePageAligned(inBytes_);
    out_ = allocatePageAligned(outBytes_);
    allocBytes_ = outBytes_;
    localViews_ = {RankBuffers{in_.get(), out_.get()}};
  }
}

void ProcessBuffers::fill() {
  if (all_) {
    all_->fill();
    return;
  }
  if (in_) std::memset(in_.get(), 0, inBytes_);
  std::memset(out_.get(), 0, allocBytes_);
  if (spec_.kind == Collective::Barrier) return;
  fillRankInput(spec_, rank_, const_cast<void*>(localViews_[0].input));
}

std::size_t ProcessBuffers::countWrong() const {
  if (all_) return all_->countWrong();
  return countWrongOnRank(spec_, rank_, localViews_[0].output);
}

long long sumOverProcesses(Backend& backend, long long value, int localRank, double timeoutSeconds) {
  if (localRank < 0 || backend.nranks() == 1) return value;
  const CollectiveSpec spec{Collective::AllReduce, backend.nranks(), 1, DType::I64, ReduceOp::Sum};
  const Schedule s = buildSchedule(spec, "ring");
  std::int64_t v = value;
  backend.run(s, Buffers{RankBuffers{&v, &v}}, RunOptions{1, 0, timeoutSeconds});
  return v;
}

}  // namespace collbench
