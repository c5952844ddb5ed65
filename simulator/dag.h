#pragma once
// The dependency-graph driver shared by the exact and aggregated methods: it applies the schedule semantics
// (deps, rendezvous, FIFO connections, reduction after receive) and asks a Timing when work starts; the Timing
// reports back when it ends (SimGrid's clock for exact, precomputed durations for aggregated). Internal.
#include <cstdint>
#include <vector>

#include "collbench/schedule.h"
#include "world.h"

namespace collbench::sim::detail {

class Dag {
 public:
  enum TagKind : std::uint64_t { kLocal = 0, kTransfer = 1, kReduce = 2, kSwitch = 3 };
  static std::uint64_t tag(TagKind k, std::uint64_t id) { return id << 2 | k; }

  struct Xfer {
    int src = 0, dst = 0;        // ranks
    int sendOp = 0, recvOp = 0;  // global op ids
    int conn = 0, seq = 0;       // connection and position on it
    int channel = 0;
    std::uint64_t bytes = 0;
    bool reduce = false;  // the receiver is a RecvReduce
    // When both sides are ready, a network transfer waits its protocol's step latency (`delay`), then carries
    // `wireBytes` from `start` (World::wire; bytes and no delay without a protocol).
    std::uint64_t wireBytes = 0;
    double delay = 0;
    double sendReady = -1, recvReady = -1, start = -1, end = -1;
  };

  /// One leg of a switch op's data between a member, or an aggregation switch, and a switch above it (sim_backend.h
  /// has the semantics).
  struct SwitchFlow {
    int match = 0;          // index into Matching::switchMatches
    int member = 0;         // index into the group's ranks; -1 for an aggregation switch's leg
    int point = -1;         // that aggregation switch (index into Aggregation::points)
    int lower = 0, sw = 0;  // node indices: the member's node or the aggregation switch, and the switch above
    World::SwitchLeg leg = World::SwitchLeg::Up;
    std::uint64_t bytes = 0;
  };

  class Timing {
   public:
    virtual ~Timing() = default;
    /// Network transfer `m` (ranks on different nodes) starts at time t (its protocol's delay included: the wire
    /// bytes move from t on).
    virtual void transfer(Dag& d, int m, double t) = 0;
    /// `bytes` of local work at the node's rate (> 0) starts at t: a reduction, a copy or a same-node transfer.
    virtual void exec(Dag& d, std::uint64_t tag, int rank, double t, double bytes) = 0;
    /// Switch flow `f` starts at time t; ends with tag(kSwitch, f). Only the exact method times switch ops.
    virtual void switchFlow(Dag& d, int f, double t);
  };

  /// `groupSwitch`: the switch node of each switch group (validateOnTopology); empty when s has none.
  Dag(const Schedule& s, const Matching& m, World& w, std::vector<int> groupSwitch = {});

  /// Makes the ops without deps ready at time 0 and processes what follows without waiting.
  void begin(Timing& timing);
  /// Work `tag` finished at time t (relative to the start); processes what follows.
  void complete(std::uint64_t tag, double t);
  /// Records that work `tag` will finish at time t, to be handled after the current step (for Timings that know
  /// durations up front); drain() handles it.
  void later(std::uint64_t tag, double t) { post(tag, t); }
  /// Handles everything recorded with later() and what follows from it.
  void drain();
  /// Throws Error{InvalidSchedule} naming the first op that never finished (a deadlock under rendezvous).
  void checkFinished() const;

  double makespan() const;
  const std::vector<Xfer>& transfers() const { return xf_; }
  const Xfer& transfer(int m) const { return xf_[static_cast<std::size_t>(m)]; }
  const SwitchFlow& switchFlow(int f) const { return sflow_[static_cast<std::size_t>(f)]; }
  std::size_t ops() const { return opRank_.size(); }
  int globalOp(int rank, int op) const { return rankOffset_[static_cast<std::size_t>(rank)] + op; }
  double opStart(int g) const { return start_[static_cast<std::size_t>(g)]; }
  double opEnd(int g) const { return end_[static_cast<std::size_t>(g)]; }
  /// One span per op (two for a RecvReduce that reduces), for the timeline.
  std::vector<Span> spans() const;

 private:
  const Op& op(int g) const;
  void post(std::uint64_t tag, double t) { work_.push_back({tag, t}); }
  void handle(std::uint64_t tag, double t);
  void opReady(int g, double t);
  void opDone(int g, double t);
  void tryStart(int m);
  void switchReady(int g, int rank, double t);
  /// Starts the leg of `member` (point -1) or of aggregation switch `point` (member -1) of switch match k.
  void startSwitchFlow(int k, int member, int point, World::SwitchLeg leg, double t);
  void startReductionUp(int k, int member, double t);
  void switchFlowDone(int f, double t);

  /// In-network aggregation, as SHARP's aggregation trees do over a leaf/spine(/core) fabric: members of a switch group
  /// whose way up to the group's switch crosses a switch that reduces and multicasts, shared with another member,
  /// meet there (their legs end at it); such switches meet likewise at the next level, and one leg joins each to the
  /// switch above it (the next aggregation switch, or the group's).
  struct Aggregation {
    std::vector<int> points;       // node indices of the aggregation switches
    std::vector<int> memberPoint;  // per member: its aggregation switch (index into points), -1: none
    std::vector<int> pointParent;  // per aggregation switch: the one above it, -1: the group's switch
  };
  Aggregation aggregation(std::size_t group) const;

  const Schedule& s_;
  const Matching& m_;
  World& world_;
  Timing* timing_ = nullptr;
  std::vector<int> rankOffset_, opRank_;
  std::vector<int> pending_;
  std::vector<double> readyT_, start_, end_;
  std::vector<int> depStart_, dependents_;  // CSR: op -> ops that depend on it
  std::vector<Xfer> xf_;
  std::vector<int> connStart_, connMatches_, connNext_;
  std::vector<double> connFree_;
  // Switch ops: per switch match, the members' ready times (-1: not yet) and legs still running. A SwitchReduce's
  // ups start when the member and the root are ready, its reduced down once every up has started; a Multicast's up
  // when the root is ready, each down when the root and that member are. A member's op completes when its own legs
  // and the legs it waits for (every up of a reduction, the up of a multicast) are done (sim_backend.h).
  static constexpr char kCopyArrived = 1, kCopyDone = 2;
  struct SwitchState {
    std::vector<double> ready;
    std::vector<char> downDone;     // multicast: kCopyArrived when the member's copy has arrived, kCopyDone when done
    std::vector<int> pointWaiting;  // reduction: per aggregation switch, what is below it and has not started up
    std::vector<char> pointDown;    // multicast: per aggregation switch, whether its copy has arrived
    double rootReady = -1;
    int upsStarted = 0, upsLeft = 0;
    bool downLeft = true;  // reduction: the reduced bytes have not reached the root yet
    double upsDone = -1;   // multicast: when the root's bytes had all gone up
  };
  std::vector<int> groupSwitch_;
  std::vector<Aggregation> agg_;  // per switch group
  std::vector<SwitchState> sstate_;
  std::vector<SwitchFlow> sflow_;
  struct Work {
    std::uint64_t tag;
    double t;
  };
  std::vector<Work> work_;
  std::size_t done_ = 0;
};

}  // namespace collbench::sim::detail
