// The web page compiled into ferry-server (generated at configure time by CMakeLists.txt from web/;
// the chat templates are apps/engine_cli/template_catalog.hpp's), so the binary needs nothing beside the model directory.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace ferry::server {

std::string_view embedded_index_html();

}  // namespace ferry::server
