#include "collbench/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace collbench {

using nlohmann::json;

std::string echoJson(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > kMaxEchoChars) s = s.substr(0, kMaxEchoChars) + "...";
  return printable(s);
}

namespace {

std::string got(const json& v) { return fmt::format("{} {}", v.type_name(), echoJson(v)); }

}  // namespace

JsonFields::JsonFields(std::string_view source, std::string where, const json& obj)
    : source_(source), where_(std::move(where)), obj_(obj) {
  if (!obj_.is_object()) fail("", fmt::format("expected an object, got {}", got(obj_)));
}

std::string JsonFields::path(std::string_view field) const {
  std::string p = where_;
  if (!field.empty()) p += (p.empty() ? "" : ".") + std::string(field);
  return p;
}

void JsonFields::fail(std::string_view field, const std::string& problem) const {
  const std::string p = path(field);
  throw Error(Errc::InvalidArgument,
              fmt::format("{}: {}: {}", printable(source_), p.empty() ? "(top level)" : p, problem));
}

bool JsonFields::has(const char* field) const { return obj_.contains(field) && !obj_.at(field).is_null(); }

bool JsonFields::present(const char* field) const { return obj_.contains(field); }

void JsonFields::allowOnly(const std::set<std::string>& known) const {
  for (const auto& [key, value] : obj_.items()) {
    if (known.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    fail(printable(key), fmt::format("unknown field (known: {})", list));
  }
}

const json& JsonFields::need(const char* field) const {
  if (!obj_.contains(field)) fail(field, "missing required field");
  return obj_.at(field);
}

JsonFields JsonFields::object(const char* field) const { return JsonFields(source_, path(field), need(field)); }

std::string JsonFields::string(const char* field) const {
  const json& v = need(field);
  if (!v.is_string()) fail(field, fmt::format("expected a string, got {}", got(v)));
  return v.get<std::string>();
}

std::string JsonFields::stringOr(const char* field, const std::string& fallback) const {
  return has(field) ? string(field) : fallback;
}

std::int64_t JsonFields::integer(const char* field, std::int64_t min, std::int64_t max) const {
  return integerValue(need(field), field, min, max);
}

std::int64_t JsonFields::integerValue(const json& v, std::string_view field, std::int64_t min, std::int64_t max) const {
  if (!v.is_number_integer()) fail(field, fmt::format("expected an integer, got {}", got(v)));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    fail(field, fmt::format("{} is too large", echoJson(v)));
  }
  const std::int64_t x = v.get<std::int64_t>();
  if (max == INT64_MAX && x < min) fail(field, fmt::format("must be >= {}, got {}", min, x));
  if (x < min || x > max) fail(field, fmt::format("must be in [{}, {}], got {}", min, max, x));
  return x;
}

std::int64_t JsonFields::integerOr(const char* field, std::int64_t fallback, std::int64_t min, std::int64_t max) const {
  return has(field) ? integer(field, min, max) : fallback;
}

double JsonFields::number(const char* field, double min) const {
  const json& v = need(field);
  if (!v.is_number()) fail(field, fmt::format("expected a number, got {}", got(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < min)
    fail(field, fmt::format("expected a finite number >= {}, got {}", min, echoJson(v)));
  return x;
}

std::optional<double> JsonFields::optionalNumber(const char* field, double min) const {
  if (!has(field)) return std::nullopt;
  return number(field, min);
}

bool JsonFields::boolean(const char* field) const {
  const json& v = need(field);
  if (!v.is_boolean()) fail(field, fmt::format("expected true or false, got {}", got(v)));
  return v.get<bool>();
}

bool JsonFields::booleanOr(const char* field, bool fallback) const { return has(field) ? boolean(field) : fallback; }

const json& JsonFields::array(const char* field) const {
  const json& v = need(field);
  if (!v.is_array()) fail(field, fmt::format("expected an array, got {}", got(v)));
  return v;
}

JsonFields JsonFields::element(const char* field, std::size_t i) const {
  return JsonFields(source_, fmt::format("{}[{}]", path(field), i), array(field)[i]);
}

void JsonFields::requireFormat(std::string_view format, int version) const {
  if (const std::string f = string("format"); f != format) {
    fail("format", fmt::format("expected \"{}\", got \"{}\"", format, printable(f)));
  }
  if (const std::int64_t v = integer("version", 0); v != version) {
    fail("version", fmt::format("version {} is not supported (this collbench reads version {})", v, version));
  }
}

}  // namespace collbench
