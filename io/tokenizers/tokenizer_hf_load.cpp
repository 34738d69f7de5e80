// tokenizer.json -> HfBpeModel. Each unsupported feature is refused by name rather than ignored, so
// a vocabulary that would tokenize differently from Hugging Face's fails at load time.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer_hf.hpp"
#include "io/tokenizers/tokenizer_text.hpp"

namespace ferry {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Ctx {
  const std::filesystem::path& file;
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("{}: {}", file.string(), what));
  }
  const json& need(const json& obj, const char* key, const char* where) const {
    if (!obj.is_object() || !obj.contains(key)) fail(fmt::format("{} has no \"{}\"", where, key));
    return obj[key];
  }
};

// Byte-level token text -> raw bytes. Characters outside GPT-2's alphabet are kept as their UTF-8
// (Hugging Face's ByteLevel decoder does the same); `pure` says whether there were none.
std::string token_to_bytes(const std::string& token, bool& pure) {
  std::string out;
  pure = true;
  for (size_t i = 0; i < token.size();) {
    size_t at = i;
    int b = byte_of_char(next_code_point(token, i));
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(token, at, i - at);
      pure = false;
    }
  }
  return out;
}

void parse_normalizer(const Ctx& c, const json& n, HfBpeModel& m) {
  if (n.is_null()) return;
  std::string type = c.need(n, "type", "normalizer").get<std::string>();
  if (type == "NFC") {
    m.nfc = true;
  } else if (type == "Sequence") {
    for (const json& sub : c.need(n, "normalizers", "normalizer Sequence")) parse_normalizer(c, sub, m);
  } else {
    c.fail(fmt::format("normalizer type \"{}\" is not supported (only NFC)", type));
  }
}

void add_split(const Ctx& c, HfBpeModel& m, const std::string& pattern, bool removed) {
  m.splits.push_back({std::make_unique<PretokenRegex>(pattern, c.file.string()), removed});
}

void parse_pre_tokenizer(const Ctx& c, const json& p, HfBpeModel& m) {
  if (p.is_null()) return;
  std::string type = c.need(p, "type", "pre_tokenizer").get<std::string>();
  if (type == "Sequence") {
    for (const json& sub : c.need(p, "pretokenizers", "pre_tokenizer Sequence")) parse_pre_tokenizer(c, sub, m);
  } else if (type == "Split") {
    std::string behavior = c.need(p, "behavior", "Split").get<std::string>();
    if (behavior != "Isolated" && behavior != "Removed") c.fail("Split behavior \"" + behavior + "\" is not supported");
    if (p.value("invert", false)) c.fail("Split with invert: true is not supported");
    const json& pat = c.need(p, "pattern", "Split");
    std::string regex;
    if (pat.contains("Regex")) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.contains("String")) {  // a literal: escape every character for the regex engine
      for (char ch : pat["String"].get<std::string>()) {
        if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) regex += '\\';
        regex += ch;
      }
    } else {
      c.fail("Split pattern is neither Regex nor String");
    }
    add_split(c, m, regex, behavior == "Removed");
  } else if (type == "ByteLevel") {
    if (p.value("add_prefix_space", false)) c.fail("ByteLevel add_prefix_space: true is not supported");
    if (p.value("use_regex", true)) add_split(c, m, kGpt2Pattern, false);
  } else {
    c.fail(fmt::format("pre_tokenizer type \"{}\" is not supported", type));
  }
}

// Reads model.vocab into m.bytes_of; returns token text -> id for the merges.
std::unordered_map<std::string, int32_t> parse_vocab(const Ctx& c, const json& model, HfBpeModel& m) {
  const json& vocab = c.need(model, "vocab", "model");
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.size());
  for (const auto& [text, idj] : vocab.items()) {
    if (!idj.is_number_integer() || idj.get<int64_t>() < 0 || idj.get<int64_t>() > INT32_MAX) {
      c.fail(fmt::format("model.vocab[\"{}\"] is not a token id", text));
    }
    auto id = idj.get<int32_t>();
    ids[text] = id;
    if (static_cast<size_t>(id) >= m.bytes_of.size()) {
      m.bytes_of.resize(static_cast<size_t>(id) + 1);
      m.known.resize(static_cast<size_t>(id) + 1, false);
    }
    bool pure = false;
    m.bytes_of[id] = token_to_bytes(text, pure);
    m.known[id] = true;
    if (pure) m.whole.emplace(m.bytes_of[id], id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(byte_level_chars()[b]);
    if (it == ids.end()) c.fail(fmt::format("model.vocab has no token for byte 0x{:02x}", b));
    m.byte_ids[b] = it->second;
  }
  return ids;
}

void parse_merges(const Ctx& c, const json& model, const std::unordered_map<std::string, int32_t>& ids,
                  HfBpeModel& m) {
  const json& merges = c.need(model, "merges", "model");
  m.merges.reserve(merges.size());
  uint32_t rank = 0;
  for (const json& mj : merges) {
    std::string a, b;
    if (mj.is_string()) {  // "a b"
      const auto& s = mj.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == s.npos || s.find(' ', sp + 1) != s.npos) c.fail(fmt::format("merge {} \"{}\" is not \"a b\"", rank, s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {  // ["a", "b"]
      a = mj[0].get<std::string>();
      b = mj[1].get<std::string>();
    } else {
      c.fail(fmt::format("merge {} is neither \"a b\" nor [\"a\", \"b\"]", rank));
    }
    auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
    if (ia == ids.end() || ib == ids.end() || iab == ids.end()) {
      c.fail(fmt::format("merge {} (\"{}\" \"{}\") uses a token missing from model.vocab", rank, a, b));
    }
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
    m.merges.insert_or_assign(key, std::pair<uint32_t, int32_t>{rank, iab->second});  // later wins, as in HF
    ++rank;
  }
}

void parse_model(const Ctx& c, const json& model, HfBpeModel& m) {
  std::string type = c.need(model, "type", "model").get<std::string>();
  if (type != "BPE") c.fail(fmt::format("model type \"{}\" is not supported (only BPE)", type));
  if (model.value("byte_fallback", false)) c.fail("BPE byte_fallback is not supported");
  if (model.contains("dropout") && !model["dropout"].is_null()) c.fail("BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
      c.fail(fmt::format("BPE {} is not supported", key));
    }
  }
  m.ignore_merges = model.value("ignore_merges", false);
  parse_merges(c, model, parse_vocab(c, model, m), m);
  if (!m.ignore_merges) m.whole.clear();
}

void parse_added(const Ctx& c, const json& added, HfBpeModel& m) {
  if (added.is_null()) return;
  for (const json& t : added) {
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      if (t.value(flag, false)) c.fail(fmt::format("added token {} has {}: true (not supported)", t.dump(), flag));
    }
    auto id = c.need(t, "id", "added token").get<int32_t>();
    std::string content = c.need(t, "content", "added token").get<std::string>();
    if (id < 0) c.fail(fmt::format("added token {} has a negative id", content));
    if (static_cast<size_t>(id) >= m.bytes_of.size()) {
      m.bytes_of.resize(static_cast<size_t>(id) + 1);
      m.known.resize(static_cast<size_t>(id) + 1, false);
    }
    m.bytes_of[id] = content;  // decodes to its own text, as HF's decoder does for added tokens
    m.known[id] = true;
    m.added.add(content, id);
  }
}

}  // namespace

HfBpeModel parse_hf_tokenizer(const json& tok, const std::filesystem::path& file) {
  Ctx c{file};
  HfBpeModel m;
  m.source = file.string();
  try {
    parse_model(c, c.need(tok, "model", "tokenizer.json"), m);
    parse_normalizer(c, tok.value("normalizer", json()), m);
    parse_pre_tokenizer(c, tok.value("pre_tokenizer", json()), m);
    parse_added(c, tok.value("added_tokens", json()), m);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    c.fail(fmt::format("unexpected structure: {}", e.what()));
  }
  return m;
}

}  // namespace ferry
