// Chrome trace ("JSON object format", the one chrome://tracing and ui.perfetto.dev both open): complete events
// ("ph":"X") in microseconds. Each rank is a process; its spans go to lanes (threads) so that spans on one lane never
// overlap, which both viewers require: sends, receives and computation get their own lanes, and concurrent spans of
// one kind (channels, a tree's two children) get extra lanes, assigned greedily.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>

#include "sim_backend.h"

namespace collbench::sim {
namespace {

constexpr double kUsPerSecond = 1e6;
// Lane ids: kind * kLaneStride + lane, so that sorting by id groups a rank's send, receive and compute lanes.
constexpr int kLaneStride = 100000;

int laneKind(SpanKind k) {
  switch (k) {
    case SpanKind::Send:
      return 0;
    case SpanKind::Recv:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

void writeTimeline(std::ostream& out, const SimResult& r, const std::string& title) {
  std::vector<const Span*> order;
  order.reserve(r.spans.size());
  for (const Span& s : r.spans) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const Span* a, const Span* b) {
    return a->rank != b->rank ? a->rank < b->rank : a->start < b->start;
  });
  nlohmann::json other = {{"title", title},
                          {"generator", std::string("collbench ") + COLLBENCH_VERSION},
                          {"method", r.method},
                          {"exact", r.exact},
                          {"simulated_seconds", r.seconds}};
  if (!r.spansMethod.empty()) {
    // The result's method has no per-op times; say where the spans come from and what they add up to.
    other["spans_method"] = r.spansMethod;
    other["spans_simulated_seconds"] = r.spansSeconds;
  }
  out << "{\"displayTimeUnit\":\"ns\",\"otherData\":" << other.dump() << ",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& e) {
    out << (first ? "" : ",\n") << e;
    first = false;
  };
  static constexpr std::array<const char*, 3> kLaneNames = {"send", "recv", "compute"};
  int rank = -1;
  std::array<std::vector<double>, 3> laneEnd;  // per kind: end of the last span on each lane
  for (const Span* s : order) {
    if (s->rank != rank) {
      rank = s->rank;
      for (auto& v : laneEnd) v.clear();
      emit(fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {}"}}}})", rank, rank));
      emit(fmt::format(R"({{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})", rank, rank));
    }
    const int kind = laneKind(s->kind);
    auto& ends = laneEnd[static_cast<std::size_t>(kind)];
    std::size_t lane = 0;
    while (lane < ends.size() && ends[lane] > s->start) ++lane;
    if (lane == ends.size()) {
      ends.push_back(s->end);
      const int tid = kind * kLaneStride + static_cast<int>(lane);
      emit(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}{}"}}}})", rank, tid,
                       kLaneNames[static_cast<std::size_t>(kind)], lane == 0 ? "" : fmt::format(" {}", lane + 1)));
      emit(fmt::format(R"({{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})", rank,
                       tid, tid));
    } else {
      ends[lane] = s->end;
    }
    std::string name;
    switch (s->kind) {
      case SpanKind::Send:
        name = fmt::format("send to {}", s->peer);
        break;
      case SpanKind::Recv:
        name = fmt::format("recv from {}", s->peer);
        break;
      case SpanKind::Reduce:
        name = s->peer >= 0 ? fmt::format("reduce from {}", s->peer) : "reduce";
        break;
      case SpanKind::Copy:
        name = "copy";
        break;
    }
    emit(fmt::format(
        R"({{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.6f},"dur":{:.6f},"args":{{"op":{},"bytes":{},"channel":{}{}}}}})",
        name, toString(s->kind), rank, kind * kLaneStride + static_cast<int>(lane), s->start * kUsPerSecond,
        (s->end - s->start) * kUsPerSecond, s->op, s->bytes, s->channel,
        s->peer >= 0 ? fmt::format(",\"peer\":{}", s->peer) : ""));
  }
  out << "\n]}\n";
}

}  // namespace collbench::sim
