// The endpoint handlers. Each returns the RESTinio handling status; a rejected request gets an
// OpenAI-shaped error (ApiError thrown here is answered by the router in http_server.cpp).
#pragma once

#include "apps/ferry-server/http_util.hpp"

namespace ferry::server {

Handled handle_chat_completions(ServerContext& c, const Request& req);
Handled handle_completions(ServerContext& c, const Request& req);
Handled handle_models(ServerContext& c, const Request& req);
Handled handle_health(ServerContext& c, const Request& req);
Handled handle_metrics(ServerContext& c, const Request& req);

}  // namespace ferry::server
