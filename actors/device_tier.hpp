// The device tier for the CUDA back-end: a cache of expert slots in GPU memory above the host pool.
// A device hit needs neither a read nor an upload; any other expert is uploaded from the pinned slot
// its bytes landed in, into an admitted cache slot (LRU) or a scratch slot. Admission is block-aware
// like the host pool's: in a block, only experts used by at least min_rows rows enter the cache; a
// plain step always admits. Only one expert computes at a time, so a slot in use is never evicted.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>

#include "actors/compute_tier.hpp"
#include "kernels/backend.hpp"

namespace ferry {

class DeviceComputeTier final : public ComputeTier {
 public:
  DeviceComputeTier(ExpertGeometry g, Backend& be, uint64_t cache_experts, uint32_t min_rows);
  ~DeviceComputeTier() override;
  std::string name() const override { return "device"; }

  // A device hit: weights in GPU memory (counted), or false.
  bool resident(const expert_key& k, ExpertWeights& w);
  // Sets whether the next uploaded expert may enter the cache (block-aware admission).
  void admit_next(bool admit) { admit_next_ = admit; }
  ExpertWeights weights(const expert_key& k, const std::byte* host) override;
  void done(const expert_key&) override {}

  uint64_t hits() const { return hits_; }
  uint64_t uploads() const { return uploads_; }
  uint64_t upload_bytes() const { return uploads_ * bytes_; }
  uint32_t min_rows() const { return min_rows_; }

 private:
  std::byte* slot(size_t i) const { return base_ + i * bytes_; }
  ExpertGeometry g_;
  Backend& be_;
  uint64_t bytes_ = 0;
  size_t capacity_ = 0;
  uint32_t min_rows_ = 2;
  std::byte* base_ = nullptr;  // capacity_ + 1 slots (the last is scratch)
  std::list<expert_key> lru_;  // front = most recent
  struct Entry {
    size_t slot;
    std::list<expert_key>::iterator pos;
  };
  std::unordered_map<uint64_t, Entry> map_;
  bool admit_next_ = true;
  uint64_t hits_ = 0, uploads_ = 0;
};

}  // namespace ferry
