// `collbench topo show|check|gen`: print, validate and generate topology files.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/topology.h"
#include "commands.h"

namespace collbench::cli {
namespace {

constexpr int kExitBadInput = 2;

std::string bandwidthRange(const LinkClassSummary& c) {
  if (c.minGBps == c.maxGBps) return fmt::format("{:g} GB/s", c.minGBps);
  return fmt::format("{:g}-{:g} GB/s", c.minGBps, c.maxGBps);
}

// One line per distinct server shape (most systems have one): GPUs, architecture, CPU maker, NICs, NVLS; then fabric
// SHARP.
void printHosts(const Topology& t) {
  std::map<std::string, int> shapes;  // description -> hosts of that shape, in first-seen order below
  std::vector<std::string> order;
  for (const HostProfile& h : hostProfiles(t)) {
    std::string d = fmt::format("{} GPUs ({})", h.gpus, h.arch.empty() ? "arch unknown" : h.arch);
    if (!t.cpuVendor.empty()) d += t.cpuVendor == "amd" ? ", AMD CPUs" : ", Intel CPUs";
    d += h.nics ? fmt::format(", {} NICs x {:g} GB/s", h.nics, h.nicGBps) : ", no NICs";
    if (h.nvlsGBps > 0) {
      d += fmt::format(", in-switch reduction (NVLS) {:g} GB/s{}", h.nvlsGBps, h.multicast ? " + multicast" : "");
    } else if (h.multicast) {
      d += ", in-switch multicast";
    }
    if (shapes[d]++ == 0) order.push_back(d);
  }
  for (const std::string& d : order)
    fmt::print("per host     {} host{}: {}\n", shapes[d], shapes[d] == 1 ? "" : "s", d);
  if (const double sharp = fabricReduceGBps(t); sharp > 0) {
    fmt::print("fabric       in-network reduction (SHARP) {:g} GB/s per port\n", sharp);
  }
}

void printSummary(const Topology& t) {
  const TopologySummary s = summarize(t);
  fmt::print("name         {}\n", t.name);
  fmt::print("description  {}\n", t.description);
  fmt::print("fingerprint  {}\n", fingerprint(t));
  fmt::print("ranks        {}\n", s.ranks);
  fmt::print("hosts        {}\n", s.hosts);
  fmt::print("nodes        {}\n", s.nodes);
  fmt::print("links        {}\n", s.links);
  fmt::print("switches     {}\n", s.switches);
  fmt::print("bisection    {:g} GB/s ({})\n", s.bisectionGBps,
             s.bisectionExact ? "exact: min over balanced rank splits" : "max-flow between rank halves in rank order");
  fmt::print("diameter     {} hops{}\n", s.diameterHops,
             s.diameterSampled ? " (sampled: routes from 64 evenly spaced ranks)" : "");
  printHosts(t);
  fmt::print("link classes\n");
  std::size_t width = 0;
  for (const auto& [name, c] : s.linkClasses) width = std::max(width, name.size());
  for (const auto& [name, c] : s.linkClasses) {
    fmt::print("  {:<{}}  {:>6} links  {:>14}  (total {:g} GB/s)\n", name, width, c.count, bandwidthRange(c),
               c.totalGBps);
  }
}

// `--param k=v`: the params JSON of generateTopology (generatorParamsJson types the values).
std::string paramsFrom(const std::vector<std::string>& assignments) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::set<std::string> keys;
  for (const std::string& a : assignments) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(Errc::InvalidArgument, fmt::format("--param '{}': expected <name>=<value>, e.g. k=8", a));
    }
    std::string key = a.substr(0, eq);
    if (!keys.insert(key).second) throw Error(Errc::InvalidArgument, fmt::format("--param {} given twice", key));
    pairs.emplace_back(std::move(key), a.substr(eq + 1));
  }
  return generatorParamsJson(pairs);
}

}  // namespace

void addTopoCommand(CLI::App& app, int& exitCode) {
  CLI::App* topo = app.add_subcommand("topo", "Show, check and generate topology files (topologies/README.md)");
  topo->require_subcommand(1);

  struct ShowArgs {
    std::string topology;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto show = std::make_shared<ShowArgs>();
  CLI::App* showCmd = topo->add_subcommand("show", "Print a topology's summary: counts, bisection, diameter, links");
  showCmd->add_option("topology", show->topology, "topology file or shipped name (e.g. dgx-h100-8x1)")->required();
  showCmd->add_option("--set", show->overrides, "override, e.g. link.nic.bandwidth_GBps=50 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  showCmd->add_flag("--json", show->json, "print the explicit JSON (after overrides) instead of the summary");
  showCmd->callback([show] {
    Topology t = loadTopology(show->topology);
    for (const std::string& o : show->overrides) applyOverride(t, o);
    if (show->json) {
      fmt::print("{}", toJson(t));
    } else {
      printSummary(t);
    }
  });

  auto checkFiles = std::make_shared<std::vector<std::string>>();
  CLI::App* checkCmd = topo->add_subcommand("check",
                                            "Validate topology files and print a one-line summary of each (ranks, "
                                            "hosts, bisection, diameter); exit 2 if any is invalid");
  checkCmd->add_option("topologies", *checkFiles, "topology files or shipped names")->required();
  checkCmd->callback([checkFiles, &exitCode] {
    for (const std::string& f : *checkFiles) {
      try {
        const Topology t = loadTopology(f);
        const TopologySummary s = summarize(t);
        fmt::print("OK {} ({}): {} ranks, {} hosts, bisection {:g} GB/s{}, diameter {} hops{}\n", t.name, f, s.ranks,
                   s.hosts, s.bisectionGBps, s.bisectionExact ? "" : " (halves in rank order)", s.diameterHops,
                   s.diameterSampled ? " (sampled)" : "");
      } catch (const Error& e) {
        std::fflush(stdout);  // keep stdout and stderr lines in order on a shared terminal
        std::fprintf(stderr, "collbench: error: %s\n", e.what());
        exitCode = kExitBadInput;
      }
    }
  });

  struct GenArgs {
    std::string generator;
    std::vector<std::string> params;
    std::string output;
    std::string name;
    std::string description;
    bool force = false;
  };
  auto gen = std::make_shared<GenArgs>();
  std::string generators;
  for (const auto& g : topologyGenerators()) generators += (generators.empty() ? "" : ", ") + g;
  CLI::App* genCmd = topo->add_subcommand("gen", "Write the explicit JSON of a generated topology");
  genCmd->add_option("generator", gen->generator, "one of: " + generators)->required();
  // One value per --param so that a positional after it is not swallowed.
  genCmd->add_option("--param", gen->params, "generator parameter name=value (repeatable), e.g. --param k=8")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  genCmd->add_option("-o,--output", gen->output, "output file (default: stdout)");
  genCmd->add_option("--name", gen->name, "name to record instead of the generated one");
  genCmd->add_option("--description", gen->description, "description to record instead of the generated one");
  genCmd->add_flag("--force", gen->force, "overwrite an existing output file");
  genCmd->callback([gen] {
    Topology t = generateTopology(gen->generator, paramsFrom(gen->params));
    if (!gen->name.empty()) t.name = gen->name;
    if (!gen->description.empty()) t.description = gen->description;
    const std::string text = toJson(t);
    if (gen->output.empty()) {
      fmt::print("{}", text);
    } else {
      checkOutputFile(gen->output, gen->force, "-o/--output");
      writeTextFile(gen->output, text, "-o/--output");
    }
  });
}

}  // namespace collbench::cli
