#pragma once
// `--schedule FILE` and `--schedule-out FILE` of plan, sim and perf: the file decides the collective, so the flags
// that would also decide it must agree with it.
#include <CLI/CLI.hpp>
#include <string>

#include "collbench/schedule_file.h"

namespace collbench::cli {

/// The flags of a command that a schedule file decides (nullptr: the command has no such flag).
struct ScheduleFlags {
  const CLI::Option* algo = nullptr;  ///< refused with --schedule: the file is the algorithm
  const CLI::Option* collective = nullptr;
  const CLI::Option* ranks = nullptr;
  const CLI::Option* dtype = nullptr;
  const CLI::Option* op = nullptr;
  const CLI::Option* root = nullptr;
};

/// Reads `path` (readScheduleFile) and checks the flags given on the command line against it: --algo is refused, and
/// each of the others that was given must have the file's value (`given` holds what the flags say). Throws
/// Error{InvalidArgument} naming the flag, its value and the file's.
ScheduleFile loadScheduleFlags(const std::string& path, const ScheduleFlags& flags, const CollectiveSpec& given);

/// --schedule-out: throws Error{InvalidArgument} when `path` exists and `force` is false (call before any work).
void checkScheduleOut(const std::string& path, bool force);

}  // namespace collbench::cli
