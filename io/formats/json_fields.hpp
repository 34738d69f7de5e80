// JsonFields: typed, path-aware access to one JSON object of a config file. Every failure throws
// ConfigError naming the origin file and the dotted field path ("config.json: text_config.hidden_size:
// missing required field"), so a bad config is reported by the field a person has to fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string origin, std::string path = "");

  // The field's value, or nullptr when it is absent or JSON null (null means "not set" in HF configs).
  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  int64_t req_int(const std::string& key) const;
  int64_t opt_int(const std::string& key, int64_t def) const;
  double req_num(const std::string& key) const;
  double opt_num(const std::string& key, double def) const;
  std::optional<double> maybe_num(const std::string& key) const;
  bool opt_bool(const std::string& key, bool def) const;
  std::string req_str(const std::string& key) const;
  std::string opt_str(const std::string& key, const std::string& def) const;
  std::vector<int64_t> req_int_list(const std::string& key) const;
  std::vector<std::string> opt_str_list(const std::string& key) const;
  // A nested object; req_ throws when absent, maybe_ returns nullopt.
  JsonFields req_obj(const std::string& key) const;
  std::optional<JsonFields> maybe_obj(const std::string& key) const;

  // "origin: path.key" for messages.
  std::string where(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const nlohmann::json& json() const { return *obj_; }

 private:
  const nlohmann::json& need(const std::string& key) const;
  const nlohmann::json* obj_;
  std::string origin_;
  std::string path_;  // "" or "text_config." (with the trailing dot)
};

}  // namespace ferry
