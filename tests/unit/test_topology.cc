// Topology library: JSON format and its rejections, generators, routing, summaries, overrides, fingerprints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "collbench/error.h"
#include "collbench/topology.h"

namespace collbench {
namespace {

using nlohmann::json;

const std::string kSourceDir = COLLBENCH_SOURCE_DIR;
const std::vector<std::string> kShipped = {"dgx-h100-8x1",   "hgx-h200-8x1", "dgx-a100-8x1", "pcie-4gpu",
                                           "h100-4x8-rail",  "fat-tree-k8",  "torus-4x4x4",  "dragonfly-small",
                                           "dgx-h100-ib400", "aws-p5",       "aws-p4de",     "gcp-a3-mega",
                                           "oci-h100-roce",  "oci-a100-roce"};

// Two GPUs on one switch: the smallest valid explicit document, mutated by the rejection tests.
json baseDoc() {
  return json::parse(R"({
    "format": "collbench-topology", "version": 1, "name": "tiny", "description": "two gpus on a switch",
    "nodes": [{"id": "n0.gpu0", "kind": "gpu", "host": "n0", "reduce_GBps": 1000},
              {"id": "n0.gpu1", "kind": "gpu", "host": "n0"},
              {"id": "n0.sw", "kind": "switch"}],
    "links": [{"a": "n0.gpu0", "b": "n0.sw", "bandwidth_GBps": 100, "latency_us": 1, "class": "nvlink"},
              {"a": "n0.gpu1", "b": "n0.sw", "bandwidth_GBps": 100, "latency_us": 1}],
    "ranks": ["n0.gpu0", "n0.gpu1"]
  })");
}

// Runs `fn`, expecting Error{code} whose one-line message contains every part.
template <typename Fn>
void expectError(Fn fn, Errc code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), code) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

void expectBad(const std::string& text, const std::vector<std::string>& parts) {
  std::vector<std::string> all{"bad.json: "};
  all.insert(all.end(), parts.begin(), parts.end());
  expectError([&] { parseTopology(text, "bad.json"); }, Errc::InvalidTopology, all);
}
void expectBad(const json& doc, const std::vector<std::string>& parts) { expectBad(doc.dump(), parts); }
void expectBad(const char* text, const std::vector<std::string>& parts) { expectBad(std::string(text), parts); }

void expectBadOverride(Topology t, const std::string& assignment, const std::vector<std::string>& parts) {
  expectError([&] { applyOverride(t, assignment); }, Errc::InvalidArgument, parts);
}

// Follows the hops from `from` and checks that they form a path ending at `to`.
void expectPath(const Topology& t, const std::vector<Hop>& hops, const std::string& from, const std::string& to) {
  std::string at = from;
  for (const Hop& h : hops) {
    const TopoLink& l = t.links.at(static_cast<std::size_t>(h.link));
    ASSERT_EQ(h.forward ? l.a : l.b, at) << "hop on link " << h.link << " does not start where the last one ended";
    at = h.forward ? l.b : l.a;
  }
  EXPECT_EQ(at, to);
}

std::vector<std::string> nodesOnRoute(const Topology& t, const std::vector<Hop>& hops) {
  std::vector<std::string> out;
  for (const Hop& h : hops) {
    const TopoLink& l = t.links[static_cast<std::size_t>(h.link)];
    out.push_back(h.forward ? l.b : l.a);
  }
  return out;
}

Topology gen(const std::string& g, const json& params) { return generateTopology(g, params.dump()); }

// ---------------------------------------------------------------------------------------------------------------
// Parsing

TEST(GeneratorParams, ValuesAreJsonWhereTheyParseAndStringsOtherwise) {
  EXPECT_EQ(generatorParamsJson({}), "{}");
  EXPECT_EQ(generatorParamsJson({{"k", "8"}, {"name", "fat"}, {"dims", "[4,4,4]"}, {"wrap", "true"}, {"bw", "1.5"}}),
            R"({"bw":1.5,"dims":[4,4,4],"k":8,"name":"fat","wrap":true})");
  EXPECT_EQ(generatorParamsJson({{"k", "4"}, {"k", "8"}}), R"({"k":8})");
  EXPECT_EQ(generatorParamsJson({{"label", ""}}), R"({"label":""})");
  // What the generator reads back: a k=4 fat tree has k^3/4 hosts.
  EXPECT_EQ(generateTopology("fat_tree", generatorParamsJson({{"k", "4"}})).ranks.size(), 16u);
  expectError(
      [] {
        generateTopology("fat_tree", generatorParamsJson({{"k", "4"}, {"oversubscription", "3"}}));
      },
      Errc::InvalidTopology, {"params.oversubscription: must be between 1 and 2", "(got 3)"});
}

TEST(TopologyParse, ReadsExplicitDocument) {
  const Topology t = parseTopology(baseDoc().dump(), "tiny.json");
  EXPECT_EQ(t.name, "tiny");
  EXPECT_EQ(t.description, "two gpus on a switch");
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[0].kind, NodeKind::Gpu);
  EXPECT_EQ(t.nodes[0].host, "n0");
  EXPECT_EQ(t.nodes[0].reduceGBps, 1000);
  EXPECT_EQ(t.nodes[2].kind, NodeKind::Switch);
  ASSERT_EQ(t.links.size(), 2u);
  EXPECT_EQ(t.links[0].bandwidthGBps, 100);
  EXPECT_EQ(t.links[0].latencyUs, 1);
  EXPECT_EQ(t.links[0].linkClass, "nvlink");
  EXPECT_EQ(t.links[1].linkClass, "fabric");  // the default class
  EXPECT_EQ(t.ranks, (std::vector<std::string>{"n0.gpu0", "n0.gpu1"}));
  EXPECT_EQ(t.nodeIndex("n0.sw"), 2);
  EXPECT_EQ(t.nodeIndex("nope"), -1);
}

TEST(TopologyParse, RejectsMalformedJsonWithPosition) {
  expectBad("{\n  \"format\": \"collbench-topology\",\n  \"version\": 1,,\n}", {"malformed JSON", "line 3", "byte"});
  expectBad("", {"malformed JSON", "line 1, column"});
  expectBad("{\"nodes\": [", {"malformed JSON"});
  expectBad(R"({"version": 1e400})", {"malformed JSON", "number overflow"});
  expectBad("{\"name\": \"\xff\"}", {"malformed JSON", "\\xff"});
}

TEST(TopologyParse, RejectsDuplicateKeys) {
  expectBad(R"({"format": "collbench-topology", "version": 1, "version": 1})", {"version: duplicate key"});
  json d = baseDoc();
  std::string text = d.dump();
  const std::string needle = R"("id":"n0.gpu1")";
  text.replace(text.find(needle), needle.size(), R"("id":"n0.gpu1","id":"x")");
  expectBad(text, {"nodes[1].id: duplicate key"});
}

TEST(TopologyParse, RejectsUnknownFieldsAtEveryLevel) {
  json d = baseDoc();
  d["colour"] = "red";
  expectBad(d, {"colour: unknown field", "\"red\"", "accepted: format"});
  d = baseDoc();
  d["nodes"][1]["colour"] = "blue";
  expectBad(d, {"nodes[1].colour: unknown field", "\"blue\""});
  d = baseDoc();
  d["links"][0]["speed"] = 9;
  expectBad(d, {"links[0].speed: unknown field", "got 9"});
  d = baseDoc();
  d["routes"] =
      json::array({{{"from", "n0.gpu0"}, {"to", "n0.gpu1"}, {"path", {"n0.gpu0", "n0.sw", "n0.gpu1"}}, {"weight", 1}}});
  expectBad(d, {"routes[0].weight: unknown field"});
}

TEST(TopologyParse, RejectsWrongFormatAndVersion) {
  json d = baseDoc();
  d["format"] = "nccl-topo";
  expectBad(d, {"format: expected \"collbench-topology\"", "\"nccl-topo\""});
  d = baseDoc();
  d.erase("format");
  expectBad(d, {"format: missing required field"});
  d = baseDoc();
  d["version"] = 2;
  expectBad(d, {"version: unsupported version", "got 2"});
  d = baseDoc();
  d["version"] = "1";
  expectBad(d, {"version:", "\"1\""});
}

TEST(TopologyParse, RejectsDanglingAndDuplicateIds) {
  json d = baseDoc();
  d["links"][1]["b"] = "n0.gpu9";
  expectBad(d, {"links[1].b: unknown node id", "\"n0.gpu9\""});
  d = baseDoc();
  d["nodes"][2]["id"] = "n0.gpu0";
  expectBad(d, {"nodes[2].id: duplicate node id (first at nodes[0])", "\"n0.gpu0\""});
  d = baseDoc();
  d["links"][0]["b"] = "n0.gpu0";
  expectBad(d, {"links[0].b: link joins a node to itself"});
}

TEST(TopologyParse, RejectsBadBandwidthAndLatency) {
  json d = baseDoc();
  d["links"][0]["bandwidth_GBps"] = 0;
  expectBad(d, {"links[0].bandwidth_GBps: bandwidth must be > 0", "(got 0)"});
  d["links"][0]["bandwidth_GBps"] = -5;
  expectBad(d, {"links[0].bandwidth_GBps", "(got -5)"});
  d = baseDoc();
  d["links"][1]["latency_us"] = -1;
  expectBad(d, {"links[1].latency_us: latency must be >= 0", "(got -1)"});
  d = baseDoc();
  d["links"][1].erase("latency_us");
  expectBad(d, {"links[1].latency_us: missing required field"});
  d = baseDoc();
  d["nodes"][0]["reduce_GBps"] = -1;
  expectBad(d, {"nodes[0].reduce_GBps", "(got -1)"});
}

TEST(TopologyParse, RejectsBadTypes) {
  json d = baseDoc();
  d["links"][0]["bandwidth_GBps"] = "fast";
  expectBad(d, {"links[0].bandwidth_GBps: expected a number", "\"fast\""});
  d = baseDoc();
  d["links"][0]["bandwidth_GBps"] = true;
  expectBad(d, {"links[0].bandwidth_GBps: expected a number", "true"});
  d = baseDoc();
  d["nodes"] = "all of them";
  expectBad(d, {"nodes: expected an array"});
  d = baseDoc();
  d["nodes"][0]["id"] = 7;
  expectBad(d, {"nodes[0].id: expected a string", "got 7"});
  d = baseDoc();
  d["nodes"][1]["kind"] = "tpu";
  expectBad(d, {"nodes[1].kind: unknown node kind", "\"tpu\""});
  d = baseDoc();
  d["links"][0] = json::array({1, 2});
  expectBad(d, {"links[0]: expected an object"});
  expectBad("[1, 2]", {"<root>: expected an object"});
  d = baseDoc();
  d["links"][0]["class"] = "nv.link";
  expectBad(d, {"links[0].class", "\"nv.link\""});
  d = baseDoc();
  d["nodes"][0]["switch_GBps"] = 10;
  expectBad(d, {"nodes[0].switch_GBps: only switches"});
}

TEST(TopologyParse, RejectsBadRanks) {
  json d = baseDoc();
  d["ranks"][1] = "n0.sw";
  expectBad(d, {"ranks[1]: ranks run on gpu or cpu nodes, node is a switch", "\"n0.sw\""});
  d["ranks"][1] = "n0.gpu7";
  expectBad(d, {"ranks[1]: unknown node id", "\"n0.gpu7\""});
  d = baseDoc();
  d.erase("ranks");
  expectBad(d, {"ranks: missing required field"});
  d = baseDoc();
  d["ranks"] = json::array();
  expectBad(d, {"ranks: must list at least one rank"});
  d = baseDoc();
  d["ranks"][1] = "n0.gpu0";
  expectBad(d, {"ranks[1]: gpu already runs rank 0"});
  // Several ranks on one cpu are fine (ranks as threads).
  d = baseDoc();
  d["nodes"].push_back({{"id", "n0.cpu"}, {"kind", "cpu"}, {"host", "n0"}});
  d["links"].push_back({{"a", "n0.cpu"}, {"b", "n0.sw"}, {"bandwidth_GBps", 10}, {"latency_us", 1}});
  d["ranks"] = {"n0.cpu", "n0.cpu", "n0.gpu1"};
  EXPECT_EQ(parseTopology(d.dump(), "cpu.json").ranks.size(), 3u);
}

TEST(TopologyParse, RejectsDisconnectedRanks) {
  json d = baseDoc();
  d["links"].erase(1);
  expectBad(d, {"ranks[1]: rank 1 cannot reach rank 0 (\"n0.gpu0\")", "\"n0.gpu1\""});
}

TEST(TopologyParse, ValidatesRoutes) {
  json d = baseDoc();
  auto route = [](json path) { return json{{"from", path.front()}, {"to", path.back()}, {"path", path}}; };
  d["routes"] = json::array({route({"n0.gpu0", "n0.gpu1"})});
  expectBad(d, {"routes[0].path[1]: no link between \"n0.gpu0\" and this node", "\"n0.gpu1\""});
  d["routes"] = json::array({route({"n0.gpu0", "n0.sw", "n0.gpu1"}), route({"n0.gpu0", "n0.sw", "n0.gpu1"})});
  expectBad(d, {"routes[1]: second route from \"n0.gpu0\" to \"n0.gpu1\""});
  d["routes"] = json::array({{{"from", "n0.gpu0"}, {"to", "n0.gpu1"}, {"path", {"n0.sw", "n0.gpu1"}}}});
  expectBad(d, {"routes[0].path[0]: must be the route's from"});
  d["routes"] = json::array({route({"n0.gpu0", "n0.sw", "n0.gpu9"})});
  expectBad(d, {"routes[0].to: unknown node id", "\"n0.gpu9\""});
}

TEST(TopologyParse, GeneratorDocuments) {
  const json d = {{"format", "collbench-topology"},
                  {"version", 1},
                  {"name", "ft4"},
                  {"generator", "fat_tree"},
                  {"params", {{"k", 4}}}};
  const Topology t = parseTopology(d.dump(), "ft.json");
  EXPECT_EQ(t.name, "ft4");
  EXPECT_EQ(t.ranks.size(), 16u);
  json bad = d;
  bad["params"]["kk"] = 4;
  expectBad(bad, {"params.kk: unknown parameter", "accepted: k, oversubscription"});
  bad = d;
  bad["params"]["k"] = 5;
  expectBad(bad, {"params.k: must be even", "(got 5)"});
  bad = d;
  bad["generator"] = "hypercube";
  expectBad(bad, {"generator: unknown generator (accepted: dragonfly, fat_tree", "\"hypercube\""});
  bad = d;
  bad["nodes"] = json::array();
  expectBad(bad, {"nodes: unknown field in a generator document"});
}

TEST(TopologyParse, BadInputFixturesFailWithTheirMessage) {
  // The CLI test runs `collbench topo check` on the same files; keep them failing for the documented reason.
  const std::map<std::string, std::string> expected{
      {"dangling_id.json", "links[1].b: unknown node id (got \"n0.nvswitch\")"},
      {"zero_bandwidth.json", "links[0].bandwidth_GBps: bandwidth must be > 0 (got 0)"},
      {"huge_bandwidth.json", "links[0].bandwidth_GBps: bandwidth must be between 1e-06 and 1e+06 GB/s (got 1e+300)"},
      {"tiny_bandwidth.json", "links[0].bandwidth_GBps: bandwidth must be between 1e-06 and 1e+06 GB/s (got 1e-300)"},
      {"huge_latency.json", "links[1].latency_us: latency must be at most 1e+09 us (got 1e+300)"},
      {"huge_reduce.json", "nodes[0].reduce_GBps: must be 0 (unknown) or between 1e-06 and 1e+06 GB/s (got 1e+300)"},
      {"disconnected_rank.json", "ranks[2]: rank 2 cannot reach rank 0"},
      {"unknown_field.json", "nodes[1].reduce_GBs: unknown field"},
      {"wrong_version.json", "version: unsupported version"},
      {"malformed.json", "malformed JSON at line 11"},
      {"unknown_arch.json",
       "nodes[1].arch: unknown GPU architecture (accepted: volta, ampere, hopper, blackwell) (got \"pascal\")"},
      {"multicast_on_gpu.json", "nodes[0].multicast: only switches multicast, node is a gpu (got true)"},
  };
  for (const auto& [file, part] : expected) {
    const std::string path = kSourceDir + "/tests/cli/topo_bad_inputs/" + file;
    expectError([&] { loadTopology(path); }, Errc::InvalidTopology, {path + ": ", part});
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Generators

// gpu arch, switch in-network reduction and multicast: the fields NCCL's model reads.
TEST(TopologyParse, ReadsArchAndInNetworkReduction) {
  json d = baseDoc();
  d["nodes"][0]["arch"] = "hopper";
  d["nodes"][2]["reduce_GBps"] = 450;
  Topology t = parseTopology(d.dump(), "nvls.json");
  EXPECT_EQ(t.nodes[0].arch, "hopper");
  EXPECT_EQ(t.nodes[1].arch, "");  // unknown
  EXPECT_EQ(t.nodes[2].reduceGBps, 450);
  EXPECT_FALSE(t.nodes[2].multicast.has_value());
  EXPECT_TRUE(t.nodes[2].reducesInNetwork());
  EXPECT_TRUE(t.nodes[2].multicasts());         // default: a reducing switch multicasts
  EXPECT_FALSE(t.nodes[0].reducesInNetwork());  // a gpu's reduce_GBps is its own compute, not the network's
  d["nodes"][2]["multicast"] = false;
  t = parseTopology(d.dump(), "nvls.json");
  EXPECT_TRUE(t.nodes[2].reducesInNetwork());
  EXPECT_FALSE(t.nodes[2].multicasts());
  d["nodes"][2].erase("reduce_GBps");
  d["nodes"][2]["multicast"] = true;
  t = parseTopology(d.dump(), "nvls.json");
  EXPECT_FALSE(t.nodes[2].reducesInNetwork());
  EXPECT_TRUE(t.nodes[2].multicasts());
  EXPECT_FALSE(parseTopology(baseDoc().dump(), "plain.json").nodes[2].multicasts());
  // Written back only where set, and read back equal.
  const std::string text = toJson(t);
  EXPECT_NE(text.find(R"("arch": "hopper")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("multicast": true)"), std::string::npos) << text;
  const Topology back = parseTopology(text, "back.json");
  EXPECT_EQ(back.nodes[0].arch, "hopper");
  EXPECT_EQ(back.nodes[2].multicast, std::optional<bool>(true));
  EXPECT_EQ(toJson(back), text);
}

TEST(TopologyParse, RejectsBadArchAndInNetworkFields) {
  auto with = [](std::size_t node, const char* key, const json& v) {
    json d = baseDoc();
    d["nodes"][node][key] = v;
    return d;
  };
  expectBad(
      with(0, "arch", "pascal"),
      {"nodes[0].arch: unknown GPU architecture (accepted: volta, ampere, hopper, blackwell)", "(got \"pascal\")"});
  expectBad(with(0, "arch", "Hopper"), {"nodes[0].arch: unknown GPU architecture", "\"Hopper\""});
  expectBad(with(0, "arch", 90), {"nodes[0].arch: expected a string", "(got 90)"});
  expectBad(with(0, "arch", ""), {"nodes[0].arch: must not be empty"});
  expectBad(with(2, "arch", "hopper"), {"nodes[2].arch: only gpu nodes have an architecture, node is a switch"});
  expectBad(with(2, "multicast", "yes"), {"nodes[2].multicast: expected true or false", "(got \"yes\")"});
  expectBad(with(0, "multicast", true), {"nodes[0].multicast: only switches multicast, node is a gpu", "(got true)"});
  expectBad(with(2, "reduce_GBps", -1), {"nodes[2].reduce_GBps: must be 0 (cannot reduce) or between", "(got -1)"});
  expectBad(with(2, "reduce_GBps", 1e300), {"nodes[2].reduce_GBps: must be 0 (cannot reduce) or between"});
}

TEST(TopologyGenerators, NvswitchNode) {
  const Topology t = gen("nvswitch_node", {{"gpus", 4}, {"link_GBps", 300}});
  EXPECT_EQ(t.nodes.size(), 5u);
  EXPECT_EQ(t.links.size(), 4u);
  EXPECT_EQ(t.ranks.size(), 4u);
  EXPECT_GE(t.nodeIndex("n0.nvsw"), 0);
  for (const auto& l : t.links) {
    EXPECT_EQ(l.bandwidthGBps, 300);
    EXPECT_EQ(l.linkClass, "nvlink");
  }
}

TEST(TopologyGenerators, FatTreeCountsMatchFormulas) {
  for (int k : {2, 4, 6, 8, 16}) {
    const Topology t = gen("fat_tree", {{"k", k}});
    const std::size_t hosts = static_cast<std::size_t>(k * k * k / 4);
    const std::size_t switches = static_cast<std::size_t>(5 * k * k / 4);
    EXPECT_EQ(t.ranks.size(), hosts) << "k=" << k;
    EXPECT_EQ(t.nodes.size(), hosts + switches) << "k=" << k;
    EXPECT_EQ(t.links.size(), 3 * hosts) << "k=" << k;  // host-edge, edge-agg, agg-core: k^3/4 each
    EXPECT_EQ(summarize(t).switches, static_cast<int>(switches));
  }
}

TEST(TopologyGenerators, FatTreeOversubscriptionRemovesUplinks) {
  // 2:1 with k = 4: each edge switch keeps its 2 hosts and has 1 uplink (of 2), at the full 40 GB/s; a pod has one
  // aggregation switch, with 2 core links, and there are 2 cores.
  const Topology t = gen("fat_tree", {{"k", 4}, {"oversubscription", 2}, {"link_GBps", 40}});
  int edgeUp = 0, aggUp = 0, hostLinks = 0;
  for (const auto& l : t.links) {
    EXPECT_EQ(l.bandwidthGBps, 40) << l.a << " - " << l.b;
    edgeUp += l.a.find(".edge") != std::string::npos && l.b.find(".agg") != std::string::npos ? 1 : 0;
    aggUp += l.a.find(".agg") != std::string::npos && l.b.find("core") == 0 ? 1 : 0;
    hostLinks += l.linkClass == "nic" ? 1 : 0;
  }
  EXPECT_EQ(hostLinks, 16);
  EXPECT_EQ(edgeUp, 8);  // k pods x k/2 edges x 1 uplink
  EXPECT_EQ(aggUp, 8);   // k pods x 1 aggregation switch x k/2 core links
  EXPECT_EQ(t.ranks.size(), 16u);
  EXPECT_EQ(summarize(t).switches, 4 * 2 + 4 * 1 + 2);
  expectError([] { generateTopology("fat_tree", R"({"k": 4, "oversubscription": 3})"); }, Errc::InvalidTopology,
              {"params.oversubscription: must be between 1 and 2", "(got 3)"});
  expectError([] { generateTopology("fat_tree", R"({"k": 8, "oversubscription": 3})"); }, Errc::InvalidTopology,
              {"params.oversubscription: must divide k/2 = 4", "(got 3)"});
  expectError([] { generateTopology("fat_tree", R"({"k": 8, "oversubscription": 1.5})"); }, Errc::InvalidTopology,
              {"params.oversubscription: expected an integer", "(got 1.5)"});
}

TEST(TopologyGenerators, MultiNodeRailOptimized) {
  const Topology t = gen("multi_node", {{"nodes", 4}, {"gpus_per_node", 8}, {"nics_per_node", 8}});
  // Per server 8 gpus + 8 nics + 1 nvswitch; 8 leaves (one per rail) and 4 spines (one uplink per downlink).
  EXPECT_EQ(t.nodes.size(), 4u * 17 + 8 + 4);
  EXPECT_EQ(t.links.size(), 4u * (8 + 8 + 8) + 8 * 4);
  EXPECT_EQ(t.ranks.size(), 32u);
  EXPECT_EQ(summarize(t).hosts, 4);
  // NIC i of every server is on leaf i.
  for (const auto& l : t.links) {
    if (l.linkClass != "nic") continue;
    const std::string rail = l.a.substr(l.a.find(".nic") + 4);
    EXPECT_EQ(l.b, "leaf" + rail) << l.a;
  }
}

TEST(TopologyGenerators, MultiNodeSharedLeavesFromRadix) {
  const Topology t =
      gen("multi_node",
          {{"nodes", 16}, {"gpus_per_node", 1}, {"nics_per_node", 1}, {"rail_optimized", false}, {"radix", 8}});
  // 16 NIC ports, 4 down ports per leaf -> 4 leaves, 4 spines; no NVSwitch with one GPU per server.
  EXPECT_EQ(t.nodes.size(), 16u * 2 + 4 + 4);
  EXPECT_EQ(t.links.size(), 16u * 2 + 4 * 4);
  expectError(
      [] {
        gen("multi_node", {{"nics_per_node", 9}});
      },
      Errc::InvalidTopology, {"params.nics_per_node: must be <= gpus_per_node (8)", "(got 9)"});
  expectError(
      [] {
        gen("multi_node", {{"nodes", 4}, {"leaves", 3}});
      },
      Errc::InvalidTopology, {"params.leaves: must be a multiple of nics_per_node"});
}

// Links of one class leaving the switches whose id starts with `prefix`, per switch, towards `to` (a prefix).
std::map<std::string, int> linksBetween(const Topology& t, const std::string& prefix, const std::string& to) {
  std::map<std::string, int> out;
  for (const auto& l : t.links) {
    if (l.a.rfind(prefix, 0) == 0 && l.b.rfind(to, 0) == 0) ++out[l.a];
    if (l.b.rfind(prefix, 0) == 0 && l.a.rfind(to, 0) == 0) ++out[l.b];
  }
  return out;
}

// 512 servers x 8 rails do not fit two levels of radix-64 switches (128 leaves): the generator builds pods of 128
// servers (4 leaves per rail, 32 spines) under cores, and a route crosses the level its endpoints need.
TEST(TopologyGenerators, MultiNodeThreeLevelRailOptimized) {
  const Topology t = gen("multi_node", {{"nodes", 512}});
  // 4 pods x 32 leaves, 4 pods x 32 spines (32 NICs per leaf, one uplink each), 32 spines x 32 uplinks = 1024 cores.
  EXPECT_EQ(t.nodes.size(), 512u * 17 + 128 + 128 + 1024);
  EXPECT_EQ(t.links.size(), 512u * 24 + 128 * 32 + 1024 * 4);
  for (const auto& [leaf, n] : linksBetween(t, "leaf", "spine")) EXPECT_EQ(n, 32) << leaf;
  for (const auto& [spine, n] : linksBetween(t, "spine", "core")) EXPECT_EQ(n, 32) << spine;
  for (const auto& [core, n] : linksBetween(t, "core", "spine")) EXPECT_EQ(n, 4) << core;  // one per pod
  const Router r(t);
  auto crosses = [&](int a, int b, const std::string& level) {
    const auto path = nodesOnRoute(t, r.route(a, b));
    return std::any_of(path.begin(), path.end(), [&](const std::string& n) { return n.rfind(level, 0) == 0; });
  };
  EXPECT_EQ(r.route(0, 8).size(), 4u);       // n0.gpu0 -> n1.gpu0: rail 0's leaf
  EXPECT_EQ(r.route(0, 32 * 8).size(), 6u);  // n32: rail 0's next leaf in pod 0, via a spine
  EXPECT_FALSE(crosses(0, 32 * 8, "core"));
  EXPECT_EQ(r.route(0, 128 * 8).size(), 8u);  // n128: pod 1, via a core
  EXPECT_TRUE(crosses(0, 128 * 8, "core"));
  expectPath(t, r.route(0, 511 * 8 + 7), "n0.gpu0", "n511.gpu7");
  EXPECT_EQ(t.ranks.size(), 4096u);
}

TEST(TopologyGenerators, MultiNodeOversubscriptionPerLevel) {
  // Leaves: 32 NICs down, 16 spines up (2:1); spines: 32 leaves down, 8 cores up (4:1).
  const Topology t = gen("multi_node", {{"nodes", 512}, {"leaf_oversubscription", 2}, {"spine_oversubscription", 4}});
  for (const auto& [leaf, n] : linksBetween(t, "leaf", "spine")) EXPECT_EQ(n, 16) << leaf;
  for (const auto& [leaf, n] : linksBetween(t, "leaf", "n")) EXPECT_EQ(n, 32) << leaf;
  for (const auto& [spine, n] : linksBetween(t, "spine", "core")) EXPECT_EQ(n, 8) << spine;
  for (const auto& [spine, n] : linksBetween(t, "spine", "leaf")) EXPECT_EQ(n, 32) << spine;
  EXPECT_EQ(linksBetween(t, "core", "spine").size(), 16u * 8);
  // Two levels: fewer spines; the summary's bisection halves with them.
  const Topology full =
      gen("multi_node",
          {{"nodes", 64}, {"gpus_per_node", 1}, {"nics_per_node", 1}, {"rail_optimized", false}, {"radix", 16}});
  const Topology half = gen("multi_node", {{"nodes", 64},
                                           {"gpus_per_node", 1},
                                           {"nics_per_node", 1},
                                           {"rail_optimized", false},
                                           {"radix", 16},
                                           {"leaf_oversubscription", 2}});
  EXPECT_EQ(linksBetween(full, "leaf", "spine").begin()->second, 8);
  EXPECT_EQ(linksBetween(half, "leaf", "spine").begin()->second, 4);
  EXPECT_NEAR(summarize(half).bisectionGBps, summarize(full).bisectionGBps / 2, 1e-9);
  expectError(
      [] {
        gen("multi_node", {{"spine_oversubscription", 0.5}});
      },
      Errc::InvalidTopology, {"params.spine_oversubscription: must be between 1 and", "(got 0.5)"});
}

// Shared (non-rail) leaves: 64 single-NIC servers on radix-8 switches are 16 leaves, more than a spine's 8 ports:
// 4 pods of 4 leaves and 4 spines, 16 cores, the k = 8 fat tree's shape with 4 hosts per leaf.
TEST(TopologyGenerators, MultiNodeThreeLevelSharedLevelsChosen) {
  const json params = {
      {"nodes", 64}, {"gpus_per_node", 1}, {"nics_per_node", 1}, {"rail_optimized", false}, {"radix", 8}};
  const Topology t = gen("multi_node", params);
  EXPECT_EQ(t.nodes.size(), 64u * 2 + 16 + 16 + 16);
  EXPECT_EQ(t.links.size(), 64u * 2 + 16 * 4 + 16 * 4);
  const Router r(t);
  EXPECT_EQ(r.route(0, 1).size(), 4u);   // same leaf
  EXPECT_EQ(r.route(0, 4).size(), 6u);   // same pod
  EXPECT_EQ(r.route(0, 16).size(), 8u);  // another pod
  json two = params;
  two["levels"] = 2;
  expectError([&] { gen("multi_node", two); }, Errc::InvalidTopology,
              {"16 leaves exceed the spine radix 8: a two-level fabric cannot join them"});
  expectError(
      [] {
        gen("multi_node", {{"nodes", 16384}});
      },
      Errc::InvalidTopology,
      {"128 pods exceed the core radix 64: 16384 servers x 8 NICs need radix >= 82 for three levels"});
  expectError(
      [] {
        gen("multi_node", {{"nodes", 512}, {"levels", 3}, {"leaves", 8}});
      },
      Errc::InvalidTopology, {"params.leaves: applies to two-level fabrics only (levels 2)", "(got 8)"});
}

// 2048 servers x 8 GPUs (16384 GPUs, three levels) generate and route in well under a second (bench/ times 16384
// servers); the node and link counts grow linearly.
TEST(TopologyGenerators, MultiNodeThreeLevel2048Servers) {
  const Topology t = gen("multi_node", {{"nodes", 2048}});
  // 16 pods x (32 leaves + 32 spines), 1024 cores with one link per pod.
  EXPECT_EQ(t.nodes.size(), 2048u * 17 + 512 + 512 + 1024);
  EXPECT_EQ(t.links.size(), 2048u * 24 + 512 * 32 + 1024 * 16);
  const Router r(t);
  EXPECT_EQ(r.route(0, 2047 * 8).size(), 8u);
}

// The PCIe pairing of GPUs and NICs for more NICs than GPUs (4 per GPU, AWS p5), fewer (2 GPUs per NIC, p4de) and
// equal; arch, NVLS and SHARP land on the GPUs, the NVSwitch and the fabric switches.
TEST(TopologyGenerators, MultiNodeNicsPerGpuArchNvlsSharp) {
  const Topology p5 = gen("multi_node", {{"nodes", 3},
                                         {"nics_per_node", 32},
                                         {"nic_GBps", 12.5},
                                         {"rail_optimized", false},
                                         {"arch", "hopper"},
                                         {"nvls_GBps", 450},
                                         {"sharp_GBps", 50}});
  EXPECT_EQ(p5.nodes.size(), 3u * (8 + 32 + 1) + 3 + 32);  // 96 ports fill 3 leaves of 32; 32 spines
  EXPECT_EQ(p5.links.size(), 3u * (8 + 32 + 32) + 3 * 32);
  const auto nics = gpuNics(p5);
  ASSERT_EQ(nics.size(), 24u);
  for (int h = 0; h < 3; ++h) {
    for (int g = 0; g < 8; ++g) {
      std::vector<std::string> want;
      for (int k = 0; k < 4; ++k) want.push_back(fmt::format("n{}.nic{}", h, 4 * g + k));
      EXPECT_EQ(nics.at(fmt::format("n{}.gpu{}", h, g)), want);
    }
  }
  for (const TopoNode& n : p5.nodes) {
    EXPECT_EQ(n.arch, n.kind == NodeKind::Gpu ? "hopper" : "") << n.id;
    if (n.kind == NodeKind::Switch) {
      EXPECT_EQ(n.reduceGBps, n.host.empty() ? 50 : 450) << n.id;
      EXPECT_TRUE(n.multicasts()) << n.id;
    }
  }
  const std::vector<HostProfile> hosts = hostProfiles(p5);
  ASSERT_EQ(hosts.size(), 3u);
  for (const HostProfile& h : hosts) {
    EXPECT_EQ(h.gpus, 8);
    EXPECT_EQ(h.arch, "hopper");
    EXPECT_EQ(h.nics, 32);
    EXPECT_EQ(h.nicGBps, 12.5);
    EXPECT_EQ(h.nvlsGBps, 450);
    EXPECT_TRUE(h.multicast);
  }
  EXPECT_EQ(hosts[1].host, "n1");
  EXPECT_EQ(fabricReduceGBps(p5), 50);

  const Topology p4de = gen("multi_node", {{"nodes", 2}, {"nics_per_node", 4}, {"arch", "ampere"}});
  const auto shared = gpuNics(p4de);
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(shared.at(fmt::format("n1.gpu{}", g)), std::vector<std::string>{fmt::format("n1.nic{}", g / 2)});
  }
  const HostProfile a100 = hostProfiles(p4de).at(0);
  EXPECT_EQ(a100.nics, 4);
  EXPECT_EQ(a100.nicGBps, 50);
  EXPECT_EQ(a100.nvlsGBps, 0);  // nvls_GBps defaults to none
  EXPECT_FALSE(a100.multicast);
  EXPECT_EQ(fabricReduceGBps(p4de), 0);

  expectError(
      [] {
        gen("multi_node", {{"nics_per_node", 12}});
      },
      Errc::InvalidTopology, {"params.nics_per_node: must be <= gpus_per_node (8) or a multiple of it", "(got 12)"});
  expectError(
      [] {
        gen("multi_node", {{"arch", "turing"}});
      },
      Errc::InvalidTopology, {"params.arch: expected one of: volta, ampere, hopper, blackwell", "(got \"turing\")"});
  expectError(
      [] {
        gen("multi_node", {{"nvls_GBps", -5}});
      },
      Errc::InvalidTopology, {"params.nvls_GBps: must be 0 (infinitely fast) or between"});
  expectError(
      [] {
        gen("multi_node", {{"gpus_per_node", 1}, {"nics_per_node", 1}, {"nvls_GBps", 450}});
      },
      Errc::InvalidTopology, {"params.nvls_GBps: needs an NVSwitch", "(got 450)"});
  // nvswitch_node takes arch and NVLS too.
  const Topology node = gen("nvswitch_node", {{"arch", "blackwell"}, {"nvls_GBps", 900}});
  EXPECT_EQ(node.nodes[0].arch, "blackwell");
  EXPECT_EQ(hostProfiles(node).at(0).nvlsGBps, 900);
}

// Defaults leave the new fields unset: the fingerprints that key reports/tuning stay what they were.
TEST(TopologyGenerators, NewParametersDefaultToTheOldNetwork) {
  EXPECT_EQ(fingerprint(loadTopology("h100-4x8-rail")), "9f2887589399157b");
  for (const TopoNode& n : loadTopology("h100-4x8-rail").nodes) {
    EXPECT_EQ(n.arch, "") << n.id;
    if (n.kind == NodeKind::Switch) {
      EXPECT_EQ(n.reduceGBps, 0) << n.id;
    }
  }
}

// The GPU-NIC PCIe paths: pcie links only, through PCIe switches of the GPU's own host, nearest NIC first.
TEST(TopologyHosts, GpuNicsFollowPcieThroughTheHostsSwitches) {
  const Topology t = parseTopology(R"({
    "format": "collbench-topology", "version": 1, "name": "pcie-paths",
    "nodes": [{"id": "n0.gpu0", "kind": "gpu", "host": "n0", "arch": "ampere"},
              {"id": "n0.gpu1", "kind": "gpu", "host": "n0", "arch": "hopper"},
              {"id": "n0.pcisw", "kind": "switch", "host": "n0"},
              {"id": "n0.nic0", "kind": "nic", "host": "n0"},
              {"id": "n0.nic1", "kind": "nic", "host": "n0"},
              {"id": "n0.nic2", "kind": "nic", "host": "n0"},
              {"id": "n0.nvsw", "kind": "switch", "host": "n0", "reduce_GBps": 100, "multicast": false},
              {"id": "leaf", "kind": "switch", "reduce_GBps": 25}],
    "links": [{"a": "n0.gpu0", "b": "n0.pcisw", "bandwidth_GBps": 30, "latency_us": 0.5, "class": "pcie"},
              {"a": "n0.pcisw", "b": "n0.nic1", "bandwidth_GBps": 30, "latency_us": 0.5, "class": "pcie"},
              {"a": "n0.gpu0", "b": "n0.nic2", "bandwidth_GBps": 30, "latency_us": 0.5, "class": "pcie"},
              {"a": "n0.gpu1", "b": "n0.nic0", "bandwidth_GBps": 30, "latency_us": 0.5, "class": "nvlink"},
              {"a": "n0.gpu0", "b": "n0.nvsw", "bandwidth_GBps": 300, "latency_us": 0.3, "class": "nvlink"},
              {"a": "n0.gpu1", "b": "n0.nvsw", "bandwidth_GBps": 300, "latency_us": 0.3, "class": "nvlink"},
              {"a": "n0.nic0", "b": "leaf", "bandwidth_GBps": 12.5, "latency_us": 1, "class": "nic"},
              {"a": "n0.nic1", "b": "leaf", "bandwidth_GBps": 25, "latency_us": 1, "class": "nic"},
              {"a": "n0.nic2", "b": "leaf", "bandwidth_GBps": 25, "latency_us": 1, "class": "nic"}],
    "ranks": ["n0.gpu0", "n0.gpu1"]
  })",
                                   "pcie.json");
  const auto nics = gpuNics(t);
  EXPECT_EQ(nics.at("n0.gpu0"), (std::vector<std::string>{"n0.nic2", "n0.nic1"}));  // direct first
  EXPECT_EQ(nics.count("n0.gpu1"), 0u);                                             // its only NIC link is not PCIe
  const HostProfile h = hostProfiles(t).at(0);
  EXPECT_EQ(h.gpus, 2);
  EXPECT_EQ(h.arch, "");  // mixed
  EXPECT_EQ(h.nics, 3);
  EXPECT_EQ(h.nicGBps, 25);
  EXPECT_EQ(h.nvlsGBps, 100);
  EXPECT_FALSE(h.multicast);
  EXPECT_EQ(fabricReduceGBps(t), 25);
}

TEST(TopologyGenerators, TorusCounts) {
  const Topology t = gen("torus", {{"dims", {4, 4, 4}}});
  EXPECT_EQ(t.ranks.size(), 64u);
  EXPECT_EQ(t.nodes.size(), 64u);
  EXPECT_EQ(t.links.size(), 64u * 3);                                 // wraparound: one link per node per dimension
  EXPECT_EQ(gen("torus", {{"dims", {2, 3}}}).links.size(), 3u + 6u);  // size 2 has one link, not two
  EXPECT_EQ(gen("torus", {{"dims", {4, 4}}, {"wraparound", false}}).links.size(), 2u * 3 * 4);
  EXPECT_EQ(gen("torus", {{"dims", {5}}}).links.size(), 5u);
  // Every node of a 3D torus has 6 neighbours.
  std::map<std::string, int> degree;
  for (const auto& l : t.links) {
    ++degree[l.a];
    ++degree[l.b];
  }
  for (const auto& [id, d] : degree) EXPECT_EQ(d, 6) << id;
}

TEST(TopologyGenerators, DragonflyCounts) {
  const int g = 9, a = 4, p = 2;
  const Topology t = gen("dragonfly", {{"groups", g}, {"routers", a}, {"hosts", p}});
  EXPECT_EQ(t.ranks.size(), static_cast<std::size_t>(g * a * p));
  EXPECT_EQ(t.nodes.size(), static_cast<std::size_t>(g * a * p + g * a));
  EXPECT_EQ(t.links.size(), static_cast<std::size_t>(g * a * p + g * a * (a - 1) / 2 + g * (g - 1) / 2));
  // Global ports are dealt evenly: 8 peer groups over 4 routers = 2 global links per router.
  std::map<std::string, int> global;
  for (const auto& l : t.links) {
    if (l.linkClass != "global") continue;
    ++global[l.a];
    ++global[l.b];
  }
  EXPECT_EQ(global.size(), static_cast<std::size_t>(g * a));
  for (const auto& [id, n] : global) EXPECT_EQ(n, 2) << id;
}

TEST(TopologyGenerators, RingAndFlat) {
  EXPECT_EQ(gen("ring", {{"n", 8}}).links.size(), 8u);
  EXPECT_EQ(gen("ring", {{"n", 2}}).links.size(), 1u);
  EXPECT_EQ(gen("ring", {{"n", 1}}).links.size(), 0u);
  const Topology f = flatTopology(5, 25, 2);
  EXPECT_EQ(f.nodes.size(), 6u);
  EXPECT_EQ(f.links.size(), 5u);
  EXPECT_EQ(f.ranks.size(), 5u);
  for (const auto& l : f.links) {
    EXPECT_EQ(l.b, "sw0");
    EXPECT_EQ(l.bandwidthGBps, 25);
    EXPECT_EQ(l.latencyUs, 2);
  }
  EXPECT_EQ(fingerprint(f), fingerprint(gen("flat", {{"n", 5}, {"bandwidth_GBps", 25}, {"latency_us", 2}})));
  expectError([] { flatTopology(0, 1, 1); }, Errc::InvalidTopology, {"flatTopology: params.n", "(got 0)"});
  expectError([] { flatTopology(4, 0, 1); }, Errc::InvalidTopology, {"params.bandwidth_GBps: bandwidth must be > 0"});
}

TEST(TopologyGenerators, DefaultsAreValidAndNamed) {
  for (const auto& g : topologyGenerators()) {
    const Topology t = generateTopology(g, "");
    EXPECT_FALSE(t.name.empty()) << g;
    EXPECT_FALSE(t.description.empty()) << g;
    EXPECT_NO_THROW(validateTopology(t, g)) << g;
    EXPECT_EQ(fingerprint(t), fingerprint(generateTopology(g, "{}"))) << g;
  }
}

TEST(TopologyGenerators, RejectBadParameters) {
  expectError([] { generateTopology("fat_tree", R"({"k": 7})"); }, Errc::InvalidTopology,
              {"generator fat_tree: params.k: must be even", "(got 7)"});
  expectError([] { generateTopology("fat_tree", R"({"k": "eight"})"); }, Errc::InvalidTopology,
              {"params.k: expected an integer", "\"eight\""});
  expectError([] { generateTopology("torus", R"({"dims": [4, 0]})"); }, Errc::InvalidTopology, {"params.dims"});
  expectError([] { generateTopology("torus", R"({"dims": [1024, 1024, 1024]})"); }, Errc::InvalidTopology,
              {"params.dims", "more than"});
  expectError([] { generateTopology("ring", R"({"n": 4, "colour": 1})"); }, Errc::InvalidTopology,
              {"params.colour: unknown parameter (accepted: n, link_GBps"});
  expectError([] { generateTopology("ring", "[1]"); }, Errc::InvalidTopology, {"params: expected an object"});
  expectError([] { generateTopology("ring", "{"); }, Errc::InvalidTopology, {"generator ring: malformed JSON"});
  expectError([] { generateTopology("mesh", ""); }, Errc::InvalidTopology, {"unknown generator", "\"mesh\""});
  expectError([] { generateTopology("dragonfly", R"({"link_GBps": 0})"); }, Errc::InvalidTopology,
              {"params.link_GBps: bandwidth must be > 0", "(got 0)"});
  expectError([] { generateTopology("flat", R"({"bandwidth_GBps": 1e300})"); }, Errc::InvalidTopology,
              {"generator flat: params.bandwidth_GBps: bandwidth must be between 1e-06 and 1e+06 GB/s", "1e+300"});
  expectError([] { generateTopology("fat_tree", R"({"latency_us": 1e300})"); }, Errc::InvalidTopology,
              {"params.latency_us: latency must be at most 1e+09 us", "1e+300"});
  expectError([] { generateTopology("multi_node", R"({"reduce_GBps": 1e300})"); }, Errc::InvalidTopology,
              {"params.reduce_GBps: must be 0 (infinitely fast) or between 1e-06 and 1e+06 GB/s", "1e+300"});
}

// ---------------------------------------------------------------------------------------------------------------
// Routing

TEST(TopologyRouting, FlatRouteHasTwoHopsWithDirections) {
  const Topology t = flatTopology(4, 50, 1);
  const Router r(t);
  const auto& hops = r.route(0, 3);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_TRUE(hops[0].forward);   // gpu (a) -> switch (b)
  EXPECT_FALSE(hops[1].forward);  // switch -> gpu, against the link's a->b
  expectPath(t, hops, t.ranks[0], t.ranks[3]);
  EXPECT_TRUE(r.route(2, 2).empty());
  EXPECT_EQ(&r.route(0, 3), &hops);  // cached
  expectError([&] { r.route(0, 4); }, Errc::InvalidArgument, {"rank 4", "4 ranks"});
  expectError([&] { r.route(-1, 0); }, Errc::InvalidArgument, {"rank -1"});
}

TEST(TopologyRouting, FatTreeHopCounts) {
  const Topology t = gen("fat_tree", {{"k", 4}});
  const Router r(t);
  EXPECT_EQ(r.route(0, 1).size(), 2u);  // same edge switch
  EXPECT_EQ(r.route(0, 2).size(), 4u);  // same pod, via an aggregation switch
  EXPECT_EQ(r.route(0, 4).size(), 6u);  // other pod, via a core switch
  for (int dst = 1; dst < 16; ++dst) expectPath(t, r.route(0, dst), t.ranks[0], t.ranks[static_cast<std::size_t>(dst)]);
}

TEST(TopologyRouting, LeafSpineHopCounts) {
  const Topology t =
      gen("multi_node",
          {{"nodes", 4}, {"gpus_per_node", 1}, {"nics_per_node", 1}, {"rail_optimized", false}, {"radix", 4}});
  const Router r(t);
  EXPECT_EQ(r.route(0, 1).size(), 4u);  // gpu nic leaf0 nic gpu: same leaf
  EXPECT_EQ(r.route(0, 2).size(), 6u);  // ... leaf0 spine leaf1 ...: across a spine
  const auto path = nodesOnRoute(t, r.route(0, 2));
  EXPECT_TRUE(std::any_of(path.begin(), path.end(), [](const std::string& n) { return n.rfind("spine", 0) == 0; }));
}

TEST(TopologyRouting, RailOptimizedSameRailStaysOnItsLeaf) {
  const Topology t = generateTopology("multi_node", R"({"nodes": 4})");
  const Router r(t);
  EXPECT_EQ(r.route(0, 1).size(), 2u);   // n0.gpu0 -> n0.nvsw -> n0.gpu1
  const auto& sameRail = r.route(0, 8);  // n0.gpu0 -> n1.gpu0
  EXPECT_EQ(sameRail.size(), 4u);
  for (const Hop& h : sameRail) EXPECT_NE(t.links[static_cast<std::size_t>(h.link)].linkClass, "fabric");
  EXPECT_EQ(r.route(0, 9).size(), 6u);  // n0.gpu0 -> n1.gpu1: another rail
  expectPath(t, r.route(0, 9), "n0.gpu0", "n1.gpu1");
}

// A GPU is an endpoint: a route never passes through another rank's node (on a DGX the detour GPU -> NVSwitch ->
// other GPU -> its NIC ties on hops with the GPU's own NIC). Where ranks are linked directly, they do forward.
TEST(TopologyRouting, RoutesPassThroughRanksOnlyWhereRanksAreLinked) {
  const Topology rail = generateTopology("multi_node", R"({"nodes": 2})");
  const Router r(rail);
  for (int src = 0; src < 16; ++src) {
    for (int dst = 0; dst < 16; ++dst) {
      if (src == dst) continue;
      const auto path = nodesOnRoute(rail, r.route(src, dst));
      for (std::size_t i = 0; i + 1 < path.size(); ++i) {  // the nodes between src and dst
        EXPECT_EQ(path[i].find(".gpu"), std::string::npos) << src << " -> " << dst << " passes " << path[i];
      }
    }
  }
  const Topology ring = gen("ring", {{"n", 6}});
  const Router rr(ring);
  EXPECT_EQ(rr.route(0, 3).size(), 3u);  // through two other ranks
}

TEST(TopologyRouting, TiesOnHopsGoToLowerLatency) {
  json d = {{"format", "collbench-topology"}, {"version", 1}, {"name", "diamond"}};
  d["nodes"] = {{{"id", "a"}, {"kind", "gpu"}},
                {{"id", "slow"}, {"kind", "switch"}},
                {{"id", "fast"}, {"kind", "switch"}},
                {{"id", "d"}, {"kind", "gpu"}}};
  d["links"] = {{{"a", "a"}, {"b", "slow"}, {"bandwidth_GBps", 10}, {"latency_us", 5}},
                {{"a", "slow"}, {"b", "d"}, {"bandwidth_GBps", 10}, {"latency_us", 5}},
                {{"a", "a"}, {"b", "fast"}, {"bandwidth_GBps", 10}, {"latency_us", 1}},
                {{"a", "fast"}, {"b", "d"}, {"bandwidth_GBps", 10}, {"latency_us", 1}}};
  d["ranks"] = {"a", "d"};
  const Topology t = parseTopology(d.dump(), "diamond.json");
  const Router r(t);
  EXPECT_EQ(nodesOnRoute(t, r.route(0, 1)), (std::vector<std::string>{"fast", "d"}));
  EXPECT_EQ(nodesOnRoute(t, r.route(1, 0)), (std::vector<std::string>{"fast", "a"}));

  // Explicit routes win, and serve the reverse direction unless it has its own.
  d["routes"] = {{{"from", "a"}, {"to", "d"}, {"path", {"a", "slow", "d"}}}};
  const Topology e = parseTopology(d.dump(), "diamond.json");
  const Router re(e);
  EXPECT_EQ(nodesOnRoute(e, re.route(0, 1)), (std::vector<std::string>{"slow", "d"}));
  EXPECT_EQ(nodesOnRoute(e, re.route(1, 0)), (std::vector<std::string>{"slow", "a"}));
  expectPath(e, re.route(1, 0), "d", "a");
  d["routes"].push_back({{"from", "d"}, {"to", "a"}, {"path", {"d", "fast", "a"}}});
  const Topology both = parseTopology(d.dump(), "diamond.json");
  const Router rb(both);
  EXPECT_EQ(nodesOnRoute(both, rb.route(0, 1)), (std::vector<std::string>{"slow", "d"}));
  EXPECT_EQ(nodesOnRoute(both, rb.route(1, 0)), (std::vector<std::string>{"fast", "a"}));
}

TEST(TopologyRouting, EcmpSpreadsPairsOverCoreSwitches) {
  const Topology t = gen("fat_tree", {{"k", 8}});
  const Router r(t);
  std::map<std::string, int> coreUse;
  int routes = 0;
  for (int src = 0; src < 16; ++src) {      // pod 0
    for (int dst = 16; dst < 128; ++dst) {  // other pods
      const auto path = nodesOnRoute(t, r.route(src, dst));
      ASSERT_EQ(path.size(), 6u);
      ASSERT_EQ(path[2].rfind("core", 0), 0u) << path[2];
      ++coreUse[path[2]];
      ++routes;
    }
  }
  EXPECT_EQ(coreUse.size(), 16u);  // (k/2)^2 cores, every one used
  const double mean = static_cast<double>(routes) / 16;
  for (const auto& [core, n] : coreUse) {
    EXPECT_GT(n, 0.6 * mean) << core;
    EXPECT_LT(n, 1.4 * mean) << core;
  }
  // Deterministic: another router over the same topology picks the same routes.
  const Router again(t);
  for (int dst = 16; dst < 128; ++dst) {
    const auto& x = r.route(3, dst);
    const auto& y = again.route(3, dst);
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].link, y[i].link);
  }
}

TEST(TopologyRouting, RoutesDoNotDependOnQueryOrder) {
  // The per-source BFS pauses at the farthest destination asked so far; resuming it must give the same answers.
  const Topology t = gen("dragonfly", json::object());
  const int n = static_cast<int>(t.ranks.size());
  const Router forward(t), backward(t);
  for (int src = 0; src < n; src += 7) {
    for (int dst = 0; dst < n; ++dst) forward.route(src, dst);
    for (int dst = n - 1; dst >= 0; --dst) backward.route(src, dst);
    for (int dst = 0; dst < n; ++dst) {
      const auto& x = forward.route(src, dst);
      const auto& y = backward.route(src, dst);
      ASSERT_EQ(x.size(), y.size());
      for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i].link, y[i].link) << src << "->" << dst;
      expectPath(t, x, t.ranks[static_cast<std::size_t>(src)], t.ranks[static_cast<std::size_t>(dst)]);
      EXPECT_EQ(static_cast<int>(x.size()), forward.distance(forward.rankNode(src), forward.rankNode(dst)));
    }
  }
}

// Where every path from a source starts with the same hops (a GPU's NIC, its leaf), the route is a walk on the
// gateway's BFS tree; it must be the route the source's own tree gives. Sources asked in turn take the gateways' trees
// (from each gateway's second source on); a source asked for every destination in a row takes its own tree (from the
// second destination on).
// Two 24-port switches joined by three links (one slower), where some GPUs have a second, slower link to theirs:
// routes cross many-port switches that the pair search reaches from the few-linked side, over parallel links of
// which only the fastest carry them.
Topology twoStars() {
  Topology t = flatTopology(48, 50, 1);
  t.nodes.push_back(TopoNode{"sw1", NodeKind::Switch, "", 0, 0});
  for (std::size_t i = 24; i < 48; ++i) t.links[i].b = "sw1";
  for (double latency : {1.0, 2.0, 1.0}) t.links.push_back(TopoLink{"sw0", "sw1", 100, latency, "fabric"});
  for (std::size_t i = 0; i < 48; i += 5) t.links.push_back(TopoLink{t.links[i].a, t.links[i].b, 50, 3, "fabric"});
  return t;
}

TEST(TopologyRouting, GatewayTreesGiveTheSourcesOwnRoutes) {
  const std::vector<Topology> topologies = {
      flatTopology(40, 50, 1),
      twoStars(),
      gen("multi_node", {{"nodes", 12}, {"nics_per_node", 2}, {"radix", 6}}),  // three levels, 4 GPUs on a NIC
      gen("multi_node", {{"nodes", 8}, {"rail_optimized", false}, {"radix", 8}}),
      gen("multi_node", {{"nodes", 6}, {"gpus_per_node", 1}, {"nics_per_node", 1}}),
      gen("fat_tree", {{"k", 4}}),
      gen("dragonfly", json::object()),
      gen("torus", {{"dims", {4, 4}}}),
      gen("nvswitch_node", {{"gpus", 8}})};
  for (const Topology& t : topologies) {
    const int n = static_cast<int>(t.ranks.size());
    const Router inTurn(t), inRow(t);
    for (int dst = 0; dst < n; ++dst) {
      for (int src = 0; src < n; ++src) inTurn.route(src, dst);
    }
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        const auto& x = inRow.route(src, dst);
        const auto& y = inTurn.route(src, dst);
        ASSERT_EQ(x.size(), y.size()) << t.name << " " << src << "->" << dst;
        for (std::size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(x[i].link, y[i].link) << t.name << " " << src << "->" << dst;
          ASSERT_EQ(x[i].forward, y[i].forward) << t.name << " " << src << "->" << dst;
        }
        expectPath(t, x, t.ranks[static_cast<std::size_t>(src)], t.ranks[static_cast<std::size_t>(dst)]);
      }
    }
  }
}

TEST(TopologyRouting, EcmpSpreadsOverSpines) {
  const Topology t =
      gen("multi_node",
          {{"nodes", 16}, {"gpus_per_node", 1}, {"nics_per_node", 1}, {"rail_optimized", false}, {"radix", 8}});
  const Router r(t);
  std::map<std::string, int> spineUse;
  for (int src = 0; src < 16; ++src) {
    for (int dst = 0; dst < 16; ++dst) {
      if (src / 4 == dst / 4) continue;  // same leaf
      for (const auto& n : nodesOnRoute(t, r.route(src, dst))) {
        if (n.rfind("spine", 0) == 0) ++spineUse[n];
      }
    }
  }
  ASSERT_EQ(spineUse.size(), 4u);
  for (const auto& [spine, n] : spineUse) EXPECT_GT(n, 192 / 4 / 2) << spine;  // 192 cross-leaf routes
}

TEST(TopologyRouting, NodeRouteAndUnreachable) {
  Topology t = flatTopology(2, 10, 1);
  t.nodes.push_back(TopoNode{"lonely", NodeKind::Switch, "", 0, 0});
  const Router r(t);
  std::vector<Hop> out{Hop{9, true}};
  EXPECT_EQ(r.nodeRoute(r.rankNode(0), t.nodeIndex("lonely"), out), -1);
  EXPECT_EQ(r.distance(r.rankNode(0), t.nodeIndex("lonely")), -1);
  EXPECT_EQ(r.nodeRoute(r.rankNode(0), r.rankNode(1), out), 2);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(r.nodeRoute(r.rankNode(1), r.rankNode(1), out), 0);
  EXPECT_TRUE(out.empty());
  expectError([&] { r.nodeRoute(0, 99, out); }, Errc::InvalidArgument, {"nodes 0 and 99"});
}

TEST(TopologyRouting, ScalesTo8192Ranks) {
  // k=32 fat tree: 8192 hosts. A ring's neighbour routes plus a few long-range ones, without all-pairs work.
  const Topology t = gen("fat_tree", {{"k", 32}});
  ASSERT_EQ(t.ranks.size(), 8192u);
  const Router r(t);
  for (int i = 0; i < 8192; ++i) {
    const auto& hops = r.route(i, (i + 1) % 8192);
    ASSERT_LE(hops.size(), 6u);
    ASSERT_GE(hops.size(), 2u);
  }
  EXPECT_EQ(r.route(0, 8191).size(), 6u);
  const TopologySummary s = summarize(t);
  EXPECT_TRUE(s.diameterSampled);
  EXPECT_EQ(s.diameterHops, 6);
  EXPECT_FALSE(s.bisectionExact);
  EXPECT_DOUBLE_EQ(s.bisectionGBps, 8192.0 / 2 * 50);  // full bisection: half the hosts at line rate
}

// ---------------------------------------------------------------------------------------------------------------
// Summaries

TEST(TopologySummary, DgxH100) {
  const TopologySummary s = summarize(loadTopology("dgx-h100-8x1"));
  EXPECT_EQ(s.ranks, 8);
  EXPECT_EQ(s.hosts, 1);
  EXPECT_EQ(s.nodes, 9);
  EXPECT_EQ(s.links, 8);
  EXPECT_EQ(s.switches, 1);
  EXPECT_TRUE(s.bisectionExact);
  EXPECT_DOUBLE_EQ(s.bisectionGBps, 4 * 450);
  EXPECT_EQ(s.diameterHops, 2);
  EXPECT_FALSE(s.diameterSampled);
  ASSERT_EQ(s.linkClasses.size(), 1u);
  EXPECT_EQ(s.linkClasses.at("nvlink").count, 8);
  EXPECT_DOUBLE_EQ(s.linkClasses.at("nvlink").totalGBps, 8 * 450);
}

TEST(TopologySummary, BisectionOfGenerators) {
  // Exact minimum over balanced splits for 16 hosts: half the pods' core links (2:1 halves the uplinks, and the
  // cores with them, so a pod's core capacity equals what its one uplink per rack can send).
  const TopologySummary ft = summarize(gen("fat_tree", {{"k", 4}, {"oversubscription", 2}}));
  EXPECT_TRUE(ft.bisectionExact);
  EXPECT_NEAR(ft.bisectionGBps, 8 * 50 / 2.0, 1e-6);
  // Torus 4x4x4 in rank order cuts two planes of 16 links.
  const TopologySummary torus = summarize(loadTopology("torus-4x4x4"));
  EXPECT_NEAR(torus.bisectionGBps, 32 * 50, 1e-6);
  EXPECT_EQ(torus.diameterHops, 6);
  // A ring cuts in two places.
  const TopologySummary ring = summarize(gen("ring", {{"n", 8}, {"link_GBps", 10}}));
  EXPECT_TRUE(ring.bisectionExact);
  EXPECT_NEAR(ring.bisectionGBps, 20, 1e-9);
  EXPECT_EQ(ring.diameterHops, 4);
  // PCIe: two GPUs' switch links carry the cut.
  const TopologySummary pcie = summarize(loadTopology("pcie-4gpu"));
  EXPECT_NEAR(pcie.bisectionGBps, 2 * 31.5, 1e-9);
  // Rail-optimised 4 x 8: servers {0,1} vs {2,3} meet through 16 NICs.
  const TopologySummary rail = summarize(loadTopology("h100-4x8-rail"));
  EXPECT_NEAR(rail.bisectionGBps, 16 * 50, 1e-6);
  EXPECT_EQ(rail.diameterHops, 6);
  EXPECT_EQ(rail.hosts, 4);
}

TEST(TopologySummary, SwitchPortLimitCapsBisection) {
  Topology t = flatTopology(4, 50, 1);
  applyOverride(t, "node.switch.switch_GBps=20");
  EXPECT_NEAR(summarize(t).bisectionGBps, 2 * 20, 1e-9);
}

TEST(TopologySummary, DiameterCountsExplicitRoutes) {
  Topology t = gen("ring", {{"n", 4}});
  EXPECT_EQ(summarize(t).diameterHops, 2);
  // n0.gpu0 -> n0.gpu1 the long way round: 3 hops.
  t.routes[{"n0.gpu0", "n0.gpu1"}] = {"n0.gpu0", "n0.gpu3", "n0.gpu2", "n0.gpu1"};
  validateTopology(t);
  EXPECT_EQ(summarize(t).diameterHops, 3);
}

// ---------------------------------------------------------------------------------------------------------------
// Overrides, fingerprints, serialisation

TEST(TopologyOverride, GeneratorParametersReplaceTheDocumentsBeforeItGenerates) {
  const std::string file = kSourceDir + "/examples/whatif/h100-16k-rail-spine-2to1.json";
  const Topology small = loadTopology(file, {{"nodes", "4"}, {"nic_GBps", "25"}});
  EXPECT_EQ(small.ranks.size(), 32u);  // 4 servers x 8 GPUs instead of the file's 2048
  EXPECT_EQ(small.name, "h100-16k-rail-spine-2to1");
  // The same as generating with the file's parameters and these.
  const Topology direct =
      generateTopology("multi_node", R"({"nodes": 4, "arch": "hopper", "spine_oversubscription": 2, "nic_GBps": 25})");
  EXPECT_EQ(fingerprint(small), fingerprint(direct));
  // A later pair wins; no pairs is loadTopology.
  EXPECT_EQ(loadTopology(file, {{"nodes", "8"}, {"nodes", "4"}, {"nic_GBps", "25"}}).ranks.size(), 32u);
  EXPECT_EQ(fingerprint(loadTopology("dgx-h100-8x1", {})), fingerprint(loadTopology("dgx-h100-8x1")));
  expectError(
      [&] {
        loadTopology("dgx-h100-8x1", {{"nodes", "2"}});
      },
      Errc::InvalidArgument, {"params.nodes: topology 'dgx-h100-8x1' is not generated (no \"generator\")"});
  expectError(
      [&] {
        loadTopology(file, {{"nodez", "2"}});
      },
      Errc::InvalidTopology, {"params.nodez: unknown parameter", "(got 2)"});
  expectError([&] { loadTopology(file, {{"nodes", "-3"}}); }, Errc::InvalidTopology, {"params.nodes", "-3"});
}

TEST(TopologyOverride, AppliesToTheSelectedClassOrKind) {
  Topology t = loadTopology("h100-4x8-rail");
  applyOverride(t, "link.nic.bandwidth_GBps=25");
  for (const auto& l : t.links) EXPECT_EQ(l.bandwidthGBps == 25, l.linkClass == "nic") << l.a << "-" << l.b;
  applyOverride(t, " link.*.latency_us = 2 ");
  for (const auto& l : t.links) EXPECT_EQ(l.latencyUs, 2);
  applyOverride(t, "node.gpu.reduce_GBps=900");
  for (const auto& n : t.nodes) EXPECT_EQ(n.reduceGBps, n.kind == NodeKind::Gpu ? 900 : 0) << n.id;
  applyOverride(t, "node.*.switch_GBps=100");
  for (const auto& n : t.nodes) EXPECT_EQ(n.switchGBps, n.kind == NodeKind::Switch ? 100 : 0) << n.id;
  EXPECT_NO_THROW(validateTopology(t));
}

TEST(TopologyOverride, ErrorsNameTheBadKeyOrValue) {
  const Topology t = loadTopology("h100-4x8-rail");
  expectBadOverride(t, "link.nic.bandwidth_GBps", {"'link.nic.bandwidth_GBps'", "expected <key>=<value>"});
  expectBadOverride(t, "link.nic.bw=5", {"'link.nic.bw'", "unknown link field 'bw'", "bandwidth_GBps, latency_us"});
  expectBadOverride(t, "link.nics.bandwidth_GBps=5", {"no link of class 'nics'", "classes: fabric, nic, nvlink, pcie"});
  expectBadOverride(t, "link.nic.bandwidth_GBps=abc", {"value 'abc' is not a finite number"});
  expectBadOverride(t, "link.nic.bandwidth_GBps=", {"value '' is not a finite number"});
  expectBadOverride(t, "link.nic.bandwidth_GBps=0", {"bandwidth_GBps: bandwidth must be > 0 (got 0)"});
  expectBadOverride(t, "link.nic.latency_us=-1", {"latency_us: latency must be >= 0 (got -1)"});
  // Finite but absurd values would abort SimGrid or print 300-digit times (topology.h, kMaxBandwidthGBps...).
  expectBadOverride(
      t, "link.nvlink.bandwidth_GBps=1e308",
      {"'link.nvlink.bandwidth_GBps=1e308'", "bandwidth must be between 1e-06 and 1e+06 GB/s (got 1e308)"});
  expectBadOverride(t, "link.nic.bandwidth_GBps=1e-300", {"between 1e-06 and 1e+06 GB/s (got 1e-300)"});
  expectBadOverride(t, "link.*.latency_us=1e300", {"latency_us: latency must be at most 1e+09 us (got 1e300)"});
  expectBadOverride(t, "node.gpu.reduce_GBps=1e300", {"reduce_GBps: must be 0 (infinitely fast) or between"});
  expectBadOverride(t, "node.switch.switch_GBps=1e-9", {"switch_GBps: must be 0 (non-blocking) or between"});
  expectBadOverride(t, "node.tpu.reduce_GBps=1", {"unknown node kind 'tpu'"});
  expectBadOverride(t, "node.gpu.switch_GBps=1", {"'node.gpu.switch_GBps'", "switches only"});
  expectBadOverride(t, "node.cpu.reduce_GBps=1", {"has no cpu node"});
  expectBadOverride(t, "wire.nic.bandwidth_GBps=1", {"'wire.nic.bandwidth_GBps'", "expected link.<class|*>"});
  expectBadOverride(t, "link.bandwidth_GBps=1", {"'link.bandwidth_GBps'"});
}

TEST(TopologyOverride, ArchMulticastAndInNetworkReduction) {
  Topology t = loadTopology("dgx-h100-ib400");
  applyOverride(t, "node.*.reduce_GBps=900");  // compute rates: switches keep their in-network reduction
  for (const auto& n : t.nodes) {
    const double want = n.kind != NodeKind::Switch ? 900 : n.host.empty() ? 50 : 450;
    EXPECT_EQ(n.reduceGBps, want) << n.id;
  }
  applyOverride(t, "node.switch.multicast=false");
  EXPECT_FALSE(hostProfiles(t).at(0).multicast);
  applyOverride(t, "node.switch.reduce_GBps=0");
  EXPECT_EQ(hostProfiles(t).at(0).nvlsGBps, 0);
  EXPECT_EQ(fabricReduceGBps(t), 0);
  applyOverride(t, "node.gpu.arch=ampere");
  EXPECT_EQ(hostProfiles(t).at(63).arch, "ampere");
  EXPECT_NO_THROW(validateTopology(t));
  expectBadOverride(
      t, "node.gpu.arch=pascal",
      {"'node.gpu.arch=pascal'", "unknown GPU architecture (accepted: volta, ampere, hopper, blackwell", "got pascal"});
  expectBadOverride(t, "node.switch.arch=hopper", {"'node.switch.arch'", "arch applies to gpus only"});
  expectBadOverride(t, "node.gpu.multicast=true", {"'node.gpu.multicast'", "multicast applies to switches only"});
  expectBadOverride(t, "node.switch.multicast=1", {"multicast: expected true or false (got 1)"});
  expectBadOverride(t, "node.switch.reduce_GBps=-1", {"reduce_GBps: must be 0 (cannot reduce) or between", "(got -1)"});
  expectBadOverride(t, "node.switch.colour=1", {"unknown node field 'colour'", "multicast, arch"});
  expectBadOverride(gen("ring", {{"n", 4}}), "node.*.multicast=true", {"topology ring-4 has no switch node"});
  expectBadOverride(t, "node.nic.arch=hopper", {"arch applies to gpus only"});
}

TEST(TopologyFingerprint, StableAndContentSensitive) {
  const Topology a = loadTopology("dgx-h100-8x1");
  const std::string fp = fingerprint(a);
  EXPECT_EQ(fp.size(), 16u);
  EXPECT_EQ(fp.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(fp, fingerprint(loadTopology(kSourceDir + "/topologies/dgx-h100-8x1.json")));
  Topology renamed = a;
  renamed.name = "mine";
  renamed.description = "same network";
  EXPECT_EQ(fingerprint(renamed), fp);  // name and description are not content
  Topology changed = a;
  applyOverride(changed, "link.nvlink.bandwidth_GBps=300");
  EXPECT_NE(fingerprint(changed), fp);
  EXPECT_NE(fingerprint(loadTopology("hgx-h200-8x1")), fp);  // same graph, different reduce_GBps
  // Pinned: the canonical form is part of the tuning-table contract; change it only with a format version bump.
  EXPECT_EQ(fingerprint(flatTopology(4, 50, 1)), "300ce6dc35f82b28");
  // arch and NVLS are network content; multicast counts only where it differs from its default.
  Topology noArch = a;
  applyOverride(noArch, "node.gpu.arch=ampere");
  EXPECT_NE(fingerprint(noArch), fp);
  Topology noNvls = a;
  applyOverride(noNvls, "node.switch.reduce_GBps=0");
  EXPECT_NE(fingerprint(noNvls), fp);
  Topology explicitMulticast = a;
  applyOverride(explicitMulticast, "node.switch.multicast=true");  // the default with reduce_GBps 450
  EXPECT_EQ(fingerprint(explicitMulticast), fp);
  applyOverride(explicitMulticast, "node.switch.multicast=false");
  EXPECT_NE(fingerprint(explicitMulticast), fp);
}

TEST(TopologyJson, RoundTrips) {
  std::vector<Topology> all;
  for (const auto& name : kShipped) all.push_back(loadTopology(name));
  for (const auto& g : topologyGenerators()) all.push_back(generateTopology(g, ""));
  Topology withRoutes = gen("ring", {{"n", 4}});
  withRoutes.routes[{"n0.gpu0", "n0.gpu1"}] = {"n0.gpu0", "n0.gpu3", "n0.gpu2", "n0.gpu1"};
  applyOverride(withRoutes, "link.*.latency_us=0.125");
  applyOverride(withRoutes, "node.gpu.reduce_GBps=333.3");
  withRoutes.description = "quotes \" and\nnewlines";
  all.push_back(withRoutes);
  for (const Topology& t : all) {
    const std::string text = toJson(t);
    const Topology back = parseTopology(text, t.name + ".json");
    EXPECT_EQ(back.name, t.name);
    EXPECT_EQ(back.description, t.description);
    EXPECT_EQ(back.ranks, t.ranks);
    EXPECT_EQ(back.routes, t.routes);
    ASSERT_EQ(back.nodes.size(), t.nodes.size());
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
      EXPECT_EQ(back.nodes[i].id, t.nodes[i].id);
      EXPECT_EQ(back.nodes[i].kind, t.nodes[i].kind);
      EXPECT_EQ(back.nodes[i].host, t.nodes[i].host);
      EXPECT_EQ(back.nodes[i].reduceGBps, t.nodes[i].reduceGBps);
      EXPECT_EQ(back.nodes[i].switchGBps, t.nodes[i].switchGBps);
    }
    ASSERT_EQ(back.links.size(), t.links.size());
    for (std::size_t i = 0; i < t.links.size(); ++i) {
      EXPECT_EQ(back.links[i].a, t.links[i].a);
      EXPECT_EQ(back.links[i].b, t.links[i].b);
      EXPECT_EQ(back.links[i].bandwidthGBps, t.links[i].bandwidthGBps);
      EXPECT_EQ(back.links[i].latencyUs, t.links[i].latencyUs);
      EXPECT_EQ(back.links[i].linkClass, t.links[i].linkClass);
    }
    EXPECT_EQ(fingerprint(back), fingerprint(t)) << t.name;
    EXPECT_EQ(toJson(back), text) << t.name;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The NCCL variables a system sets

TEST(TopologyNcclEnv, ParseRoundTripOutsideTheFingerprint) {
  json d = baseDoc();
  d["nccl_env"] = json{{"NCCL_PROTO", "simple"}, {"NCCL_MIN_NCHANNELS", "4"}};
  const Topology t = parseTopology(d.dump(), "env.json");
  EXPECT_EQ(t.ncclEnv, (std::map<std::string, std::string>{{"NCCL_MIN_NCHANNELS", "4"}, {"NCCL_PROTO", "simple"}}));
  const Topology back = parseTopology(toJson(t), "back.json");
  EXPECT_EQ(back.ncclEnv, t.ncclEnv);
  EXPECT_EQ(toJson(back), toJson(t));
  d.erase("nccl_env");
  EXPECT_EQ(fingerprint(t), fingerprint(parseTopology(d.dump(), "plain.json")));  // the same network
  // Generator documents take it too.
  json g = json::parse(R"({"format": "collbench-topology", "version": 1, "generator": "nvswitch_node",
                           "nccl_env": {"NCCL_ALGO": "Ring,Tree"}})");
  EXPECT_EQ(parseTopology(g.dump(), "gen.json").ncclEnv.at("NCCL_ALGO"), "Ring,Tree");
}

TEST(TopologyNcclEnv, RejectsWhatIsNotAnNcclVariable) {
  json d = baseDoc();
  d["nccl_env"] = json{{"FI_PROVIDER", "efa"}};
  expectBad(d, {"nccl_env.FI_PROVIDER: not an NCCL variable (NCCL_<NAME>)", "\"efa\""});
  d["nccl_env"] = json{{"NCCL_MIN_NCHANNELS", 4}};
  expectBad(d, {"nccl_env.NCCL_MIN_NCHANNELS: expected a string", "4"});
  d["nccl_env"] = json::array();
  expectBad(d, {"nccl_env: expected an object"});
  d["nccl_env"] = json{{"NCCL_PROTO", "LL256"}};
  expectBad(d, {"nccl_env.NCCL_PROTO: NCCL_PROTO=LL256: ", "\"LL256\""});
}

// The hosts' CPU maker, which NCCL's tuning reads: parsed, written back, outside the fingerprint; a maker NCCL does not
// tell apart is bad input naming the field and the value.
TEST(TopologyCpuVendor, ParseRoundTripOutsideTheFingerprint) {
  json d = baseDoc();
  EXPECT_EQ(parseTopology(d.dump(), "plain.json").cpuVendor, "");
  const std::string plain = fingerprint(parseTopology(d.dump(), "plain.json"));
  d["cpu_vendor"] = "amd";
  const Topology t = parseTopology(d.dump(), "amd.json");
  EXPECT_EQ(t.cpuVendor, "amd");
  const Topology back = parseTopology(toJson(t), "back.json");
  EXPECT_EQ(back.cpuVendor, "amd");
  EXPECT_EQ(toJson(back), toJson(t));
  EXPECT_EQ(fingerprint(t), plain);
  json g = json::parse(R"({"format": "collbench-topology", "version": 1, "generator": "multi_node",
                           "cpu_vendor": "intel"})");
  EXPECT_EQ(parseTopology(g.dump(), "gen.json").cpuVendor, "intel");
  d["cpu_vendor"] = "arm";
  expectBad(d, {"cpu_vendor: unknown CPU vendor (accepted: intel, amd)", "\"arm\""});
  d["cpu_vendor"] = 2;
  expectBad(d, {"cpu_vendor: expected a string", "2"});
  // A topology built in code is held to the same list.
  Topology built = t;
  built.cpuVendor = "AMD";
  expectError([&] { validateTopology(built, "built"); }, Errc::InvalidTopology,
              {"built: cpu_vendor: unknown CPU vendor (accepted: intel, amd)", "\"AMD\""});
}

// ---------------------------------------------------------------------------------------------------------------
// Memory tiers

json tieredDoc() {
  json d = baseDoc();
  d["nodes"][2]["host"] = "n0";  // the switch inside the server: its links are intra-host
  d["memory_tiers"] = json::parse(R"([{"max_working_set_bytes": 1048576, "bandwidth_scale": 1},
                                      {"max_working_set_bytes": 33554432, "bandwidth_scale": 0.5},
                                      {"bandwidth_scale": 0.25}])");
  return d;
}

TEST(TopologyMemoryTiers, ParseRoundTripAndFingerprint) {
  const Topology t = parseTopology(tieredDoc().dump(), "tiers.json");
  ASSERT_EQ(t.memoryTiers.size(), 3u);
  EXPECT_EQ(t.memoryTiers[0].maxWorkingSetBytes, 1048576u);
  EXPECT_EQ(t.memoryTiers[1].bandwidthScale, 0.5);
  EXPECT_EQ(t.memoryTiers[2].maxWorkingSetBytes, 0u);
  const Topology back = parseTopology(toJson(t), "back.json");
  ASSERT_EQ(back.memoryTiers.size(), 3u);
  EXPECT_EQ(back.memoryTiers[1].maxWorkingSetBytes, 33554432u);
  EXPECT_EQ(back.memoryTiers[2].bandwidthScale, 0.25);
  EXPECT_EQ(toJson(back), toJson(t));
  Topology plain = t;
  plain.memoryTiers.clear();
  EXPECT_NE(fingerprint(plain), fingerprint(t));  // tiers are network content...
  json untiered = tieredDoc();
  untiered.erase("memory_tiers");
  EXPECT_EQ(fingerprint(plain), fingerprint(parseTopology(untiered.dump(), "plain.json")));  // ...absent ones none

  // The tier of a call: its host's ranks x (input + output bytes); bounds are inclusive.
  const auto spec = [](std::size_t count) { return CollectiveSpec{Collective::AllReduce, 2, count, DType::F32}; };
  EXPECT_EQ(hostWorkingSetBytes(t, spec(1024)), 2u * (4096 + 4096));
  EXPECT_EQ(memoryTierIndex(t, 1048576), 0u);
  EXPECT_EQ(memoryTierIndex(t, 1048577), 1u);
  EXPECT_EQ(memoryTierIndex(t, 33554432), 1u);
  EXPECT_EQ(memoryTierIndex(t, std::size_t{1} << 40), 2u);
  EXPECT_EQ(memoryTierIndex(plain, 1), 0u);
  const Topology big = topologyForCall(t, spec(std::size_t{1} << 20));  // 16 MiB: tier 1
  EXPECT_TRUE(big.memoryTiers.empty());
  EXPECT_EQ(big.links[0].bandwidthGBps, 50);
  EXPECT_EQ(big.nodes[0].reduceGBps, 500);
  EXPECT_EQ(big.nodes[1].reduceGBps, 0);  // unknown (infinite) stays so
  EXPECT_EQ(topologyForCall(t, spec(1024)).links[0].bandwidthGBps, 100);
  // Links that leave the host (a host-less switch) are not memory copies: unscaled.
  Topology flat = flatTopology(2, 50, 1);
  flat.memoryTiers = {{16, 1}, {0, 0.5}};
  const Topology flatBig = applyMemoryTier(flat, 1);
  for (const TopoLink& l : flatBig.links) EXPECT_EQ(l.bandwidthGBps, 50);
  EXPECT_THROW(applyMemoryTier(flat, 2), Error);
}

TEST(TopologyMemoryTiers, RejectsBadTiers) {
  auto with = [](const char* tiers) {
    json d = tieredDoc();
    d["memory_tiers"] = json::parse(tiers);
    return d;
  };
  expectBad(with(R"([{"max_working_set_bytes": 10, "bandwidth_scale": 1}, {"bandwidth_scale": 0}])"),
            {"memory_tiers[1].bandwidth_scale: must be a number in (0, 1000000]", "(got 0)"});
  expectBad(with(R"([{"max_working_set_bytes": 10, "bandwidth_scale": 1},
                     {"max_working_set_bytes": 20, "bandwidth_scale": 1}])"),
            {"memory_tiers[1].max_working_set_bytes: the last tier has no bound", "(got 20)"});
  expectBad(with(R"([{"bandwidth_scale": 1}, {"bandwidth_scale": 0.5}])"),
            {"memory_tiers[0].max_working_set_bytes: missing: only the last tier is unbounded"});
  expectBad(with(R"([{"max_working_set_bytes": 10, "bandwidth_scale": 1},
                     {"max_working_set_bytes": 10, "bandwidth_scale": 1}, {"bandwidth_scale": 1}])"),
            {"memory_tiers[1].max_working_set_bytes: must exceed the previous tier's 10", "(got 10)"});
  expectBad(with(R"([{"max_working_set_bytes": "1M", "bandwidth_scale": 1}, {"bandwidth_scale": 1}])"),
            {"memory_tiers[0].max_working_set_bytes: expected an integer number of bytes >= 1", "\"1M\""});
  expectBad(with(R"([{"max_working_set_bytes": -4, "bandwidth_scale": 1}, {"bandwidth_scale": 1}])"),
            {"memory_tiers[0].max_working_set_bytes: expected an integer number of bytes >= 1", "-4"});
  expectBad(with(R"([{"size": 4, "bandwidth_scale": 1}])"), {"memory_tiers[0].size: unknown field"});
  expectBad(with(R"([{"max_working_set_bytes": 4}, {"bandwidth_scale": 1}])"),
            {"memory_tiers[0].bandwidth_scale: missing required field"});
  expectBad(with(R"({"bandwidth_scale": 1})"), {"memory_tiers: expected an array"});
}

// ---------------------------------------------------------------------------------------------------------------
// Shipped topologies and the search path

TEST(TopologyShipped, EveryFileLoadsAndIsConnected) {
  const std::vector<std::string> available = availableTopologies();
  for (const auto& name : kShipped) {
    EXPECT_NE(std::find(available.begin(), available.end(), name), available.end()) << name;
    const Topology t = loadTopology(name);
    EXPECT_EQ(t.name, name);
    EXPECT_FALSE(t.description.empty()) << name;
    const Router r(t);
    for (int dst = 1; dst < static_cast<int>(t.ranks.size()); ++dst) {
      EXPECT_FALSE(r.route(0, dst).empty()) << name << " rank " << dst;
    }
  }
  // Every .json in topologies/ is one of the documented ones (README.md describes each).
  for (const auto& entry : std::filesystem::directory_iterator(kSourceDir + "/topologies")) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NE(std::find(kShipped.begin(), kShipped.end(), entry.path().stem().string()), kShipped.end())
        << entry.path() << " is not in this test's list";
  }
}

TEST(TopologyShipped, ExpectedShapes) {
  EXPECT_EQ(loadTopology("h100-4x8-rail").ranks.size(), 32u);
  const TopologySummary ft = summarize(loadTopology("fat-tree-k8"));
  EXPECT_EQ(ft.ranks, 128);
  EXPECT_EQ(ft.switches, 80);
  EXPECT_EQ(summarize(loadTopology("dragonfly-small")).ranks, 72);
  const Topology pcie = loadTopology("pcie-4gpu");
  EXPECT_EQ(pcie.ranks.size(), 4u);
  EXPECT_EQ(summarize(pcie).linkClasses.count("nvlink"), 0u);
  EXPECT_EQ(loadTopology("dgx-a100-8x1").links[0].bandwidthGBps, 300);
}

// The systems of the real nccl-tests tables (topologies/README.md gives each figure's source).
TEST(TopologyShipped, SystemsHaveTheirDocumentedServers) {
  struct System {
    const char* name;
    const char* arch;
    int nics;
    double nicGBps, nvlinkGBps, nvlsGBps, sharpGBps;
    int servers;
  };
  const std::vector<System> systems{
      {"dgx-h100-8x1", "hopper", 0, 0, 450, 450, 0, 1},     {"hgx-h200-8x1", "hopper", 0, 0, 450, 450, 0, 1},
      {"dgx-a100-8x1", "ampere", 0, 0, 300, 0, 0, 1},       {"dgx-h100-ib400", "hopper", 8, 50, 450, 450, 50, 64},
      {"aws-p5", "hopper", 8, 50, 450, 450, 0, 64},         {"aws-p4de", "ampere", 4, 12.5, 300, 0, 0, 64},
      {"gcp-a3-mega", "hopper", 8, 25, 450, 450, 0, 64},    {"oci-h100-roce", "hopper", 16, 25, 450, 450, 0, 64},
      {"oci-a100-roce", "ampere", 16, 12.5, 300, 0, 0, 64},
  };
  for (const System& sys : systems) {
    SCOPED_TRACE(sys.name);
    const Topology t = loadTopology(sys.name);
    ASSERT_EQ(t.ranks.size(), static_cast<std::size_t>(8 * sys.servers));
    const std::vector<HostProfile> hosts = hostProfiles(t);
    ASSERT_EQ(hosts.size(), static_cast<std::size_t>(sys.servers));
    for (const HostProfile& h : hosts) {
      EXPECT_EQ(h.gpus, 8) << h.host;
      EXPECT_EQ(h.arch, sys.arch) << h.host;
      EXPECT_EQ(h.nics, sys.nics) << h.host;
      EXPECT_EQ(h.nicGBps, sys.nicGBps) << h.host;
      EXPECT_EQ(h.nvlsGBps, sys.nvlsGBps) << h.host;
      EXPECT_EQ(h.multicast, sys.nvlsGBps > 0) << h.host;
    }
    EXPECT_EQ(fabricReduceGBps(t), sys.sharpGBps);
    EXPECT_EQ(summarize(t).linkClasses.at("nvlink").maxGBps, sys.nvlinkGBps);
    // Ranks go server by server, so -g 16 is the first two servers.
    const std::vector<int> first = rankHosts(t, std::min<int>(16, static_cast<int>(t.ranks.size())));
    for (std::size_t r = 0; r < first.size(); ++r) EXPECT_EQ(first[r], static_cast<int>(r / 8)) << r;
    // Every GPU of a multi-server system reaches max(1, nics / 8) NICs over PCIe.
    const auto nics = gpuNics(t);
    EXPECT_EQ(nics.size(), sys.nics ? t.ranks.size() : 0u);
    for (const auto& [gpu, list] : nics) {
      EXPECT_EQ(list.size(), static_cast<std::size_t>(std::max(1, sys.nics / 8))) << gpu;
    }
  }
}

TEST(TopologyShipped, SearchPathAndErrors) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("collbench-topo-test-{}", ::getpid());
  fs::create_directories(dir);
  {
    std::ofstream(dir / "dgx-h100-8x1.json") << toJson(flatTopology(2, 1, 1));  // shadows the shipped file
    std::ofstream(dir / "mine.json") << toJson(flatTopology(3, 1, 1));
  }
  const char* old = std::getenv("COLLBENCH_TOPOLOGY_PATH");
  const std::string saved = old ? old : "";
  ::setenv("COLLBENCH_TOPOLOGY_PATH", ("/nonexistent:" + dir.string()).c_str(), 1);
  EXPECT_EQ(loadTopology("mine").ranks.size(), 3u);
  EXPECT_EQ(loadTopology("dgx-h100-8x1").ranks.size(), 2u);   // the path comes first
  EXPECT_EQ(loadTopology("fat-tree-k8").ranks.size(), 128u);  // then the shipped directory
  const auto names = availableTopologies();
  EXPECT_NE(std::find(names.begin(), names.end(), "mine"), names.end());
  if (old) {
    ::setenv("COLLBENCH_TOPOLOGY_PATH", saved.c_str(), 1);
  } else {
    ::unsetenv("COLLBENCH_TOPOLOGY_PATH");
  }
  fs::remove_all(dir);
  expectError([] { loadTopology("no-such-topology"); }, Errc::InvalidTopology,
              {"no-such-topology: no such file", "available: ", "dgx-h100-8x1"});
  expectError([] { loadTopology("/nonexistent/x.json"); }, Errc::InvalidTopology, {"/nonexistent/x.json"});
  EXPECT_EQ(resolveTopologyPath("pcie-4gpu"), kSourceDir + "/topologies/pcie-4gpu.json");
}

}  // namespace
}  // namespace collbench
