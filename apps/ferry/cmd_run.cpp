// `ferry run` (generate text) and `ferry eval` (teacher-forced logits and perplexity).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/engine_cli/template_catalog.hpp"
#include "apps/ferry/commands.hpp"
#include "apps/ferry/draft_run.hpp"
#include "apps/ferry/streaming_report.hpp"
#include "apps/engine_cli/engine_cli.hpp"
#include "actors/runtime/engine.hpp"
#include "actors/runtime/runtime.hpp"
#include "io/errors.hpp"
#include "io/strict_parse.hpp"
#include "kernels/decoding/generate.hpp"

namespace ferry::cli {
namespace {

struct RunOptions {
  EngineOptions engine;  // model, back-end, streaming, caches, drafter (apps/engine_cli)
  std::string prompt, prompt_file, prompt_ids, trace_hash;
  int64_t n_predict = 64;
  float temp = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool json = false, ignore_eos = false, no_bos = false;
  bool profile = false;  // --profile: section times (Model::set_profile)
  int logprobs = -1;   // --logprobs N: each token's log-probability and the N most likely (--json)
  bool chat = false;   // --chat: the prompt as a user turn of the chat template ferry-server uses
  std::string system;  // --system: its system message
  std::string chat_template;  // --chat-template (default: by model_type, as the server)
};

// Strict: "4294967297" and "1.5" are refused, not read as 1 (io/strict_parse.hpp).
std::vector<int32_t> parse_ids(const std::string& s) { return parse_token_ids(s, "--prompt-ids"); }

ChatTemplate chat_template_of(const RunOptions& o, const LoadedModel& m) {
  return choose_chat_template(o.chat_template, o.engine.model.dir, m.cfg.model_type);
}

std::vector<int32_t> prompt_tokens(const RunOptions& o, const LoadedModel& m) {
  if (!o.prompt_ids.empty()) return parse_ids(o.prompt_ids);
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file);
    if (!f) throw Error("cannot read prompt file " + o.prompt_file);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (!m.tokenizer) throw Error("model directory " + o.engine.model.dir + " has no tokenizer: use --prompt-ids");
  if (o.chat) {
    const ChatTemplate t = chat_template_of(o, m);
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system, {}});
    msgs.push_back({"user", text, {}});
    return tokenize_prompt(t, *m.tokenizer, render_chat(t, msgs, ""));
  }
  std::vector<int32_t> ids;
  if (!o.no_bos && m.tokenizer->bos_id() >= 0) ids.push_back(m.tokenizer->bos_id());
  auto t = m.tokenizer->encode(text, true);
  ids.insert(ids.end(), t.begin(), t.end());
  if (ids.empty()) throw Error("the prompt is empty");
  return ids;
}

// `--profile-ops`: device time per op label, largest first, and how busy the device was.
void print_op_profile(const TimingBackend::Report& r) {
  std::vector<std::pair<std::string, TimingBackend::OpTime>> v(r.ops.begin(), r.ops.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::fprintf(stderr, "ferry: op profile (prompt + decode): ops busy %.3f ms of a %.3f ms span (%.1f%%)\n",
               r.busy_ms, r.span_ms, r.span_ms > 0 ? 100 * r.busy_ms / r.span_ms : 0.0);
  for (size_t i = 0; i < v.size() && i < 30; ++i)
    std::fprintf(stderr, "ferry:   %-40s %9.3f ms %7llu calls %9.2f us each %5.1f%%\n", v[i].first.c_str(),
                 v[i].second.ms, static_cast<unsigned long long>(v[i].second.calls),
                 1e3 * v[i].second.ms / double(v[i].second.calls), r.busy_ms > 0 ? 100 * v[i].second.ms / r.busy_ms : 0.0);
}

void print_metrics(const RunOptions& o, const LoadedModel& m, const GenerateMetrics& g, double wall,
                   const std::vector<int32_t>& prompt, const std::vector<GeneratedToken>& toks,
                   const std::vector<int32_t>& stop_ids, const DraftRun* draft) {
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.engine.model.dir;
    j["backend"] = m.backend->name();
    j["n"] = o.n_predict;
    j["prompt_tokens"] = g.prompt_tokens;
    j["prompt_ids"] = prompt;
    j["generated"] = g.generated;
    j["steady"] = g.steady_tok_s();
    j["steady_s"] = g.last_token_s - g.first_token_s;
    j["prompt_s"] = g.prompt_s;
    j["generation_tok_s"] = g.generation_tok_s();
    j["load_s"] = m.load_s;
    j["wall"] = wall;
    std::vector<int32_t> ids;
    std::string text;  // the reply as ferry-server streams it: token bytes, end tokens left out
    for (auto& t : toks) {
      ids.push_back(t.id);
      if (m.tokenizer && std::find(stop_ids.begin(), stop_ids.end(), t.id) == stop_ids.end())
        text += m.tokenizer->display_bytes(t.id);
    }
    j["ids"] = ids;
    if (m.tokenizer) j["text"] = text;
    if (o.logprobs >= 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& t : toks) {
        nlohmann::json top = nlohmann::json::array();
        for (const TopLogprob& x : t.top) top.push_back({{"id", x.id}, {"logprob", x.logprob}});
        lp.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
      }
      j["logprobs"] = lp;
    }
    if (draft) j["draft"] = draft_json(*draft);
    if (m.timing) {
      const auto r = m.timing->report();
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [name, t] : r.ops) ops[name] = {{"calls", t.calls}, {"ms", t.ms}};
      j["op_profile"] = {{"ops", ops}, {"busy_ms", r.busy_ms}, {"span_ms", r.span_ms}};
    }
    if (o.profile) {
      nlohmann::json p = nlohmann::json::object();
      for (const auto& [name, e] : m.model->profile()) p[name] = {{"seconds", e.seconds}, {"calls", e.calls}};
      j["profile"] = p;
    }
    report_streaming(m, &j);
    // Token bytes may split a UTF-8 character at the end of "text": replace rather than fail.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::fprintf(stderr,
               "\n\nferry: backend %s | prompt %lld tokens in %.3f s (%.1f tok/s) | generated %lld tokens\n"
               "ferry: steady decode %.2f tok/s | generation %.2f tok/s | load %.2f s | process wall %.2f s\n",
               m.backend->name().c_str(), static_cast<long long>(g.prompt_tokens), g.prompt_s,
               g.prompt_s > 0 ? g.prompt_tokens / g.prompt_s : 0.0, static_cast<long long>(g.generated),
               g.steady_tok_s(), g.generation_tok_s(), m.load_s, wall);
  if (draft) print_draft_stats(*draft);
  if (m.timing) print_op_profile(m.timing->report());
  if (o.profile) {
    double total = 0;
    for (const auto& [name, e] : m.model->profile()) total += e.seconds;
    std::fprintf(stderr, "ferry: profile (back-end synchronised at each section edge, prompt included):\n");
    for (const auto& [name, e] : m.model->profile())
      std::fprintf(stderr, "ferry:   %-10s %9.3f ms in %6llu calls (%.3f ms each, %4.1f%%)\n", name.c_str(),
                   e.seconds * 1e3, static_cast<unsigned long long>(e.calls), e.seconds * 1e3 / double(e.calls),
                   total > 0 ? 100 * e.seconds / total : 0.0);
  }
  report_streaming(m, nullptr);
}

void run_main(RunOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_sampling(o.n_predict, o.temp, o.top_p);
  Runtime rt;  // the one actor system of this process: streaming actors, drafter bridge, tracer
  Engine e = start_engine(o.engine, &rt);
  LoadedModel& m = e.model;
  const std::vector<int32_t> prompt = prompt_tokens(o, m);
  if (static_cast<int64_t>(prompt.size()) + o.n_predict > o.engine.ctx)
    throw LimitError("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(o.n_predict) +
                     " exceeds the context size -c " + std::to_string(o.engine.ctx));
  auto state = m.model->new_state(o.engine.ctx);
  m.model->set_profile(o.profile);
  GenerateParams gp;
  gp.n_predict = o.n_predict;
  gp.sampling = {o.temp, o.top_p, o.seed};
  gp.logprobs = o.logprobs;
  if (!o.ignore_eos && o.chat)
    gp.stop_ids = chat_stop_ids(chat_template_of(o, m), *m.tokenizer, m.cfg.eos_id);
  else if (!o.ignore_eos && m.cfg.eos_id >= 0)
    gp.stop_ids.push_back(static_cast<int32_t>(m.cfg.eos_id));
  std::unique_ptr<std::ofstream> hash_out;
  if (!o.trace_hash.empty()) {
    hash_out = std::make_unique<std::ofstream>(o.trace_hash);
    if (!*hash_out) throw Error("cannot write --trace-hash file " + o.trace_hash);
  }
  if (!o.json) {
    if (m.tokenizer) {
      std::fputs(m.tokenizer->display(prompt).c_str(), stdout);
    } else {
      for (int32_t id : prompt) std::printf("%d ", id);
      std::printf("|");
    }
    std::fflush(stdout);
  }
  GenerateMetrics g;
  auto on_token = [&](const GeneratedToken& t) {
    if (hash_out) write_trace_hash(*hash_out, t);
    if (!o.json) {
      if (m.tokenizer)
        std::fputs(m.tokenizer->display_bytes(t.id).c_str(), stdout);
      else
        std::printf(" %d", t.id);
      std::fflush(stdout);
    }
    return true;
  };
  DraftRun draft;
  const bool drafting = !o.engine.draft.spec.empty();
  auto toks = drafting ? generate_with_drafter(rt, o.engine.draft, m, *state, prompt, gp, g, draft, on_token)
                       : generate(*m.model, *state, prompt, gp, g, on_token);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.json && m.tokenizer) {
    std::fprintf(stderr, "\nferry: ids:");
    for (auto& t : toks) std::fprintf(stderr, " %d", t.id);
  }
  print_metrics(o, m, g, wall, prompt, toks, gp.stop_ids, drafting ? &draft : nullptr);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* c = app.add_subcommand("run", "Generate text from a prompt");
  add_engine_flags(c, o->engine);
  auto* p = c->add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* f = c->add_option("-f,--file", o->prompt_file, "Read the prompt text from a file");
  auto* ids = c->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
  p->excludes(f)->excludes(ids);
  f->excludes(ids);
  c->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  c->add_option("--temp", o->temp, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("--top-p", o->top_p, "Nucleus sampling threshold")->capture_default_str();
  c->add_option("-s,--seed", o->seed, "Sampling seed")->capture_default_str();
  c->add_option("--trace-hash", o->trace_hash,
                "Write 'position token FNV-1a-64(logits)' per generated position to FILE");
  c->add_flag("--json", o->json, "Print the result and metrics as one JSON object");
  c->add_option("--logprobs", o->logprobs,
                "With --json: each generated token's log-probability and the N most likely tokens (0-20), as "
                "ferry-server's logprobs")
      ->check(CLI::Range(0, 20));
  c->add_flag("--profile-ops", o->engine.model.profile_ops,
              "Time every back-end op on the device (events around each op) and print the largest");
  c->add_flag("--profile", o->profile,
              "Time each section (embedding, mixer and feed-forward by kind, head) with a back-end sync at its "
              "edges; slows decoding");
  c->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  c->add_flag("--no-bos", o->no_bos, "Do not prepend the BOS token to a text prompt");
  auto* chat = c->add_flag("--chat", o->chat, "Wrap the prompt in the chat template (as a user turn), as ferry-server does");
  c->add_option("--system", o->system, "System message of --chat (default: the template's)")->needs(chat);
  c->add_option("--chat-template", o->chat_template,
                "Chat template of --chat: a built-in name (kimi, plain) or a template JSON file; default by model_type")
      ->needs(chat);
  chat->excludes(ids);
  c->callback([o, c] {
    if (o->prompt.empty() && o->prompt_file.empty() && o->prompt_ids.empty())
      throw CLI::RequiredError("one of -p, -f or --prompt-ids");
    (void)c;
    run_main(*o);
  });
}

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("eval", "Teacher-forced logits, log-likelihood and perplexity of token ids");
  add_engine_flags(c, o->engine);
  c->add_option("--prompt-ids", o->prompt_ids, "Token ids, comma-separated")->required();
  c->add_option("--logits-out", *out, "Write float32 LE logits [n_ids, vocab] here");
  c->callback([o, out] {
    const auto ids = parse_ids(o->prompt_ids);
    o->engine.ctx = std::max<int64_t>(o->engine.ctx, static_cast<int64_t>(ids.size()));
    Runtime rt;  // streaming flags spawn actors in it
    Engine e = start_engine(o->engine, &rt);
    LoadedModel& m = e.model;
    auto state = m.model->new_state(static_cast<int64_t>(ids.size()));
    ForwardOptions fo;
    fo.prefill = true;
    fo.all_logits = true;
    const auto logits = m.model->forward(*state, ids, fo);
    const int64_t v = m.cfg.vocab;
    if (!out->empty()) {
      std::ofstream f(*out, std::ios::binary);
      f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
      if (!f) throw Error("cannot write --logits-out file " + *out);
    }
    double nll = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const float* row = logits.data() + static_cast<int64_t>(i) * v;
      double mx = row[0], s = 0;
      for (int64_t j = 1; j < v; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      for (int64_t j = 0; j < v; ++j) s += std::exp(row[j] - mx);
      const double lp = row[ids[i + 1]] - mx - std::log(s);
      nll -= lp;
      std::printf("%zu\t%d\tlogp %.6f\n", i + 1, ids[i + 1], lp);
    }
    const double n = static_cast<double>(ids.size() - 1);
    if (n > 0) std::printf("tokens %zu | mean log-likelihood %.6f | perplexity %.4f\n", ids.size(), -nll / n, std::exp(nll / n));
  });
}

}  // namespace ferry::cli
