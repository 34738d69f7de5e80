#include "kernels/decoding/prompt_cache.hpp"

#include <algorithm>

#include "io/store/sizing.hpp"

namespace ferry {

PromptCache::PromptCache(Model& model, int64_t ctx, bool enabled)
    : model_(model), ctx_(ctx), enabled_(enabled), recurrent_(model.config().count(Mixer::kda) > 0) {}

// The kept prefix this prompt can start from: it must leave at least one token for the pass that
// makes the logits; with KDA it is all of ids_ or nothing, without it the common prefix cut to 64.
int64_t PromptCache::reusable(std::span<const int32_t> prompt) const {
  if (!state_ || ids_.empty()) return 0;
  const size_t limit = std::min(ids_.size(), prompt.size() - 1);
  const size_t common = size_t(std::mismatch(ids_.begin(), ids_.begin() + long(limit), prompt.begin()).first - ids_.begin());
  if (recurrent_) return common == ids_.size() ? int64_t(common) : 0;
  return int64_t(common) / kPrefillChunkAlign * kPrefillChunkAlign;
}

PromptCache::Lease PromptCache::begin(std::span<const int32_t> prompt) {
  Lease l;
  l.reused = enabled_ && !prompt.empty() ? reusable(prompt) : 0;
  ids_.clear();  // nothing is kept while a job runs: a failure leaves the cache empty
  if (l.reused > 0) {
    l.state = std::move(state_);
    model_.restore(*l.state, snap_);  // KDA state and conv history after ids_ (nothing without KDA)
    l.state->len = l.reused;          // attention rows past it are rewritten by the prompt pass
  } else {
    state_.reset();  // free the kept sequence before allocating the next one
    l.state = model_.new_state(ctx_);
  }
  if (enabled_ && !prompt.empty()) {
    l.mark = (int64_t(prompt.size()) - 1) / kPrefillChunkAlign * kPrefillChunkAlign;
    l.ids.assign(prompt.begin(), prompt.begin() + l.mark);
  }
  return l;
}

void PromptCache::request_snapshot(const Lease& lease, GenerateParams& p) {
  p.prompt_cached = lease.reused;
  p.snapshot = nullptr;
  p.snapshot_at = 0;
  if (lease.mark > lease.reused) {
    p.snapshot = &snap_;
    p.snapshot_at = lease.mark;
  }
}

void PromptCache::end(Lease&& lease, bool ok) {
  // ok: generate returned, so its prompt pass ran and took the snapshot at the mark (or the restored one
  // was already there). A failed job may have left a partial snapshot: nothing is kept.
  if (enabled_ && ok && lease.mark > 0) {
    state_ = std::move(lease.state);
    ids_ = std::move(lease.ids);
    return;
  }
  ids_.clear();
  lease.state.reset();
}

}  // namespace ferry
