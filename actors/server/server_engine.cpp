#include "actors/server/server_engine.hpp"

#include <algorithm>
#include <exception>

#include "io/tokenizers/tokenizer.hpp"
#include "kernels/model/model.hpp"

namespace ferry {

ServerEngine::ServerEngine(Model& model, const Tokenizer& tok, int64_t ctx, size_t max_queue, EngineMetrics& metrics,
                           std::optional<ServerDrafter> drafter, bool prompt_cache)
    : model_(model),
      tok_(tok),
      ctx_(ctx),
      max_queue_(max_queue),
      metrics_(metrics),
      drafter_(std::move(drafter)),
      cache_(model, ctx, prompt_cache) {
  metrics_.queue_capacity.set(static_cast<double>(max_queue));
  worker_ = std::thread([this] { run(); });
}

ServerEngine::~ServerEngine() { stop(); }

ServerEngine::Submit ServerEngine::submit(std::shared_ptr<GenerationJob> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Submit::stopped;
    if (queue_.size() >= max_queue_) return Submit::queue_full;
    queue_.push_back(std::move(job));
    metrics_.queue_depth.set(static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
  return Submit::accepted;
}

void ServerEngine::cancel_connection(uint64_t connection_id) {
  std::lock_guard lock(mu_);
  if (running_ && running_->connection_id == connection_id) running_->cancelled = true;
  for (auto& j : queue_)
    if (j->connection_id == connection_id) j->cancelled = true;
}

void ServerEngine::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (running_) running_->cancelled = true;
    for (auto& j : queue_) j->cancelled = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

size_t ServerEngine::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void ServerEngine::run() {
  for (;;) {
    std::shared_ptr<GenerationJob> job;
    {
      std::unique_lock lock(mu_);
      // Drain the queue even when stopping, so every sink hears how its job ended.
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = job;
      metrics_.queue_depth.set(static_cast<double>(queue_.size()));
    }
    try {
      if (job->cancelled) {
        metrics_.cancelled.add(1);
        job->sink->on_cancelled();
      } else {
        metrics_.busy.set(1);
        execute(*job);
      }
    } catch (const std::exception&) {
      // A sink that fails to write (its client is gone) must not end the engine for everyone else.
    }
    metrics_.busy.set(0);
    metrics_.live_rate.set(0);
    std::lock_guard lock(mu_);
    running_.reset();
  }
}

bool ServerEngine::on_token(GenerationJob& job, TextPipeline& pipe, const GeneratedToken& t, GenerateMetrics& gm) {
  if (job.cancelled) return false;
  if (trace_hash_) {
    write_trace_hash(*trace_hash_, t);
    trace_hash_->flush();  // a reader may compare the file while the server runs
  }
  metrics_.generated_tokens.add(1);
  if (gm.generated == 1) {
    metrics_.prompt_tokens.add(static_cast<double>(gm.prompt_tokens));
    metrics_.last_prompt_s.set(gm.prompt_s);
  }
  metrics_.live_rate.set(gm.steady_tok_s());
  const auto& stops = job.params.stop_ids;
  // An end token ends the reply; its own text ("<|im_end|>") is not part of it.
  if (std::find(stops.begin(), stops.end(), t.id) != stops.end()) return true;
  const std::string bytes = tok_.display_bytes(t.id);
  if (job.params.logprobs >= 0) {
    TokenLogprobs lp{bytes, t.logprob, {}};
    for (const TopLogprob& o : t.top) lp.top.emplace_back(tok_.display_bytes(o.id), o.logprob);
    job.sink->on_logprobs(lp);
  }
  TextDelta d = pipe.feed(bytes);
  if (!d.empty()) job.sink->on_delta(d);
  return !pipe.stopped();
}

namespace {
constexpr size_t kRememberedReplies = 64;
}

void ServerEngine::remember(const std::vector<GeneratedToken>& toks, const std::vector<int32_t>& stop_ids) {
  std::pair<std::string, std::vector<int32_t>> r;
  for (const auto& t : toks) {
    if (std::find(stop_ids.begin(), stop_ids.end(), t.id) != stop_ids.end()) continue;
    r.first += tok_.token_bytes(t.id);
    r.second.push_back(t.id);
  }
  if (r.second.empty()) return;
  std::lock_guard lock(mu_);
  replies_.push_back(std::move(r));
  if (replies_.size() > kRememberedReplies) replies_.pop_front();
}

std::vector<int32_t> ServerEngine::reply_ids(const std::string& text) const {
  std::lock_guard lock(mu_);
  for (auto it = replies_.rbegin(); it != replies_.rend(); ++it)
    if (it->first == text) return it->second;
  return {};
}

void ServerEngine::execute(GenerationJob& job) {
  job.sink->on_start();
  TextPipeline pipe(job.stop, job.reasoning);
  GenerateMetrics gm;
  std::vector<GeneratedToken> toks;
  int64_t reused = 0;
  try {
    // The prompt cache's state (the last job's prompt rows where this prompt starts with them), kept
    // for the next job when this one ends, or a fresh one freed with the job.
    PromptCache::Lease lease = cache_.begin(job.prompt);
    reused = lease.reused;
    cache_.request_snapshot(lease, job.params);
    auto emit = [&](const GeneratedToken& t) { return on_token(job, pipe, t, gm); };
    if (drafter_) {
      SpecStats st;
      toks = generate_speculative(model_, *lease.state, job.prompt, job.params, drafter_->params, drafter_->propose, gm,
                                  st, emit);
      metrics_.add_draft(st);
    } else {
      toks = generate(model_, *lease.state, job.prompt, job.params, gm, emit);
    }
    cache_.end(std::move(lease), true);
  } catch (const std::exception& e) {
    cache_.end(PromptCache::Lease{}, false);
    metrics_.generations.add(1);
    job.sink->on_error(e.what());
    return;
  }
  metrics_.prompt_cached_tokens.add(static_cast<double>(reused));
  metrics_.generations.add(1);
  metrics_.busy.set(0);  // before the sink answers, so a client that sees its reply sees an idle engine
  metrics_.live_rate.set(0);
  metrics_.prompt_seconds.add(gm.prompt_s);
  metrics_.decode_seconds.add(gm.decode_s);
  if (gm.generated > 1) metrics_.steady_rate.set(gm.steady_tok_s());
  if (job.cancelled) {
    metrics_.cancelled.add(1);
    job.sink->on_cancelled();
    return;
  }
  remember(toks, job.params.stop_ids);
  TextDelta rest = pipe.finish();
  if (!rest.empty()) job.sink->on_delta(rest);
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(job.prompt.size());
  r.cached_tokens = reused;
  r.completion_tokens = static_cast<int64_t>(toks.size());
  const auto& stops = job.params.stop_ids;
  const bool end_token = !toks.empty() && std::find(stops.begin(), stops.end(), toks.back().id) != stops.end();
  r.finish_reason = (end_token || pipe.stopped()) ? "stop" : "length";
  job.sink->on_done(r);
}

}  // namespace ferry
