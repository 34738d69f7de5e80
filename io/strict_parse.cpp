#include "io/strict_parse.hpp"

#include <charconv>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

int64_t parse_int_strict(std::string_view text, int64_t lo, int64_t hi, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi)
    throw ConfigError(fmt::format("{}: '{}' is not an integer in [{}, {}]", what, text, lo, hi));
  return v;
}

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::vector<int32_t> parse_token_ids(std::string_view text, const std::string& what) {
  std::vector<int32_t> ids;
  if (trim(text).empty()) throw ConfigError(what + ": no token ids given");
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string_view tok = trim(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (tok.empty()) throw ConfigError(fmt::format("{}: empty entry in '{}'", what, text));
    ids.push_back(static_cast<int32_t>(parse_int_strict(tok, 0, INT32_MAX, what + " token id")));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace ferry
