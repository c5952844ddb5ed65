#pragma once
/// The one field reader of collbench's JSON formats (perf, replay, sim, sweep, regret, calibration, and the gate's
/// and report's inputs): required and optional fields with a type check, and one-line messages
/// "<source>: <path>: <problem>", e.g. "run.json: results[3].out_of_place.time_us: expected a number, got string
/// \"abc\"".
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "collbench/error.h"

namespace collbench {

/// Cap on the characters of a value echoed in a message: messages stay one line.
inline constexpr std::size_t kMaxEchoChars = 80;

/// `v` as compact one-line ASCII JSON, cut at kMaxEchoChars.
std::string echoJson(const nlohmann::json& v);

/// Reads the fields of one JSON object. `where` is the object's path ("" for the document, "results[2]"), used in
/// every message. The object must outlive the reader. A field set to null counts as absent for the optional readers.
class JsonFields {
 public:
  /// Throws Error{InvalidArgument} "<source>: <where>: expected an object, got ..." when `obj` is not an object.
  JsonFields(std::string_view source, std::string where, const nlohmann::json& obj);

  /// Throws Error{InvalidArgument} "<source>: <where>.<field>: <problem>" ("(top level)" for the document itself).
  [[noreturn]] void fail(std::string_view field, const std::string& problem) const;

  /// The field is present and not null.
  bool has(const char* field) const;
  /// The field is present, null included (formats where null is not a value: the trace).
  bool present(const char* field) const;
  /// Fails "<path>.<key>: unknown field (known: a, b, ...)" for the first field of the object not in `known`.
  void allowOnly(const std::set<std::string>& known) const;
  /// The field's value; "missing required field" when absent.
  const nlohmann::json& need(const char* field) const;

  JsonFields object(const char* field) const;
  std::string string(const char* field) const;
  std::string stringOr(const char* field, const std::string& fallback) const;
  /// An integer in [min, max] ("must be >= min" when max is INT64_MAX).
  std::int64_t integer(const char* field, std::int64_t min, std::int64_t max = INT64_MAX) const;
  /// `v` (an element of one of this object's arrays, named `field` in messages, e.g. "deps[2]") as an integer in
  /// [min, max].
  std::int64_t integerValue(const nlohmann::json& v, std::string_view field, std::int64_t min,
                            std::int64_t max = INT64_MAX) const;
  std::int64_t integerOr(const char* field, std::int64_t fallback, std::int64_t min,
                         std::int64_t max = INT64_MAX) const;
  /// A finite number >= min.
  double number(const char* field, double min = -HUGE_VAL) const;
  /// nullopt when absent or null.
  std::optional<double> optionalNumber(const char* field, double min = -HUGE_VAL) const;
  bool boolean(const char* field) const;
  bool booleanOr(const char* field, bool fallback) const;
  const nlohmann::json& array(const char* field) const;
  /// The element `i` of array field `field` as an object reader ("<where>.<field>[i]").
  JsonFields element(const char* field, std::size_t i) const;

  /// Requires "format" == `format` and "version" == `version` (the header every collbench record starts with).
  void requireFormat(std::string_view format, int version) const;

  /// Runs a parser of names (parseCollective, parseDType, ...) on a string field and re-raises its error against
  /// the field: "<path>: <parser's message>".
  template <typename F>
  auto parsed(const char* field, F&& parse) const {
    const std::string text = string(field);
    try {
      return parse(text);
    } catch (const Error& e) {
      fail(field, e.what());
    }
  }

  const std::string& where() const { return where_; }
  /// The path of `field` of this object ("results[2].time_us"), as messages name it.
  std::string path(std::string_view field) const;
  std::string_view source() const { return source_; }

 private:
  std::string_view source_;
  std::string where_;
  const nlohmann::json& obj_;
};

}  // namespace collbench
