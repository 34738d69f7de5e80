// ferry-server: an OpenAI-compatible HTTP server with a web chat and a live engine dashboard.
// `ferry-server --help` lists the options; docs/USAGE.md "Server" shows the API.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "apps/ferry-server/events_hub.hpp"
#include "apps/ferry-server/server_context.hpp"
#include "apps/ferry-server/template_catalog.hpp"
#include "io/errors.hpp"

namespace ferry::server {
namespace {

void add_options(CLI::App& app, ServerOptions& o) {
  app.add_option("-m,--model", o.model.dir, "Model directory: a Hugging Face checkpoint or a `ferry prepare` output")
      ->required();
  app.add_option("--host", o.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port")->capture_default_str();
  app.add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' on /v1/* (also $FERRY_API_KEY)")
      ->envname("FERRY_API_KEY");
  app.add_option("--max-queue", o.max_queue, "Requests that may wait while one generates; more get 429")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--max-tokens-limit", o.max_tokens_limit, "Largest max_tokens a request may ask for")
      ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-body-bytes", o.max_body_bytes, "Largest request body; larger ones get 413")
      ->capture_default_str()->check(CLI::Range(256, 1 << 30));
  app.add_option("-c,--ctx", o.ctx, "Context per request in tokens (prompt + reply)")->capture_default_str()
      ->check(CLI::Range(2, 1 << 24));
  app.add_option("-t,--threads", o.model.threads, "CPU threads for the model (0 = all cores)")->capture_default_str();
  app.add_option("--http-threads", o.http_threads, "Threads serving HTTP")->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--spine-type", o.model.spine_type, "Non-expert weights in memory: f32 (exact) or q8_0")
      ->capture_default_str();
  app.add_option("--chat-template", o.chat_template,
                 "Chat template: a built-in name (kimi, plain) or a template JSON file; default by model_type");
  app.add_option("--model-name", o.model_name, "Model id reported by /v1/models (default: the directory name)");
  app.add_option("--events-interval-ms", o.events_interval_ms, "Dashboard feed period")->capture_default_str()
      ->check(CLI::Range(50, 60000));
  app.add_option("--request-timeout", o.request_timeout_s, "Longest a request may take, queue wait included (s)")
      ->capture_default_str()->check(CLI::Range(1, 86400 * 7));
}

std::string default_model_name(const std::string& dir) {
  auto p = std::filesystem::weakly_canonical(dir);
  if (p.filename().empty()) p = p.parent_path();
  // Checkpoints often sit in MODEL/hf (the Hugging Face files of a prepared model): name it MODEL.
  if (p.filename() == "hf" && p.has_parent_path()) p = p.parent_path();
  return p.filename().string();
}

void start(ServerContext& c) {
  c.runtime = std::make_unique<Runtime>();
  c.model = load_model(c.opt.model, c.runtime.get());
  if (!c.model.tokenizer) throw ConfigError("model directory " + c.opt.model.dir + " has no tokenizer files");
  if (c.model.cfg.max_positions > 0 && c.opt.ctx > c.model.cfg.max_positions) {
    std::fprintf(stderr, "ferry-server: --ctx %lld is over the model's %lld positions; using %lld\n",
                 static_cast<long long>(c.opt.ctx), static_cast<long long>(c.model.cfg.max_positions),
                 static_cast<long long>(c.model.cfg.max_positions));
    c.opt.ctx = c.model.cfg.max_positions;
  }
  c.tmpl = choose_chat_template(c.opt.chat_template, c.opt.model.dir, c.model.cfg.model_type);
  for (const auto& name : missing_specials(c.tmpl, *c.model.tokenizer))
    std::fprintf(stderr, "ferry-server: warning: the vocabulary has no special token %s; template '%s' encodes it "
                 "as plain text\n", name.c_str(), c.tmpl.name.c_str());
  if (c.model.cfg.eos_id >= 0) c.chat_stop_ids.push_back(static_cast<int32_t>(c.model.cfg.eos_id));
  for (int32_t id : stop_token_ids(c.tmpl, *c.model.tokenizer)) c.chat_stop_ids.push_back(id);
  c.model_name = c.opt.model_name.empty() ? default_model_name(c.opt.model.dir) : c.opt.model_name;
  c.limits.max_tokens_limit = c.opt.max_tokens_limit;
  c.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  c.metrics = std::make_unique<EngineMetrics>(c.registry);
  c.engine = std::make_unique<ServerEngine>(*c.model.model, *c.model.tokenizer, c.opt.ctx, c.opt.max_queue, *c.metrics);
  c.events = std::make_unique<EventsHub>(c, std::chrono::milliseconds(c.opt.events_interval_ms));
  std::fprintf(stderr, "ferry-server: model %s (%s, backend %s) loaded in %.2f s; chat template '%s'; context %lld\n",
               c.model_name.c_str(), c.model.cfg.model_type.c_str(), c.model.backend->name().c_str(), c.model.load_s,
               c.tmpl.name.c_str(), static_cast<long long>(c.opt.ctx));
  run_http_server(c);
  c.events->stop();
  c.engine->stop();
}

}  // namespace
}  // namespace ferry::server

int main(int argc, char** argv) {
  CLI::App app{"ferry-server: OpenAI-compatible REST server, web chat and live engine dashboard"};
  auto c = std::make_unique<ferry::server::ServerContext>();
  ferry::server::add_options(app, c->opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    ferry::server::start(*c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-server: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
