// The output-file check and the file writer every command that writes a file goes through, and the reader of the
// records' files (records.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "collbench/error.h"
#include "collbench/records.h"

namespace collbench {

void checkOutputFile(const std::string& path, bool force, std::string_view flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const std::string shown = printable(path);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!force) {
      throw Error(Errc::InvalidArgument, fmt::format("{} '{}' exists; pass --force to overwrite it", flag, shown));
    }
    if (fs::is_directory(path, ec))
      throw Error(Errc::InvalidArgument, fmt::format("{} '{}' is a directory", flag, shown));
    if (::access(path.c_str(), W_OK) != 0) {
      throw Error(Errc::InvalidArgument, fmt::format("{} '{}' is not writable: {}", flag, shown, errnoText(errno)));
    }
    return;
  }
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string dirShown = printable(dir.string());
  if (!fs::is_directory(dir, ec)) {
    throw Error(Errc::InvalidArgument, fmt::format("{} '{}': directory '{}' does not exist", flag, shown, dirShown));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw Error(Errc::InvalidArgument,
                fmt::format("{} '{}': cannot create files in '{}': {}", flag, shown, dirShown, errnoText(errno)));
  }
}

void checkDistinctOutputs(const std::vector<std::pair<std::string_view, std::string>>& outputs) {
  namespace fs = std::filesystem;
  // However the paths are spelled: links to one existing file, or one path once resolved.
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec) return true;
    std::error_code ea, eb;
    const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea),
                   cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
    return !ea && !eb ? ca == cb : fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [flagA, a] = outputs[i];
      const auto& [flagB, b] = outputs[j];
      if (!a.empty() && !b.empty() && same(a, b)) {
        throw Error(Errc::InvalidArgument,
                    fmt::format("{} and {} name the same file '{}'", flagA, flagB, printable(b)));
      }
    }
  }
}

void writeTextFile(const std::string& path, const std::string& text, std::string_view flag) {
  std::ofstream f(path);
  const bool endsLine = !text.empty() && text.back() == '\n';
  if (!f || !(f << text << (endsLine ? "" : "\n")) || !f.flush()) {
    throw Error(Errc::InvalidArgument, fmt::format("cannot write {} '{}'", flag, printable(path)));
  }
}

std::string readTextFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::InvalidArgument, fmt::format("cannot read {} '{}'", what, printable(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string toolName() { return std::string("collbench ") + COLLBENCH_VERSION; }

}  // namespace collbench
