#include "apps/ferry-server/http_sinks.hpp"

namespace ferry::server {

using nlohmann::json;

void BufferedSink::on_delta(const TextDelta& d) {
  text_.content += d.content;
  text_.reasoning += d.reasoning;
}

void BufferedSink::on_done(const GenerationResult& r) {
  json lp = nullptr;
  if (logprobs_) lp = chat_ ? chat_logprobs(tokens_) : text_logprobs(tokens_, 0);
  const json body = chat_ ? chat_completion(id_, text_, r, lp) : text_completion(id_, text_.content, r, lp);
  reply(c_, req_, 200, dump_json(body), "application/json");
}

void BufferedSink::on_error(const std::string& message) {
  reply_error(c_, req_, ApiError(500, "generation failed: " + message, "", "generation_failed", "server_error"));
}

void BufferedSink::on_cancelled() {
  // The client is gone (nothing reaches it) or the server is stopping (this tells it why).
  reply_error(c_, req_, ApiError(503, "the request was cancelled: the client disconnected or the server is stopping",
                                 "", "cancelled", "server_error"));
}

void StreamSink::on_start() {
  resp_.emplace(req_->create_response<restinio::chunked_output_t>(status_line(200)));
  add_sse_headers(*resp_);
  count_response(c_, 200);
  // OpenAI's first chat chunk carries the role only.
  if (chat_) send(sse_event(chat_chunk(id_, {{"role", "assistant"}, {"content", ""}}, "")));
  else resp_->flush();
}

void StreamSink::send(std::string event) {
  resp_->append_chunk(std::move(event));
  resp_->flush([job = job_](const asio::error_code& ec) {
    if (!ec) return;
    if (auto j = job.lock()) j->cancelled = true;  // the client cannot be written to: stop generating
  });
}

json StreamSink::take_logprobs() {
  if (!logprobs_) return nullptr;
  json lp = chat_ ? chat_logprobs(pending_) : text_logprobs(pending_, text_bytes_);
  for (const TokenLogprobs& t : pending_) text_bytes_ += t.token.size();
  pending_.clear();
  return lp;
}

void StreamSink::on_delta(const TextDelta& d) {
  if (!chat_) {
    send(sse_event(text_chunk(id_, d.content, "", take_logprobs())));
    return;
  }
  if (!d.reasoning.empty())
    send(sse_event(chat_chunk(id_, {{"reasoning_content", d.reasoning}}, "", d.content.empty() ? take_logprobs() : nullptr)));
  if (!d.content.empty()) send(sse_event(chat_chunk(id_, {{"content", d.content}}, "", take_logprobs())));
}

void StreamSink::on_done(const GenerationResult& r) {
  json last = chat_ ? chat_chunk(id_, json::object(), r.finish_reason, take_logprobs())
                    : text_chunk(id_, "", r.finish_reason, take_logprobs());
  last["usage"] = usage_json(r);  // every response carries usage, the final chunk included
  send(sse_event(last));
  if (include_usage_) send(sse_event(usage_chunk(id_, chat_, r)));
  finish();
}

void StreamSink::on_error(const std::string& message) {
  if (!resp_) on_start();
  send(sse_event(error_json(ApiError(500, "generation failed: " + message, "", "generation_failed", "server_error"))));
  finish();
}

void StreamSink::on_cancelled() {
  if (!resp_) {
    reply_error(c_, req_, ApiError(503, "the request was cancelled: the client disconnected or the server is stopping",
                                   "", "cancelled", "server_error"));
    return;
  }
  finish();
}

void StreamSink::finish() {
  resp_->append_chunk(std::string(sse_done()));
  resp_->done();
}

}  // namespace ferry::server
