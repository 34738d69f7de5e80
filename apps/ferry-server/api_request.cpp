#include "apps/ferry-server/api_request.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace ferry::server {
namespace {

using nlohmann::json;

// Deep nesting would make later recursive walks (dump) costly; no valid request needs more.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxStops = 16;
constexpr int kMaxTopLogprobs = 20;         // OpenAI chat's limit
constexpr int kMaxCompletionLogprobs = 5;   // OpenAI completions' limit

std::string type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

[[noreturn]] void bad(const std::string& param, const std::string& what, const json* got = nullptr) {
  std::string msg = "'" + param + "' " + what;
  if (got) msg += " (got " + type_name(*got) + ")";
  throw ApiError(400, msg, param, got ? "invalid_type" : "invalid_value");
}

json parse_body(std::string_view body) {
  json::parser_callback_t depth_guard = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth)
      throw ApiError(400, "Invalid JSON body: nested deeper than " + std::to_string(kMaxDepth) + " levels", "",
                     "invalid_json");
    return true;
  };
  json j;
  try {
    j = json::parse(body.begin(), body.end(), depth_guard);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw ApiError(400, std::string("Invalid JSON body: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "The request body must be a JSON object", "", "invalid_json");
  return j;
}

// A present, non-null field (OpenAI clients send null for "not set").
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number_in(const json& j, const char* key, double lo, double hi, double fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) bad(key, "must be a number", v);
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    bad(key, "must be between " + json(lo).dump() + " and " + json(hi).dump() + " (got " + v->dump() + ")");
  return d;
}

void parse_stop(const json& j, SamplingRequest& r) {
  const json* v = field(j, "stop");
  if (!v) return;
  if (v->is_string()) {
    r.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array()) bad("stop", "must be a string or an array of strings", v);
  if (v->size() > kMaxStops) bad("stop", "may hold at most " + std::to_string(kMaxStops) + " strings");
  for (const auto& s : *v) {
    if (!s.is_string()) bad("stop", "must be a string or an array of strings", &s);
    r.stop.push_back(s.get<std::string>());
  }
}

void parse_sampling(const json& j, const RequestLimits& limits, SamplingRequest& r) {
  if (const json* v = field(j, "model")) {
    if (!v->is_string()) bad("model", "must be a string", v);
    r.model = v->get<std::string>();
  }
  const char* mt = field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const json* v = field(j, mt)) {
    if (!v->is_number_integer()) bad(mt, "must be an integer", v);
    const int64_t n = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
    if (n < 1) bad(mt, "must be at least 1 (got " + std::to_string(n) + ")");
    if (n > limits.max_tokens_limit)
      throw ApiError(400, "'" + std::string(mt) + "' is " + std::to_string(n) + ", over this server's limit of " +
                              std::to_string(limits.max_tokens_limit) + " (--max-tokens-limit)",
                     mt, "max_tokens_limit");
    r.max_tokens = n;
  }
  r.temperature = static_cast<float>(number_in(j, "temperature", 0.0, 2.0, 1.0));
  r.top_p = static_cast<float>(number_in(j, "top_p", 0.0, 1.0, 1.0));
  if (r.top_p <= 0.0f) bad("top_p", "must be greater than 0");
  if (const json* v = field(j, "seed")) {
    if (!v->is_number_integer()) bad("seed", "must be an integer", v);
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (const json* v = field(j, "n")) {
    if (!v->is_number_integer()) bad("n", "must be an integer", v);
    if (!(v->is_number_unsigned() && v->get<uint64_t>() == 1))
      throw ApiError(400, "'n' must be 1: this server generates one choice per request (got " + v->dump() + ")", "n",
                     "unsupported_value");
  }
  parse_stop(j, r);
  if (const json* v = field(j, "stream")) {
    if (!v->is_boolean()) bad("stream", "must be true or false", v);
    r.stream = v->get<bool>();
  }
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "must be an object", v);
    if (const json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) bad("stream_options.include_usage", "must be true or false", u);
      r.include_usage = u->get<bool>();
    }
  }
}

std::string message_content(const json& m, const std::string& where) {
  const json* c = field(m, "content");
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad(where + ".content", "must be a string or an array of content parts", c);
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string pw = where + ".content[" + std::to_string(k) + "]";
    if (!part.is_object()) bad(pw, "must be an object", &part);
    const json* type = field(part, "type");
    if (!type || !type->is_string() || *type != "text") bad(pw + ".type", "must be \"text\" (other parts are not supported)");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) bad(pw + ".text", "must be a string", t);
    text += t->get<std::string>();
  }
  return text;
}

ChatMessage parse_message(const json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) bad(where, "must be an object", &m);
  const json* role = field(m, "role");
  if (!role) bad(where + ".role", "is required");
  if (!role->is_string()) bad(where + ".role", "must be a string", role);
  std::string r = role->get<std::string>();
  if (r == "developer") r = "system";  // OpenAI's newer name for the system role
  if (r != "system" && r != "user" && r != "assistant" && r != "tool")
    bad(where + ".role", "must be one of system, developer, user, assistant, tool (got \"" + r + "\")");
  return {r, message_content(m, where)};
}

}  // namespace

// Chat: `logprobs` true/false and `top_logprobs` 0..20 (only with logprobs: true, as OpenAI has it).
void parse_chat_logprobs(const json& j, SamplingRequest& r) {
  bool on = false;
  if (const json* v = field(j, "logprobs")) {
    if (!v->is_boolean()) bad("logprobs", "must be true or false", v);
    on = v->get<bool>();
  }
  int top = 0;
  if (const json* v = field(j, "top_logprobs")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxTopLogprobs)
      bad("top_logprobs", "must be an integer from 0 to " + std::to_string(kMaxTopLogprobs), v);
    if (!on) bad("top_logprobs", "needs logprobs: true");
    top = static_cast<int>(v->get<int64_t>());
  }
  r.logprobs = on ? top : -1;
}

ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_body(body);
  ChatRequest r;
  parse_sampling(j, limits, r);
  parse_chat_logprobs(j, r);
  const json* msgs = field(j, "messages");
  if (!msgs) bad("messages", "is required");
  if (!msgs->is_array()) bad("messages", "must be an array of messages", msgs);
  if (msgs->empty()) bad("messages", "must hold at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) r.messages.push_back(parse_message((*msgs)[i], i));
  if (const json* tools = field(j, "tools")) {
    if (!tools->is_array()) bad("tools", "must be an array of tool declarations", tools);
    for (size_t i = 0; i < tools->size(); ++i)
      if (!(*tools)[i].is_object()) bad("tools[" + std::to_string(i) + "]", "must be an object", &(*tools)[i]);
    if (!tools->empty()) r.tools_json = tools->dump();
  }
  return r;
}

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  const json j = parse_body(body);
  CompletionRequest r;
  parse_sampling(j, limits, r);
  // Completions (legacy): `logprobs` N = each token's logprob and the N most likely, N in 0..5.
  if (const json* v = field(j, "logprobs")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxCompletionLogprobs)
      bad("logprobs", "must be an integer from 0 to " + std::to_string(kMaxCompletionLogprobs), v);
    r.logprobs = static_cast<int>(v->get<int64_t>());
  }
  if (const json* v = field(j, "echo"); v && (!v->is_boolean() || v->get<bool>()))
    throw ApiError(400, "'echo' is not supported: this server returns the completion only", "echo", "unsupported_value");
  const json* p = field(j, "prompt");
  if (!p) bad("prompt", "is required");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    r.has_ids = true;
    for (const auto& v : *p) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad("prompt", "token id arrays must hold non-negative integers only");
      r.prompt_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  } else if (p->is_array() && p->size() > 1) {
    throw ApiError(400, "'prompt' must be one prompt: this server answers one prompt per request", "prompt",
                   "unsupported_value");
  } else {
    bad("prompt", "must be a string, an array of one string, or an array of token ids", p);
  }
  if (!r.has_ids && r.prompt.empty()) bad("prompt", "must not be empty");
  return r;
}

}  // namespace ferry::server
