// Small RESTinio helpers shared by the handlers: whole responses with a status and JSON or text body,
// OpenAI-shaped error responses, and request accounting in the metrics.
#pragma once

#include <restinio/all.hpp>
#include <string>

#include "apps/ferry-server/api_request.hpp"
#include "apps/ferry-server/server_context.hpp"

namespace ferry::server {

using Request = restinio::request_handle_t;
using Handled = restinio::request_handling_status_t;

const char* reason_phrase(int status);
restinio::http_status_line_t status_line(int status);

// Counts a response in the metrics (request errors for status >= 400).
void count_response(ServerContext& c, int status);

Handled reply(ServerContext& c, const Request& req, int status, std::string body, const char* content_type,
              int retry_after_s = -1);
Handled reply_error(ServerContext& c, const Request& req, const ApiError& e);

// The SSE response headers on a streaming (chunked) response.
void add_sse_headers(restinio::response_builder_t<restinio::chunked_output_t>& resp);

}  // namespace ferry::server
