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
