// tiktoken-format BPE: byte strings with ranks (the rank is the token id and the merge priority),
// special tokens matched before pre-tokenization, and a Rust-regex pre-tokenizer pattern.
// Used for Kimi K2/K3 (tiktoken.model + tokenizer_config.json) and, in tests, for OpenAI's
// cl100k_base / o200k_base vocabularies that js-tiktoken ships.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/tokenizers/tokenizer.hpp"
#include "io/tokenizers/tokenizer_regex.hpp"
#include "io/tokenizers/tokenizer_special.hpp"

namespace ferry {

// The pre-tokenizer pattern of Kimi's tokenization_kimi.py (MODEL_SPEC §10), Rust-regex syntax.
std::string_view kimi_pattern();

// Reads a tiktoken.model file: one "base64(bytes) rank" per line. FormatError names file and line.
std::vector<std::pair<std::string, int32_t>> load_tiktoken_ranks(const std::filesystem::path& file);

struct TiktokenOptions {
  std::string pattern;                                   // Rust-regex syntax
  std::vector<std::pair<std::string, int32_t>> specials;  // content -> id
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  // tokenization_kimi.py's encode() first cuts the text every 400,000 characters and then into
  // runs of at most 25,000 consecutive (non-)whitespace characters, encoding each part on its own;
  // plain tiktoken does not. Only texts with such runs are affected.
  bool kimi_chunking = false;
  std::string source = "tiktoken";  // names the vocabulary in error messages
};

class TiktokenTokenizer final : public Tokenizer {
 public:
  TiktokenTokenizer(std::vector<std::pair<std::string, int32_t>> ranks, TiktokenOptions options);

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_of_.size()); }
  int32_t bos_id() const override { return options_.bos_id; }
  int32_t eos_id() const override { return options_.eos_id; }
  int32_t id_of(std::string_view special_name) const override { return specials_.id_of(special_name); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t rank_of(std::string_view bytes) const;

  TiktokenOptions options_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ranks_;
  std::vector<std::string> bytes_of_;  // id -> bytes (ranks and specials)
  std::vector<bool> known_;            // ids with no token (gaps in o200k_base) are false
  SpecialMatcher specials_;
  PretokenRegex regex_;
};

// Kimi layout: dir/tiktoken.model + dir/tokenizer_config.json (added_tokens_decoder, bos/eos names).
// Specials are ids num_ranks .. num_ranks+255, named ones from added_tokens_decoder and the rest
// "<|reserved_token_{id}|>", as tokenization_kimi.py builds them.
std::unique_ptr<Tokenizer> load_kimi_tiktoken(const std::filesystem::path& dir);

}  // namespace ferry
