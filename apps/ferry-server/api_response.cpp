#include "apps/ferry-server/api_response.hpp"

#include "apps/ferry-server/api_request.hpp"

namespace ferry::server {

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const GenerationResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json error_json(const ApiError& e) {
  auto opt = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", e.what()}, {"type", e.type}, {"param", opt(e.param)}, {"code", opt(e.code)}}}};
}

static json finish(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

static json header(const CompletionId& id, const char* object) {
  return {{"id", id.id}, {"object", object}, {"created", id.created}, {"model", id.model},
          {"system_fingerprint", "ferry"}};
}

static json token_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(int(ch));
  return b;
}

json chat_logprobs(const std::vector<TokenLogprobs>& toks) {
  json content = json::array();
  for (const TokenLogprobs& t : toks) {
    json top = json::array();
    for (const auto& [tok, lp] : t.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", token_bytes(tok)}});
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", token_bytes(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json text_logprobs(const std::vector<TokenLogprobs>& toks, size_t offset0) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t at = offset0;
  for (const TokenLogprobs& t : toks) {
    tokens.push_back(t.token);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [tok, lp] : t.top) top[tok] = lp;
    tops.push_back(top);
    offsets.push_back(at);
    at += t.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_completion(const CompletionId& id, const TextDelta& text, const GenerationResult& r, json logprobs) {
  json msg = {{"role", "assistant"}, {"content", text.content}};
  if (!text.reasoning.empty()) msg["reasoning_content"] = text.reasoning;
  json j = header(id, "chat.completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"message", msg}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish(r.finish_reason)}}});
  j["usage"] = usage_json(r);
  return j;
}

json chat_chunk(const CompletionId& id, json delta, const std::string& finish_reason, json logprobs) {
  json j = header(id, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                               {"finish_reason", finish(finish_reason)}}});
  return j;
}

json text_completion(const CompletionId& id, const std::string& text, const GenerationResult& r, json logprobs) {
  json j = header(id, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish(r.finish_reason)}}});
  j["usage"] = usage_json(r);
  return j;
}

json text_chunk(const CompletionId& id, const std::string& text, const std::string& finish_reason, json logprobs) {
  json j = header(id, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish(finish_reason)}}});
  return j;
}

json usage_chunk(const CompletionId& id, bool chat, const GenerationResult& r) {
  json j = header(id, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(r);
  return j;
}

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace ferry::server
