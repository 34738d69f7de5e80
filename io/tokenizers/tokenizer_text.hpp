// Byte and character helpers the tokenizers share: UTF-8 validation, Unicode NFC (ICU), base64 (the
// tiktoken.model encoding) and GPT-2's byte-level alphabet (tokenizer.json vocabularies).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

// Offset of the first byte that is not part of well-formed UTF-8 (overlong forms, surrogates and
// code points past U+10FFFF are ill-formed), or nullopt when all of `s` is well formed.
std::optional<size_t> utf8_error_offset(std::string_view s);

// Unicode Normalization Form C of valid UTF-8 `s` (ICU). ASCII text is returned as is.
std::string nfc(std::string_view s);

// Standard base64 (RFC 4648, '=' padding optional) -> bytes; nullopt if `s` is not base64.
std::optional<std::string> base64_decode(std::string_view s);

// GPT-2's bytes_to_unicode: each byte is written as one printable code point in tokenizer.json.
// byte_level_char(b) is that code point's UTF-8; byte_of_char(cp) is the inverse (-1: not a byte).
const std::array<std::string, 256>& byte_level_chars();
int byte_of_char(char32_t cp);

// Decodes one UTF-8 character at s[i] (valid input assumed), advancing i.
char32_t next_code_point(std::string_view s, size_t& i);

}  // namespace ferry
