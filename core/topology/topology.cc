// Topology: the JSON format (parse, validate, serialise), overrides, fingerprints and the named-file search path.
// Generators live in topology_generators.cc, routing and summaries in topology_routing.cc.
#include "collbench/topology.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <system_error>
#include <unordered_set>

#include "collbench/error.h"
#include "collbench/json_document.h"
#include "collbench/nccl_model.h"
#include "topology_internal.h"

namespace collbench {
namespace topo_detail {

namespace {
// Long values (a whole nodes array) are cut so that the message stays one readable line.
constexpr std::size_t kMaxRenderedChars = 80;
}  // namespace

void fail(const std::string& source, const std::string& path, const std::string& what, const std::string& value) {
  std::string msg = fmt::format("{}: {}: {}", source, path.empty() ? "<root>" : path, what);
  if (!value.empty()) msg += fmt::format(" (got {})", value);
  throw Error(Errc::InvalidTopology, msg);
}

std::string bandwidthProblem(double gbps) {
  if (!std::isfinite(gbps) || gbps <= 0) return "bandwidth must be > 0";
  if (gbps < kMinBandwidthGBps || gbps > kMaxBandwidthGBps) {
    return fmt::format("bandwidth must be between {:g} and {:g} GB/s", kMinBandwidthGBps, kMaxBandwidthGBps);
  }
  return "";
}

std::string rateProblem(double gbps, const char* zeroMeans) {
  if (gbps == 0) return "";
  if (!std::isfinite(gbps) || gbps < kMinBandwidthGBps || gbps > kMaxBandwidthGBps) {
    return fmt::format("must be 0 ({}) or between {:g} and {:g} GB/s", zeroMeans, kMinBandwidthGBps, kMaxBandwidthGBps);
  }
  return "";
}

std::string latencyProblem(double us) {
  if (!std::isfinite(us) || us < 0) return "latency must be >= 0";
  if (us > kMaxLatencyUs) return fmt::format("latency must be at most {:g} us", kMaxLatencyUs);
  return "";
}

std::string render(const json& v) {
  // dump() escapes control characters, so the result never contains a newline.
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxRenderedChars) s = s.substr(0, kMaxRenderedChars - 3) + "...";
  return s;
}

json parseJsonText(const std::string& text, const std::string& source) {
  return parseJsonDocument(text, source, Errc::InvalidTopology);
}

std::unordered_map<std::string, int> indexById(const Topology& t) {
  std::unordered_map<std::string, int> index;
  index.reserve(t.nodes.size() * 2);
  for (std::size_t i = 0; i < t.nodes.size(); ++i) index.emplace(t.nodes[i].id, static_cast<int>(i));
  return index;
}

Adjacency buildAdjacency(const Topology& t, const std::unordered_map<std::string, int>& index) {
  Adjacency adj;
  const std::size_t n = t.nodes.size();
  std::vector<int> degree(n + 1, 0);
  std::vector<std::pair<int, int>> ends(t.links.size());
  for (std::size_t l = 0; l < t.links.size(); ++l) {
    const int a = index.at(t.links[l].a), b = index.at(t.links[l].b);
    ends[l] = {a, b};
    ++degree[static_cast<std::size_t>(a)];
    ++degree[static_cast<std::size_t>(b)];
  }
  adj.start.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) adj.start[i + 1] = adj.start[i] + degree[i];
  adj.nbr.resize(static_cast<std::size_t>(adj.start[n]));
  adj.link.resize(adj.nbr.size());
  std::vector<int> fill(adj.start.begin(), adj.start.end() - 1);
  // Link order is kept inside each neighbour list so that routing choices depend only on the file's content.
  for (std::size_t l = 0; l < ends.size(); ++l) {
    const auto [a, b] = ends[l];
    auto put = [&](int from, int to) {
      const auto slot = static_cast<std::size_t>(fill[static_cast<std::size_t>(from)]++);
      adj.nbr[slot] = to;
      adj.link[slot] = static_cast<int>(l);
    };
    put(a, b);
    if (a != b) put(b, a);
  }
  return adj;
}

std::vector<int> bfsHops(const Adjacency& adj, int src) {
  const std::size_t n = adj.start.size() - 1;
  std::vector<int> hops(n, -1);
  std::vector<int> queue;
  queue.reserve(n);
  hops[static_cast<std::size_t>(src)] = 0;
  queue.push_back(src);
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const int u = queue[head];
    for (int e = adj.start[static_cast<std::size_t>(u)]; e < adj.start[static_cast<std::size_t>(u) + 1]; ++e) {
      const int v = adj.nbr[static_cast<std::size_t>(e)];
      if (hops[static_cast<std::size_t>(v)] < 0) {
        hops[static_cast<std::size_t>(v)] = hops[static_cast<std::size_t>(u)] + 1;
        queue.push_back(v);
      }
    }
  }
  return hops;
}

}  // namespace topo_detail

namespace {

using topo_detail::fail;
using topo_detail::json;
using topo_detail::render;

constexpr const char* kFormat = "collbench-topology";
constexpr int kVersion = 1;
// Links written without "class" get this one: the generic network class of the cost model.
constexpr const char* kDefaultLinkClass = "fabric";
// Integral doubles below this print as integers in toJson ("450", not "450.0"); 2^53 keeps them exact.
constexpr double kMaxIntegralPrint = 9007199254740992.0;
// toJson wraps the ranks array so that an 8192-rank file has no 100 kB line.
constexpr std::size_t kRanksLineChars = 100;
// Memory tiers scale rates by at most this much either way: 1e6 is the range reduce_GBps accepts.
constexpr double kMaxBandwidthScale = 1e6;

std::string quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }
std::string num(double v) { return fmt::format("{}", v); }

std::string joinPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string indexPath(const std::string& parent, std::size_t i) { return fmt::format("{}[{}]", parent, i); }

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool validClassName(const std::string& s) {
  // Classes appear inside override keys ("link.<class>.field"), so '.', '=' and '*' cannot be part of them.
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

bool isGpuArch(const std::string& s) {
  const auto& archs = gpuArchitectures();
  return std::find(archs.begin(), archs.end(), s) != archs.end();
}

// Type-checked access to one JSON document; every failure names the source and the field path.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}
  const std::string& source() const { return source_; }

  void onlyFields(const json& obj, const std::string& path, const std::vector<std::string>& allowed,
                  const char* context = nullptr) const {
    expectObject(obj, path);
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail(source_, joinPath(path, key),
             fmt::format("unknown field{}{} (accepted: {})", context ? " in " : "", context ? context : "",
                         joinNames(allowed)),
             render(value));
      }
    }
  }
  void expectObject(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(source_, path, "expected an object", render(v));
  }
  const json* find(const json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& require(const json& obj, const std::string& path, const char* key) const {
    const json* v = find(obj, key);
    if (!v) fail(source_, joinPath(path, key), "missing required field");
    return *v;
  }
  std::string string(const json& v, const std::string& path, bool nonEmpty = true) const {
    if (!v.is_string()) fail(source_, path, "expected a string", render(v));
    const auto& s = v.get_ref<const std::string&>();
    if (nonEmpty && s.empty()) fail(source_, path, "must not be empty", render(v));
    return s;
  }
  double number(const json& v, const std::string& path) const {
    if (!v.is_number()) fail(source_, path, "expected a number", render(v));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(source_, path, "must be finite", render(v));
    return d;
  }
  bool boolean(const json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(source_, path, "expected true or false", render(v));
    return v.get<bool>();
  }
  const json& array(const json& v, const std::string& path) const {
    if (!v.is_array()) fail(source_, path, "expected an array", render(v));
    return v;
  }

 private:
  const std::string& source_;
};

// The checks shared by parseTopology (which knows the JSON order of routes) and validateTopology.
void validateImpl(const Topology& t, const std::string& source,
                  const std::vector<std::pair<std::string, std::string>>* routeOrder) {
  if (!t.cpuVendor.empty() && std::find(cpuVendors().begin(), cpuVendors().end(), t.cpuVendor) == cpuVendors().end()) {
    fail(source, "cpu_vendor", fmt::format("unknown CPU vendor (accepted: {})", joinNames(cpuVendors())),
         quote(t.cpuVendor));
  }
  if (t.nodes.empty()) fail(source, "nodes", "must list at least one node", "[]");
  std::unordered_map<std::string, int> index;
  index.reserve(t.nodes.size() * 2);
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    const TopoNode& n = t.nodes[i];
    const std::string p = indexPath("nodes", i);
    if (n.id.empty()) fail(source, p + ".id", "must not be empty", "\"\"");
    if (auto [it, inserted] = index.emplace(n.id, static_cast<int>(i)); !inserted) {
      fail(source, p + ".id", fmt::format("duplicate node id (first at nodes[{}])", it->second), quote(n.id));
    }
    const bool isSwitch = n.kind == NodeKind::Switch;
    if (const std::string why = topo_detail::rateProblem(n.reduceGBps, isSwitch ? "cannot reduce" : "unknown");
        !why.empty()) {
      fail(source, p + ".reduce_GBps", why, num(n.reduceGBps));
    }
    if (const std::string why = topo_detail::rateProblem(n.switchGBps, "non-blocking"); !why.empty()) {
      fail(source, p + ".switch_GBps", why, num(n.switchGBps));
    }
    if (n.switchGBps != 0 && n.kind != NodeKind::Switch) {
      fail(source, p + ".switch_GBps", fmt::format("only switches forward traffic, node is a {}", toString(n.kind)),
           num(n.switchGBps));
    }
    if (!n.arch.empty()) {
      if (n.kind != NodeKind::Gpu) {
        fail(source, p + ".arch", fmt::format("only gpu nodes have an architecture, node is a {}", toString(n.kind)),
             quote(n.arch));
      }
      if (!isGpuArch(n.arch)) {
        fail(source, p + ".arch", fmt::format("unknown GPU architecture (accepted: {})", joinNames(gpuArchitectures())),
             quote(n.arch));
      }
    }
    if (n.multicast && n.kind != NodeKind::Switch) {
      fail(source, p + ".multicast", fmt::format("only switches multicast, node is a {}", toString(n.kind)),
           *n.multicast ? "true" : "false");
    }
  }
  for (std::size_t l = 0; l < t.links.size(); ++l) {
    const TopoLink& k = t.links[l];
    const std::string p = indexPath("links", l);
    if (!index.count(k.a)) fail(source, p + ".a", "unknown node id", quote(k.a));
    if (!index.count(k.b)) fail(source, p + ".b", "unknown node id", quote(k.b));
    if (k.a == k.b) fail(source, p + ".b", "link joins a node to itself", quote(k.b));
    if (const std::string why = topo_detail::bandwidthProblem(k.bandwidthGBps); !why.empty()) {
      fail(source, p + ".bandwidth_GBps", why, num(k.bandwidthGBps));
    }
    if (const std::string why = topo_detail::latencyProblem(k.latencyUs); !why.empty()) {
      fail(source, p + ".latency_us", why, num(k.latencyUs));
    }
    if (!validClassName(k.linkClass)) {
      fail(source, p + ".class", "must be a non-empty name of letters, digits, '_' or '-'", quote(k.linkClass));
    }
  }
  for (std::size_t i = 0; i < t.memoryTiers.size(); ++i) {
    const MemoryTier& m = t.memoryTiers[i];
    const std::string p = indexPath("memory_tiers", i);
    if (!(m.bandwidthScale > 0) || !std::isfinite(m.bandwidthScale) || m.bandwidthScale > kMaxBandwidthScale) {
      fail(source, p + ".bandwidth_scale", fmt::format("must be a number in (0, {}]", kMaxBandwidthScale),
           num(m.bandwidthScale));
    }
    const bool last = i + 1 == t.memoryTiers.size();
    if (last && m.maxWorkingSetBytes != 0) {
      fail(source, p + ".max_working_set_bytes", "the last tier has no bound (leave it out)",
           std::to_string(m.maxWorkingSetBytes));
    }
    if (!last && m.maxWorkingSetBytes == 0) {
      fail(source, p + ".max_working_set_bytes", "missing: only the last tier is unbounded");
    }
    if (!last && i > 0 && m.maxWorkingSetBytes <= t.memoryTiers[i - 1].maxWorkingSetBytes) {
      fail(source, p + ".max_working_set_bytes",
           fmt::format("must exceed the previous tier's {}", t.memoryTiers[i - 1].maxWorkingSetBytes),
           std::to_string(m.maxWorkingSetBytes));
    }
  }
  if (t.ranks.empty()) fail(source, "ranks", "must list at least one rank", "[]");
  std::unordered_map<int, std::size_t> gpuRank;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    const std::string p = indexPath("ranks", r);
    const auto it = index.find(t.ranks[r]);
    if (it == index.end()) fail(source, p, "unknown node id", quote(t.ranks[r]));
    const TopoNode& n = t.nodes[static_cast<std::size_t>(it->second)];
    if (n.kind != NodeKind::Gpu && n.kind != NodeKind::Cpu) {
      fail(source, p, fmt::format("ranks run on gpu or cpu nodes, node is a {}", toString(n.kind)), quote(n.id));
    }
    // Several ranks may share a cpu (ranks as threads); a gpu runs one rank.
    if (n.kind == NodeKind::Gpu) {
      if (auto [g, inserted] = gpuRank.emplace(it->second, r); !inserted) {
        fail(source, p, fmt::format("gpu already runs rank {}", g->second), quote(n.id));
      }
    }
  }

  const topo_detail::Adjacency adj = topo_detail::buildAdjacency(t, index);
  auto linked = [&](int u, int v) {
    for (int e = adj.start[static_cast<std::size_t>(u)]; e < adj.start[static_cast<std::size_t>(u) + 1]; ++e) {
      if (adj.nbr[static_cast<std::size_t>(e)] == v) return true;
    }
    return false;
  };
  const int root = index.at(t.ranks[0]);
  const std::vector<int> hops = topo_detail::bfsHops(adj, root);
  for (std::size_t r = 1; r < t.ranks.size(); ++r) {
    if (hops[static_cast<std::size_t>(index.at(t.ranks[r]))] < 0) {
      fail(source, indexPath("ranks", r), fmt::format("rank {} cannot reach rank 0 ({})", r, quote(t.ranks[0])),
           quote(t.ranks[r]));
    }
  }

  std::vector<std::pair<std::string, std::string>> order;
  if (routeOrder) {
    order = *routeOrder;
  } else {
    for (const auto& [key, path] : t.routes) order.push_back(key);
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& [from, to] = order[i];
    const std::string p = indexPath("routes", i);
    const auto& path = t.routes.at(order[i]);
    if (!index.count(from)) fail(source, p + ".from", "unknown node id", quote(from));
    if (!index.count(to)) fail(source, p + ".to", "unknown node id", quote(to));
    if (from == to) fail(source, p + ".to", "route from a node to itself", quote(to));
    if (path.size() < 2) fail(source, p + ".path", "needs at least the two endpoints", render(json(path)));
    if (path.front() != from)
      fail(source, p + ".path[0]", fmt::format("must be the route's from {}", quote(from)), quote(path.front()));
    if (path.back() != to) {
      fail(source, indexPath(p + ".path", path.size() - 1), fmt::format("must be the route's to {}", quote(to)),
           quote(path.back()));
    }
    std::unordered_set<std::string> seen;
    for (std::size_t h = 0; h < path.size(); ++h) {
      const std::string hp = indexPath(p + ".path", h);
      const auto it = index.find(path[h]);
      if (it == index.end()) fail(source, hp, "unknown node id", quote(path[h]));
      if (!seen.insert(path[h]).second) fail(source, hp, "route visits a node twice", quote(path[h]));
      if (h > 0 && !linked(index.at(path[h - 1]), it->second)) {
        fail(source, hp, fmt::format("no link between {} and this node", quote(path[h - 1])), quote(path[h]));
      }
    }
  }
}

TopoNode readNode(const Reader& rd, const json& j, const std::string& p) {
  rd.onlyFields(j, p, {"id", "kind", "host", "reduce_GBps", "switch_GBps", "arch", "multicast"});
  TopoNode n;
  n.id = rd.string(rd.require(j, p, "id"), p + ".id");
  const json& kind = rd.require(j, p, "kind");
  const std::string k = rd.string(kind, p + ".kind");
  if (k == "gpu") {
    n.kind = NodeKind::Gpu;
  } else if (k == "nic") {
    n.kind = NodeKind::Nic;
  } else if (k == "cpu") {
    n.kind = NodeKind::Cpu;
  } else if (k == "switch") {
    n.kind = NodeKind::Switch;
  } else {
    fail(rd.source(), p + ".kind", "unknown node kind (accepted: gpu, nic, cpu, switch)", render(kind));
  }
  if (const json* h = rd.find(j, "host")) n.host = rd.string(*h, p + ".host", false);
  if (const json* v = rd.find(j, "reduce_GBps")) n.reduceGBps = rd.number(*v, p + ".reduce_GBps");
  if (const json* v = rd.find(j, "switch_GBps")) n.switchGBps = rd.number(*v, p + ".switch_GBps");
  if (const json* v = rd.find(j, "arch")) n.arch = rd.string(*v, p + ".arch");
  if (const json* v = rd.find(j, "multicast")) n.multicast = rd.boolean(*v, p + ".multicast");
  return n;
}

TopoLink readLink(const Reader& rd, const json& j, const std::string& p) {
  rd.onlyFields(j, p, {"a", "b", "bandwidth_GBps", "latency_us", "class"});
  TopoLink k;
  k.a = rd.string(rd.require(j, p, "a"), p + ".a");
  k.b = rd.string(rd.require(j, p, "b"), p + ".b");
  k.bandwidthGBps = rd.number(rd.require(j, p, "bandwidth_GBps"), p + ".bandwidth_GBps");
  k.latencyUs = rd.number(rd.require(j, p, "latency_us"), p + ".latency_us");
  k.linkClass = kDefaultLinkClass;
  if (const json* c = rd.find(j, "class")) k.linkClass = rd.string(*c, p + ".class", false);
  return k;
}

/// "nccl_env": {"NCCL_<NAME>": "value", ...}, each value as the NCCL model parses it (parseNcclEnv).
std::map<std::string, std::string> readNcclEnv(const Reader& rd, const json& doc) {
  std::map<std::string, std::string> vars;
  const json* env = rd.find(doc, "nccl_env");
  if (env == nullptr) return vars;
  rd.expectObject(*env, "nccl_env");
  for (const auto& [name, value] : env->items()) {
    const std::string p = joinPath("nccl_env", name);
    if (name.rfind("NCCL_", 0) != 0) fail(rd.source(), p, "not an NCCL variable (NCCL_<NAME>)", render(value));
    vars[name] = rd.string(value, p);
    try {
      parseNcclEnv({{name, vars[name]}});
    } catch (const Error& e) {
      fail(rd.source(), p, e.what(), render(value));
    }
  }
  return vars;
}

/// "cpu_vendor" ("" when absent); validateImpl checks it is one of cpuVendors().
std::string readCpuVendor(const Reader& rd, const json& doc) {
  const json* v = rd.find(doc, "cpu_vendor");
  return v == nullptr ? "" : rd.string(*v, "cpu_vendor");
}

Topology fromJson(const json& doc, const std::string& source) {
  const Reader rd(source);
  rd.expectObject(doc, "");
  const bool generated = doc.contains("generator");
  if (generated) {
    rd.onlyFields(doc, "",
                  {"format", "version", "name", "description", "generator", "params", "nccl_env", "cpu_vendor"},
                  "a generator document");
  } else {
    rd.onlyFields(doc, "",
                  {"format", "version", "name", "description", "nodes", "links", "ranks", "routes", "memory_tiers",
                   "nccl_env", "cpu_vendor"});
  }
  const json& format = rd.require(doc, "", "format");
  if (!format.is_string() || format.get<std::string>() != kFormat) {
    fail(source, "format", fmt::format("expected \"{}\"", kFormat), render(format));
  }
  const json& version = rd.require(doc, "", "version");
  if (!version.is_number_integer() || version.get<long long>() != kVersion) {
    fail(source, "version", fmt::format("unsupported version (this build reads version {})", kVersion),
         render(version));
  }

  Topology t;
  if (generated) {
    const std::string gen = rd.string(doc.at("generator"), "generator");
    const json* params = rd.find(doc, "params");
    t = topo_detail::generateFromJson(gen, params ? *params : json(), source);
    if (const json* n = rd.find(doc, "name")) t.name = rd.string(*n, "name");
    if (const json* d = rd.find(doc, "description")) t.description = rd.string(*d, "description", false);
    t.ncclEnv = readNcclEnv(rd, doc);
    t.cpuVendor = readCpuVendor(rd, doc);
    validateImpl(t, source, nullptr);
    return t;
  }

  t.name = rd.string(rd.require(doc, "", "name"), "name");
  if (const json* d = rd.find(doc, "description")) t.description = rd.string(*d, "description", false);
  const json& nodes = rd.array(rd.require(doc, "", "nodes"), "nodes");
  t.nodes.reserve(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) t.nodes.push_back(readNode(rd, nodes[i], indexPath("nodes", i)));
  const json& links = rd.array(rd.require(doc, "", "links"), "links");
  t.links.reserve(links.size());
  for (std::size_t i = 0; i < links.size(); ++i) t.links.push_back(readLink(rd, links[i], indexPath("links", i)));
  const json& ranks = rd.array(rd.require(doc, "", "ranks"), "ranks");
  t.ranks.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) t.ranks.push_back(rd.string(ranks[i], indexPath("ranks", i)));

  std::vector<std::pair<std::string, std::string>> routeOrder;
  if (const json* routes = rd.find(doc, "routes")) {
    rd.array(*routes, "routes");
    for (std::size_t i = 0; i < routes->size(); ++i) {
      const json& r = (*routes)[i];
      const std::string p = indexPath("routes", i);
      rd.onlyFields(r, p, {"from", "to", "path"});
      const std::string from = rd.string(rd.require(r, p, "from"), p + ".from");
      const std::string to = rd.string(rd.require(r, p, "to"), p + ".to");
      const json& path = rd.array(rd.require(r, p, "path"), p + ".path");
      std::vector<std::string> ids;
      for (std::size_t h = 0; h < path.size(); ++h) ids.push_back(rd.string(path[h], indexPath(p + ".path", h)));
      if (!t.routes.emplace(std::make_pair(from, to), std::move(ids)).second) {
        fail(source, p, fmt::format("second route from {} to {}", quote(from), quote(to)));
      }
      routeOrder.emplace_back(from, to);
    }
  }
  if (const json* tiers = rd.find(doc, "memory_tiers")) {
    rd.array(*tiers, "memory_tiers");
    for (std::size_t i = 0; i < tiers->size(); ++i) {
      const json& j = (*tiers)[i];
      const std::string p = indexPath("memory_tiers", i);
      rd.onlyFields(j, p, {"max_working_set_bytes", "bandwidth_scale"});
      MemoryTier m;
      if (const json* b = rd.find(j, "max_working_set_bytes")) {
        if (!b->is_number_unsigned() || b->get<std::uint64_t>() == 0) {
          fail(source, p + ".max_working_set_bytes", "expected an integer number of bytes >= 1", render(*b));
        }
        m.maxWorkingSetBytes = b->get<std::size_t>();
      }
      m.bandwidthScale = rd.number(rd.require(j, p, "bandwidth_scale"), p + ".bandwidth_scale");
      t.memoryTiers.push_back(m);
    }
  }
  t.ncclEnv = readNcclEnv(rd, doc);
  t.cpuVendor = readCpuVendor(rd, doc);
  validateImpl(t, source, &routeOrder);
  return t;
}

std::vector<std::string> searchDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("COLLBENCH_TOPOLOGY_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
#ifdef COLLBENCH_SOURCE_DIR
  dirs.push_back(std::string(COLLBENCH_SOURCE_DIR) + "/topologies");
#endif
  return dirs;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(Errc::InvalidTopology, fmt::format("{}: cannot open: {}", path, std::system_category().message(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(Errc::InvalidTopology, fmt::format("{}: read error", path));
  return ss.str();
}

// Writes {"k": v, ...} on one line with a space after ':' and ',' (nlohmann's compact form has none).
std::string inlineObject(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = "{";
  for (std::size_t i = 0; i < fields.size(); ++i) {
    out += (i ? ", " : "") + quote(fields[i].first) + ": " + fields[i].second;
  }
  return out + "}";
}

std::string jsonNumber(double v) {
  if (std::floor(v) == v && std::fabs(v) < kMaxIntegralPrint) return fmt::format("{}", static_cast<long long>(v));
  return json(v).dump();
}

std::string stringArray(const std::vector<std::string>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + quote(ids[i]);
  return out + "]";
}

std::uint64_t fnv1a64(std::string_view s) {
  // FNV-1a 64-bit offset basis and prime (Fowler/Noll/Vo, IETF draft-eastlake-fnv).
  constexpr std::uint64_t kOffsetBasis = 14695981039346656037ull;
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t h = kOffsetBasis;
  for (unsigned char c : s) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

double parseOverrideValue(const std::string& assignment, const std::string& value) {
  double v = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (value.empty() || ec != std::errc() || ptr != last || !std::isfinite(v)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("override '{}': value '{}' is not a finite number", assignment, value));
  }
  return v;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// The node kinds a field applies to, and whether a node of kind `k` gets it under selector `kind` (unset = "*").
// node.*.reduce_GBps leaves switches alone: on a switch the field means in-network reduction, a capability that a
// blanket change of compute rates must not switch on.
bool fieldApplies(const std::string& field, std::optional<NodeKind> kind, NodeKind k) {
  if (kind && *kind != k) return false;
  if (field == "reduce_GBps") return kind || k != NodeKind::Switch;
  if (field == "arch") return k == NodeKind::Gpu;
  return k == NodeKind::Switch;  // switch_GBps, multicast
}

// The node half of applyOverride, after the key is split: checks that the field suits the selected kind, parses the
// value for the field and sets it on every matching node.
void overrideNodes(Topology& t, const std::string& assignment, const std::string& key, std::optional<NodeKind> kind,
                   const std::string& field, const std::string& valueText) {
  const bool gpuField = field == "arch";
  const NodeKind owner = gpuField ? NodeKind::Gpu : NodeKind::Switch;
  if (field != "reduce_GBps" && kind && *kind != owner) {
    throw Error(Errc::InvalidArgument, fmt::format("override key '{}': {} applies to {} only (use node.{}.{})", key,
                                                   field, gpuField ? "gpus" : "switches", toString(owner), field));
  }
  std::function<void(TopoNode&)> set;
  if (field == "arch") {
    if (!isGpuArch(valueText)) {
      throw Error(Errc::InvalidArgument, fmt::format("override '{}': arch: unknown GPU architecture (accepted: {}; got "
                                                     "{})",
                                                     assignment, joinNames(gpuArchitectures()), valueText));
    }
    set = [&](TopoNode& n) { n.arch = valueText; };
  } else if (field == "multicast") {
    if (valueText != "true" && valueText != "false") {
      throw Error(Errc::InvalidArgument,
                  fmt::format("override '{}': multicast: expected true or false (got {})", assignment, valueText));
    }
    const bool on = valueText == "true";
    set = [on](TopoNode& n) { n.multicast = on; };
  } else {
    const bool reduce = field == "reduce_GBps";
    const double v = parseOverrideValue(assignment, valueText);
    const char* zeroMeans = !reduce ? "non-blocking" : kind == NodeKind::Switch ? "cannot reduce" : "infinitely fast";
    if (const std::string why = topo_detail::rateProblem(v, zeroMeans); !why.empty()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("override '{}': {}: {} (got {})", assignment, field, why, valueText));
    }
    set = [v, reduce](TopoNode& n) { (reduce ? n.reduceGBps : n.switchGBps) = v; };
  }
  int matched = 0;
  for (TopoNode& n : t.nodes) {
    if (!fieldApplies(field, kind, n.kind)) continue;
    set(n);
    ++matched;
  }
  if (matched == 0) {
    const std::string what = kind                     ? std::string(toString(*kind))
                             : field == "reduce_GBps" ? "gpu, nic or cpu"
                                                      : std::string(toString(owner));
    throw Error(Errc::InvalidArgument, fmt::format("override key '{}': topology {} has no {} node", key, t.name, what));
  }
}

}  // namespace

std::string_view toString(NodeKind k) {
  switch (k) {
    case NodeKind::Gpu:
      return "gpu";
    case NodeKind::Nic:
      return "nic";
    case NodeKind::Cpu:
      return "cpu";
    case NodeKind::Switch:
      return "switch";
  }
  return "?";
}

const std::vector<std::string>& gpuArchitectures() {
  // Compute capability 7.0 (V100), 8.0 (A100), 9.0 (H100/H200), 10.0 (B200): NCCL's tuning tables have one column
  // per generation (src/graph/tuning.cc).
  static const std::vector<std::string> kArchs{"volta", "ampere", "hopper", "blackwell"};
  return kArchs;
}

const std::vector<std::string>& cpuVendors() {
  static const std::vector<std::string> kVendors{"intel", "amd"};
  return kVendors;
}

NodeKind parseNodeKind(std::string_view s) {
  for (NodeKind k : {NodeKind::Gpu, NodeKind::Nic, NodeKind::Cpu, NodeKind::Switch}) {
    if (s == toString(k)) return k;
  }
  throw Error(Errc::InvalidArgument, fmt::format("unknown node kind '{}' (accepted: gpu, nic, cpu, switch)", s));
}

int Topology::nodeIndex(const std::string& id) const {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

Topology parseTopology(const std::string& jsonText, const std::string& source) {
  return fromJson(topo_detail::parseJsonText(jsonText, source), source);
}

void validateTopology(const Topology& t, const std::string& source) { validateImpl(t, source, nullptr); }

std::string resolveTopologyPath(const std::string& pathOrName) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(pathOrName, ec)) return pathOrName;
  const bool looksLikePath =
      pathOrName.find('/') != std::string::npos || (pathOrName.size() > 5 && pathOrName.ends_with(".json"));
  if (looksLikePath || pathOrName.empty()) {
    throw Error(Errc::InvalidTopology, fmt::format("{}: no such topology file", pathOrName));
  }
  const std::vector<std::string> dirs = searchDirs();
  for (const auto& dir : dirs) {
    std::string candidate = fmt::format("{}/{}.json", dir, pathOrName);
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  throw Error(Errc::InvalidTopology, fmt::format("{}: no such file, and no {}.json in {} (available: {})", pathOrName,
                                                 pathOrName, joinNames(dirs), joinNames(availableTopologies())));
}

std::vector<std::string> availableTopologies() {
  namespace fs = std::filesystem;
  std::set<std::string> names;
  for (const auto& dir : searchDirs()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".json" && it->is_regular_file(ec)) names.insert(it->path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

Topology loadTopology(const std::string& pathOrName) {
  const std::string path = resolveTopologyPath(pathOrName);
  return parseTopology(readFile(path), path);
}

Topology loadTopology(const std::string& pathOrName, const std::vector<std::pair<std::string, std::string>>& params) {
  if (params.empty()) return loadTopology(pathOrName);
  const std::string path = resolveTopologyPath(pathOrName);
  json doc = topo_detail::parseJsonText(readFile(path), path);
  if (!doc.is_object() || !doc.contains("generator")) {
    throw Error(Errc::InvalidArgument,
                fmt::format("params.{}: topology '{}' is not generated (no \"generator\"): it has no parameters to set",
                            params.front().first, printable(pathOrName)));
  }
  json& target = doc["params"];
  if (target.is_null()) target = json::object();
  if (!target.is_object()) return fromJson(doc, path);  // the reader names the bad "params"
  const json replaced = json::parse(generatorParamsJson(params));
  for (const auto& [key, value] : replaced.items()) target[key] = value;
  return fromJson(doc, path);
}

Topology generateTopology(const std::string& generator, const std::string& paramsJson) {
  const std::string source = fmt::format("generator {}", generator);
  const bool empty = trim(paramsJson).empty();
  const json params = empty ? json() : topo_detail::parseJsonText(paramsJson, source);
  Topology t = topo_detail::generateFromJson(generator, params, source);
  validateImpl(t, source, nullptr);
  return t;
}

std::string generatorParamsJson(const std::vector<std::pair<std::string, std::string>>& assignments) {
  json params = json::object();
  for (const auto& [key, value] : assignments) {
    json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
    params[key] = v.is_discarded() ? json(value) : v;
  }
  return params.dump();
}

std::string toJson(const Topology& t) {
  std::string out = "{\n";
  out += fmt::format("  \"format\": {},\n  \"version\": {},\n", quote(kFormat), kVersion);
  out += fmt::format("  \"name\": {},\n  \"description\": {},\n", quote(t.name), quote(t.description));
  out += "  \"nodes\": [\n";
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    const TopoNode& n = t.nodes[i];
    std::vector<std::pair<std::string, std::string>> f{{"id", quote(n.id)},
                                                       {"kind", quote(std::string(toString(n.kind)))}};
    if (!n.host.empty()) f.emplace_back("host", quote(n.host));
    if (n.reduceGBps != 0) f.emplace_back("reduce_GBps", jsonNumber(n.reduceGBps));
    if (n.switchGBps != 0) f.emplace_back("switch_GBps", jsonNumber(n.switchGBps));
    if (!n.arch.empty()) f.emplace_back("arch", quote(n.arch));
    if (n.multicast) f.emplace_back("multicast", *n.multicast ? "true" : "false");
    out += "    " + inlineObject(f) + (i + 1 < t.nodes.size() ? ",\n" : "\n");
  }
  out += "  ],\n  \"links\": [\n";
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    const TopoLink& k = t.links[i];
    out += "    " +
           inlineObject({{"a", quote(k.a)},
                         {"b", quote(k.b)},
                         {"bandwidth_GBps", jsonNumber(k.bandwidthGBps)},
                         {"latency_us", jsonNumber(k.latencyUs)},
                         {"class", quote(k.linkClass)}}) +
           (i + 1 < t.links.size() ? ",\n" : "\n");
  }
  out += "  ],\n  \"ranks\": [";
  std::size_t lineChars = kRanksLineChars;  // forces a line break before the first id
  for (std::size_t i = 0; i < t.ranks.size(); ++i) {
    const std::string id = quote(t.ranks[i]);
    if (lineChars + id.size() + 2 > kRanksLineChars) {
      out += i ? ",\n    " : "\n    ";
      lineChars = 4;
    } else {
      out += ", ";
    }
    out += id;
    lineChars += id.size() + 2;
  }
  out += t.ranks.empty() ? "]" : "\n  ]";
  if (!t.routes.empty()) {
    out += ",\n  \"routes\": [\n";
    std::size_t i = 0;
    for (const auto& [key, path] : t.routes) {
      out += "    " +
             inlineObject({{"from", quote(key.first)}, {"to", quote(key.second)}, {"path", stringArray(path)}}) +
             (++i < t.routes.size() ? ",\n" : "\n");
    }
    out += "  ]";
  }
  if (!t.memoryTiers.empty()) {
    out += ",\n  \"memory_tiers\": [\n";
    for (std::size_t i = 0; i < t.memoryTiers.size(); ++i) {
      const MemoryTier& m = t.memoryTiers[i];
      std::vector<std::pair<std::string, std::string>> f;
      if (m.maxWorkingSetBytes) f.emplace_back("max_working_set_bytes", std::to_string(m.maxWorkingSetBytes));
      f.emplace_back("bandwidth_scale", jsonNumber(m.bandwidthScale));
      out += "    " + inlineObject(f) + (i + 1 < t.memoryTiers.size() ? ",\n" : "\n");
    }
    out += "  ]";
  }
  if (!t.ncclEnv.empty()) {
    std::vector<std::pair<std::string, std::string>> f;
    for (const auto& [name, value] : t.ncclEnv) f.emplace_back(name, quote(value));
    out += ",\n  \"nccl_env\": " + inlineObject(f);
  }
  if (!t.cpuVendor.empty()) out += ",\n  \"cpu_vendor\": " + quote(t.cpuVendor);
  return out + "\n}\n";
}

std::string fingerprint(const Topology& t) {
  // nlohmann::json sorts object keys and prints doubles in the shortest round-trip form, so the canonical text
  // depends only on the content; "collbench-topology/1" ties the hash to this format version.
  json canon = json::object();
  canon["format"] = fmt::format("{}/{}", kFormat, kVersion);
  json& nodes = canon["nodes"] = json::array();
  for (const TopoNode& n : t.nodes) {
    json& node = nodes.emplace_back(json{{"id", n.id},
                                         {"kind", std::string(toString(n.kind))},
                                         {"host", n.host},
                                         {"reduce_GBps", n.reduceGBps},
                                         {"switch_GBps", n.switchGBps}});
    // Absent when unset, so that files written before these fields keep their fingerprints (tuning keys).
    if (!n.arch.empty()) node["arch"] = n.arch;
    if (n.multicast && *n.multicast != (n.reduceGBps > 0)) node["multicast"] = *n.multicast;  // beyond its default
  }
  json& links = canon["links"] = json::array();
  for (const TopoLink& k : t.links) {
    links.push_back({{"a", k.a},
                     {"b", k.b},
                     {"bandwidth_GBps", k.bandwidthGBps},
                     {"latency_us", k.latencyUs},
                     {"class", k.linkClass}});
  }
  canon["ranks"] = t.ranks;
  json& routes = canon["routes"] = json::array();
  for (const auto& [key, path] : t.routes) routes.push_back({{"from", key.first}, {"to", key.second}, {"path", path}});
  if (!t.memoryTiers.empty()) {  // absent otherwise: topologies without tiers keep their fingerprints (tuning keys)
    json& tiers = canon["memory_tiers"] = json::array();
    for (const MemoryTier& m : t.memoryTiers) {
      tiers.push_back({{"max_working_set_bytes", m.maxWorkingSetBytes}, {"bandwidth_scale", m.bandwidthScale}});
    }
  }
  return fmt::format("{:016x}", fnv1a64(canon.dump()));
}

void applyOverride(Topology& t, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) {
    throw Error(Errc::InvalidArgument,
                fmt::format("override '{}': expected <key>=<value>, e.g. link.nic.bandwidth_GBps=50", assignment));
  }
  const std::string key = trim(assignment.substr(0, eq));
  const std::string valueText = trim(assignment.substr(eq + 1));
  std::vector<std::string> parts;
  {
    std::stringstream ss(key);
    std::string part;
    while (std::getline(ss, part, '.')) parts.push_back(part);
  }
  if (parts.size() != 3 || (parts[0] != "link" && parts[0] != "node") || parts[1].empty() || parts[2].empty()) {
    throw Error(Errc::InvalidArgument,
                fmt::format("override key '{}': expected link.<class|*>.<field> or node.<kind|*>.<field>", key));
  }
  const std::string& selector = parts[1];
  const std::string& field = parts[2];

  if (parts[0] == "link") {
    const bool bandwidth = field == "bandwidth_GBps";
    if (!bandwidth && field != "latency_us") {
      throw Error(Errc::InvalidArgument, fmt::format("override key '{}': unknown link field '{}' (accepted: "
                                                     "bandwidth_GBps, latency_us)",
                                                     key, field));
    }
    const double v = parseOverrideValue(assignment, valueText);
    if (const std::string why = bandwidth ? topo_detail::bandwidthProblem(v) : topo_detail::latencyProblem(v);
        !why.empty()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("override '{}': {}: {} (got {})", assignment, field, why, valueText));
    }
    std::set<std::string> classes;
    int matched = 0;
    for (TopoLink& k : t.links) {
      classes.insert(k.linkClass);
      if (selector != "*" && k.linkClass != selector) continue;
      (bandwidth ? k.bandwidthGBps : k.latencyUs) = v;
      ++matched;
    }
    if (matched == 0) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("override key '{}': no link of class '{}' in topology {} (classes: {})", key, selector,
                              t.name, joinNames({classes.begin(), classes.end()})));
    }
    return;
  }

  if (field != "reduce_GBps" && field != "switch_GBps" && field != "multicast" && field != "arch") {
    throw Error(Errc::InvalidArgument, fmt::format("override key '{}': unknown node field '{}' (accepted: reduce_GBps, "
                                                   "switch_GBps, multicast, arch)",
                                                   key, field));
  }
  std::optional<NodeKind> kind;
  if (selector != "*") {
    try {
      kind = parseNodeKind(selector);
    } catch (const Error&) {
      throw Error(Errc::InvalidArgument, fmt::format("override key '{}': unknown node kind '{}' (accepted: gpu, nic, "
                                                     "cpu, switch, *)",
                                                     key, selector));
    }
  }
  overrideNodes(t, assignment, key, kind, field, valueText);
}

std::vector<int> rankHosts(const Topology& t, int nranks) {
  if (nranks > static_cast<int>(t.ranks.size())) {
    throw Error(Errc::InvalidArgument,
                fmt::format("topology '{}' has {} ranks, {} requested", t.name, t.ranks.size(), nranks));
  }
  // One map of node ids rather than nodeIndex per rank (a linear scan: 1e10 steps at 100k ranks).
  std::unordered_map<std::string_view, std::size_t> nodeOf;
  for (std::size_t i = 0; i < t.nodes.size(); ++i) nodeOf.emplace(t.nodes[i].id, i);
  std::map<std::string, int> ids;
  std::vector<int> hosts;
  for (int r = 0; r < nranks; ++r) {
    const std::string& host = t.nodes[nodeOf.at(t.ranks[static_cast<std::size_t>(r)])].host;
    const std::string key = host.empty() ? t.ranks[static_cast<std::size_t>(r)] : host;
    hosts.push_back(ids.emplace(key, static_cast<int>(ids.size())).first->second);
  }
  return hosts;
}

std::size_t hostWorkingSetBytes(const Topology& t, const CollectiveSpec& spec) {
  std::map<int, std::size_t> ranksOn;
  std::size_t busiest = 0;
  for (int h : rankHosts(t, spec.nranks)) busiest = std::max(busiest, ++ranksOn[h]);
  return busiest * (spec.inputBytes() + spec.outputBytes());
}

std::size_t memoryTierIndex(const Topology& t, std::size_t workingSetBytes) {
  for (std::size_t i = 0; i + 1 < t.memoryTiers.size(); ++i) {
    if (workingSetBytes <= t.memoryTiers[i].maxWorkingSetBytes) return i;
  }
  return t.memoryTiers.empty() ? 0 : t.memoryTiers.size() - 1;
}

Topology applyMemoryTier(const Topology& t, std::size_t tier) {
  Topology out = t;
  out.memoryTiers.clear();
  if (t.memoryTiers.empty()) return out;
  if (tier >= t.memoryTiers.size()) {
    throw Error(Errc::InvalidArgument, fmt::format("topology '{}' has {} memory tiers, tier {} asked for", t.name,
                                                   t.memoryTiers.size(), tier));
  }
  const double scale = t.memoryTiers[tier].bandwidthScale;
  std::unordered_map<std::string, const std::string*> hostOf;
  for (TopoNode& n : out.nodes) {
    hostOf.emplace(n.id, &n.host);
    if (n.kind == NodeKind::Gpu || n.kind == NodeKind::Cpu) n.reduceGBps *= scale;
  }
  for (TopoLink& k : out.links) {
    const std::string& a = *hostOf.at(k.a);
    if (!a.empty() && a == *hostOf.at(k.b)) k.bandwidthGBps *= scale;
  }
  return out;
}

Topology topologyForCall(const Topology& t, const CollectiveSpec& spec) {
  return applyMemoryTier(t, memoryTierIndex(t, hostWorkingSetBytes(t, spec)));
}

}  // namespace collbench
