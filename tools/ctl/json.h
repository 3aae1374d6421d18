// JSON output for `metaroce-ctl -j` (docs/operations.md §JSON): a small
// writer, enough for objects, arrays, strings and unsigned numbers. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace metaroce::ctl {

// "..." with ", \ and control characters escaped (\n, \t, \u00XX); bytes
// >= 0x80 pass through (the strings we print are UTF-8 or ASCII).
std::string json_string(std::string_view s);

// {"key": value, ...} in insertion order.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, uint64_t value);
  JsonObject& add_bool(std::string_view key, bool value);
  JsonObject& add_json(std::string_view key, const std::string& json);  // already JSON
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

// [a, b, ...] of already-JSON items.
std::string json_array(const std::vector<std::string>& items);

}  // namespace metaroce::ctl
