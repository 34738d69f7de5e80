#include "io/tokenizers/chat_template.hpp"

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer.hpp"

namespace ferry {
namespace {

using nlohmann::json;

std::string str_field(const json& j, const char* key, const std::string& where, const std::string& fallback = "") {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string()) throw ConfigError(where + ": field '" + key + "' must be a string");
  return j[key].get<std::string>();
}

std::vector<std::string> str_list(const json& j, const char* key, const std::string& where) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) throw ConfigError(where + ": field '" + key + "' must be an array of strings");
  for (const auto& v : j[key]) {
    if (!v.is_string()) throw ConfigError(where + ": field '" + key + "' must be an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

ChatTurnFormat turn_format(const json& j, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where + " must be an object with 'prefix' and 'suffix'");
  return {str_field(j, "prefix", where), str_field(j, "suffix", where)};
}

// All control text of a template, for the special-token scan.
std::vector<std::string> control_texts(const ChatTemplate& t) {
  std::vector<std::string> v{t.tools.prefix, t.tools.suffix, t.generation_prompt};
  for (const auto& [role, f] : t.roles) {
    v.push_back(f.prefix);
    v.push_back(f.suffix);
  }
  v.insert(v.end(), t.stop.begin(), t.stop.end());
  return v;
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw ConfigError(origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw ConfigError(origin + ": a chat template is a JSON object");
  ChatTemplate t;
  t.name = str_field(j, "name", origin);
  if (t.name.empty()) throw ConfigError(origin + ": field 'name' is required");
  t.description = str_field(j, "description", origin);
  t.model_types = str_list(j, "model_types", origin);
  if (j.contains("add_bos")) {
    if (!j["add_bos"].is_boolean()) throw ConfigError(origin + ": field 'add_bos' must be true or false");
    t.add_bos = j["add_bos"].get<bool>();
  }
  t.default_system = str_field(j, "default_system", origin);
  if (j.contains("tools")) t.tools = turn_format(j["tools"], origin + ": field 'tools'");
  if (!j.contains("roles") || !j["roles"].is_object() || j["roles"].empty())
    throw ConfigError(origin + ": field 'roles' must be an object mapping role names to {prefix, suffix}");
  for (const auto& [role, f] : j["roles"].items()) t.roles[role] = turn_format(f, origin + ": roles." + role);
  t.generation_prompt = str_field(j, "generation_prompt", origin);
  t.stop = str_list(j, "stop", origin);
  if (j.contains("reasoning")) {
    const json& r = j["reasoning"];
    const std::string where = origin + ": field 'reasoning'";
    if (!r.is_object()) throw ConfigError(where + " must be an object with 'open' and 'close'");
    t.reasoning.open = str_field(r, "open", where);
    t.reasoning.close = str_field(r, "close", where);
    if (t.reasoning.open.empty() != t.reasoning.close.empty())
      throw ConfigError(where + ": 'open' and 'close' must both be set or both be empty");
    if (r.contains("starts_open")) t.reasoning.starts_in_reasoning = r.value("starts_open", false);
  }
  if (j.contains("aliases")) {
    if (!j["aliases"].is_object()) throw ConfigError(origin + ": field 'aliases' must map a name to a list of names");
    for (const auto& [name, v] : j["aliases"].items()) t.aliases[name] = str_list(j["aliases"], name.c_str(), origin + ": aliases");
  }
  return t;
}

std::vector<PromptSegment> render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                       const std::string& tools_json, bool add_generation_prompt) {
  std::vector<PromptSegment> out;
  auto turn = [&](const std::string& role, const std::string& content, const std::vector<int32_t>& ids) {
    auto it = t.roles.find(role);
    if (it == t.roles.end()) throw ConfigError("chat template '" + t.name + "' has no format for role '" + role + "'");
    out.push_back({it->second.prefix, true, {}});
    out.push_back({content, false, ids});
    out.push_back({it->second.suffix, true, {}});
  };
  if (!tools_json.empty()) {
    out.push_back({t.tools.prefix, true, {}});
    out.push_back({tools_json, false, {}});
    out.push_back({t.tools.suffix, true, {}});
  }
  const bool has_system = !messages.empty() && messages.front().role == "system";
  if (!has_system && !t.default_system.empty()) turn("system", t.default_system, {});
  for (const auto& m : messages) turn(m.role, m.content, m.ids);
  if (add_generation_prompt) out.push_back({t.generation_prompt, true, {}});
  std::erase_if(out, [](const PromptSegment& s) { return s.text.empty() && s.ids.empty(); });
  return out;
}

std::vector<int32_t> tokenize_prompt(const ChatTemplate& t, const Tokenizer& tok,
                                     const std::vector<PromptSegment>& segments) {
  std::vector<int32_t> ids;
  if (t.add_bos && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  for (const auto& s : segments) {
    if (!s.ids.empty()) {
      ids.insert(ids.end(), s.ids.begin(), s.ids.end());
      continue;
    }
    auto part = tok.encode(s.control ? resolve_aliases(t, tok, s.text) : s.text, s.control);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::string resolve_aliases(const ChatTemplate& t, const Tokenizer& tok, std::string text) {
  for (const auto& [name, others] : t.aliases) {
    if (tok.id_of(name) >= 0 || text.find(name) == std::string::npos) continue;
    for (const auto& o : others) {
      if (tok.id_of(o) < 0) continue;
      for (size_t p = text.find(name); p != std::string::npos; p = text.find(name, p + o.size())) text.replace(p, name.size(), o);
      break;
    }
  }
  return text;
}

std::vector<std::string> missing_specials(const ChatTemplate& t, const Tokenizer& tok) {
  static const std::regex special(R"(<\|[A-Za-z0-9_]+\|>)");
  std::set<std::string> missing;
  for (const auto& raw : control_texts(t)) {
    const std::string text = resolve_aliases(t, tok, raw);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), special); it != std::sregex_iterator(); ++it)
      if (tok.id_of(it->str()) < 0) missing.insert(it->str());
  }
  return {missing.begin(), missing.end()};
}

std::vector<int32_t> stop_token_ids(const ChatTemplate& t, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const auto& s : t.stop)
    if (int32_t id = tok.id_of(resolve_aliases(t, tok, s)); id >= 0) ids.push_back(id);
  return ids;
}

std::vector<int32_t> chat_stop_ids(const ChatTemplate& t, const Tokenizer& tok, int64_t eos_id) {
  std::vector<int32_t> ids;
  if (eos_id >= 0) ids.push_back(static_cast<int32_t>(eos_id));
  for (int32_t id : stop_token_ids(t, tok)) ids.push_back(id);
  return ids;
}

}  // namespace ferry
