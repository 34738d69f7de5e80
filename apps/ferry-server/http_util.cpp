#include "apps/ferry-server/http_util.hpp"

#include "apps/ferry-server/api_response.hpp"

namespace ferry::server {

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

restinio::http_status_line_t status_line(int status) {
  return restinio::http_status_line_t{restinio::http_status_code_t{static_cast<std::uint16_t>(status)},
                                      reason_phrase(status)};
}

void count_response(ServerContext& c, int status) {
  c.metrics->requests.add(1);
  if (status >= 400) c.metrics->request_errors.add(1);
}

Handled reply(ServerContext& c, const Request& req, int status, std::string body, const char* content_type,
              int retry_after_s) {
  count_response(c, status);
  auto resp = req->create_response(status_line(status));
  resp.append_header(restinio::http_field::content_type, content_type);
  resp.append_header("Access-Control-Allow-Origin", "*");
  if (retry_after_s >= 0) resp.append_header(restinio::http_field::retry_after, std::to_string(retry_after_s));
  if (status == 401) resp.append_header(restinio::http_field::www_authenticate, "Bearer");
  resp.set_body(std::move(body));
  return resp.done();
}

Handled reply_error(ServerContext& c, const Request& req, const ApiError& e) {
  const int retry = e.status == 429 ? 1 : -1;
  return reply(c, req, e.status, dump_json(error_json(e)), "application/json", retry);
}

void add_sse_headers(restinio::response_builder_t<restinio::chunked_output_t>& resp) {
  resp.append_header(restinio::http_field::content_type, "text/event-stream");
  resp.append_header(restinio::http_field::cache_control, "no-cache");
  resp.append_header("Access-Control-Allow-Origin", "*");
  resp.append_header("X-Accel-Buffering", "no");
}

}  // namespace ferry::server
