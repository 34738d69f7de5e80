// Byte-pair merging shared by both vocabulary formats. tiktoken's byte_pair_merge and Hugging Face's
// BPE Word::merge_all make the same choice at every step: merge the adjacent pair with the lowest
// rank, the leftmost one among equal ranks, until no adjacent pair has a rank. A min-heap of
// (rank, position) keyed candidates with lazy invalidation makes that O(n log n) per piece, so a
// long run without spaces (base64, minified code) does not go quadratic.
#pragma once

#include <cstdint>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

namespace ferry {

struct BpePart {
  uint32_t begin = 0;  // byte offsets of this part in the piece
  uint32_t end = 0;
  int32_t id = -1;     // the part's token id (the rank, for tiktoken)
};

inline constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();

// `parts` start as single bytes (or whatever units the caller chose), in order. `pair(l, r)` returns
// {rank, merged id} of joining adjacent parts l and r, or {kNoMerge, -1}. On return `parts` holds the
// final parts in order.
template <class PairFn>
void bpe_merge(std::vector<BpePart>& parts, PairFn&& pair) {
  const auto n = static_cast<int32_t>(parts.size());
  if (n < 2) return;
  std::vector<int32_t> next(n), prev(n);
  std::vector<uint32_t> gen(n, 0);  // bumped when a part changes, invalidating queued candidates
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    uint32_t rank, begin;
    int32_t left, right, id;
    uint32_t left_gen, right_gen;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : begin > o.begin; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto [rank, id] = pair(parts[l], parts[r]);
    if (rank != kNoMerge) heap.push({rank, parts[l].begin, l, r, id, gen[l], gen[r]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (gen[c.left] != c.left_gen || gen[c.right] != c.right_gen || next[c.left] != c.right) continue;
    parts[c.left].end = parts[c.right].end;
    parts[c.left].id = c.id;
    ++gen[c.left];
    ++gen[c.right];  // the right part is gone: no candidate may use it again
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  std::vector<BpePart> out;
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(parts[i]);
  parts = std::move(out);
}

}  // namespace ferry
