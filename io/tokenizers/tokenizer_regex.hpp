// Pre-tokenizer regexes. tiktoken and Hugging Face tokenizers write their split patterns in the Rust
// regex dialect; this compiles them with PCRE2 (UTF + UCP, JIT when available) after translating the
// two constructs whose meaning differs: `\s` (Rust: the Unicode White_Space property; PCRE2's UCP
// `\s` also takes U+180E) and class intersection `[A&&[^B]]` (absent from PCRE2).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// Rust-regex pattern -> PCRE2 pattern. Throws FormatError for intersections it cannot express.
std::string translate_rust_regex(std::string_view rust_pattern);

struct RegexMatch {
  size_t begin = 0;
  size_t end = 0;
};

class PretokenRegex {
 public:
  // `rust_pattern` is translated first; `what` names the pattern's source in error messages.
  PretokenRegex(std::string_view rust_pattern, std::string_view what);
  ~PretokenRegex();
  PretokenRegex(const PretokenRegex&) = delete;
  PretokenRegex& operator=(const PretokenRegex&) = delete;

  // Non-overlapping, non-empty matches of `text`, left to right. `text` must be valid UTF-8
  // (checked by the caller once per encode; PCRE2's own check is switched off for speed).
  // Thread-safe. A text whose backtracking needs more than 256 MiB of JIT stack -> LimitError.
  std::vector<RegexMatch> matches(std::string_view text) const;

  const std::string& pcre_pattern() const { return pcre_pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pcre_pattern_;
};

}  // namespace ferry
