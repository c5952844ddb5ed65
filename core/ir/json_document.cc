#include "collbench/json_document.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

namespace collbench {

namespace {

using nlohmann::json;

struct DuplicateKey {
  std::string path;
};

struct TooDeep {
  std::string path;
};

// Strips nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: " prefix: the position is
// reported separately, computed from the byte offset, because the wording differs between nlohmann versions.
std::string parseReason(const std::string& what) {
  const auto col = what.find("column ");
  if (col != std::string::npos) {
    const auto colon = what.find(": ", col);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  const auto bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

}  // namespace

json parseJsonDocument(std::string_view text, std::string_view source, Errc code) {
  const std::string src = printable(source);
  struct Frame {
    bool object = false;
    std::string key;
    long index = -1;
    std::unordered_set<std::string> keys;
  };
  std::vector<Frame> stack;
  auto pathTo = [&](const std::string& leaf) {
    std::string p;
    for (std::size_t i = 0; i + 1 < stack.size(); ++i) {
      if (stack[i].object) {
        p += (p.empty() ? "" : ".") + stack[i].key;
      } else {
        p += fmt::format("[{}]", stack[i].index);
      }
    }
    return p + (p.empty() || leaf.empty() ? "" : ".") + leaf;
  };
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    using E = json::parse_event_t;
    auto countElement = [&] {
      if (!stack.empty() && !stack.back().object) ++stack.back().index;
    };
    auto open = [&](bool object) {
      countElement();
      stack.push_back(Frame{object, {}, -1, {}});
      if (static_cast<int>(stack.size()) > kMaxJsonDepth) throw TooDeep{pathTo("")};
    };
    switch (ev) {
      case E::object_start:
        open(true);
        break;
      case E::array_start:
        open(false);
        break;
      case E::object_end:
      case E::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case E::key: {
        Frame& f = stack.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw DuplicateKey{pathTo(f.key)};
        break;
      }
      case E::value:
        countElement();
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const DuplicateKey& d) {
    throw Error(code, fmt::format("{}: {}: duplicate key", src, printable(d.path)));
  } catch (const TooDeep& d) {
    throw Error(code, fmt::format("{}: {}: JSON nested deeper than {} levels", src,
                                  d.path.empty() ? "<root>" : printable(d.path), kMaxJsonDepth));
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the last character read.
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error(code, fmt::format("{}: malformed JSON at line {}, column {} (byte {}): {}", src, line, column, e.byte,
                                  printable(parseReason(e.what()))));
  } catch (const json::exception& e) {
    // Numbers beyond double range ("1e400") are reported as out_of_range, without a position.
    throw Error(code, fmt::format("{}: malformed JSON: {}", src, printable(parseReason(e.what()))));
  }
}

}  // namespace collbench
