// The server's engine: one worker thread owns the model and runs one generation at a time, taking
// jobs from a bounded FIFO queue. HTTP threads submit jobs and get their output through a sink; a
// job whose client went away is cancelled (the generation stops at its next token, a queued one is
// dropped without running). The last job's sequence state stays for the next one when the prompt
// cache is on (kernels/decoding/prompt_cache.hpp), else it is freed with the job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "actors/server/chat_stream.hpp"
#include "actors/server/server_metrics.hpp"
#include "kernels/decoding/generate.hpp"
#include "kernels/decoding/prompt_cache.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry {

class Model;
class Tokenizer;

struct GenerationResult {
  std::string finish_reason;  // "stop" (end token or stop string) or "length"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt tokens, those the prompt cache held (OpenAI prompt_tokens_details)
  int64_t completion_tokens = 0;
};

// One generated token's log-probabilities (GenerateParams::logprobs >= 0; OpenAI `logprobs`).
struct TokenLogprobs {
  std::string token;  // the token's bytes (a special or unknown id: its display form)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // the most likely tokens, most likely first
};

// Receives one job's output, called on the engine thread only.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void on_start() {}
  // Before the text the token adds (which may come later: stop strings and UTF-8 hold text back).
  virtual void on_logprobs(const TokenLogprobs&) {}
  virtual void on_delta(const TextDelta& d) = 0;
  virtual void on_done(const GenerationResult& r) = 0;
  virtual void on_error(const std::string& message) = 0;
  virtual void on_cancelled() {}
};

struct GenerationJob {
  uint64_t connection_id = 0;  // the HTTP connection waiting for it (for cancellation on disconnect)
  std::vector<int32_t> prompt;
  GenerateParams params;       // n_predict, sampling, stop ids
  std::vector<std::string> stop;  // stop strings on the decoded text
  ReasoningMarkers reasoning;
  std::shared_ptr<GenerationSink> sink;
  std::atomic<bool> cancelled{false};
};

// A drafter for every job: its proposals are checked in blocks by the big model, so the tokens are the
// ones plain generation gives (the same sampler, seed and stop rules); a failed or late drafter call is
// a plain step. `propose` must stay valid while the engine runs (ferry-server keeps the bridge).
struct ServerDrafter {
  ProposeFn propose;
  SpecParams params;
};

class ServerEngine {
 public:
  enum class Submit { accepted, queue_full, stopped };

  // max_queue: jobs that may wait while one runs. ctx: sequence state size per job. prompt_cache:
  // keep the last job's prompt pass for the next job that starts with the same tokens.
  ServerEngine(Model& model, const Tokenizer& tok, int64_t ctx, size_t max_queue, EngineMetrics& metrics,
               std::optional<ServerDrafter> drafter = std::nullopt, bool prompt_cache = true);
  ~ServerEngine();  // stops and joins

  Submit submit(std::shared_ptr<GenerationJob> job);
  // Cancels the running and queued jobs of a connection that closed.
  void cancel_connection(uint64_t connection_id);
  // Stops taking jobs, cancels what is queued or running, joins the worker.
  void stop();

  size_t queue_depth() const;
  // The token ids of a recent reply whose text (its tokens' bytes, end token left out) is `text`; empty
  // when none is remembered. Chat history sent back keeps the model's own tokens this way.
  std::vector<int32_t> reply_ids(const std::string& text) const;
  int64_t ctx() const { return ctx_; }
  // Appends "position id logits-hash" for every token every job generates to `out` (the lines
  // `ferry run --trace-hash` writes), so a reply can be checked logit for logit against `ferry run`.
  // Call before the first submit; `out` must outlive the engine.
  void trace_hashes_to(std::ostream* out) { trace_hash_ = out; }

 private:
  void run();
  void execute(GenerationJob& job);
  void remember(const std::vector<GeneratedToken>& toks, const std::vector<int32_t>& stop_ids);
  bool on_token(GenerationJob& job, TextPipeline& pipe, const GeneratedToken& t, GenerateMetrics& gm);

  Model& model_;
  const Tokenizer& tok_;
  const int64_t ctx_;
  const size_t max_queue_;
  EngineMetrics& metrics_;
  const std::optional<ServerDrafter> drafter_;
  std::ostream* trace_hash_ = nullptr;  // engine thread only
  PromptCache cache_;                   // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenerationJob>> queue_;
  std::shared_ptr<GenerationJob> running_;
  std::deque<std::pair<std::string, std::vector<int32_t>>> replies_;  // the last kRememberedReplies
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace ferry
