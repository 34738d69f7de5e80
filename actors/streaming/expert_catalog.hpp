// What the streaming runtime knows about every routed expert: which directories hold a copy and the
// file's xxh64 (from manifest.json), and the file geometry. Immutable once built; shared by the layer
// schedulers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace ferry {

struct Manifest;

struct ExpertCatalog {
  uint32_t n_layers = 0, n_experts = 0;
  uint64_t expert_bytes = 0;  // payload
  uint64_t file_bytes = 0;    // on disk (4096-padded): what a read moves
  std::vector<std::string> dirs;
  std::vector<std::vector<uint32_t>> copies;  // [layer * n_experts + expert], primary first
  std::vector<uint64_t> xxh64;                // same index
  uint64_t part_bytes = 0;                    // manifest part hashes: span of each (0: none)
  std::vector<std::vector<uint64_t>> part_xxh64;  // same index; empty where the manifest has none

  bool has(const expert_key& k) const;
  const std::vector<uint32_t>& copies_of(const expert_key& k) const;  // throws LimitError when unknown
  uint64_t hash_of(const expert_key& k) const;
  const std::vector<uint64_t>& part_hashes_of(const expert_key& k) const;  // empty when unknown
  std::string path_of(const expert_key& k, uint32_t dir) const;
  // The primary copy's path (for messages).
  std::string path_of(const expert_key& k) const;
};

// From a manifest. dir_override, when not empty, replaces the manifest's directories in order (drives
// mounted elsewhere) and must have as many entries. Throws ConfigError / FormatError naming the field.
ExpertCatalog make_catalog(const Manifest& m, const std::vector<std::string>& dir_override);

}  // namespace ferry
