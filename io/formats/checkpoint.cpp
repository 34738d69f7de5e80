// open_safetensors_checkpoint: a Hugging Face checkpoint directory as one TensorSource. Either a
// single model.safetensors (checked first, as transformers does) or the shards named by
// model.safetensors.index.json's weight_map. Every shard is opened and validated up front, so a
// broken checkpoint fails at load time naming the file, not midway through building the model.
#include "io/formats/checkpoint.hpp"

#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/formats/safetensors.hpp"

namespace ferry {

namespace {

class ShardedCheckpoint final : public TensorSource {
 public:
  explicit ShardedCheckpoint(const std::filesystem::path& index_path);
  bool has(const std::string& name) const override { return where_.count(name) != 0; }
  TensorView get(const std::string& name) const override {
    auto it = where_.find(name);
    if (it == where_.end()) throw TensorError(fmt::format("{}: no tensor '{}'", describe(), name));
    return shards_[it->second]->get(name);
  }
  std::vector<std::string> names() const override { return order_; }
  std::string describe() const override { return dir_.string(); }

 private:
  nlohmann::json read_index() const;
  std::filesystem::path dir_, index_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, size_t> where_;
  std::vector<std::string> order_;
};

nlohmann::json ShardedCheckpoint::read_index() const {
  std::ifstream in(index_, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot open", index_.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON: {}", index_.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw FormatError(fmt::format("{}: no 'weight_map' object", index_.string()));
  return j;
}

ShardedCheckpoint::ShardedCheckpoint(const std::filesystem::path& index_path)
    : dir_(index_path.parent_path()), index_(index_path) {
  auto j = read_index();
  std::map<std::string, size_t> shard_ids;  // file name -> index in shards_
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const std::string& tensor = it.key();
    if (!it->is_string())
      throw FormatError(fmt::format("{}: weight_map entry '{}' is not a file name", index_.string(), tensor));
    std::string file = it->get<std::string>();
    // A shard must sit in the checkpoint directory: refuse paths that climb out of it.
    std::filesystem::path rel(file);
    if (file.empty() || rel.is_absolute() || rel.has_parent_path())
      throw FormatError(fmt::format("{}: tensor '{}' maps to '{}', not a file name in the checkpoint directory",
                                    index_.string(), tensor, file));
    auto [sit, added] = shard_ids.emplace(file, shards_.size());
    if (added) {
      auto path = dir_ / file;
      if (!std::filesystem::exists(path))
        throw FormatError(fmt::format("{}: shard '{}' (holding tensor '{}') does not exist", index_.string(),
                                      path.string(), tensor));
      shards_.push_back(std::make_unique<SafetensorsFile>(path));  // validates; errors name the shard
    }
    if (!shards_[sit->second]->has(tensor))
      throw FormatError(fmt::format("{}: tensor '{}' is listed in {} but absent from the shard",
                                    shards_[sit->second]->path(), tensor, index_.string()));
    where_.emplace(tensor, sit->second);
    order_.push_back(tensor);
  }
}

class SingleFileCheckpoint final : public TensorSource {
 public:
  SingleFileCheckpoint(const std::filesystem::path& dir, const std::filesystem::path& file) : dir_(dir), file_(file) {}
  bool has(const std::string& name) const override { return file_.has(name); }
  TensorView get(const std::string& name) const override { return file_.get(name); }
  std::vector<std::string> names() const override { return file_.names(); }
  std::string describe() const override { return dir_.string(); }

 private:
  std::filesystem::path dir_;
  SafetensorsFile file_;
};

}  // namespace

std::unique_ptr<TensorSource> open_safetensors_checkpoint(const std::filesystem::path& dir) {
  if (std::filesystem::is_regular_file(dir)) {
    if (dir.extension() == ".json") return std::make_unique<ShardedCheckpoint>(dir);
    return std::make_unique<SingleFileCheckpoint>(dir.parent_path(), dir);
  }
  if (!std::filesystem::is_directory(dir))
    throw FormatError(fmt::format("{}: not a checkpoint directory (does not exist)", dir.string()));
  auto single = dir / "model.safetensors";
  if (std::filesystem::exists(single)) return std::make_unique<SingleFileCheckpoint>(dir, single);
  auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) return std::make_unique<ShardedCheckpoint>(index);
  throw FormatError(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir.string()));
}

}  // namespace ferry
