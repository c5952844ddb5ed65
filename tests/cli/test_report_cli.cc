// `collbench report`: the HTML page from perf, replay, trace and timeline files renders in headless Chromium
// (Debian's chromium) with no console messages, its DOM holds every plot with data points, and its screenshot is
// not blank; --format md gives the same sections as tables.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "cli_runner.h"

namespace collbench {
namespace {

using testing::CliResult;
using testing::runCli;

const std::filesystem::path kBaselines = std::filesystem::path(COLLBENCH_SOURCE_DIR) / "reports" / "baselines";

class ReportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("collbench_report_{}", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static bool hasSim() {
    return runCli("perf --backend sim -b 8 -e 8 -g 1 -n 0 -w 0 -c 0").err.find("unknown backend") == std::string::npos;
  }
  static void run(const std::string& args) {
    const CliResult r = runCli(args);
    ASSERT_EQ(r.exitCode, 0) << args << "\n" << r.err;
  }

  /// Inputs for every section: simulated and measured runs of ring at 4 ranks (sim vs measured, with two measured
  /// repeats for error bars), simulated ring at 2/4/8 ranks (scaling), an --algo auto run (selector), committed
  /// baselines (busbw per algorithm), a timeline, a workload trace and two replays of it.
  static std::vector<std::string> allInputs() {
    std::vector<std::string> in;
    const std::string sizes = "-b 1K -e 256K -f 4";
    for (int g : {2, 4, 8}) {
      in.push_back(path(fmt::format("sim_ring_{}.json", g)));
      run(fmt::format("perf all_reduce --backend sim --topology dgx-h100-8x1 -g {} {} --algo ring -J {}", g, sizes,
                      in.back()));
    }
    in.push_back(path("sim_auto.json"));
    run(fmt::format("perf all_reduce --backend sim --topology dgx-h100-8x1 -g 8 -b 1K -e 64M -f 4 -J {}", in.back()));
    for (int rep = 0; rep < 2; ++rep) {
      in.push_back(path(fmt::format("host_ring_{}.json", rep)));
      run(fmt::format("perf all_reduce --backend host -g 4 {} --algo ring -n 3 -w 1 -J {}", sizes, in.back()));
    }
    in.push_back((kBaselines / "sim-dgx-h100-8x1-all_reduce-tree.json").string());
    in.push_back((kBaselines / "sim-dgx-h100-8x1-all_reduce-recursive_doubling.json").string());
    in.push_back(path("timeline.json"));
    run(fmt::format("sim --topology dgx-h100-8x1 -g 8 --bytes 1M --algo ring --timeline {}", in.back()));
    const std::string trace = path("workload.json");
    run(fmt::format("workload --model bert-large --world-size 8 --bytes-per-pack 32M --steps 2 -o {}", trace));
    in.push_back(trace);
    for (int w : {8, 4}) {
      in.push_back(path(fmt::format("replay_{}.json", w)));
      run(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 --world-size {} -J {}", trace, w, in.back()));
    }
    return in;
  }

  static std::filesystem::path dir_;
};
std::filesystem::path ReportCli::dir_;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += " " + x;
  return s;
}

/// data-x points inside each <svg data-plot="KIND"> of a DOM dump.
std::map<std::string, int> plotPoints(const std::string& dom) {
  std::map<std::string, int> out;
  const std::regex svg(R"re(<svg[^>]*data-plot="([^"]+)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), svg); it != std::sregex_iterator(); ++it) {
    const std::size_t from = static_cast<std::size_t>(it->position());
    const std::size_t to = dom.find("</svg>", from);
    const std::string body = dom.substr(from, to - from);
    int n = 0;
    for (std::size_t at = body.find(" data-x=\""); at != std::string::npos; at = body.find(" data-x=\"", at + 1)) ++n;
    out[(*it)[1]] += n;
  }
  return out;
}

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

/// Runs headless Chromium on `url` with `flags`; stdout is returned, stderr written to `errPath`.
std::string runChromium(const std::string& url, const std::string& flags, const std::string& profile,
                        const std::string& errPath) {
  std::filesystem::create_directories(profile);
  // Flags that work as root in a container with no GPU, no network and no session bus.
  const std::string cmd = fmt::format(
      "timeout 60 {} --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --user-data-dir={} "
      "--enable-logging=stderr --v=0 {} '{}' 2>{}",
      chromium(), profile, flags, url, errPath);
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

TEST_F(ReportCli, HtmlRendersInChromiumWithEveryPlot) {
  if (!hasSim()) GTEST_SKIP() << "needs the simulator backend for its inputs (COLLBENCH_WITH_SIMGRID=OFF)";
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  const auto inputs = allInputs();
  const std::string html = path("report.html");
  const CliResult r = runCli("report" + joined(inputs) + " -o " + html + " --title 'test report'");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string page = testing::slurp(html);
  // Self-contained: no scripts, no external references.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);

  const std::string err = path("chromium_dom.err");
  const std::string dom = runChromium("file://" + html, "--dump-dom", path("profile1"), err);
  ASSERT_NE(dom.find("</html>"), std::string::npos) << testing::slurp(err);
  const std::string log = testing::slurp(err);
  EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;  // console.* output and uncaught errors land here
  const auto pts = plotPoints(dom);
  for (const char* kind :
       {"busbw", "scaling", "scaling-efficiency", "sim-vs-measured", "selector", "timeline", "trace-timeline"}) {
    EXPECT_GT(pts.count(kind) ? pts.at(kind) : 0, 0) << "plot " << kind << " has no data points";
  }
  EXPECT_NE(dom.find("class=\"errbar\""), std::string::npos) << "measured repeats give error bars";
  EXPECT_GE(pts.at("busbw"), 3 * 9);  // at least the three 8-rank algorithms' sizes

  // The screenshot is not blank: Chromium itself counts its non-white pixels (a canvas over the PNG).
  const std::string png = path("report.png");
  runChromium("file://" + html, "--screenshot=" + png + " --window-size=1200,2000", path("profile2"),
              path("chromium_shot.err"));
  ASSERT_TRUE(std::filesystem::exists(png)) << testing::slurp(path("chromium_shot.err"));
  const std::string checker = path("check.html");
  std::ofstream(checker) << R"(<!DOCTYPE html><html><body><div id="out">pending</div><script>
const img = new Image();
img.onload = () => { const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0); const d = g.getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) n++;
  document.getElementById('out').textContent = 'pixels ' + (img.width * img.height) + ' nonwhite ' + n; };
img.onerror = () => { document.getElementById('out').textContent = 'error'; };
img.src = 'report.png';
</script></body></html>)";
  const std::string counted =
      runChromium("file://" + checker, "--allow-file-access-from-files --virtual-time-budget=5000 --dump-dom",
                  path("profile3"), path("chromium_check.err"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(counted, m, std::regex(R"re(pixels (\d+) nonwhite (\d+))re"))) << counted;
  const double total = std::stod(m[1]), nonWhite = std::stod(m[2]);
  EXPECT_EQ(total, 1200.0 * 2000.0);
  EXPECT_GT(nonWhite / total, 0.02) << "screenshot looks blank: " << nonWhite << " non-white pixels";
}

TEST_F(ReportCli, MarkdownForPullRequests) {
  if (!hasSim()) GTEST_SKIP() << "needs the simulator backend for its inputs (COLLBENCH_WITH_SIMGRID=OFF)";
  const std::vector<std::string> inputs = {(kBaselines / "sim-dgx-h100-8x1-all_reduce-ring.json").string(),
                                           (kBaselines / "sim-dgx-h100-8x1-all_reduce-tree.json").string()};
  const CliResult r = runCli("report" + joined(inputs) + " --format md");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("## Bus bandwidth"), std::string::npos);
  EXPECT_NE(r.out.find("| sim ring n=8 dgx-h100-8x1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| sim tree n=8 dgx-h100-8x1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("_Needs perf runs with `--algo auto`._"), std::string::npos);
  EXPECT_EQ(r.out.find("<svg"), std::string::npos);
  // -o with a .md extension picks Markdown; an existing file needs --force.
  const std::string md = path("r.md");
  ASSERT_EQ(runCli("report" + joined(inputs) + " -o " + md).exitCode, 0);
  const auto body = [](const std::string& s) { return s.substr(s.find("## Bus bandwidth")); };  // past the command line
  EXPECT_EQ(body(testing::slurp(md)), body(r.out));
  EXPECT_EQ(runCli("report" + joined(inputs) + " -o " + md).exitCode, 2);
  EXPECT_EQ(runCli("report" + joined(inputs) + " -o " + md + " --force").exitCode, 0);
}

/// The <svg ...> start tag of the first plot of `kind` in `page` ("" if none).
std::string svgTag(const std::string& page, const std::string& kind) {
  const std::size_t at = page.find(fmt::format("data-plot=\"{}\"", kind));
  if (at == std::string::npos) return "";
  const std::size_t from = page.rfind("<svg", at);
  return page.substr(from, page.find('>', at) - from + 1);
}

TEST_F(ReportCli, ReplaysGroupByTopologyFingerprint) {
  if (!hasSim()) GTEST_SKIP() << "needs the simulator backend for its inputs (COLLBENCH_WITH_SIMGRID=OFF)";
  const std::string trace = path("fp_workload.json");
  run(fmt::format("workload --model resnet50 --world-size 8 --bytes-per-pack 16M --steps 2 -o {}", trace));
  // The same network named two ways: the shipped name at 8 replicas, its file's path at 4.
  const std::string file = (std::filesystem::path(COLLBENCH_SOURCE_DIR) / "topologies" / "dgx-h100-8x1.json").string();
  const std::string byName = path("fp_replay_8.json"), byPath = path("fp_replay_4.json");
  run(fmt::format("replay {} --backend sim --topology dgx-h100-8x1 -J {}", trace, byName));
  run(fmt::format("replay {} --backend sim --topology {} --world-size 4 -J {}", trace, file, byPath));
  const std::string html = path("fp.html");
  ASSERT_EQ(runCli(fmt::format("report {} {} -o {}", byName, byPath, html)).exitCode, 0);
  const std::string page = testing::slurp(html);
  const std::string tag = svgTag(page, "scaling-efficiency");
  EXPECT_NE(tag.find("data-series=\"1\""), std::string::npos) << "one network, one series: " << tag;
  EXPECT_NE(tag.find("data-points=\"2\""), std::string::npos) << tag;
  // Only replays: the page says what would fill the rank-scaling plot, and how the replay figures were taken.
  EXPECT_NE(page.find("id=\"rank-scaling-missing\""), std::string::npos);
  EXPECT_NE(page.find("two or more rank counts (collbench perf -g N -J"), std::string::npos);
  EXPECT_NE(page.find("median step after the first"), std::string::npos);
  const CliResult md = runCli(fmt::format("report {} {} --format md", byName, byPath));
  ASSERT_EQ(md.exitCode, 0) << md.err;
  EXPECT_NE(md.out.find("_Bus bandwidth vs ranks needs perf runs"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| compute (ms) | exposed comm (ms) |"), std::string::npos) << md.out;
}

TEST_F(ReportCli, BusbwAxisIsLogarithmicWhenSeriesDifferByDecades) {
  const std::string ring = (kBaselines / "sim-dgx-h100-8x1-all_reduce-ring.json").string();
  const std::string tree = (kBaselines / "sim-dgx-h100-8x1-all_reduce-tree.json").string();
  // Two simulated algorithms on one node: peaks of the same order, a linear axis.
  const std::string same = path("same.html");
  ASSERT_EQ(runCli(fmt::format("report {} {} -o {}", ring, tree, same)).exitCode, 0);
  EXPECT_NE(svgTag(testing::slurp(same), "busbw").find("data-y-scale=\"linear\""), std::string::npos);
  // A run 1000x slower (a CPU network next to NVLink): on a linear axis it would be a flat line at zero.
  nlohmann::json slow = nlohmann::json::parse(testing::slurp(ring));
  slow["config"]["backend"] = "host";
  for (auto& row : slow["results"]) {
    for (const char* half : {"out_of_place", "in_place"})
      row[half]["busbw_GBps"] = row[half]["busbw_GBps"].get<double>() / 1000;
  }
  const std::string slowPath = path("slow_host.json");
  std::ofstream(slowPath) << slow.dump();
  const std::string mixed = path("mixed.html");
  ASSERT_EQ(runCli(fmt::format("report {} {} -o {}", ring, slowPath, mixed)).exitCode, 0);
  const std::string tag = svgTag(testing::slurp(mixed), "busbw");
  EXPECT_NE(tag.find("data-y-scale=\"log\""), std::string::npos) << tag;
  EXPECT_NE(testing::slurp(mixed).find("busbw (GB/s, log scale)"), std::string::npos);
}

TEST_F(ReportCli, BadInputsExitTwo) {
  const std::string junk = path("junk.json");
  std::ofstream(junk) << R"({"hello": "world"})";
  CliResult r = runCli("report " + junk);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("not a collbench perf, replay, trace or timeline file"), std::string::npos) << r.err;
  EXPECT_EQ(testing::countLines(r.err), 1);
  r = runCli("report /nonexistent.json");
  EXPECT_EQ(r.exitCode, 2);
  r = runCli("report " + (kBaselines / "sim-dgx-h100-8x1-all_reduce-ring.json").string() + " --format pdf");
  EXPECT_EQ(r.exitCode, 2);
}

}  // namespace
}  // namespace collbench
