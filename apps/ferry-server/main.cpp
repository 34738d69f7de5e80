// ferry-server: an OpenAI-compatible HTTP server with a web chat and a live engine dashboard.
// `ferry-server --help` lists the options; docs/USAGE.md "Server" shows the API.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>

#include "apps/engine_cli/engine_cli.hpp"
#include "apps/ferry-server/events_hub.hpp"
#include "apps/ferry-server/server_context.hpp"
#include "apps/engine_cli/template_catalog.hpp"
#include "io/errors.hpp"

namespace ferry::server {
namespace {

void add_options(CLI::App& app, ServerOptions& o) {
  cli::add_engine_flags(&app, o.engine);
  app.add_option("--host", o.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port")->capture_default_str();
  app.add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' on every route but /health and the web page (also $FERRY_API_KEY)")
      ->envname("FERRY_API_KEY");
  app.add_option("--max-queue", o.max_queue, "Requests that may wait while one generates; more get 429")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--max-tokens-limit", o.max_tokens_limit, "Largest max_tokens a request may ask for")
      ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-body-bytes", o.max_body_bytes, "Largest request body; larger ones get 413")
      ->capture_default_str()->check(CLI::Range(256, 1 << 30));
  app.add_option("--http-threads", o.http_threads, "Threads serving HTTP")->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--chat-template", o.chat_template,
                 "Chat template: a built-in name (kimi, plain) or a template JSON file; default by model_type");
  app.add_option("--model-name", o.model_name, "Model id reported by /v1/models (default: the directory name)");
  app.add_option("--events-interval-ms", o.events_interval_ms, "Dashboard feed period")->capture_default_str()
      ->check(CLI::Range(50, 60000));
  app.add_option("--max-connections", o.max_connections, "Open connections in all")->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(65536)));
  app.add_option("--max-connections-per-client", o.max_connections_per_client,
                 "Open connections one client address may hold; more are closed at once")
      ->capture_default_str()->check(CLI::Range(size_t(1), size_t(65536)));
  app.add_option("--idle-timeout", o.idle_timeout_s,
                 "Seconds a connection may sit idle or take to send one request (slow clients are closed)")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  app.add_option("--trace-hash", o.trace_hash,
                 "Append 'position id logits-hash' for every token every request generates to FILE (the lines "
                 "`ferry run --trace-hash` writes: replies can be compared with it logit for logit)");
  app.add_flag("--prompt-cache,!--no-prompt-cache", o.engine.prompt_cache,
               "Keep the last request's prompt pass (to its last multiple of 64 tokens) for the next request that "
               "starts with the same tokens, e.g. the next turn of a chat; the same tokens either way (on by default)");
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

// Holds host:port from before the model loads until RESTinio binds it: a port in use fails at once,
// not after minutes of loading, and nobody takes it meanwhile.
class PortHold {
 public:
  PortHold(const std::string& host, uint16_t port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const std::string where = host + ":" + std::to_string(port);
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
      throw UsageError("--host " + host + ": cannot resolve the address to listen on");
    fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // Bound, not listening: a server already listening there makes bind fail; clients polling during
    // the load are refused at once instead of waiting in a backlog nobody accepts.
    const bool ok = fd_ >= 0 && ::bind(fd_, res->ai_addr, res->ai_addrlen) == 0;
    const int err = errno;
    ::freeaddrinfo(res);
    if (!ok) {
      release();
      throw UsageError("cannot listen on " + where + " (--host/--port): " + std::strerror(err));
    }
  }
  ~PortHold() { release(); }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// --draft: the same sidecar and bridge `ferry run --draft` uses, started once and kept across requests
// (the bridge restarts a sidecar that dies; a late or failed call is a plain step, never other tokens).
void start_drafter(ServerContext& c) {
  const DraftOptions& d = c.opt.engine.draft;
  if (d.spec.empty()) return;
  bool up = false;
  c.drafter = ferry::start_drafter(*c.runtime, d, c.model, &up);  // the runtime restarts its bridge
  std::fprintf(stderr, "ferry-server: drafter %s %s (up to %d drafts per block, gate %s, cost gate %s)\n",
               d.spec.c_str(), up ? "up" : "not up yet (requests run plain steps until it is)", d.max, d.gate.c_str(),
               d.cost_gate ? "on" : "off");
}

void load(ServerContext& c) {
  validate_engine_options(c.opt.engine);
  c.runtime = std::make_unique<Runtime>();  // the process's actor system, before anything spawns an actor
  Engine e = start_engine(c.opt.engine, c.runtime.get());
  c.model = std::move(e.model);
  c.plan = e.plan;
  if (!c.model.tokenizer) throw UsageError("model directory " + c.opt.engine.model.dir + " has no tokenizer files");
  int64_t& ctx = c.opt.engine.ctx;
  if (c.model.cfg.max_positions > 0 && ctx > c.model.cfg.max_positions) {
    std::fprintf(stderr, "ferry-server: --ctx %lld is over the model's %lld positions; using %lld\n",
                 static_cast<long long>(ctx), static_cast<long long>(c.model.cfg.max_positions),
                 static_cast<long long>(c.model.cfg.max_positions));
    ctx = c.model.cfg.max_positions;
  }
  c.tmpl = cli::choose_chat_template(c.opt.chat_template, c.opt.engine.model.dir, c.model.cfg.model_type);
  for (const auto& name : missing_specials(c.tmpl, *c.model.tokenizer))
    std::fprintf(stderr, "ferry-server: warning: the vocabulary has no special token %s; template '%s' encodes it "
                 "as plain text\n", name.c_str(), c.tmpl.name.c_str());
  c.chat_stop_ids = chat_stop_ids(c.tmpl, *c.model.tokenizer, c.model.cfg.eos_id);
  start_drafter(c);
}

void start(ServerContext& c) {
  PortHold hold(c.opt.host, c.opt.port);
  if (!c.opt.trace_hash.empty()) {
    c.trace_hash = std::make_unique<std::ofstream>(c.opt.trace_hash, std::ios::app);
    if (!*c.trace_hash) throw UsageError("--trace-hash " + c.opt.trace_hash + ": cannot open the file for writing");
  }
  load(c);
  c.model_name = c.opt.model_name.empty() ? default_model_name(c.opt.engine.model.dir) : c.opt.model_name;
  c.limits.max_tokens_limit = c.opt.max_tokens_limit;
  c.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  c.metrics = std::make_unique<EngineMetrics>(c.registry);
  std::optional<ServerDrafter> drafter;
  if (c.drafter) drafter = ServerDrafter{c.drafter->propose_fn(), draft_spec_params(c.opt.engine.draft)};
  c.engine = std::make_unique<ServerEngine>(*c.model.model, *c.model.tokenizer, c.opt.engine.ctx, c.opt.max_queue,
                                            *c.metrics, std::move(drafter), c.opt.engine.prompt_cache);
  if (c.trace_hash) c.engine->trace_hashes_to(c.trace_hash.get());
  c.events = std::make_unique<EventsHub>(c, std::chrono::milliseconds(c.opt.events_interval_ms));
  std::fprintf(stderr, "ferry-server: model %s (%s, backend %s%s) loaded in %.2f s; chat template '%s'; context %lld\n",
               c.model_name.c_str(), c.model.cfg.model_type.c_str(), c.model.backend->name().c_str(),
               c.model.streaming ? ", experts streaming" : "", c.model.load_s, c.tmpl.name.c_str(),
               static_cast<long long>(c.opt.engine.ctx));
  hold.release();
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
  } catch (const std::exception& e) {  // a flag's own check (a size without a unit, ...)
    std::fprintf(stderr, "ferry-server: error: %s\n", e.what());
    return ferry::cli::exit_status(e);
  }
  try {
    ferry::server::start(*c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-server: error: %s\n", e.what());
    return ferry::cli::exit_status(e);  // 2: refused before loading (bad flag, misfit, port taken)
  }
  return 0;
}
