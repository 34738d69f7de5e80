#include "kernels/decoding/verify.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "kernels/decoding/draft_cost.hpp"

namespace ferry {

size_t DraftGate::cut(const DraftProposal& p) const {
  size_t n = 0;
  while (n < p.ids.size() && n < p.conf.size() && p.conf[n] >= t_) ++n;
  return n;
}

void DraftGate::update(size_t proposed, size_t accepted) {
  if (!o_.adaptive || proposed == 0) return;
  if (accepted == proposed)
    t_ -= 0.05f;
  else if (accepted == 0)
    t_ += 0.05f;
  else
    t_ += 2 * accepted >= proposed ? -0.02f : 0.02f;
  t_ = std::clamp(t_, 0.5f, 0.99f);
}

namespace {

bool is_stop(std::span<const int32_t> stop_ids, int32_t id) {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

// Leaves `s` holding exactly the first `keep` rows of the block that started at snap.len. Attention
// caches (KV, MLA latent, DSA indexer keys) are indexed by position, so truncating the length rolls
// them back; KDA state and conv history are sums over every row, so they are restored from the
// snapshot and the kept rows re-run. Decode-mode rows are row-invariant, so the re-run state is the
// bits plain steps would have left.
void roll_back(Model& model, SeqState& s, const SeqSnapshot* snap, int64_t pos0,
               std::span<const int32_t> rows, size_t keep, SpecStats& st) {
  if (keep == rows.size()) return;
  if (!snap) {
    s.len = pos0 + static_cast<int64_t>(keep);
    return;
  }
  model.restore(s, *snap);
  ForwardOptions fo;
  fo.no_logits = true;
  model.forward(s, rows.first(keep), fo);
  st.replays += static_cast<int64_t>(keep);
}

}  // namespace

BlockOutcome verify_block(Model& model, SeqState& s, int32_t cur, std::span<const int32_t> drafts, Sampler& sampler,
                          std::span<const int32_t> stop_ids, int64_t limit, SpecStats& st, int logprobs) {
  const int64_t vocab = model.config().vocab;
  const int64_t pos0 = s.len;
  const size_t k = drafts.size();
  std::vector<int32_t> rows{cur};
  rows.insert(rows.end(), drafts.begin(), drafts.end());
  const SeqSnapshot* snap = nullptr;
  if (model.config().count(Mixer::kda) > 0) {
    model.snapshot(s, s.block_snapshot);
    snap = &s.block_snapshot;
  }
  ForwardOptions fo;
  fo.all_logits = true;
  const std::vector<float> logits = model.forward(s, rows, fo);

  BlockOutcome out;
  for (size_t i = 0; i <= k; ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * vocab;
    const GeneratedToken t = choose_token(pos0 + static_cast<int64_t>(i) + 1,
                                          std::span<const float>(row, static_cast<size_t>(vocab)), sampler, logprobs);
    out.emitted.push_back(t);
    if (is_stop(stop_ids, t.id)) {
      out.stopped = true;
      break;
    }
    if (static_cast<int64_t>(out.emitted.size()) >= limit || i == k || t.id != drafts[i]) break;
    ++out.accepted;
  }
  ++st.blocks;
  st.drafts += static_cast<int64_t>(k);
  st.accepted += static_cast<int64_t>(out.accepted);
  st.blk_tokens += static_cast<int64_t>(out.emitted.size());
  if (out.accepted == k)
    ++st.full;
  else if (out.accepted == 0)
    ++st.zero;
  else
    ++st.partial;
  roll_back(model, s, snap, pos0, rows, out.accepted + 1, st);
  return out;
}

namespace {

// The drafts worth verifying: at most max_k, cut at the gate and at the first id outside the
// vocabulary (the bridge already rejects those; the block must never see one).
std::vector<int32_t> usable_drafts(const std::optional<DraftProposal>& p, const DraftGate& gate, size_t max_k,
                                   int64_t vocab) {
  std::vector<int32_t> d;
  if (!p) return d;
  const size_t n = std::min(gate.cut(*p), max_k);
  for (size_t i = 0; i < n; ++i) {
    if (p->ids[i] < 0 || p->ids[i] >= vocab) break;
    d.push_back(p->ids[i]);
  }
  return d;
}

}  // namespace

std::vector<GeneratedToken> generate_speculative(Model& model, SeqState& state, std::span<const int32_t> prompt,
                                                 const GenerateParams& p, const SpecParams& sp,
                                                 const ProposeFn& propose, GenerateMetrics& m, SpecStats& st,
                                                 const std::function<bool(const GeneratedToken&)>& on_token) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto since = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  Sampler sampler(p.sampling);
  DraftGate gate(sp.gate);
  std::vector<GeneratedToken> out;
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const int64_t vocab = model.config().vocab;
  m.prompt_tokens = static_cast<int64_t>(prompt.size());
  m.prompt_cached = p.prompt_cached;
  std::vector<float> logits = prompt_pass(model, state, prompt, p);
  m.prompt_s = since();
  bool done = p.n_predict <= 0;
  // Emits one token; false once generation must end (stop id, caller, or n_predict reached).
  auto emit = [&](const GeneratedToken& t) {
    out.push_back(t);
    history.push_back(t.id);
    m.generated = static_cast<int64_t>(out.size());
    m.last_token_s = since();
    if (out.size() == 1) m.first_token_s = m.last_token_s;
    const bool stop = std::find(p.stop_ids.begin(), p.stop_ids.end(), t.id) != p.stop_ids.end();
    return !((on_token && !on_token(t)) || stop || m.generated >= p.n_predict);
  };
  auto plain = [&](const std::vector<float>& l) {
    return emit(choose_token(state.len, std::span<const float>(l.data(), static_cast<size_t>(vocab)), sampler, p.logprobs));
  };
  if (!done) done = !plain(logits);
  // The cost gate: how many drafts pay now, from this run's measured plain steps, blocks and drafter
  // calls (a call is on the critical path whether or not it offers drafts).
  std::optional<DraftCostModel> cost;
  if (sp.cost_gate) cost.emplace(static_cast<size_t>(std::clamp(sp.draft_max, 1, 15)));
  auto seconds_since = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  while (!done) {
    const int64_t remaining = p.n_predict - static_cast<int64_t>(out.size());
    const int64_t room = state.max_ctx - state.len - 1;
    int64_t max_k = std::max<int64_t>(0, std::min<int64_t>({sp.draft_max, 15, remaining - 1, room}));
    if (cost && propose && max_k > 0) {
      max_k = static_cast<int64_t>(cost->choose(static_cast<size_t>(max_k)));
      if (max_k == 0) ++st.cost_gated;
    }
    std::optional<DraftProposal> prop;
    double call_s = -1;
    if (propose && max_k > 0) {
      const auto c0 = clock::now();
      prop = propose(history, static_cast<int>(max_k), gate.threshold());
      call_s = seconds_since(c0);
      st.call_ms += 1e3 * call_s;
      ++st.calls;
    }
    const std::vector<int32_t> drafts = usable_drafts(prop, gate, static_cast<size_t>(max_k), vocab);
    if (cost && call_s >= 0) cost->asked(call_s, !drafts.empty());
    if (drafts.empty()) {
      ++st.plain_steps;
      const auto p0 = clock::now();
      logits = model.forward(state, std::vector<int32_t>{history.back()});
      if (cost) cost->plain_step(seconds_since(p0));
      done = !plain(logits);
      continue;
    }
    const auto b0 = clock::now();
    BlockOutcome b = verify_block(model, state, history.back(), drafts, sampler, p.stop_ids, remaining, st, p.logprobs);
    // A block cut short by a stop id or the token limit is no rejection.
    if (cost)
      cost->block(drafts.size(), b.accepted, seconds_since(b0),
                  b.stopped || static_cast<int64_t>(b.emitted.size()) >= remaining);
    gate.update(drafts.size(), b.accepted);
    for (const GeneratedToken& t : b.emitted)
      if (!emit(t)) {
        done = true;
        break;
      }
  }
  m.decode_s = m.last_token_s - m.prompt_s;
  return out;
}

}  // namespace ferry
