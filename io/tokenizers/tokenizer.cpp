#include "io/tokenizers/tokenizer.hpp"

#include <fstream>
#include <map>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_hf.hpp"
#include "io/tokenizers/tokenizer_json.hpp"
#include "io/tokenizers/tokenizer_tiktoken.hpp"
#include "io/regular_file.hpp"

namespace ferry {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::display_bytes(int32_t id) const {
  try {
    return token_bytes(id);
  } catch (const LimitError&) {
    return fmt::format("<|id:{}|>", id);
  }
}

std::string Tokenizer::display(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += display_bytes(id);
  return out;
}

nlohmann::json read_tokenizer_json(const std::filesystem::path& file) {
  require_regular_file(file, "tokenizer file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot open", file.string()));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
  }
}

std::string token_name(const nlohmann::json& config, const char* field, const std::filesystem::path& file) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  throw FormatError(fmt::format("{}: \"{}\" is neither a string nor {{\"content\": string}}", file.string(), field));
}

std::unique_ptr<Tokenizer> load_kimi_tiktoken(const std::filesystem::path& dir) {
  constexpr int32_t kReservedSpecials = 256;  // tokenization_kimi.py num_reserved_special_tokens
  auto ranks = load_tiktoken_ranks(dir / "tiktoken.model");
  const auto num_base = static_cast<int32_t>(ranks.size());
  const auto config_file = dir / "tokenizer_config.json";
  nlohmann::json config = read_tokenizer_json(config_file);
  std::map<int32_t, std::string> named;
  if (auto it = config.find("added_tokens_decoder"); it != config.end()) {
    if (!it->is_object()) throw FormatError(fmt::format("{}: added_tokens_decoder is not an object", config_file.string()));
    for (const auto& [key, tok] : it->items()) {
      int32_t id = -1;
      try {
        id = std::stoi(key);
      } catch (const std::exception&) {
      }
      if (id < 0 || !tok.is_object() || !tok.contains("content") || !tok["content"].is_string()) {
        throw FormatError(fmt::format("{}: added_tokens_decoder[\"{}\"] needs a numeric id and a string content",
                                      config_file.string(), key));
      }
      named[id] = tok["content"].get<std::string>();
    }
  } else {
    throw FormatError(fmt::format("{}: no added_tokens_decoder (the special tokens)", config_file.string()));
  }
  TiktokenOptions opt;
  opt.pattern = std::string(kimi_pattern());
  opt.kimi_chunking = true;
  opt.source = (dir / "tiktoken.model").string();
  for (int32_t id = num_base; id < num_base + kReservedSpecials; ++id) {
    auto it = named.find(id);
    opt.specials.emplace_back(it != named.end() ? it->second : fmt::format("<|reserved_token_{}|>", id), id);
  }
  auto find_special = [&](const char* field, const char* fallback) {
    std::string name = token_name(config, field, config_file);
    if (name.empty()) name = fallback;
    for (const auto& [content, id] : opt.specials) {
      if (content == name) return id;
    }
    throw FormatError(fmt::format("{}: {} \"{}\" is not one of the special tokens", config_file.string(), field, name));
  };
  opt.bos_id = find_special("bos_token", "[BOS]");
  opt.eos_id = find_special("eos_token", "[EOS]");
  return std::make_unique<TiktokenTokenizer>(std::move(ranks), std::move(opt));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "tiktoken.model")) return load_kimi_tiktoken(dir);
  if (std::filesystem::exists(dir / "tokenizer.json")) return load_hf_tokenizer(dir);
  throw FormatError(fmt::format("{}: no tokenizer (expected tiktoken.model or tokenizer.json)", dir.string()));
}

}  // namespace ferry
