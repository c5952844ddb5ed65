// `collbench gate`: compares perf runs with a baseline (collbench/gate.h); exit 0 pass, 1 regression, 2 bad input.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "collbench/error.h"
#include "collbench/gate.h"
#include "commands.h"

namespace collbench::cli {
namespace {

struct GateArgs {
  std::vector<std::string> baseline, current;
  std::string tolerance = "3%";
  double confidence = 0.95;
  int repeat = 0;
  bool all = false;
  bool failInconclusive = false;
  std::string summary;
};

std::vector<std::string> splitWords(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// The exit code of a collbench command refusing its input (main.cc's kExitBadInput).
constexpr int kChildBadInput = 2;

/// The first line a rerun wrote to stderr (its one error line), without the "collbench: error: " prefix, printable.
std::string firstErrorLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  constexpr std::string_view kPrefix = "collbench: error: ";
  if (line.rfind(kPrefix, 0) == 0) line.erase(0, kPrefix.size());
  return printable(line);
}

/// Reruns the perf command recorded in `run` with its JSON going to `path`; its table goes to /dev/null.
void rerun(const PerfRun& run, const std::string& path) {
  std::vector<std::string> words = splitWords(run.commandLine);
  if (words.size() < 2 || words[1] != "perf") {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: command_line '{}' is not a `collbench perf` run; --repeat cannot rerun it",
                            printable(run.source), printable(run.commandLine)));
  }
  bool replaced = false;
  for (std::size_t i = 1; i < words.size(); ++i) {
    if ((words[i] == "-J" || words[i] == "--output_file") && i + 1 < words.size()) {
      words[i + 1] = path;
      replaced = true;
    } else if (words[i].rfind("--output_file=", 0) == 0) {
      words[i] = "--output_file=" + path;
      replaced = true;
    }
  }
  if (!replaced) {
    words.push_back("-J");
    words.push_back(path);
  }
  words.push_back("--force");
  std::vector<char*> argv;
  static char self[] = "collbench";
  argv.push_back(self);
  for (std::size_t i = 1; i < words.size(); ++i) argv.push_back(words[i].data());
  argv.push_back(nullptr);
  // The rerun's stderr goes to a file: its error becomes part of the gate's one line rather than a second one.
  const std::string errPath = path + ".err";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(Errc::BackendError, "fork failed while repeating a perf run");
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    const int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string why = firstErrorLine(errPath);
  std::filesystem::remove(errPath);
  // Exit 1 is a run that finished with wrong results: its JSON still counts (the gate flags the rows).
  if (code == 0 || code == 1) return;
  // Exit 2 is the recorded command's own bad input (a flag this collbench does not know, a size it refuses): the
  // current file is what is wrong, so it is the gate's bad input too.
  if (code == kChildBadInput) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: command_line '{}' cannot be rerun by --repeat: {}", printable(run.source),
                            printable(run.commandLine), why.empty() ? "it exited with code 2" : why));
  }
  throw Error(Errc::BackendError, fmt::format("repeating '{}' failed with exit code {}{}", printable(run.commandLine),
                                              code, why.empty() ? "" : ": " + why));
}

int run(const GateArgs& a) {
  GateOptions o;
  o.tolerance = parseTolerance(a.tolerance);
  o.confidence = a.confidence;
  if (!(a.confidence > 0 && a.confidence < 1)) {
    throw Error(Errc::InvalidArgument, fmt::format("--confidence must be in (0, 1), got {}", a.confidence));
  }
  if (a.repeat < 0) throw Error(Errc::InvalidArgument, fmt::format("--repeat must be >= 0, got {}", a.repeat));
  std::vector<PerfRun> base, cur;
  // A run without rows compares nothing: against an empty baseline every current run would pass.
  const auto read = [](const std::string& path, const char* flag) {
    PerfRun r = readPerfRun(path);
    if (r.rows.empty()) {
      throw Error(Errc::InvalidArgument,
                  fmt::format("{} {}: results: the run has no rows, nothing to compare", flag, printable(path)));
    }
    return r;
  };
  for (const std::string& p : a.baseline) base.push_back(read(p, "--baseline"));
  for (const std::string& p : a.current) cur.push_back(read(p, "--current"));
  if (a.repeat > 0) {
    const bool tty = ::isatty(STDERR_FILENO);
    const std::vector<PerfRun> originals = cur;
    const auto dir = std::filesystem::temp_directory_path();
    int done = 0;
    for (const PerfRun& r : originals) {
      if (r.deterministic()) continue;  // a simulator repeats itself exactly: nothing to learn
      for (int i = 0; i < a.repeat; ++i) {
        if (tty) std::fprintf(stderr, "\rcollbench gate: repeat %d/%d of %s", i + 1, a.repeat, r.source.c_str());
        const auto path = dir / fmt::format("collbench_gate_{}_{}.json", ::getpid(), done++);
        rerun(r, path.string());
        PerfRun again = readPerfRun(path.string());
        again.source = fmt::format("{} (repeat {})", r.source, i + 1);
        std::filesystem::remove(path);
        cur.push_back(std::move(again));
      }
    }
    if (tty && done) std::fprintf(stderr, "\n");
  }
  const GateReport rep = gate(base, cur, o);
  const std::string md = toMarkdown(rep, a.all);
  std::fputs(md.c_str(), stdout);
  if (!a.summary.empty()) {
    // Appends: $GITHUB_STEP_SUMMARY collects every step's markdown in one file.
    std::ofstream f(a.summary, std::ios::app);
    if (!f || !(f << md << '\n')) {
      throw Error(Errc::InvalidArgument, fmt::format("cannot append to summary file '{}'", printable(a.summary)));
    }
  }
  return rep.exitCode(a.failInconclusive);
}

}  // namespace

void addGateCommand(CLI::App& app, int& exitCode) {
  auto a = std::make_shared<GateArgs>();
  CLI::App* cmd =
      app.add_subcommand("gate", "compare perf runs (-J JSON) with a baseline: exit 0 pass, 1 regression, 2 bad input");
  cmd->add_option("--baseline", a->baseline, "baseline perf JSON file(s): several files are repeated runs")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--current", a->current, "current perf JSON file(s)")->required()->expected(1, -1);
  cmd->add_option("--tolerance", a->tolerance, "relative change allowed, e.g. 3% or 0.03")->default_val("3%");
  cmd->add_option("--confidence", a->confidence, "confidence of the interval for measured runs")->default_val(0.95);
  cmd->add_option("--repeat", a->repeat,
                  "rerun each measured current file's recorded perf command N more times (medians need repeats)")
      ->default_val(0);
  cmd->add_flag("--all", a->all, "list every row, not only those that did not pass");
  cmd->add_flag("--fail-inconclusive", a->failInconclusive, "exit 1 when a row is inconclusive too");
  cmd->add_option("--summary", a->summary, "also append the markdown to this file (e.g. $GITHUB_STEP_SUMMARY)");
  cmd->callback([a, &exitCode] { exitCode = run(*a); });
}

}  // namespace collbench::cli
