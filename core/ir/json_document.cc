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

/// The rules parseJsonDocument adds to JSON's, as a SAX handler (nlohmann's json_sax interface): no key twice in an
/// object, no nesting deeper than kMaxJsonDepth. Throws DuplicateKey or TooDeep naming the path, and the parser's own
/// exception for malformed text.
class DocumentRules {
 public:
  // NOLINTBEGIN(readability-identifier-naming): the names json_sax requires
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    Frame& f = stack_.back();
    f.key = k;
    if (!f.keys.insert(k).second) throw DuplicateKey{pathTo(k)};
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) throw *p;
    if (const auto* o = dynamic_cast<const json::out_of_range*>(&e)) throw *o;
    throw json::other_error::create(kUnexpectedError, e.what(), nullptr);
  }
  // NOLINTEND(readability-identifier-naming)

 private:
  // nlohmann's id for an error that is none of its documented kinds.
  static constexpr int kUnexpectedError = 599;
  struct Frame {
    bool object = false;
    std::string key;
    long index = -1;
    std::unordered_set<std::string> keys;
  };
  bool value() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
    return true;
  }
  bool open(bool object) {
    value();
    stack_.push_back(Frame{object, {}, -1, {}});
    if (static_cast<int>(stack_.size()) > kMaxJsonDepth) throw TooDeep{pathTo("")};
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::string pathTo(const std::string& leaf) const {
    std::string p;
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      if (stack_[i].object) {
        p += (p.empty() ? "" : ".") + stack_[i].key;
      } else {
        p += fmt::format("[{}]", stack_[i].index);
      }
    }
    return p + (p.empty() || leaf.empty() ? "" : ".") + leaf;
  }
  std::vector<Frame> stack_;
};

}  // namespace

json parseJsonDocument(std::string_view text, std::string_view source, Errc code) {
  const std::string src = printable(source);
  // The rules first, in one pass over the parser's events; then the document, by the plain parser. (nlohmann's parser
  // with a callback looks through the whole enclosing array for a discarded element at every object's end, quadratic
  // in the array's length: 35 s for a 43 MB topology of 65536 GPUs.)
  DocumentRules rules;
  try {
    json::sax_parse(text.begin(), text.end(), &rules);
    return json::parse(text.begin(), text.end());
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
