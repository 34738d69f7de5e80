// `ferry chat`: a conversation in the terminal (what llama.cpp's conversation mode is), on the engine
// every front-end builds. Each line on stdin is a user turn; the reply streams to stdout. The prompt is
// the whole conversation rendered by the chat template ferry-server uses (the model's replies kept as
// its own token ids), and the server's prompt cache keeps the last turn's prompt pass, so a turn passes
// only its new tokens through the model: the same logits as passing the whole conversation.
//
// Lines starting with '/' are commands: /reset (a new conversation), /system TEXT (set the system
// message and start over), /exit (or end of input). With --draft one drafter serves the whole session
// (the tokens stay the plain ones).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <unistd.h>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/engine.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/server/chat_stream.hpp"
#include "kernels/decoding/prompt_cache.hpp"
#include "apps/engine_cli/engine_cli.hpp"
#include "apps/engine_cli/template_catalog.hpp"
#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/tokenizers/chat_template.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "kernels/decoding/generate.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry::cli {
namespace {

struct ChatOptions {
  EngineOptions engine;
  int64_t n_predict = 512;  // most tokens per reply
  float temp = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  std::string system, chat_template, trace_hash;
};

class ChatSession {
 public:
  // drafter: --draft's, kept for the session (nullptr: plain steps).
  ChatSession(ChatOptions& o, LoadedModel& m, std::unique_ptr<DrafterClient> drafter)
      : o_(o),
        m_(m),
        tmpl_(choose_chat_template(o.chat_template, o.engine.model.dir, m.cfg.model_type)),
        cache_(*m.model, o.engine.ctx, true),
        stop_ids_(chat_stop_ids(tmpl_, *m.tokenizer, m.cfg.eos_id)),
        drafter_(std::move(drafter)) {
    if (!o.trace_hash.empty()) {
      hashes_ = std::make_unique<std::ofstream>(o.trace_hash);
      if (!*hashes_) throw UsageError("--trace-hash " + o.trace_hash + ": cannot open the file for writing");
    }
    reset();
  }

  void reset() {
    messages_.clear();
    if (!o_.system.empty()) messages_.push_back({"system", o_.system, {}});
  }

  // One user turn: the reply to stdout, a status line to stderr. False: the turn did not fit.
  bool turn(const std::string& text) {
    messages_.push_back({"user", text, {}});
    const std::vector<int32_t> prompt = tokenize_prompt(tmpl_, *m_.tokenizer, render_chat(tmpl_, messages_, ""));
    if (int64_t(prompt.size()) >= o_.engine.ctx) {
      messages_.pop_back();
      std::fprintf(stderr, "ferry chat: the conversation would be %zu tokens, the context holds %lld (-c): /reset to "
                   "start over, or a larger -c\n", prompt.size(), static_cast<long long>(o_.engine.ctx));
      return false;
    }
    GenerateParams gp;
    gp.n_predict = std::min<int64_t>(o_.n_predict, o_.engine.ctx - int64_t(prompt.size()));
    gp.sampling = {o_.temp, o_.top_p, o_.seed};
    gp.stop_ids = stop_ids_;
    PromptCache::Lease lease = cache_.begin(prompt);
    cache_.request_snapshot(lease, gp);
    TextPipeline pipe(tmpl_.stop, tmpl_.reasoning);
    ChatMessage reply{"assistant", "", {}};
    auto show = [&](const TextDelta& d) {
      std::fputs(d.reasoning.c_str(), stdout);  // a model that thinks aloud: shown as it comes
      std::fputs(d.content.c_str(), stdout);
      reply.content += d.content;
      std::fflush(stdout);
    };
    auto on_token = [&](const GeneratedToken& t) {
      if (hashes_) write_trace_hash(*hashes_, t);
      if (std::find(stop_ids_.begin(), stop_ids_.end(), t.id) != stop_ids_.end()) return true;
      reply.ids.push_back(t.id);
      show(pipe.feed(m_.tokenizer->display_bytes(t.id)));
      return !pipe.stopped();
    };
    GenerateMetrics g;
    SpecStats st;
    try {
      if (drafter_) {
        generate_speculative(*m_.model, *lease.state, prompt, gp, draft_spec_params(o_.engine.draft),
                             drafter_->propose_fn(), g, st, on_token);
      } else {
        generate(*m_.model, *lease.state, prompt, gp, g, on_token);
      }
    } catch (...) {
      cache_.end(PromptCache::Lease{}, false);
      messages_.pop_back();
      throw;
    }
    cache_.end(std::move(lease), true);
    show(pipe.finish());
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (hashes_) hashes_->flush();
    messages_.push_back(std::move(reply));  // the model's own ids, special tokens included
    std::string drafts;
    if (drafter_)
      drafts = " | blocks " + std::to_string(st.blocks) + ", accepted " + std::to_string(st.accepted) + " of " +
               std::to_string(st.drafts) + " drafts";
    std::fprintf(stderr, "[prompt %lld tokens (%lld cached) in %.2f s | %lld tokens, %.2f tok/s%s]\n",
                 static_cast<long long>(g.prompt_tokens), static_cast<long long>(g.prompt_cached), g.prompt_s,
                 static_cast<long long>(g.generated), g.steady_tok_s(), drafts.c_str());
    return true;
  }

 private:
  ChatOptions& o_;
  LoadedModel& m_;
  ChatTemplate tmpl_;
  PromptCache cache_;
  std::vector<int32_t> stop_ids_;
  std::vector<ChatMessage> messages_;
  std::unique_ptr<DrafterClient> drafter_;
  std::unique_ptr<std::ofstream> hashes_;
};

void chat_main(ChatOptions& o) {
  validate_sampling(o.n_predict, o.temp, o.top_p);
  o.engine.prompt_cache = true;  // the plan counts the cache's snapshot
  Runtime rt;
  Engine e = start_engine(o.engine, &rt);
  if (!e.model.tokenizer) throw UsageError("-m " + o.engine.model.dir + ": ferry chat needs the model's tokenizer files");
  ChatSession s(o, e.model, o.engine.draft.spec.empty() ? nullptr : start_drafter(rt, o.engine.draft, e.model));
  const bool tty = ::isatty(0) == 1;
  if (tty) std::fputs("ferry chat: type a message; /reset, /system TEXT, /exit\n", stderr);
  for (std::string line;;) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    if (line == "/reset") {
      s.reset();
      continue;
    }
    if (line.rfind("/system ", 0) == 0) {
      o.system = line.substr(8);
      s.reset();
      continue;
    }
    s.turn(line);
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* c = app.add_subcommand("chat", "Chat in the terminal: one user turn per line, the reply streamed");
  add_engine_flags(c, o->engine);
  c->add_option("-n,--n-predict", o->n_predict, "Most tokens per reply")->capture_default_str();
  c->add_option("--temp", o->temp, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("--top-p", o->top_p, "Nucleus sampling threshold")->capture_default_str();
  c->add_option("-s,--seed", o->seed, "Sampling seed")->capture_default_str();
  c->add_option("--system", o->system, "System message (default: the template's)");
  c->add_option("--chat-template", o->chat_template, "kimi, plain, or a template JSON file (default: by model)");
  c->add_option("--trace-hash", o->trace_hash, "Write 'position id logits-hash' for every generated token to FILE");
  c->callback([o] { chat_main(*o); });
}

}  // namespace ferry::cli
