#include "io/tokenizers/tokenizer_hf.hpp"

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_bpe.hpp"
#include "io/tokenizers/tokenizer_json.hpp"
#include "io/tokenizers/tokenizer_text.hpp"

namespace ferry {

void HfBpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (m_.ignore_merges) {
    if (auto it = m_.whole.find(std::string(piece)); it != m_.whole.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<BpePart> parts(piece.size());
  for (uint32_t i = 0; i < piece.size(); ++i) parts[i] = {i, i + 1, m_.byte_ids[static_cast<unsigned char>(piece[i])]};
  bpe_merge(parts, [&](const BpePart& l, const BpePart& r) -> std::pair<uint32_t, int32_t> {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l.id)) << 32) | static_cast<uint32_t>(r.id);
    auto it = m_.merges.find(key);
    return it == m_.merges.end() ? std::pair<uint32_t, int32_t>{kNoMerge, -1} : it->second;
  });
  for (const BpePart& p : parts) out.push_back(p.id);
}

void HfBpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized = m_.nfc ? nfc(text) : std::string(text);
  std::vector<std::string_view> pieces{normalized};
  std::vector<std::string_view> next;
  for (const auto& step : m_.splits) {
    next.clear();
    for (std::string_view p : pieces) {
      size_t gap = 0;
      for (const RegexMatch& m : step.regex->matches(p)) {
        if (m.begin > gap) next.push_back(p.substr(gap, m.begin - gap));
        if (!step.removed) next.push_back(p.substr(m.begin, m.end - m.begin));
        gap = m.end;
      }
      if (gap < p.size()) next.push_back(p.substr(gap));
    }
    pieces.swap(next);
  }
  for (std::string_view p : pieces) encode_piece(p, out);
}

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text, bool allow_special) const {
  if (auto bad = utf8_error_offset(text)) {
    throw FormatError(fmt::format("text to encode is not valid UTF-8 (byte {})", *bad));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (!allow_special) {
    encode_plain(text, out);
    return out;
  }
  for (const auto& seg : m_.added.split(text)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
    } else {
      encode_plain(seg.text, out);
    }
  }
  return out;
}

std::string HfBpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !m_.known[id]) {
    throw LimitError(fmt::format("{}: token id {} is not in the vocabulary (size {})", m_.source, id, vocab_size()));
  }
  return m_.bytes_of[id];
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& dir) {
  auto file = dir / "tokenizer.json";
  nlohmann::json tok = read_tokenizer_json(file);
  auto config_file = dir / "tokenizer_config.json";
  nlohmann::json config;
  bool have_config = std::filesystem::exists(config_file);
  if (have_config) config = read_tokenizer_json(config_file);
  HfBpeModel model = parse_hf_tokenizer(tok, file);
  if (have_config) {
    auto pick = [&](const char* field) {
      std::string name = token_name(config, field, config_file);
      if (name.empty()) return -1;
      int32_t id = model.added.id_of(name);
      if (id < 0) throw FormatError(fmt::format("{}: {} \"{}\" is not an added token of {}", config_file.string(),
                                                field, name, file.string()));
      return id;
    };
    model.bos_id = pick("bos_token");
    model.eos_id = pick("eos_token");
  }
  return std::make_unique<HfBpeTokenizer>(std::move(model));
}

}  // namespace ferry
