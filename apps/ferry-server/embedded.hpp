// Files compiled into ferry-server (generated at configure time by CMakeLists.txt from web/ and
// config/templates/), so the binary needs nothing beside the model directory.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace ferry::server {

std::string_view embedded_index_html();
// (file name, JSON text) of every config/templates/*.json.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_templates();

}  // namespace ferry::server
