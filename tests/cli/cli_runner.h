#pragma once
// Runs the real `collbench` binary and captures exit code, stdout and stderr.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace collbench::testing {

struct CliResult {
  int exitCode = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline CliResult runCli(const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path();
  const auto errPath = dir / ("collbench_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string cmd = std::string(COLLBENCH_CLI) + " " + args + " 2>" + errPath.string() + " </dev/null";
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = slurp(errPath);
  std::filesystem::remove(errPath);
  return r;
}

/// Data rows of an nccl-tests table (lines not starting with '#'), split on whitespace.
inline std::vector<std::vector<std::string>> tableRows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.find_first_not_of(' ') == std::string::npos) continue;
    if (line[line.find_first_not_of(' ')] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> row;
    for (std::string f; fields >> f;) row.push_back(f);
    rows.push_back(row);
  }
  return rows;
}

inline int countLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace collbench::testing
