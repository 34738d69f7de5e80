// Where a generation's output goes: a whole JSON response when it ends (BufferedSink), or SSE chunks
// as tokens arrive (StreamSink). Called on the engine thread; RESTinio moves the bytes to the socket
// on its own threads.
#pragma once

#include <memory>
#include <optional>

#include "actors/server/server_engine.hpp"
#include "apps/ferry-server/api_response.hpp"
#include "apps/ferry-server/http_util.hpp"

namespace ferry::server {

class BufferedSink final : public GenerationSink {
 public:
  BufferedSink(ServerContext& c, Request req, CompletionId id, bool chat, bool logprobs = false)
      : c_(c), req_(std::move(req)), id_(std::move(id)), chat_(chat), logprobs_(logprobs) {}
  void on_logprobs(const TokenLogprobs& t) override { tokens_.push_back(t); }
  void on_delta(const TextDelta& d) override;
  void on_done(const GenerationResult& r) override;
  void on_error(const std::string& message) override;
  void on_cancelled() override;

 private:
  ServerContext& c_;
  Request req_;
  CompletionId id_;
  bool chat_, logprobs_;
  TextDelta text_;
  std::vector<TokenLogprobs> tokens_;
};

class StreamSink final : public GenerationSink {
 public:
  StreamSink(ServerContext& c, Request req, CompletionId id, bool chat, bool include_usage, bool logprobs = false)
      : c_(c), req_(std::move(req)), id_(std::move(id)), chat_(chat), include_usage_(include_usage), logprobs_(logprobs) {}
  // Held until the next chunk, which carries them (the text they add may come in a later chunk).
  void on_logprobs(const TokenLogprobs& t) override { pending_.push_back(t); }
  // The job whose `cancelled` flag a failed write sets (the client is gone).
  void attach(const std::shared_ptr<GenerationJob>& job) { job_ = job; }
  void on_start() override;
  void on_delta(const TextDelta& d) override;
  void on_done(const GenerationResult& r) override;
  void on_error(const std::string& message) override;
  void on_cancelled() override;

 private:
  void send(std::string event);
  void finish();
  nlohmann::json take_logprobs();  // the pending tokens' logprobs (null when not asked for)

  ServerContext& c_;
  Request req_;
  CompletionId id_;
  bool chat_, include_usage_, logprobs_;
  std::vector<TokenLogprobs> pending_;
  size_t text_bytes_ = 0;  // completions: bytes of text_offset so far
  std::weak_ptr<GenerationJob> job_;
  std::optional<restinio::response_builder_t<restinio::chunked_output_t>> resp_;
};

}  // namespace ferry::server
