#pragma once
// Helpers shared by the record readers and writers of this folder.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "collbench/json_document.h"
#include "collbench/json_fields.h"
#include "collbench/records.h"

namespace collbench::records_detail {

/// A number, or null where it is not finite (JSON has no NaN or infinity).
inline nlohmann::json finiteOrNull(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

/// The field's number, NaN when null (what finiteOrNull wrote for a non-finite value).
inline double numberOrNaN(const JsonFields& f, const char* field) {
  if (f.has(field)) return f.number(field);
  f.need(field);  // absent is an error; null is NaN
  return NAN;
}

/// The document of `text` with its format header checked.
inline JsonFields header(const nlohmann::json& doc, std::string_view source, std::string_view format, int version) {
  JsonFields top(source, "", doc);
  top.requireFormat(format, version);
  return top;
}

/// CalibrationErrors as {"median", "worst", "count"} (median and worst null for an empty set), and back.
inline CalibrationErrors readErrors(const JsonFields& f) {
  f.allowOnly({"median", "worst", "count"});
  return {f.optionalNumber("median", 0), f.optionalNumber("worst", 0), static_cast<std::size_t>(f.integer("count", 0))};
}
inline nlohmann::json errorsJson(const CalibrationErrors& e) {
  return {{"median", e.median ? nlohmann::json(*e.median) : nlohmann::json(nullptr)},
          {"worst", e.worst ? nlohmann::json(*e.worst) : nlohmann::json(nullptr)},
          {"count", e.count}};
}

}  // namespace collbench::records_detail
