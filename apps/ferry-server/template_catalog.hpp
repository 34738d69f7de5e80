// Which chat template a model gets: --chat-template (a built-in name or a file), else the model
// directory's own `ferry_chat_template.json`, else the built-in template listing the model's
// config.json model_type, else "plain".
#pragma once

#include <string>

#include "io/tokenizers/chat_template.hpp"

namespace ferry::server {

inline constexpr const char* kModelDirTemplateFile = "ferry_chat_template.json";

// Throws ConfigError naming the file, or listing the built-in names for an unknown one.
ChatTemplate choose_chat_template(const std::string& requested, const std::string& model_dir,
                                  const std::string& model_type);

}  // namespace ferry::server
