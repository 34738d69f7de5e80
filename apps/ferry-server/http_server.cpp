// RESTinio set-up: a thread pool serving the routes, a connection-state listener that cancels the
// generation of a client that disconnects, a per-client connection limit, and signal handling for a
// clean stop.
#include <asio.hpp>
#include <cstdio>
#include <map>
#include <mutex>
#include <restinio/all.hpp>
#include <thread>

#include "apps/ferry-server/embedded.hpp"
#include "apps/ferry-server/events_hub.hpp"
#include "apps/ferry-server/http_handlers.hpp"

namespace ferry::server {
namespace {

// Open connections per client address. The IP blocker counts a connection in when RESTinio accepts
// it and refuses one over the limit (closed at once, so its slot in max_connections is free again);
// the listener counts it out when it closes.
class ClientCounts {
 public:
  explicit ClientCounts(size_t limit) : limit_(limit) {}
  bool enter(const asio::ip::address& a) {
    std::lock_guard lk(m_);
    size_t& n = open_[a];
    if (n >= limit_) return false;
    ++n;
    return true;
  }
  void leave(const asio::ip::address& a) {
    std::lock_guard lk(m_);
    auto it = open_.find(a);
    if (it != open_.end() && --it->second == 0) open_.erase(it);
  }

 private:
  std::mutex m_;
  std::map<asio::ip::address, size_t> open_;
  size_t limit_;
};

struct IpBlocker {
  std::shared_ptr<ClientCounts> counts;
  restinio::ip_blocker::inspection_result_t inspect(const restinio::ip_blocker::incoming_info_t& i) noexcept {
    try {
      return counts->enter(i.remote_endpoint().address()) ? restinio::ip_blocker::allow() : restinio::ip_blocker::deny();
    } catch (...) {
      return restinio::ip_blocker::deny();
    }
  }
};

struct ConnectionListener {
  ServerContext* c;
  std::shared_ptr<ClientCounts> counts;
  void state_changed(const restinio::connection_state::notice_t& n) noexcept {
    if (!restinio::holds_alternative<restinio::connection_state::closed_t>(n.cause())) return;
    try {
      counts->leave(n.remote_endpoint().address());
      c->engine->cancel_connection(n.connection_id());
      c->events->connection_closed(n.connection_id());
    } catch (...) {  // noexcept: RESTinio calls this from its I/O threads
    }
  }
};

struct Traits : restinio::default_traits_t {
  using connection_state_listener_t = ConnectionListener;
  using ip_blocker_t = IpBlocker;
  static constexpr bool use_connection_count_limiter = true;
};

// 'Authorization: Bearer KEY', or ?api_key=KEY for the dashboard's EventSource (which cannot send headers).
bool authorized(const ServerContext& c, const Request& req) {
  if (c.opt.api_key.empty()) return true;
  const auto value = req->header().opt_value_of(restinio::http_field::authorization);
  if (value && *value == "Bearer " + c.opt.api_key) return true;
  try {
    const auto q = restinio::parse_query(req->header().query());
    const auto key = q.get_param("api_key");
    return key && *key == c.opt.api_key;
  } catch (const std::exception&) {
    return false;
  }
}

Handled route(ServerContext& c, const Request& req) {
  const std::string path{req->header().path()};
  const auto method = req->header().method();
  const bool get = method == restinio::http_method_get(), post = method == restinio::http_method_post();
  auto only = [&](bool ok, const char* allowed) {
    if (!ok) throw ApiError(405, "method not allowed on " + path + " (use " + allowed + ")", "", "method_not_allowed");
  };
  // Every route but the health check and the static page needs the key (the page's own fetches send it).
  const bool open_route = path == "/health" || path == "/" || path == "/index.html" || path == "/favicon.ico";
  if (!open_route && !authorized(c, req))
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
  // 64 x the limit (at least 64 MiB) keeps "413 for every oversized body" true for any body a client
  // plausibly sends, while one connection still cannot make the server buffer without bound.
  const uint64_t hard_body_limit = std::max<uint64_t>(64 * uint64_t(c.opt.max_body_bytes), uint64_t(64) << 20);
  auto counts = std::make_shared<ClientCounts>(c.opt.max_connections_per_client);
  restinio::http_server_t<Traits> server{
      restinio::external_io_context(ioc),
      restinio::server_settings_t<Traits>{}
          .port(c.opt.port)
          .address(c.opt.host)
          .request_handler([&c](const Request& req) { return handle(c, req); })
          .connection_state_listener(std::make_shared<ConnectionListener>(ConnectionListener{&c, counts}))
          .ip_blocker(std::make_shared<IpBlocker>(IpBlocker{counts}))
          .incoming_http_msg_limits(restinio::incoming_http_msg_limits_t{}
                                        .max_url_size(8192)
                                        .max_field_count(100)
                                        .max_field_value_size(16384)
                                        .max_body_size(hard_body_limit))
          .max_parallel_connections(c.opt.max_connections)
          // A second request slot keeps RESTinio reading while a request is in the engine, so a client
          // that disconnects is noticed (EOF) and its generation cancelled even before any byte is written.
          .max_pipelined_requests(2)
          // SSE chunks are small writes: without TCP_NODELAY, Nagle + delayed ACK stall each by ~40 ms.
          .socket_options_setter([](auto& options) { options.set_option(asio::ip::tcp::no_delay{true}); })
          .read_next_http_message_timelimit(seconds(c.opt.idle_timeout_s))
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
