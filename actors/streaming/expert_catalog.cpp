#include "actors/streaming/expert_catalog.hpp"

#include <fmt/format.h>

#include "actors/readers/reader_actor.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"

namespace ferry {

namespace {
size_t index_of(const ExpertCatalog& c, const expert_key& k) { return size_t{k.layer} * c.n_experts + k.expert; }
}  // namespace

bool ExpertCatalog::has(const expert_key& k) const {
  return k.layer < n_layers && k.expert < n_experts && !copies[index_of(*this, k)].empty();
}

const std::vector<uint32_t>& ExpertCatalog::copies_of(const expert_key& k) const {
  if (!has(k))
    throw LimitError(fmt::format("expert catalog: no copy of {} in the manifest", expert_file_name(k.layer, k.expert)));
  return copies[index_of(*this, k)];
}

uint64_t ExpertCatalog::hash_of(const expert_key& k) const { return xxh64[index_of(*this, k)]; }

const std::vector<uint64_t>& ExpertCatalog::part_hashes_of(const expert_key& k) const {
  static const std::vector<uint64_t> none;
  const size_t i = index_of(*this, k);
  return i < part_xxh64.size() ? part_xxh64[i] : none;  // a catalog built without part hashes has none
}

std::string ExpertCatalog::path_of(const expert_key& k, uint32_t dir) const {
  return dirs.at(dir) + "/" + expert_file_name(k.layer, k.expert);
}

std::string ExpertCatalog::path_of(const expert_key& k) const { return path_of(k, copies_of(k).front()); }

ExpertCatalog make_catalog(const Manifest& m, const std::vector<std::string>& dir_override) {
  ExpertCatalog c;
  if (m.n_layers <= 0 || m.n_experts <= 0 || m.file_bytes <= 0)
    throw FormatError(fmt::format("manifest: n_layers {} / n_experts {} / file_bytes {} must be > 0", m.n_layers,
                                  m.n_experts, m.file_bytes));
  c.n_layers = static_cast<uint32_t>(m.n_layers);
  c.n_experts = static_cast<uint32_t>(m.n_experts);
  c.expert_bytes = static_cast<uint64_t>(m.expert_bytes);
  c.file_bytes = static_cast<uint64_t>(m.file_bytes);
  c.dirs = m.dirs;
  if (!dir_override.empty()) {
    if (dir_override.size() != m.dirs.size())
      throw ConfigError(fmt::format("--expert-dir given {} times but manifest.json lists {} expert directories; give "
                                    "one per manifest directory, in the same order",
                                    dir_override.size(), m.dirs.size()));
    c.dirs = dir_override;
  }
  const size_t n = size_t{c.n_layers} * c.n_experts;
  c.copies.assign(n, {});
  c.xxh64.assign(n, 0);
  c.part_xxh64.assign(n, {});
  c.part_bytes = m.part_bytes > 0 ? uint64_t(m.part_bytes) : 0;
  for (const auto& e : m.experts) {
    if (e.layer < 0 || e.expert < 0 || uint32_t(e.layer) >= c.n_layers || uint32_t(e.expert) >= c.n_experts)
      throw FormatError(fmt::format("manifest: expert L{}-E{} outside {} layers x {} experts", e.layer, e.expert,
                                    c.n_layers, c.n_experts));
    auto& dst = c.copies[size_t(e.layer) * c.n_experts + size_t(e.expert)];
    for (uint16_t d : e.dirs) {
      if (d >= c.dirs.size())
        throw FormatError(fmt::format("manifest: expert L{}-E{} names directory {} of {}", e.layer, e.expert, d,
                                      c.dirs.size()));
      dst.push_back(d);
    }
    c.xxh64[size_t(e.layer) * c.n_experts + size_t(e.expert)] = e.xxh64;
    if (c.part_bytes > 0) c.part_xxh64[size_t(e.layer) * c.n_experts + size_t(e.expert)] = e.part_xxh64;
  }
  return c;
}

}  // namespace ferry
