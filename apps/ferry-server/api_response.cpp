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

json chat_completion(const CompletionId& id, const TextDelta& text, const GenerationResult& r) {
  json msg = {{"role", "assistant"}, {"content", text.content}};
  if (!text.reasoning.empty()) msg["reasoning_content"] = text.reasoning;
  json j = header(id, "chat.completion");
  j["choices"] = json::array({{{"index", 0}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", finish(r.finish_reason)}}});
  j["usage"] = usage_json(r);
  return j;
}

json chat_chunk(const CompletionId& id, json delta, const std::string& finish_reason) {
  json j = header(id, "chat.completion.chunk");
  j["choices"] = json::array(
      {{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}}});
  return j;
}

json text_completion(const CompletionId& id, const std::string& text, const GenerationResult& r) {
  json j = header(id, "text_completion");
  j["choices"] =
      json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish(r.finish_reason)}}});
  j["usage"] = usage_json(r);
  return j;
}

json text_chunk(const CompletionId& id, const std::string& text, const std::string& finish_reason) {
  json j = header(id, "text_completion");
  j["choices"] =
      json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}}});
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
