// Text <-> token ids. One interface over the two vocabulary formats the supported models ship:
// tiktoken BPE (Kimi K2/K3: tiktoken.model + tokenizer_config.json) and Hugging Face byte-level BPE
// (Qwen3, DeepSeek V3: tokenizer.json). Both are checked id for id against implementations written
// by others (tests/io/tokenizers/tokenizer_crosscheck_test.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids of `text` (UTF-8). With allow_special, a special/added token's string in the text becomes
  // its id (leftmost, longest match first); without it every byte is ordinary text, so user input
  // can never forge a control token. Invalid UTF-8 -> FormatError.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special) const = 0;

  // Concatenated token_bytes of each id. decode(encode(s, any)) == s byte for byte, except that a
  // tokenizer with a normalizer (Qwen: NFC) gives back the normalized text. Unknown id -> LimitError.
  virtual std::string decode(const std::vector<int32_t>& ids) const;

  // The raw bytes of one token (may be part of a UTF-8 character: stream bytes, not characters).
  virtual std::string token_bytes(int32_t id) const = 0;

  // What to show for an id: its bytes, or "<|id:N|>" for an id the tokenizer does not know. Models
  // often pad their vocabulary beyond the tokenizer's (to a multiple of 64 or 128 rows), and a
  // sampled padding id must be shown, never end generation.
  std::string display_bytes(int32_t id) const;
  std::string display(const std::vector<int32_t>& ids) const;  // display_bytes of each id, concatenated

  // One past the highest id (specials included).
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if the vocabulary has none
  virtual int32_t eos_id() const = 0;  // -1 if the vocabulary has none

  // Id of a special/added token by its exact string ("<|im_end|>", "[BOS]"), or -1.
  virtual int32_t id_of(std::string_view special_name) const = 0;
};

// Reads the tokenizer in a Hugging Face model directory: `tiktoken.model` (+ tokenizer_config.json
// for the specials, Kimi layout) or `tokenizer.json`. Missing or malformed files -> FormatError
// naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

}  // namespace ferry
