#include "io/tokenizers/tokenizer_tiktoken.hpp"

#include <fstream>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_bpe.hpp"
#include "io/tokenizers/tokenizer_text.hpp"
#include "io/regular_file.hpp"

namespace ferry {

std::string_view kimi_pattern() {
  // tokenization_kimi.py's pat_str, alternatives joined with '|'.
  static const std::string pattern =
      R"([\p{Han}]+)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3})"
      R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
      R"(|\s*[\r\n]+)"
      R"(|\s+(?!\S))"
      R"(|\s+)";
  return pattern;
}

std::vector<std::pair<std::string, int32_t>> load_tiktoken_ranks(const std::filesystem::path& file) {
  require_regular_file(file, "tiktoken ranks file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot open tiktoken ranks file", file.string()));
  std::vector<std::pair<std::string, int32_t>> ranks;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    std::optional<std::string> bytes = sp == line.npos ? std::nullopt : base64_decode(line.substr(0, sp));
    long long rank = -1;
    try {
      size_t used = 0;
      if (sp != line.npos) rank = std::stoll(line.substr(sp + 1), &used);
      if (sp != line.npos && used != line.size() - sp - 1) rank = -1;
    } catch (const std::exception&) {
      rank = -1;
    }
    if (!bytes || bytes->empty() || rank < 0 || rank > INT32_MAX) {
      throw FormatError(fmt::format("{}:{}: expected \"base64(bytes) rank\", got \"{}\"", file.string(), lineno,
                                    line.substr(0, 80)));
    }
    ranks.emplace_back(std::move(*bytes), static_cast<int32_t>(rank));
  }
  if (ranks.empty()) throw FormatError(fmt::format("{}: no ranks", file.string()));
  return ranks;
}

TiktokenTokenizer::TiktokenTokenizer(std::vector<std::pair<std::string, int32_t>> ranks, TiktokenOptions options)
    : options_(std::move(options)), regex_(options_.pattern, options_.source) {
  int32_t top = -1;
  for (const auto& [bytes, rank] : ranks) top = std::max(top, rank);
  for (const auto& [content, id] : options_.specials) top = std::max(top, id);
  bytes_of_.resize(static_cast<size_t>(top) + 1);
  known_.assign(bytes_of_.size(), false);
  ranks_.reserve(ranks.size());
  for (auto& [bytes, rank] : ranks) {
    if (known_[rank]) throw FormatError(fmt::format("{}: rank {} appears twice", options_.source, rank));
    known_[rank] = true;
    bytes_of_[rank] = bytes;
    if (!ranks_.emplace(std::move(bytes), rank).second) {
      throw FormatError(fmt::format("{}: the bytes of rank {} appear twice", options_.source, rank));
    }
  }
  for (int b = 0; b < 256; ++b) {
    // Every byte must be a token, or some text would have no encoding (tiktoken would panic).
    if (rank_of(std::string_view(std::string(1, static_cast<char>(b)))) < 0) {
      throw FormatError(fmt::format("{}: byte 0x{:02x} has no rank", options_.source, b));
    }
  }
  for (const auto& [content, id] : options_.specials) {
    if (known_[id] && bytes_of_[id] != content) {
      throw FormatError(fmt::format("{}: special token {} reuses id {}", options_.source, content, id));
    }
    known_[id] = true;
    bytes_of_[id] = content;
    specials_.add(content, id);
  }
}

int32_t TiktokenTokenizer::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : it->second;
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (int32_t whole = rank_of(piece); whole >= 0) {  // tiktoken's shortcut, kept for identical ids
    out.push_back(whole);
    return;
  }
  std::vector<BpePart> parts(piece.size());
  for (uint32_t i = 0; i < piece.size(); ++i) parts[i] = {i, i + 1, rank_of(piece.substr(i, 1))};
  bpe_merge(parts, [&](const BpePart& l, const BpePart& r) -> std::pair<uint32_t, int32_t> {
    int32_t rank = rank_of(piece.substr(l.begin, r.end - l.begin));
    return {rank < 0 ? kNoMerge : static_cast<uint32_t>(rank), rank};
  });
  for (const BpePart& p : parts) out.push_back(p.id);
}

void TiktokenTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  // Text between matches is dropped, as tiktoken does; the patterns here match every character.
  for (const RegexMatch& m : regex_.matches(text)) encode_piece(text.substr(m.begin, m.end - m.begin), out);
}

namespace {

// Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// tokenization_kimi.py: cut every 400,000 characters, then at every 25,000th character of a run of
// whitespace or of non-whitespace (_split_whitespaces_or_nonwhitespaces).
std::vector<std::string_view> kimi_chunks(std::string_view text) {
  constexpr size_t kMaxChars = 400'000, kMaxRun = 25'000;
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t slice_start = i, run = 0, chars = 0;
    bool run_space = false;
    for (; i < text.size() && chars < kMaxChars; ++chars) {
      size_t at = i;
      bool space = python_isspace(next_code_point(text, i));
      if (chars == 0) run_space = space;
      if (space != run_space) {
        run = 1;
        run_space = space;
      } else if (++run > kMaxRun) {
        out.push_back(text.substr(slice_start, at - slice_start));
        slice_start = at;
        run = 1;
      }
    }
    out.push_back(text.substr(slice_start, i - slice_start));
  }
  return out;
}

}  // namespace

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text, bool allow_special) const {
  if (auto bad = utf8_error_offset(text)) {
    throw FormatError(fmt::format("text to encode is not valid UTF-8 (byte {})", *bad));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<std::string_view> chunks = options_.kimi_chunking ? kimi_chunks(text) : std::vector{text};
  for (std::string_view chunk : chunks) {
    if (!allow_special) {
      encode_plain(chunk, out);
      continue;
    }
    for (const auto& seg : specials_.split(chunk)) {
      if (seg.id >= 0) {
        out.push_back(seg.id);
      } else {
        encode_plain(seg.text, out);
      }
    }
  }
  return out;
}

std::string TiktokenTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !known_[id]) {
    throw LimitError(fmt::format("{}: token id {} is not in the vocabulary (size {})", options_.source, id,
                                 vocab_size()));
  }
  return bytes_of_[id];
}

}  // namespace ferry
