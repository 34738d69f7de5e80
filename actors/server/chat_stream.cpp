#include "actors/server/chat_stream.hpp"

#include <algorithm>
#include <cstdint>

namespace ferry {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Seq { ok, invalid, incomplete };

// The UTF-8 sequence starting at s[i] (Unicode 15, table 3-7 "well-formed byte sequences").
Seq utf8_sequence(std::string_view s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  uint8_t lo = 0x80, hi = 0xBF;
  if (c < 0x80) {
    len = 1;
    return Seq::ok;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return Seq::invalid;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return Seq::incomplete;
    const uint8_t lim_lo = k == 1 ? lo : 0x80, lim_hi = k == 1 ? hi : 0xBF;
    if (b(k) < lim_lo || b(k) > lim_hi) return Seq::invalid;
  }
  return Seq::ok;
}

// Length of the longest suffix of `text` that is a proper prefix of `pattern`.
size_t partial_suffix(std::string_view text, std::string_view pattern) {
  const size_t most = std::min(text.size(), pattern.empty() ? 0 : pattern.size() - 1);
  for (size_t n = most; n > 0; --n)
    if (text.substr(text.size() - n) == pattern.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    if (utf8_sequence(s, i, len) != Seq::ok) return false;
    i += len;
  }
  return true;
}

std::string Utf8Assembler::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t len = 0;
    const Seq s = utf8_sequence(pending_, i, len);
    if (s == Seq::incomplete) break;
    if (s == Seq::invalid) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(pending_, i, len);
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Assembler::flush() {
  std::string out;
  // An incomplete sequence is one malformed character, shown as one replacement.
  if (!pending_.empty()) out = kReplacement;
  pending_.clear();
  return out;
}

TextPipeline::TextPipeline(std::vector<std::string> stop, ReasoningMarkers markers)
    : markers_(std::move(markers)), in_reasoning_(markers_.starts_in_reasoning) {
  for (auto& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
  if (markers_.open.empty() || markers_.close.empty()) markers_ = {};
}

std::string TextPipeline::check_stops(bool final) {
  size_t first = std::string::npos, hold = 0;
  for (const auto& s : stop_) {
    first = std::min(first, held_.find(s));
    hold = std::max(hold, partial_suffix(held_, s));
  }
  std::string out;
  if (first != std::string::npos) {
    out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  if (final) hold = 0;
  out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

TextDelta TextPipeline::route(std::string text, bool final) {
  TextDelta d;
  if (markers_.open.empty()) {
    d.content = std::move(text);
    return d;
  }
  split_held_ += text;
  for (;;) {
    const std::string& marker = in_reasoning_ ? markers_.close : markers_.open;
    std::string& sink = in_reasoning_ ? d.reasoning : d.content;
    const size_t p = split_held_.find(marker);
    if (p != std::string::npos) {
      sink += split_held_.substr(0, p);
      split_held_.erase(0, p + marker.size());
      in_reasoning_ = !in_reasoning_;
      continue;
    }
    const size_t hold = final ? 0 : partial_suffix(split_held_, marker);
    sink += split_held_.substr(0, split_held_.size() - hold);
    split_held_.erase(0, split_held_.size() - hold);
    return d;
  }
}

TextDelta TextPipeline::feed(std::string_view token_bytes) {
  if (stopped_) return {};
  held_ += utf8_.feed(token_bytes);
  std::string text = check_stops(false);
  return route(std::move(text), stopped_);
}

TextDelta TextPipeline::finish() {
  if (stopped_) return route("", true);
  held_ += utf8_.flush();
  std::string text = check_stops(true);
  return route(std::move(text), true);
}

}  // namespace ferry
