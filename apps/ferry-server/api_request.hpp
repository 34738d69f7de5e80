// Parsing and validating OpenAI-style request bodies. Every rejection is an ApiError carrying the HTTP
// status and OpenAI's error fields, with a message that names the offending field (`param`).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizers/chat_template.hpp"

namespace ferry::server {

struct ApiError : std::runtime_error {
  ApiError(int status_, std::string message, std::string param_ = "", std::string code_ = "",
           std::string type_ = "invalid_request_error")
      : std::runtime_error(message), status(status_), param(std::move(param_)), code(std::move(code_)),
        type(std::move(type_)) {}
  int status;
  std::string param, code, type;
};

struct RequestLimits {
  int64_t max_tokens_limit = 4096;  // --max-tokens-limit
};

// Fields shared by /v1/chat/completions and /v1/completions.
struct SamplingRequest {
  std::string model;
  int64_t max_tokens = -1;  // -1: not given (the server uses what the context and limit allow)
  float temperature = 1.0f; // OpenAI's default
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: an extra usage-only chunk
  int logprobs = -1;           // >= 0: each token's logprob and that many alternatives (chat: top_logprobs)
};

struct ChatRequest : SamplingRequest {
  std::vector<ChatMessage> messages;
  std::string tools_json;  // compact JSON of `tools`, "" when absent
};

struct CompletionRequest : SamplingRequest {
  std::string prompt;              // text prompt, or
  std::vector<int32_t> prompt_ids; // token ids (prompt given as an array of integers)
  bool has_ids = false;
};

// Throw ApiError: 400 invalid_json for a body that is not JSON (or nests deeper than 64 levels),
// 400 with `param` naming the field for a missing field or a bad type or value.
ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits);
CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits);

}  // namespace ferry::server
