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
  BufferedSink(ServerContext& c, Request req, CompletionId id, bool chat)
      : c_(c), req_(std::move(req)), id_(std::move(id)), chat_(chat) {}
  void on_delta(const TextDelta& d) override;
  void on_done(const GenerationResult& r) override;
  void on_error(const std::string& message) override;
  void on_cancelled() override;

 private:
  ServerContext& c_;
  Request req_;
  CompletionId id_;
  bool chat_;
  TextDelta text_;
};

class StreamSink final : public GenerationSink {
 public:
  StreamSink(ServerContext& c, Request req, CompletionId id, bool chat, bool include_usage)
      : c_(c), req_(std::move(req)), id_(std::move(id)), chat_(chat), include_usage_(include_usage) {}
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

  ServerContext& c_;
  Request req_;
  CompletionId id_;
  bool chat_, include_usage_;
  std::weak_ptr<GenerationJob> job_;
  std::optional<restinio::response_builder_t<restinio::chunked_output_t>> resp_;
};

}  // namespace ferry::server
