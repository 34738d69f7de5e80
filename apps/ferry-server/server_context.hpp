// What every part of ferry-server shares: the options, the loaded model and its chat template, the
// metrics registry, the engine and the dashboard feed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "actors/drafter/drafter_bridge.hpp"
#include "io/tokenizers/chat_template.hpp"
#include "actors/runtime/engine.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/server/server_engine.hpp"
#include "actors/server/server_metrics.hpp"
#include "apps/ferry-server/api_request.hpp"

namespace ferry::server {

class EventsHub;

struct ServerOptions {
  ServerOptions() { engine.prompt_cache = true; }
  EngineOptions engine;            // the one engine option set (model, back-end, streaming, caches, ...)
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string api_key;             // empty: no authentication
  size_t max_queue = 8;            // requests that may wait while one generates
  int64_t max_tokens_limit = 4096; // largest max_tokens a request may ask for
  size_t max_body_bytes = 1 << 20; // larger request bodies get 413
  std::string chat_template;       // name of a built-in template or a path to a template file
  std::string model_name;          // the id /v1/models reports; default: the model directory's name
  int http_threads = 2;
  int events_interval_ms = 500;    // dashboard feed period
  int request_timeout_s = 3600;    // longest a request may take (queue wait + generation)
  // Availability: one client address may hold this many connections (more are closed at accept), all
  // clients together max_connections; a connection idle (or sending one request's headers and body)
  // longer than idle_timeout_s is closed. So a client holding ~1,000 idle connections cannot stall
  // others (tests/apps/server: ServerRobustness.IdleConnectionFloodDoesNotStallAGoodRequest).
  size_t max_connections = 1024;
  size_t max_connections_per_client = 64;
  int idle_timeout_s = 5;
  std::string trace_hash;          // --trace-hash FILE: every generated token's "position id logits-hash"
};

struct ServerContext {
  ServerOptions opt;
  std::unique_ptr<Runtime> runtime;  // the process's actor system; declared before (outlives) the model
  LoadedModel model;
  MemoryPlan plan;                 // how the engine divided GPU and host memory
  ChatTemplate tmpl;
  std::vector<int32_t> chat_stop_ids;  // end-of-text id + the template's stop tokens
  std::string model_name;
  int64_t started_unix = 0;
  RequestLimits limits;
  MetricsRegistry registry;
  // --draft: one drafter sidecar behind its bridge for the server's life, on the runtime's actor system
  // (declared before `engine`, whose jobs call it, so it is destroyed after the engine).
  std::unique_ptr<DrafterClient> drafter;
  std::unique_ptr<EngineMetrics> metrics;
  std::unique_ptr<std::ostream> trace_hash;  // --trace-hash; declared before (outlives) the engine writing it
  std::unique_ptr<ServerEngine> engine;
  std::unique_ptr<EventsHub> events;
  std::atomic<uint64_t> next_id{1};
};

// Copies the streaming runtime's counters into the registry (before /metrics and each dashboard event).
void refresh_engine_metrics(ServerContext& c);

// Runs the HTTP server until SIGINT or SIGTERM (blocks). Throws when the address cannot be bound.
void run_http_server(ServerContext& c);

}  // namespace ferry::server
