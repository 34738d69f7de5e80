// Hugging Face tokenizer.json byte-level BPE (Qwen2/3, DeepSeek V3, GPT-2 style): added tokens are
// matched first, the rest is normalized (NFC or nothing), cut by the pre-tokenizer's Split regexes
// and byte-level mapped, then each piece is merged by the model's merge ranks.
//
// Supported subset (anything else in the file is a FormatError that names it): normalizer null /
// NFC / Sequence of those; pre_tokenizer Split (behaviour Isolated or Removed, invert false),
// ByteLevel (add_prefix_space false; use_regex true adds GPT-2's split) or a Sequence of them;
// model BPE without byte_fallback, dropout, continuing_subword_prefix or end_of_word_suffix;
// added tokens without lstrip/rstrip/single_word. Added tokens are all matched on the raw text in
// one leftmost-longest pass. HF matches `normalized: true` ones after normalizing, which gives the
// same ids for the vocabularies here: Qwen3's added tokens are all `normalized: false` and DeepSeek
// V3 has an empty normalizer.
#pragma once

#include <array>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/tokenizers/tokenizer.hpp"
#include "io/tokenizers/tokenizer_regex.hpp"
#include "io/tokenizers/tokenizer_special.hpp"

namespace ferry {

struct HfBpeModel {
  struct SplitStep {
    std::unique_ptr<PretokenRegex> regex;
    bool removed = false;  // behaviour Removed drops the matches; Isolated keeps them as pieces
  };
  std::vector<std::string> bytes_of;      // id -> raw bytes (vocab and added tokens)
  std::vector<bool> known;                // false for ids no token has
  std::array<int32_t, 256> byte_ids{};    // the single-byte tokens BPE starts from
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;  // (left<<32 | right) -> (rank, merged)
  bool ignore_merges = false;             // look the whole piece up in the vocabulary first
  std::unordered_map<std::string, int32_t> whole;  // raw bytes -> id, used when ignore_merges
  bool nfc = false;
  std::vector<SplitStep> splits;
  SpecialMatcher added;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::string source;  // the tokenizer.json path, for messages
};

class HfBpeTokenizer final : public Tokenizer {
 public:
  explicit HfBpeTokenizer(HfBpeModel model) : m_(std::move(model)) {}

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(m_.bytes_of.size()); }
  int32_t bos_id() const override { return m_.bos_id; }
  int32_t eos_id() const override { return m_.eos_id; }
  int32_t id_of(std::string_view special_name) const override { return m_.added.id_of(special_name); }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  HfBpeModel m_;
};

// Builds the model from a parsed tokenizer.json (`file` names it in errors); bos/eos stay -1.
HfBpeModel parse_hf_tokenizer(const nlohmann::json& tok, const std::filesystem::path& file);

// dir/tokenizer.json (+ dir/tokenizer_config.json when present, for bos_token/eos_token).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& dir);

}  // namespace ferry
