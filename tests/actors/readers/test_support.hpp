// Shared helpers of the actors tests: real expert files under the build directory, an actor system
// with the ferry types registered, and batch fetches through a scoped actor.
#pragma once

#include <chrono>
#include <cstring>
#include <thread>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <gtest/gtest.h>
#include <xxhash.h>

#include "actors/readers/reader_actor.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "messages/messages.hpp"

namespace ferry::test {

namespace fs = std::filesystem;

// A fresh directory FERRY_BINARY_DIR/test-data/actors/<name> (removed first).
inline std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(FERRY_BINARY_DIR) / "test-data" / "actors" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Deterministic bytes of expert (layer, expert): splitmix64 of a per-expert seed.
inline std::vector<std::byte> expert_payload(expert_key k, size_t bytes) {
  std::vector<std::byte> out(bytes);
  uint64_t x = (uint64_t{k.layer} << 32 | k.expert) * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<size_t>(8, bytes - i));
  }
  return out;
}

inline uint64_t xxh64(const void* p, size_t n) { return XXH64(p, n, 0); }

// Writes L<layer>-E<e>.bin for e in [0, n) into every directory in `dirs`, payload `bytes` long and
// zero-padded to 4096 (docs/FORMATS.md). Returns the payloads' xxh64.
inline std::vector<uint64_t> write_experts(const std::vector<std::string>& dirs, uint32_t layer, uint32_t n,
                                           size_t bytes) {
  std::vector<uint64_t> hashes;
  for (uint32_t e = 0; e < n; ++e) {
    auto data = expert_payload({layer, e}, bytes);
    hashes.push_back(xxh64(data.data(), data.size()));
    data.resize(io::round_up(bytes, io::kDirectAlign));
    for (auto& d : dirs) {
      FILE* f = std::fopen((d + "/" + expert_file_name(int(layer), int(e))).c_str(), "wb");
      if (!f || std::fwrite(data.data(), 1, data.size(), f) != data.size()) throw std::runtime_error("write " + d);
      std::fclose(f);
    }
  }
  return hashes;
}

// A CAF actor system with the ferry type-ID block and error category registered.
struct ActorSystem {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  ActorSystem() {
    register_ferry_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// Sends every request first (so they are in flight together), then collects the answers in order.
template <class Handle, class... Ts>
std::vector<caf::expected<read_done>> request_all(caf::scoped_actor& self, const Handle& h,
                                                 const std::vector<std::tuple<Ts...>>& msgs,
                                                 std::chrono::seconds timeout = std::chrono::seconds(30)) {
  using handle_t = decltype(std::apply([&](auto&&... xs) { return self->request(h, timeout, xs...); }, msgs[0]));
  std::vector<handle_t> pending;
  for (auto& m : msgs) pending.push_back(std::apply([&](auto&&... xs) { return self->request(h, timeout, xs...); }, m));
  std::vector<caf::expected<read_done>> out;
  for (auto& p : pending)
    p.receive([&](read_done& d) { out.emplace_back(d); }, [&](caf::error& e) { out.emplace_back(std::move(e)); });
  return out;
}

}  // namespace ferry::test
