#pragma once
// Helpers shared by the topology sources (topology.cc, topology_generators.cc, topology_routing.cc); not public.
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "collbench/topology.h"

namespace collbench::topo_detail {

using nlohmann::json;

/// Throws Error{InvalidTopology} "<source>: <path>: <what> (got <value>)"; the value part is omitted when empty.
[[noreturn]] void fail(const std::string& source, const std::string& path, const std::string& what,
                       const std::string& value = "");
/// Accepted ranges of the numeric fields (files, --set overrides and generator parameters all enforce them;
/// topologies/README.md). They are orders of magnitude outside real hardware (the fastest link today, NVLink5, is
/// 900 GB/s per direction; a long-haul link is milliseconds) and keep the simulator's arithmetic finite: SimGrid
/// aborts on a link of 1e300 bytes/s, and a latency of 1e300 us prints as a 300-digit time.
/// Bandwidths and rates: 1 kB/s .. 1 PB/s.
inline constexpr double kMinBandwidthGBps = 1e-6;
inline constexpr double kMaxBandwidthGBps = 1e6;
/// Latency: 0 .. 1000 s.
inline constexpr double kMaxLatencyUs = 1e9;

/// Range checks shared by files, overrides and generators: "" when the value is acceptable, else what is wrong with
/// it ("bandwidth must be > 0", "bandwidth must be between ...").
std::string bandwidthProblem(double gbps);
/// A rate where 0 has a meaning (reduce_GBps 0 = infinite, switch_GBps 0 = non-blocking): 0 or a bandwidth.
std::string rateProblem(double gbps, const char* zeroMeans);
std::string latencyProblem(double us);

/// A JSON value rendered for a one-line message (compact, truncated).
std::string render(const json& v);

/// Parses text, rejecting duplicate object keys; syntax errors name line, column and byte offset.
json parseJsonText(const std::string& text, const std::string& source);

/// Builds a Topology from a {"generator", "params"} document part (params may be null = defaults).
Topology generateFromJson(const std::string& generator, const json& params, const std::string& source);

/// id -> index; duplicate ids keep the first (validation reports them).
std::unordered_map<std::string, int> indexById(const Topology& t);

/// Undirected adjacency in CSR form: neighbours of n are entries [start[n], start[n+1]) of (nbr, link).
struct Adjacency {
  std::vector<int> start;
  std::vector<int> nbr;
  std::vector<int> link;
};
/// Requires every link endpoint to exist in `index`.
Adjacency buildAdjacency(const Topology& t, const std::unordered_map<std::string, int>& index);

/// Hop counts from `src` to every node (-1 = unreachable).
std::vector<int> bfsHops(const Adjacency& adj, int src);

}  // namespace collbench::topo_detail
