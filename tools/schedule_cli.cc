#include "schedule_cli.h"

#include <filesystem>

#include "collbench/error.h"

namespace collbench::cli {
namespace {

bool given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }

void agree(const CLI::Option* o, const std::string& path, std::string_view flagValue, std::string_view fileValue,
           std::string_view what) {
  if (!given(o) || flagValue == fileValue) return;
  throw Error(Errc::InvalidArgument,
              fmt::format("{} {} disagrees with the schedule file '{}' ({} {}); drop {} or use another file",
                          o->get_name(), flagValue, path, what, fileValue, o->get_name()));
}

}  // namespace

ScheduleFile loadScheduleFlags(const std::string& path, const ScheduleFlags& flags, const CollectiveSpec& flagSpec) {
  if (given(flags.algo)) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--algo cannot be used with --schedule: the schedule file '{}' is the algorithm", path));
  }
  ScheduleFile f = readScheduleFile(path);
  const CollectiveSpec& s = f.schedule.spec;
  agree(flags.collective, path, toString(flagSpec.kind), toString(s.kind), "collective");
  agree(flags.ranks, path, std::to_string(flagSpec.nranks), std::to_string(s.nranks), "nranks");
  agree(flags.dtype, path, toString(flagSpec.dtype), toString(s.dtype), "dtype");
  if (s.reduces()) agree(flags.op, path, toString(flagSpec.op), toString(s.op), "op");
  if (s.kind == Collective::Broadcast || s.kind == Collective::Reduce) {
    agree(flags.root, path, std::to_string(flagSpec.root), std::to_string(s.root), "root");
  }
  return f;
}

void checkScheduleOut(const std::string& path, bool force) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::exists(path, ec) && !force) {
    throw Error(Errc::InvalidArgument,
                fmt::format("--schedule-out '{}' exists; pass --force to overwrite it", printable(path)));
  }
}

}  // namespace collbench::cli
