#include "kernels/decoding/generate.hpp"

#include <algorithm>
#include <chrono>
#include <ostream>
#include <stdexcept>
#include <string>

#include "io/errors.hpp"

namespace ferry {

void write_trace_hash(std::ostream& out, const GeneratedToken& t) {
  out << t.pos << ' ' << t.id << ' ' << std::hex << t.logits_hash << std::dec << '\n';
}

std::vector<float> prompt_pass(Model& model, SeqState& state, std::span<const int32_t> prompt, const GenerateParams& p) {
  const int64_t n = static_cast<int64_t>(prompt.size()), cached = p.prompt_cached;
  if (n == 0) throw LimitError("the prompt is empty: generation needs at least one token");
  if (cached < 0 || cached >= n || state.len != cached)
    throw std::invalid_argument("prompt_cached " + std::to_string(cached) + " of a " + std::to_string(n) +
                                "-token prompt, the state holding " + std::to_string(state.len));
  ForwardOptions pre;
  pre.prefill = true;
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
    GeneratedToken t;
    t.pos = state.len;
    t.id = sampler.sample(std::span<const float>(logits.data(), static_cast<size_t>(vocab)));
    t.logits_hash = fnv1a64(logits.data(), static_cast<size_t>(vocab) * sizeof(float));
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
