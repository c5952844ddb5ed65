#pragma once
/// Helpers every `collbench` subcommand shares.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collbench/schedule.h"

namespace CLI {
class App;
}  // namespace CLI

namespace collbench::cli {

// ---- The command line (provenance in outputs) ----

/// Records argv joined by spaces; main calls it once, before any subcommand runs (a second call is an internal
/// error: the line is fixed for the life of the process).
void setCommandLine(int argc, const char* const* argv);
/// The line setCommandLine recorded; "" when commands are driven in process without main (tests).
const std::string& commandLine();

// ---- Comma-separated list flags ("--chunks 0,128K,2M", "-g 2,4,8") ----

/// The items of a comma-separated flag value, empty items (",," or a trailing comma) skipped.
std::vector<std::string> splitList(std::string_view text);
/// One integer item of flag `flag`, at least `min`; Error{InvalidArgument} "<flag>: '<item>' is not an integer >=
/// <min><alternatives>" otherwise (`alternatives` names other accepted words, e.g. " or 'all'").
int parseIntItem(std::string_view flag, std::string_view item, int min, std::string_view alternatives = "");
/// Every item of `text` as parseIntItem reads it; Error{InvalidArgument} "<flag>: empty list" when there is none.
std::vector<int> parseIntList(std::string_view flag, std::string_view text, int min);
/// A channel count of flag `flag` (`--channels`, a list's item): 1..kMaxChannels; Error{InvalidArgument} "<flag>:
/// <value> channels: at most <kMaxChannels> (NCCL's MAXCHANNELS)" above, parseIntItem's below 1.
int checkChannels(std::string_view flag, int channels);
/// parseIntList of channel counts, each checked by checkChannels.
std::vector<int> parseChannelList(std::string_view flag, std::string_view text);
/// Every item of `text` as a byte size (parseBytes: "128K", "2M", "4096"), its error naming `flag` and the item;
/// Error{InvalidArgument} "<flag>: empty list" when there is none.
std::vector<std::size_t> parseBytesList(std::string_view flag, std::string_view text);

// ---- The wire protocol flag (perf, sim, plan) ----

/// Adds `--proto LL|LL128|Simple` to `cmd`, stored as text in `value` (read it with parseProtoFlag).
void addProtoOption(CLI::App* cmd, std::string& value);
/// The protocol `--proto` named, nullopt when it was not given (""); Error{InvalidArgument} "--proto: unknown
/// protocol '<value>' (available: LL, LL128, Simple)" otherwise.
std::optional<Protocol> parseProtoFlag(std::string_view value);

}  // namespace collbench::cli
