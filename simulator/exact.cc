// The exact method: every transfer is a SimGrid comm and every reduction a SimGrid execution, started when the
// schedule semantics allow (Dag) and finished on SimGrid's clock.
#include "dag.h"
#include "engine.h"

namespace collbench::sim::detail {
namespace {

class SimGridTiming : public Dag::Timing {
 public:
  explicit SimGridTiming(World& w) : w_(w) {}
  // Called when both sides are ready (now): the comm starts after the protocol's delay, at t.
  void transfer(Dag& d, int m, double) override {
    const Dag::Xfer& x = d.transfer(m);
    w_.startComm(x.src, x.dst, x.wireBytes, Dag::tag(Dag::kTransfer, static_cast<std::uint64_t>(m)), x.delay);
  }
  void exec(Dag&, std::uint64_t tag, int rank, double, double bytes) override { w_.startExec(rank, bytes, tag); }
  void switchFlow(Dag& d, int f, double) override {
    const Dag::SwitchFlow& x = d.switchFlow(f);
    w_.startSwitchComm(x.lower, x.sw, x.leg, x.bytes, Dag::tag(Dag::kSwitch, static_cast<std::uint64_t>(f)));
  }

 private:
  World& w_;
};

}  // namespace

SimResult simulateExact(World& w, const Schedule& s, const Matching& m, bool timeline,
                        const std::vector<int>& groupSwitch) {
  Dag d(s, m, w, groupSwitch);
  SimGridTiming timing(w);
  const double t0 = w.now();
  const std::size_t before = w.activities();
  d.begin(timing);
  const std::function<void(std::uint64_t)> onDone = [&](std::uint64_t tag) { d.complete(tag, w.now() - t0); };
  w.run(onDone);
  d.checkFinished();
  SimResult r;
  r.seconds = d.makespan();
  r.method = "exact";
  r.ops = d.ops();
  r.transfers = d.transfers().size();
  r.simulatedActivities = w.activities() - before;
  if (timeline) r.spans = d.spans();
  return r;
}

}  // namespace collbench::sim::detail
