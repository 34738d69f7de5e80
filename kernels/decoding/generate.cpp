#include "kernels/decoding/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>

#include "io/errors.hpp"

namespace ferry {

void write_trace_hash(std::ostream& out, const GeneratedToken& t) {
  out << t.pos << ' ' << t.id << ' ' << std::hex << t.logits_hash << std::dec << '\n';
}

GeneratedToken choose_token(int64_t pos, std::span<const float> logits, Sampler& sampler, int logprobs) {
  GeneratedToken t;
  t.pos = pos;
  t.id = sampler.sample(logits);
  t.logits_hash = fnv1a64(logits.data(), logits.size() * sizeof(float));
  if (logprobs < 0) return t;
  // log-softmax in double: lse = max + log(sum exp(x - max)).
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  t.logprob = static_cast<float>(logits[static_cast<size_t>(t.id)] - lse);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t n = std::min(ids.size(), static_cast<size_t>(logprobs));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  for (size_t i = 0; i < n; ++i) t.top.push_back({ids[i], static_cast<float>(logits[size_t(ids[i])] - lse)});
  return t;
}

std::vector<float> prompt_pass(Model& model, SeqState& state, std::span<const int32_t> prompt, const GenerateParams& p) {
  const int64_t n = static_cast<int64_t>(prompt.size()), cached = p.prompt_cached;
  if (n == 0) throw LimitError("the prompt is empty: generation needs at least one token");
  if (cached < 0 || cached >= n || state.len != cached)
    throw std::invalid_argument("prompt_cached " + std::to_string(cached) + " of a " + std::to_string(n) +
                                "-token prompt, the state holding " + std::to_string(state.len));
  ForwardOptions pre;
  pre.prefill = true;
  if (p.snapshot) {
    pre.snapshot = p.snapshot;
    pre.snapshot_row = p.snapshot_at - cached;
  }
  return model.forward(state, prompt.subspan(static_cast<size_t>(cached)), pre);
}

std::vector<GeneratedToken> generate(Model& model, SeqState& state, std::span<const int32_t> prompt,
                                     const GenerateParams& p, GenerateMetrics& m,
                                     const std::function<bool(const GeneratedToken&)>& on_token) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto since = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  Sampler sampler(p.sampling);
  std::vector<GeneratedToken> out;
  m.prompt_tokens = static_cast<int64_t>(prompt.size());
  m.prompt_cached = p.prompt_cached;
  std::vector<float> logits = prompt_pass(model, state, prompt, p);
  m.prompt_s = since();
  const int64_t vocab = model.config().vocab;
  for (int64_t i = 0; i < p.n_predict; ++i) {
    const GeneratedToken t =
        choose_token(state.len, std::span<const float>(logits.data(), static_cast<size_t>(vocab)), sampler, p.logprobs);
    out.push_back(t);
    m.generated = static_cast<int64_t>(out.size());
    m.last_token_s = since();
    if (i == 0) m.first_token_s = m.last_token_s;
    const bool stop = std::find(p.stop_ids.begin(), p.stop_ids.end(), t.id) != p.stop_ids.end();
    if ((on_token && !on_token(t)) || stop || i + 1 == p.n_predict) break;
    logits = model.forward(state, std::vector<int32_t>{t.id});
  }
  m.decode_s = m.last_token_s - m.prompt_s;
  return out;
}

}  // namespace ferry
