#include "io/tokenizers/tokenizer_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {
namespace {

// Copies `body` (the inside of a character class, or top-level text) with \s and \S rewritten to
// the White_Space property, which is what Rust's Unicode-aware \s means.
std::string translate_escapes(std::string_view body) {
  std::string out;
  out.reserve(body.size() + 16);
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\\' && i + 1 < body.size()) {
      char e = body[i + 1];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += body.substr(i, 2);
      }
      ++i;
    } else {
      out += body[i];
    }
  }
  return out;
}

// Index one past the ']' that closes the class opened at p[open] (Rust classes may nest).
size_t class_end(std::string_view p, size_t open, std::string_view rust_pattern) {
  size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;  // a leading ']' is a literal
  int depth = 1;
  for (; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      ++depth;
    } else if (p[i] == ']' && --depth == 0) {
      return i + 1;
    }
  }
  throw FormatError(fmt::format("pre-tokenizer regex has an unclosed '[': {}", rust_pattern));
}

// One class "[...]" -> PCRE2. `[A&&[^B]]` (A minus B) becomes `(?:(?![B])[A])`.
std::string translate_class(std::string_view cls, std::string_view rust_pattern) {
  std::string_view body = cls.substr(1, cls.size() - 2);
  size_t amp = body.find("&&");
  std::string out = "[";  // built by appending: GCC 12 warns falsely (-Wrestrict) on "lit" + string&&
  if (amp == std::string_view::npos) return out.append(translate_escapes(body)).append("]");
  std::string_view a = body.substr(0, amp);
  std::string_view rest = body.substr(amp + 2);
  if (rest.size() < 3 || rest.substr(0, 2) != "[^" || rest.back() != ']' || a.find('[') != a.npos) {
    throw FormatError(fmt::format(
        "pre-tokenizer regex: only the intersection form [A&&[^B]] is supported, got {} in {}", cls,
        rust_pattern));
  }
  std::string_view b = rest.substr(2, rest.size() - 3);
  out = "(?:(?![";
  return out.append(translate_escapes(b)).append("])[").append(translate_escapes(a)).append("])");
}

}  // namespace

std::string translate_rust_regex(std::string_view p) {
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out += translate_escapes(p.substr(i, 2));
      i += 2;
    } else if (p[i] == '[') {
      size_t end = class_end(p, i, p);
      out += translate_class(p.substr(i, end - i), p);
      i = end;
    } else {
      out += p[i++];
    }
  }
  return out;
}

struct PretokenRegex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

PretokenRegex::PretokenRegex(std::string_view rust_pattern, std::string_view what)
    : impl_(std::make_unique<Impl>()), pcre_pattern_(translate_rust_regex(rust_pattern)) {
  int err = 0;
  PCRE2_SIZE at = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern_.data()), pcre_pattern_.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw FormatError(fmt::format("{}: pre-tokenizer regex does not compile ({} at offset {}): {}", what,
                                  reinterpret_cast<const char*>(msg), at, rust_pattern));
  }
  // JIT is an optimisation only: the interpreter gives the same matches where JIT is unavailable.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

PretokenRegex::~PretokenRegex() = default;

namespace {

// Backtracking over a long run (`\s+(?!\S)` on 60,000 spaces) outgrows PCRE2's default 32 KiB
// JIT stack. Such a match is retried with a JIT stack of up to 256 MiB made for this call only, so
// the common case allocates nothing extra.
struct BigStack {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~BigStack() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
  }
  pcre2_match_context* get() {
    if (ctx == nullptr) {
      ctx = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(1 << 20, 256 << 20, nullptr);
      pcre2_jit_stack_assign(ctx, nullptr, stack);
      pcre2_set_heap_limit(ctx, 1 << 20);  // KiB, for the interpreter when JIT is unavailable
    }
    return ctx;
  }
};

}  // namespace

std::vector<RegexMatch> PretokenRegex::matches(std::string_view text) const {
  std::vector<RegexMatch> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  BigStack big;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  auto match = [&](size_t pos, pcre2_match_context* ctx) {
    return impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, ctx)
                      : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, ctx);
  };
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = match(pos, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) rc = match(pos, big.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw LimitError(fmt::format("pre-tokenizer regex failed at byte {} of a {}-byte text: {}", pos, text.size(),
                                   reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      out.push_back({ov[0], ov[1]});
      pos = ov[1];
    } else {  // an empty match carries no text: step over one UTF-8 character
      pos = ov[0] + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace ferry
