// `collbench report RUNS... -o report.html`: one self-contained HTML page (or Markdown) from perf, replay, trace and
// timeline files (collbench/report.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli_common.h"
#include "collbench/error.h"
#include "collbench/records.h"
#include "collbench/report.h"
#include "commands.h"

namespace collbench::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string output;
  std::string format;
  std::string title = "collbench report";
  bool force = false;
};

void run(const ReportArgs& a) {
  std::string format = a.format;
  if (format.empty()) {
    const std::string ext = std::filesystem::path(a.output).extension().string();
    format = ext == ".md" || ext == ".markdown" ? "md" : "html";
  }
  if (format != "html" && format != "md") {
    throw Error(Errc::InvalidArgument, fmt::format("--format must be html or md, got '{}'", printable(format)));
  }
  checkOutputFile(a.output, a.force, "-o/--output");
  const ReportInputs in = loadReportInputs(a.inputs);
  ReportOptions o;
  o.title = a.title;
  o.commandLine = commandLine();
  const std::string text = format == "md" ? renderReportMarkdown(in, o) : renderReportHtml(in, o);
  if (a.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream f(a.output, std::ios::binary);
  if (!f || !(f << text)) throw Error(Errc::InvalidArgument, fmt::format("cannot write output file '{}'", a.output));
}

}  // namespace

void addReportCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "self-contained HTML (inline SVG) or Markdown report from perf, replay, trace and timeline files");
  cmd->add_option("runs", a->inputs, "perf -J, replay -J, trace and sim --timeline files")->required()->expected(1, -1);
  cmd->add_option("-o,--output", a->output, "output file (default: stdout)");
  cmd->add_option("--format", a->format, "html | md (default: from the -o extension, else html)");
  cmd->add_option("--title", a->title, "page title")->default_val("collbench report");
  cmd->add_flag("--force", a->force, "overwrite an existing output file");
  cmd->callback([a, &exitCode] {
    run(*a);
    exitCode = 0;
  });
}

}  // namespace collbench::cli
