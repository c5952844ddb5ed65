#pragma once
// An event-driven fluid model of the network, without SimGrid (simulator/README.md "fluid"). It keeps SimGrid's CM02
// semantics where they are local and drops the one that is global:
//  - a transfer waits its route's latency (no bandwidth used), then moves its wire bytes;
//  - each flow's sharing penalty is its route's latency (1 when that is 0), as CM02's (network/weight-S 0);
//  - a reduction is a flow of `bytes` on its node's reduction resource (the node's rate shared by its reductions,
//    penalty 1, as SimGrid's executions on one host);
//  - a flow's rate is its smallest weighted share over its resources: capacity x (1 / penalty) / (sum of 1 / penalty
//    of the flows on the resource). Max-min (SimGrid's solver) would also hand what a flow bottlenecked elsewhere
//    leaves on a resource to the others; this rule does not. Where every flow of a resource is bottlenecked on it
//    (saturated links: a pipeline's steady state) the two agree.
// Each event touches only the flows on the resources it changes, so its cost does not grow with the machine.
// Internal to simulator/.
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "world.h"

namespace collbench::sim::detail {

class FluidNetwork {
 public:
  /// Work reported done: its tag and time. It may start more work.
  using OnDone = std::function<void(std::uint64_t tag, double t)>;

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
  /// Runs the events in time order, reporting each finished transfer or exec to `onDone` until none is left.
  void run(const OnDone& onDone);

 private:
  struct Flow {
    std::uint64_t tag = 0;
    const int* resources = nullptr;  // a route's directed links, or one host's reduction
    std::uint32_t resourceCount = 0;
    double weight = 1;     // 1 / sharing penalty
    double remaining = 0;  // bytes left at `since`
    double rate = 0;       // bytes/s since `since`
    double since = 0;
    double end = 0;              // when it ends at the present rate
    double queuedEnd = 0;        // the end event in the queue (never later than `end`: a slower rate waits for it)
    std::uint32_t version = 0;   // events of older versions are stale (a slot's version grows across reuse; mod 2^31)
    std::uint32_t reshared = 0;  // the reshare that last gave it a rate
  };
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
  /// A flow on a resource, with its weight (so that a resource's weights are summed without visiting its flows).
  struct Member {
    int flow;
    double weight;
  };
  /// A resource: its capacity, its flows and the sum of their weights, in one record (a reshare reads it for every
  /// resource of every flow it visits; at 131072 GPUs the flows and resources no longer fit the cache, and one miss
  /// for the record with its list's header took tree x1 there from 24.4 to 23.7 s).
  struct Load {
    double capacity = 0, weights = 0;
    std::vector<Member> flows;
  };

  int add(std::uint64_t tag, std::span<const int> resources, double weight, double bytes);
  void schedule(double t, Event::Kind kind, int flow);
  void join(int id, double t);
  void leave(int id, double t);
  /// New rates for the flows on these resources (the only ones whose shares changed).
  void reshare(const int* changed, std::uint32_t count, double t);

  World& w_;
  int firstHost_;  // resources: directed links, then each host's reduction
  std::vector<double> hostRate_;
  std::vector<std::vector<int>> hostResource_;
  std::vector<Load> load_;
  std::vector<Flow> flows_;
  std::uint32_t reshares_ = 0;
  std::vector<int> free_;
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
