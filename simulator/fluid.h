#pragma once
// An event-driven fluid model of the network, without SimGrid (simulator/README.md "fluid"). It keeps SimGrid's CM02
// semantics where they are local and bounds the one that is global:
//  - a transfer waits its route's latency (no bandwidth used), then moves its wire bytes;
//  - each flow's sharing penalty is its route's latency (1 when that is 0), as CM02's (network/weight-S 0);
//  - a reduction is a flow of `bytes` on its node's reduction resource (the node's rate shared by its reductions,
//    penalty 1, as SimGrid's executions on one host);
//  - rates are weighted max-min shares (weight: 1 / penalty), as SimGrid's solver gives, solved locally: an event
//    that adds or removes a flow re-solves max-min (progressive filling) for the flows on the resources it changes,
//    every other flow held at its rate (its use of a resource taken off the capacity), then once more for the flows
//    on the resources where the re-solved flows gave up bandwidth, so that the held flows there take it. Global
//    max-min would go on along every flow's other resources; here that waits for the next event on them. A round
//    over more than kFilledShares resources (an all-to-all's burst) gives each flow its least share in one pass, and
//    has no second round. Every allocation is feasible (no resource above its capacity). Against op by op:
//    tests/sim (FluidVsExact), bench/fluid-vs-exact.sh.
// Each event touches the flows on the resources it changes and on those of one more round, so its cost does not grow
// with the machine.
// Internal to simulator/.
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "world.h"

namespace collbench::sim::detail {

class FluidNetwork {
 public:
  /// Work done: its tag and time.
  struct Done {
    std::uint64_t tag;
    double t;
  };

  explicit FluidNetwork(World& w);

  /// A transfer between the nodes of ranks src and dst (different nodes) whose `wireBytes` move from time t on,
  /// after its route's latency.
  void transfer(int src, int dst, std::uint64_t wireBytes, double t, std::uint64_t tag);
  /// transfer() along a route the caller looked up (World::route or a copy, which outlives the network) with its
  /// latency.
  void transfer(std::span<const DirLink> route, double latency, std::uint64_t wireBytes, double t, std::uint64_t tag);
  /// The sum of the route's link latencies.
  double latency(std::span<const DirLink> route) const;
  /// `bytes` of reduction (or copy) work on the rank's node from time t on, at the node's rate (> 0), shared with
  /// the node's other work.
  void exec(int rank, double bytes, double t, std::uint64_t tag);
  /// The resource of a reducing switch's port (World::reducePortRates) on directed link l leaving the switch: a route
  /// for transfer() may name it besides links, for reduced bytes delivered there.
  int reducePort(DirLink l) const { return reducePortResource_.at(l); }
  /// Scales a resource's capacity by `factor`, before any work starts: directed link l, or host h's reduction (World::
  /// hostIndex).
  void scaleLink(DirLink l, double factor) { load_[static_cast<std::size_t>(l)].capacity *= factor; }
  void scaleHost(int h, double factor) {
    load_[static_cast<std::size_t>(firstHost_) + static_cast<std::size_t>(h)].capacity *= factor;
  }
  /// Runs the events in time order up to the next transfer or exec that finishes; nullopt once none is left. The
  /// caller may start more work before asking for the next.
  std::optional<Done> next();

 private:
  /// What a reshare reads of every flow on the resources it changes (its stamp, resources, weight and rate) comes
  /// first, in one cache line of the 64-byte record.
  struct alignas(64) Flow {
    std::uint32_t reshared = 0;  // the reshare that last gave it a rate
    std::uint32_t resourceCount = 0;
    const int* resources = nullptr;  // a route's directed links, or one host's reduction
    double weight = 1;               // 1 / sharing penalty
    double rate = 0;                 // bytes/s since `since`
    double remaining = 0;            // bytes left at `since`
    double since = 0;
    double queuedEnd = 0;       // the end event in the queue (never later than the end: a slower rate waits for it)
    std::uint32_t version = 0;  // events of older versions are stale (a slot's version grows across reuse; mod 2^31)
    /// When it ends at the present rate.
    double end() const { return rate > 0 ? since + remaining / rate : remaining > 0 ? INFINITY : since; }
  };
  static_assert(sizeof(Flow) == 64);
  /// 16 bytes: the queue holds hundreds of thousands at 16k GPUs. Ties in time pop in an order fixed by the pushes
  /// before them, so runs are deterministic.
  struct Event {
    enum Kind : std::uint32_t { kJoin, kEnd };
    double t;
    std::uint32_t flow;
    std::uint32_t versionKind;  // the flow's version << 1 | kind
    Kind kind() const { return static_cast<Kind>(versionKind & 1); }
    std::uint32_t version() const { return versionKind >> 1; }
    bool operator>(const Event& o) const { return t > o.t; }
  };
  /// A resource: its capacity, its flows and the sum of their rates, in one record (a reshare reads it for every
  /// resource of every flow it visits; at 131072 GPUs the flows and resources no longer fit the cache, and one miss
  /// for the record with its list's header took tree x1 there from 24.4 to 23.7 s).
  struct Load {
    double capacity = 0;
    double allocated = 0;  // the sum of its flows' rates (kept as they change; 0 when it has none)
    std::vector<int> flows;
    std::uint32_t reshared = 0, share = 0;  // the reshare that last met it, and its Share there
  };
  /// A resource in a round of a reshare: what the held flows leave of it, and the weights and number of its re-solved
  /// flows not yet fixed.
  struct Share {
    int resource;
    std::uint32_t unfixed = 0;
    double residual = 0, weights = 0;
    double floor = 0;           // the least residual handed out (kResidualFloor of its capacity)
    double released = 0;        // what the re-solved flows gave up on it
    std::uint32_t members = 0;  // the re-solved flows on it
  };

  int add(std::uint64_t tag, std::span<const int> resources, double weight, double bytes);
  void schedule(double t, Event::Kind kind, int flow);
  void join(int id, double t);
  void leave(int id, double t);
  /// New rates after these resources' flows changed: weighted max-min among their flows, the others held, and one
  /// more round where those gave up bandwidth.
  void reshare(const int* changed, std::uint32_t count, double t);
  /// One round of a reshare: max-min for the flows on `changed`, the others held.
  void solve(const int* changed, std::uint32_t count, double t);
  /// Gathers the round's flows (reshared_) and their resources (shares_, flowShares_).
  void gather(const int* changed, std::uint32_t count);
  /// New rates for the round (newRate_): progressive filling, the resource of least share per unit weight fixing its
  /// flows at that share, repeatedly; one pass over many resources (kFilledShares).
  void fill();
  void setRate(int id, double rate, double t);

  World& w_;
  int firstHost_;  // resources: directed links, then each host's reduction, then reducing switches' ports
  std::unordered_map<DirLink, int> reducePortResource_;
  std::vector<double> hostRate_;
  std::vector<std::vector<int>> hostResource_;
  std::vector<Load> load_;
  std::vector<Flow> flows_;
  std::vector<std::uint64_t> tags_;  // per flow: what next() reports when it ends
  std::uint32_t reshares_ = 0;
  std::vector<int> free_;
  // A round's scratch, kept across events: its flows and their new rates (by slot), its resources, each flow's
  // resources; the resources of the next round.
  std::vector<int> reshared_, released_;
  std::vector<double> newRate_;
  std::vector<Share> shares_;
  std::vector<std::uint32_t> flowShares_, flowFirst_;  // flow i's resources: shares_ indices from flowFirst_[i]
  /// Events by time. Times never go below the last one popped (work starts at or after the event that started it), so
  /// a radix heap (Ahuja, Mehlhorn, Orlin, Tarjan, "Faster algorithms for the shortest path problem", JACM 1990)
  /// serves them: buckets by the highest bit in which an event's time differs from the last popped, each element
  /// moving down at most 64 times, appended and scanned in order (a binary heap's sift-downs miss the cache once its
  /// hundreds of thousands of events outgrow it).
  class EventQueue {
   public:
    bool empty() const { return size_ == 0; }
    void push(const Event& e);
    Event pop();

   private:
    static std::uint64_t key(double t);
    std::size_t bucketOf(std::uint64_t k) const;
    std::array<std::vector<Event>, 65> buckets_;
    std::size_t head_ = 0;  // events of bucket 0 (the last popped time) before head_ have popped
    std::uint64_t last_ = 0;
    std::size_t size_ = 0;
  };
  EventQueue events_;
};

}  // namespace collbench::sim::detail
