// JSON reading for tokenizer files: every failure is a FormatError that names the file.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace ferry {

nlohmann::json read_tokenizer_json(const std::filesystem::path& file);

// A token named in tokenizer_config.json: a plain string or an AddedToken object {"content": ...};
// "" when the field is absent or null.
std::string token_name(const nlohmann::json& config, const char* field, const std::filesystem::path& file);

}  // namespace ferry
