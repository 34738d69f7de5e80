#include "io/formats/json_fields.hpp"

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

namespace {
const char* type_name(const nlohmann::json& j) { return j.type_name(); }
}  // namespace

JsonFields::JsonFields(const nlohmann::json& obj, std::string origin, std::string path)
    : obj_(&obj), origin_(std::move(origin)), path_(std::move(path)) {
  if (!obj.is_object())
    throw ConfigError(fmt::format("{}: {}: expected a JSON object, got {}", origin_,
                                  path_.empty() ? "(top level)" : path_.substr(0, path_.size() - 1), type_name(obj)));
}

std::string JsonFields::where(const std::string& key) const { return fmt::format("{}: field '{}{}'", origin_, path_, key); }

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw ConfigError(fmt::format("{}: {}", where(key), what));
}

const nlohmann::json* JsonFields::find(const std::string& key) const {
  auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& JsonFields::need(const std::string& key) const {
  const auto* v = find(key);
  if (!v) fail(key, "missing required field");
  return *v;
}

namespace {
// JSON numbers written by Python may be 4096 or 4096.0; an integral float is accepted as an integer.
// An unsigned value above INT64_MAX or a float outside ±2^63 is refused, never wrapped (a cast of such
// a double to int64_t is undefined behaviour).
bool as_int(const nlohmann::json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
    out = static_cast<int64_t>(v.get<uint64_t>());
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(d >= -0x1p63 && d < 0x1p63)) return false;
    if (d == static_cast<double>(static_cast<int64_t>(d))) {
      out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}
}  // namespace

int64_t JsonFields::req_int(const std::string& key) const {
  const auto& v = need(key);
  int64_t out = 0;
  if (!as_int(v, out)) fail(key, fmt::format("expected an integer, got {} {}", type_name(v), v.dump()));
  return out;
}

int64_t JsonFields::opt_int(const std::string& key, int64_t def) const { return has(key) ? req_int(key) : def; }

double JsonFields::req_num(const std::string& key) const {
  const auto& v = need(key);
  if (!v.is_number()) fail(key, fmt::format("expected a number, got {} {}", type_name(v), v.dump()));
  return v.get<double>();
}

double JsonFields::opt_num(const std::string& key, double def) const { return has(key) ? req_num(key) : def; }

std::optional<double> JsonFields::maybe_num(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return req_num(key);
}

bool JsonFields::opt_bool(const std::string& key, bool def) const {
  const auto* v = find(key);
  if (!v) return def;
  if (!v->is_boolean()) fail(key, fmt::format("expected true/false, got {} {}", type_name(*v), v->dump()));
  return v->get<bool>();
}

std::string JsonFields::req_str(const std::string& key) const {
  const auto& v = need(key);
  if (!v.is_string()) fail(key, fmt::format("expected a string, got {} {}", type_name(v), v.dump()));
  return v.get<std::string>();
}

std::string JsonFields::opt_str(const std::string& key, const std::string& def) const {
  return has(key) ? req_str(key) : def;
}

std::vector<int64_t> JsonFields::req_int_list(const std::string& key) const {
  const auto& v = need(key);
  if (!v.is_array()) fail(key, fmt::format("expected a list of integers, got {}", type_name(v)));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    if (!as_int(v[i], x)) fail(key, fmt::format("element {} is {}, expected an integer", i, v[i].dump()));
    out.push_back(x);
  }
  return out;
}

std::vector<std::string> JsonFields::opt_str_list(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return {};
  if (!v->is_array()) fail(key, fmt::format("expected a list of strings, got {}", type_name(*v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) fail(key, fmt::format("element {} is {}, expected a string", i, (*v)[i].dump()));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

JsonFields JsonFields::req_obj(const std::string& key) const {
  const auto& v = need(key);
  if (!v.is_object()) fail(key, fmt::format("expected a JSON object, got {}", type_name(v)));
  return JsonFields(v, origin_, path_ + key + ".");
}

std::optional<JsonFields> JsonFields::maybe_obj(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return req_obj(key);
}

}  // namespace ferry
