#include "apps/ferry-server/http_handlers.hpp"

#include <algorithm>
#include <chrono>

#include "apps/ferry-server/http_sinks.hpp"
#include "io/errors.hpp"
#include "io/tokenizers/tokenizer.hpp"

namespace ferry::server {
namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

CompletionId new_id(ServerContext& c, bool chat) {
  const uint64_t n = c.next_id.fetch_add(1);
  return {(chat ? "chatcmpl-" : "cmpl-") + std::to_string(c.started_unix) + "-" + std::to_string(n), unix_now(),
          c.model_name};
}

// Shared by both endpoints: limits, stop rules, queueing. `param` names the prompt field in errors.
Handled submit(ServerContext& c, const Request& req, const SamplingRequest& s, std::vector<int32_t> prompt,
               bool chat, const char* param) {
  const int64_t ctx = c.engine->ctx();
  const auto n = static_cast<int64_t>(prompt.size());
  if (n == 0) throw ApiError(400, std::string("'") + param + "' gives an empty prompt", param, "invalid_value");
  if (n >= ctx)
    throw ApiError(413, "the prompt is " + std::to_string(n) + " tokens; the context holds " + std::to_string(ctx) +
                            " tokens (--ctx " + std::to_string(ctx) + "), prompt and reply together",
                   param, "context_length_exceeded");
  auto job = std::make_shared<GenerationJob>();
  job->connection_id = req->connection_id();
  // Without max_tokens the reply may run to the server's limit; either way it ends with the context.
  job->params.n_predict = std::min(s.max_tokens < 0 ? c.limits.max_tokens_limit : s.max_tokens, ctx - n);
  job->params.sampling = {s.temperature, s.top_p, s.seed};
  job->params.logprobs = s.logprobs;
  job->params.stop_ids = chat ? c.chat_stop_ids : std::vector<int32_t>{};
  if (!chat && c.model.cfg.eos_id >= 0) job->params.stop_ids.push_back(static_cast<int32_t>(c.model.cfg.eos_id));
  job->stop = s.stop;
  if (chat) {
    job->stop.insert(job->stop.end(), c.tmpl.stop.begin(), c.tmpl.stop.end());
    job->reasoning = c.tmpl.reasoning;
  }
  job->prompt = std::move(prompt);
  const CompletionId id = new_id(c, chat);
  if (s.stream) {
    auto sink = std::make_shared<StreamSink>(c, req, id, chat, s.include_usage, s.logprobs >= 0);
    sink->attach(job);
    job->sink = sink;
  } else {
    job->sink = std::make_shared<BufferedSink>(c, req, id, chat, s.logprobs >= 0);
  }
  switch (c.engine->submit(job)) {
    case ServerEngine::Submit::accepted:
      return restinio::request_accepted();
    case ServerEngine::Submit::queue_full:
      c.metrics->rejected_busy.add(1);
      throw ApiError(429, "the server is busy: " + std::to_string(c.opt.max_queue) +
                              " requests are already waiting (--max-queue); retry later",
                     "", "queue_full", "rate_limit_error");
    case ServerEngine::Submit::stopped:
      break;
  }
  throw ApiError(503, "the server is stopping", "", "stopping", "server_error");
}

}  // namespace

Handled handle_chat_completions(ServerContext& c, const Request& req) {
  ChatRequest r = parse_chat_request(req->body(), c.limits);
  // A reply this server generated comes back as the same tokens, special ones included, not re-encoded.
  for (auto& m : r.messages)
    if (m.role == "assistant") m.ids = c.engine->reply_ids(m.content);
  std::vector<int32_t> prompt;
  try {
    prompt = tokenize_prompt(c.tmpl, *c.model.tokenizer, render_chat(c.tmpl, r.messages, r.tools_json));
  } catch (const ConfigError& e) {
    throw ApiError(400, e.what(), "messages", "invalid_value");
  } catch (const FormatError& e) {
    throw ApiError(400, std::string("'messages': ") + e.what(), "messages", "invalid_value");
  }
  return submit(c, req, r, std::move(prompt), true, "messages");
}

Handled handle_completions(ServerContext& c, const Request& req) {
  const CompletionRequest r = parse_completion_request(req->body(), c.limits);
  std::vector<int32_t> prompt;
  const Tokenizer& tok = *c.model.tokenizer;
  if (r.has_ids) {
    for (int32_t id : r.prompt_ids)
      if (id >= c.model.cfg.vocab)
        throw ApiError(400, "'prompt' holds token id " + std::to_string(id) + ", outside the vocabulary of " +
                                std::to_string(c.model.cfg.vocab), "prompt", "invalid_value");
    prompt = r.prompt_ids;
  } else {
    // Raw prompt mode: the text is the whole prompt, special-token names included (as benchmarks use it).
    if (tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    try {
      auto ids = tok.encode(r.prompt, true);
      prompt.insert(prompt.end(), ids.begin(), ids.end());
    } catch (const FormatError& e) {
      throw ApiError(400, std::string("'prompt': ") + e.what(), "prompt", "invalid_value");
    }
  }
  return submit(c, req, r, std::move(prompt), false, "prompt");
}

Handled handle_models(ServerContext& c, const Request& req) {
  nlohmann::json m = {{"id", c.model_name}, {"object", "model"}, {"created", c.started_unix}, {"owned_by", "ferry"},
                      {"meta", {{"model_type", c.model.cfg.model_type}, {"context_length", c.engine->ctx()},
                                {"chat_template", c.tmpl.name}, {"vocab_size", c.model.cfg.vocab}}}};
  nlohmann::json body = {{"object", "list"}, {"data", nlohmann::json::array({m})}};
  return reply(c, req, 200, dump_json(body), "application/json");
}

Handled handle_health(ServerContext& c, const Request& req) {
  nlohmann::json body = {{"status", "ok"}, {"model", c.model_name}, {"queue_depth", c.engine->queue_depth()}};
  return reply(c, req, 200, dump_json(body), "application/json");
}

void refresh_engine_metrics(ServerContext& c) {
  if (c.model.streaming) c.metrics->set_streaming(c.model.streaming->metrics());
}

Handled handle_metrics(ServerContext& c, const Request& req) {
  refresh_engine_metrics(c);
  return reply(c, req, 200, c.registry.prometheus(), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace ferry::server
