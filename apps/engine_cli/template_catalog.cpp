#include "apps/engine_cli/template_catalog.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/errors.hpp"

namespace ferry::cli {
namespace {

ChatTemplate from_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw ConfigError("cannot read chat template file " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_chat_template(ss.str(), p.string());
}

std::vector<ChatTemplate> builtins() {
  std::vector<ChatTemplate> out;
  for (const auto& [file, text] : embedded_templates())
    out.push_back(parse_chat_template(std::string(text), "config/templates/" + std::string(file)));
  return out;
}

}  // namespace

ChatTemplate choose_chat_template(const std::string& requested, const std::string& model_dir,
                                  const std::string& model_type) {
  const auto all = builtins();
  if (!requested.empty()) {
    for (const auto& t : all)
      if (t.name == requested) return t;
    if (std::filesystem::is_regular_file(requested)) return from_file(requested);
    std::string names;
    for (const auto& t : all) names += (names.empty() ? "" : ", ") + t.name;
    throw ConfigError("--chat-template '" + requested + "' is neither a built-in template (" + names +
                      ") nor a readable file");
  }
  const auto own = std::filesystem::path(model_dir) / kModelDirTemplateFile;
  if (std::filesystem::is_regular_file(own)) return from_file(own);
  for (const auto& t : all)
    if (std::find(t.model_types.begin(), t.model_types.end(), model_type) != t.model_types.end()) return t;
  for (const auto& t : all)
    if (t.name == "plain") return t;
  throw ConfigError("no chat template for model_type '" + model_type + "' and no built-in 'plain' template");
}

}  // namespace ferry::cli
