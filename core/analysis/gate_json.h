#pragma once
// Field access for the JSON inputs of gate and report, with one-line messages "source: path: problem" (the same
// shape as the trace and topology readers).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "collbench/error.h"
#include "collbench/json_document.h"

namespace collbench::detail {

/// Cap on echoed values in messages.
inline constexpr std::size_t kMaxEchoChars = 80;

inline std::string echoJson(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (s.size() > kMaxEchoChars) s = s.substr(0, kMaxEchoChars) + "...";
  return printable(s);
}

class JsonReader {
 public:
  JsonReader(std::string_view source, std::string where, const nlohmann::json& obj)
      : source_(source), where_(std::move(where)), obj_(obj) {
    if (!obj_.is_object()) fail("", fmt::format("expected an object, got {} {}", obj_.type_name(), echoJson(obj_)));
  }

  [[noreturn]] void fail(std::string_view field, const std::string& problem) const {
    std::string path = where_;
    if (!field.empty()) path += (path.empty() ? "" : ".") + std::string(field);
    throw Error(Errc::InvalidArgument,
                fmt::format("{}: {}: {}", printable(source_), path.empty() ? "(top level)" : path, problem));
  }

  bool has(const char* field) const { return obj_.contains(field) && !obj_.at(field).is_null(); }
  const nlohmann::json& need(const char* field) const {
    if (!obj_.contains(field)) fail(field, "missing required field");
    return obj_.at(field);
  }
  JsonReader object(const char* field) const {
    return JsonReader(source_, where_.empty() ? field : where_ + "." + field, need(field));
  }
  std::string string(const char* field) const {
    const nlohmann::json& v = need(field);
    if (!v.is_string()) fail(field, fmt::format("expected a string, got {} {}", v.type_name(), echoJson(v)));
    return v.get<std::string>();
  }
  std::string stringOr(const char* field, const std::string& fallback) const {
    return has(field) ? string(field) : fallback;
  }
  std::int64_t integer(const char* field, std::int64_t min, std::int64_t max = INT64_MAX) const {
    const nlohmann::json& v = need(field);
    if (!v.is_number_integer()) fail(field, fmt::format("expected an integer, got {} {}", v.type_name(), echoJson(v)));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(field, fmt::format("{} is too large", echoJson(v)));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min || x > max) fail(field, fmt::format("must be in [{}, {}], got {}", min, max, x));
    return x;
  }
  double number(const char* field, double min = -HUGE_VAL) const {
    const nlohmann::json& v = need(field);
    if (!v.is_number()) fail(field, fmt::format("expected a number, got {} {}", v.type_name(), echoJson(v)));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < min)
      fail(field, fmt::format("expected a finite number >= {}, got {}", min, echoJson(v)));
    return x;
  }
  const nlohmann::json& array(const char* field) const {
    const nlohmann::json& v = need(field);
    if (!v.is_array()) fail(field, fmt::format("expected an array, got {} {}", v.type_name(), echoJson(v)));
    return v;
  }
  const std::string& where() const { return where_; }
  std::string_view source() const { return source_; }

 private:
  std::string_view source_;
  std::string where_;
  const nlohmann::json& obj_;
};

}  // namespace collbench::detail
