// RESTinio set-up: a thread pool serving the routes, a connection-state listener that cancels the
// generation of a client that disconnects, and signal handling for a clean stop.
#include <asio.hpp>
#include <cstdio>
#include <restinio/all.hpp>
#include <thread>

#include "apps/ferry-server/embedded.hpp"
#include "apps/ferry-server/events_hub.hpp"
#include "apps/ferry-server/http_handlers.hpp"

namespace ferry::server {
namespace {

struct ConnectionListener {
  ServerContext* c;
  void state_changed(const restinio::connection_state::notice_t& n) noexcept {
    if (!restinio::holds_alternative<restinio::connection_state::closed_t>(n.cause())) return;
    try {
      c->engine->cancel_connection(n.connection_id());
      c->events->connection_closed(n.connection_id());
    } catch (...) {  // noexcept: RESTinio calls this from its I/O threads
    }
  }
};

struct Traits : restinio::default_traits_t {
  using connection_state_listener_t = ConnectionListener;
  static constexpr bool use_connection_count_limiter = true;
};

bool authorized(const ServerContext& c, const Request& req) {
  if (c.opt.api_key.empty()) return true;
  const auto value = req->header().opt_value_of(restinio::http_field::authorization);
  return value && *value == "Bearer " + c.opt.api_key;
}

Handled route(ServerContext& c, const Request& req) {
  const std::string path{req->header().path()};
  const auto method = req->header().method();
  const bool get = method == restinio::http_method_get(), post = method == restinio::http_method_post();
  auto only = [&](bool ok, const char* allowed) {
    if (!ok) throw ApiError(405, "method not allowed on " + path + " (use " + allowed + ")", "", "method_not_allowed");
  };
  if (path.rfind("/v1/", 0) == 0 && !authorized(c, req))
    throw ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "", "invalid_api_key",
                   "authentication_error");
  if (req->body().size() > c.opt.max_body_bytes)
    throw ApiError(413, "the request body is " + std::to_string(req->body().size()) + " bytes, over the limit of " +
                            std::to_string(c.opt.max_body_bytes) + " (--max-body-bytes)", "", "body_too_large");
  if (path == "/v1/chat/completions") return only(post, "POST"), handle_chat_completions(c, req);
  if (path == "/v1/completions") return only(post, "POST"), handle_completions(c, req);
  if (path == "/v1/models") return only(get, "GET"), handle_models(c, req);
  if (path == "/health") return only(get, "GET"), handle_health(c, req);
  if (path == "/metrics") return only(get, "GET"), handle_metrics(c, req);
  if (path == "/events") return only(get, "GET"), c.events->subscribe(req);
  if (path == "/favicon.ico") return reply(c, req, 204, "", "image/x-icon");  // browsers ask; none is not an error
  if (path == "/" || path == "/index.html") {
    only(get, "GET");
    return reply(c, req, 200, std::string(embedded_index_html()), "text/html; charset=utf-8");
  }
  throw ApiError(404, "no such endpoint: " + path, "", "not_found", "not_found_error");
}

Handled handle(ServerContext& c, const Request& req) {
  try {
    return route(c, req);
  } catch (const ApiError& e) {
    return reply_error(c, req, e);
  } catch (const std::exception& e) {
    return reply_error(c, req, ApiError(500, std::string("internal error: ") + e.what(), "", "internal", "server_error"));
  }
}

}  // namespace

void run_http_server(ServerContext& c) {
  using namespace std::chrono;
  asio::io_context ioc;
  // RESTinio drops (closes) a request over its own limit without answering, so its limit sits well
  // above --max-body-bytes: bodies in between get a proper 413 from route().
  const uint64_t hard_body_limit = std::max<uint64_t>(4 * c.opt.max_body_bytes, c.opt.max_body_bytes + (1 << 20));
  restinio::http_server_t<Traits> server{
      restinio::external_io_context(ioc),
      restinio::server_settings_t<Traits>{}
          .port(c.opt.port)
          .address(c.opt.host)
          .request_handler([&c](const Request& req) { return handle(c, req); })
          .connection_state_listener(std::make_shared<ConnectionListener>(ConnectionListener{&c}))
          .incoming_http_msg_limits(restinio::incoming_http_msg_limits_t{}
                                        .max_url_size(8192)
                                        .max_field_count(100)
                                        .max_field_value_size(16384)
                                        .max_body_size(hard_body_limit))
          .max_parallel_connections(1024)
          // A second request slot keeps RESTinio reading while a request is in the engine, so a client
          // that disconnects is noticed (EOF) and its generation cancelled even before any byte is written.
          .max_pipelined_requests(2)
          // SSE chunks are small writes: without TCP_NODELAY, Nagle + delayed ACK stall each by ~40 ms.
          .socket_options_setter([](auto& options) { options.set_option(asio::ip::tcp::no_delay{true}); })
          .read_next_http_message_timelimit(seconds(15))
          .write_http_response_timelimit(seconds(30))
          .handle_request_timeout(seconds(c.opt.request_timeout_s))};
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const asio::error_code& ec, int) {
    if (ec) return;
    std::fprintf(stderr, "ferry-server: stopping\n");
    c.events->stop();
    c.engine->stop();
    server.close_async([&] { ioc.stop(); }, [&](std::exception_ptr) { ioc.stop(); });
  });
  server.open_sync();
  std::fprintf(stderr, "ferry-server: listening on http://%s:%u\n", c.opt.host.c_str(), unsigned(c.opt.port));
  std::vector<std::thread> pool;
  for (int i = 1; i < std::max(1, c.opt.http_threads); ++i) pool.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : pool) t.join();
}

}  // namespace ferry::server
