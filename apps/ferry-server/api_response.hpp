// OpenAI-shaped response bodies: completions, streaming chunks, model lists and errors. All JSON is
// written with invalid UTF-8 replaced (U+FFFD), so a body is always valid JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "actors/server/chat_stream.hpp"
#include "actors/server/server_engine.hpp"

namespace ferry::server {

struct ApiError;

// Identity of one completion, shared by all of its chunks.
struct CompletionId {
  std::string id;      // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0; // Unix seconds
  std::string model;
};

std::string dump_json(const nlohmann::json& j);
nlohmann::json usage_json(const GenerationResult& r);
nlohmann::json error_json(const ApiError& e);

// `logprobs` of a choice: null when not asked for, else chat_logprobs / text_logprobs of its tokens.
nlohmann::json chat_completion(const CompletionId& id, const TextDelta& text, const GenerationResult& r,
                               nlohmann::json logprobs = nullptr);
// delta: {"role": …} / {"content": …} / {"reasoning_content": …} / {}; finish_reason "" -> null.
nlohmann::json chat_chunk(const CompletionId& id, nlohmann::json delta, const std::string& finish_reason,
                          nlohmann::json logprobs = nullptr);
nlohmann::json text_completion(const CompletionId& id, const std::string& text, const GenerationResult& r,
                               nlohmann::json logprobs = nullptr);
nlohmann::json text_chunk(const CompletionId& id, const std::string& text, const std::string& finish_reason,
                          nlohmann::json logprobs = nullptr);
// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::json chat_logprobs(const std::vector<TokenLogprobs>& toks);
// Completions (legacy): {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"};
// offsets count bytes of the completion from `offset0` (where these tokens start).
nlohmann::json text_logprobs(const std::vector<TokenLogprobs>& toks, size_t offset0);
// The final usage-only chunk (stream_options.include_usage): empty choices.
nlohmann::json usage_chunk(const CompletionId& id, bool chat, const GenerationResult& r);

// One server-sent event carrying a JSON payload, or the terminating "data: [DONE]".
std::string sse_event(const nlohmann::json& j);
inline const char* sse_done() { return "data: [DONE]\n\n"; }

}  // namespace ferry::server
