#include "io/tokenizers/tokenizer_text.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

std::optional<size_t> utf8_error_offset(std::string_view s) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = at(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 0;
    if (n == 0 || c > 0xF4 || i + n >= s.size()) return i;
    for (size_t k = 1; k <= n; ++k) {
      if ((at(i + k) & 0xC0) != 0x80) return i;
    }
    unsigned char c1 = at(i + 1);
    // Second-byte limits that rule out overlong forms, UTF-16 surrogates and > U+10FFFF.
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 > 0x8F)) {
      return i;
    }
    i += n + 1;
  }
  return std::nullopt;
}

std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is always in NFC
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw FormatError(fmt::format("ICU NFC normalizer unavailable: {}", u_errorName(status)));
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()));
  norm->normalizeUTF8(0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw FormatError(fmt::format("NFC normalization failed: {}", u_errorName(status)));
  return out;
}

std::optional<std::string> base64_decode(std::string_view s) {
  while (!s.empty() && s.back() == '=') s.remove_suffix(1);
  std::string out;
  out.reserve(s.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : s) {
    int v = ch >= 'A' && ch <= 'Z' ? ch - 'A'
            : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26
            : ch >= '0' && ch <= '9' ? ch - '0' + 52
            : ch == '+' ? 62
            : ch == '/' ? 63
                        : -1;
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone trailing character carries no whole byte
  return out;
}

namespace {

// GPT-2: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
std::array<char32_t, 256> make_byte_code_points() {
  std::array<char32_t, 256> cps{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cps[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return cps;
}

const std::array<char32_t, 256>& byte_code_points() {
  static const std::array<char32_t, 256> cps = make_byte_code_points();
  return cps;
}

std::string utf8_of(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    for (int b = 0; b < 256; ++b) c[b] = utf8_of(byte_code_points()[b]);
    return c;
  }();
  return chars;
}

int byte_of_char(char32_t cp) {
  if (cp < 0x21 || cp > 0x143) return -1;  // the alphabet spans U+0021..U+0143
  const auto& cps = byte_code_points();
  for (int b = 0; b < 256; ++b) {
    if (cps[b] == cp) return b;
  }
  return -1;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  char32_t cp = n == 0 ? c : c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n + 1;
  return cp;
}

}  // namespace ferry
