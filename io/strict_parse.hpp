// Strict parsing of numbers that people type (flags, prompt ids): the whole text must be the number,
// in 64 bits, inside the range the caller names. std::stol/stoi accept "1.5" as 1 and wrap or truncate
// silently once the result is cast to a narrower type ("4294967297" -> 1 as an int32 token id).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// The decimal integer `text` (optional leading '-', no spaces, no fraction, no exponent) in [lo, hi].
// Throws ConfigError "<what>: '<text>' is not an integer in [lo, hi]".
int64_t parse_int_strict(std::string_view text, int64_t lo, int64_t hi, const std::string& what);

// Comma-separated token ids, each an integer in [0, 2^31 - 1]; spaces around an id are allowed, an
// empty list or an empty entry is not. Throws ConfigError naming `what` and the bad entry.
std::vector<int32_t> parse_token_ids(std::string_view text, const std::string& what);

}  // namespace ferry
