// Drafter factory, tokenizer identity, and the two weight-free drafters (n-gram lookup, replay).
#include "actors/drafter/sidecar/drafter_core.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/errors.hpp"
#include "kernels/model/model.hpp"

namespace ferry {

std::string tokenizer_identity(const Tokenizer* t) {
  if (!t) return "ids";
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < t->vocab_size(); ++i) {
    std::string b;
    try {
      b = t->token_bytes(i);
    } catch (const Error&) {
      b = "\xff<hole>";  // an unused id: still part of the identity, distinct from any real token
    }
    const uint64_t hb = fnv1a64(b.data(), b.size());
    h = (h ^ hb) * 1099511628211ull;
  }
  std::ostringstream s;
  s << t->vocab_size() << ':' << std::hex << h;
  return s.str();
}

namespace {

// Prompt lookup: the most recent earlier occurrence of the longest suffix (max_n down to 1 tokens)
// is continued. A draft's confidence is the share of that suffix's occurrences (up to 8, the most
// recent first) that continue with the same token at that offset, times 1 - 2^-n for a suffix of n
// tokens: a longer matched context predicts better (n = 4 passes the default 0.9 gate, n = 1 only
// a gate at 0.5).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int max_n) : max_n_(std::max(1, max_n)) {}
  std::string name() const override { return "ngram:" + std::to_string(max_n_); }

  DraftProposal propose(std::span<const int32_t> h, int max_tokens, float min_conf) override {
    const int64_t len = static_cast<int64_t>(h.size());
    for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= 1; --n) {
      std::vector<int64_t> starts;  // where a continuation of an occurrence starts
      for (int64_t j = len - n - 1; j >= 0 && starts.size() < 8; --j)
        if (std::equal(h.begin() + j, h.begin() + j + n, h.end() - n)) starts.push_back(j + n);
      if (starts.empty()) continue;
      return continue_from(h, starts, max_tokens, min_conf, 1.0f - std::ldexp(1.0f, -static_cast<int>(n)));
    }
    return {};
  }

 private:
  static DraftProposal continue_from(std::span<const int32_t> h, const std::vector<int64_t>& starts,
                                     int max_tokens, float min_conf, float scale) {
    DraftProposal p;
    const int64_t len = static_cast<int64_t>(h.size());
    for (int64_t o = 0; o < max_tokens && starts[0] + o < len; ++o) {
      const int32_t id = h[static_cast<size_t>(starts[0] + o)];
      int agree = 0;
      for (int64_t s : starts) agree += s + o < len && h[static_cast<size_t>(s + o)] == id;
      const float c = scale * static_cast<float>(agree) / static_cast<float>(starts.size());
      p.ids.push_back(id);
      p.conf.push_back(c);
      if (c < min_conf) break;
    }
    return p;
  }
  int max_n_;
};

// Proposes the recorded continuation of the history, corrupted where the options say, so tests and
// sweeps choose exactly which drafts the target rejects.
class ReplayDrafter final : public Drafter {
 public:
  ReplayDrafter(std::vector<int32_t> seq, ReplayOptions o) : seq_(std::move(seq)), o_(std::move(o)) {}
  std::string name() const override { return "replay"; }

  DraftProposal propose(std::span<const int32_t> h, int max_tokens, float) override {
    DraftProposal p;
    const size_t pos = h.size();
    if (pos > seq_.size() || !std::equal(h.begin(), h.end(), seq_.begin())) return p;  // diverged
    const int n = static_cast<int>(std::min<size_t>({static_cast<size_t>(std::max(0, max_tokens)),
                                                     static_cast<size_t>(std::max(0, o_.len)), seq_.size() - pos}));
    const int forced = forced_index(n);
    for (int i = 0; i < n; ++i) {
      const int64_t at = static_cast<int64_t>(pos) + i;
      int32_t id = seq_[static_cast<size_t>(at)];
      const bool wrong = i == forced || std::find(o_.at.begin(), o_.at.end(), at) != o_.at.end() ||
                         (o_.rate < 1.0 && draw(at) >= o_.rate);
      if (wrong) id = id == 0 ? 1 : id - 1;
      p.ids.push_back(id);
      p.conf.push_back(i == o_.lowconf ? 0.05f : o_.conf);
    }
    return p;
  }

 private:
  int forced_index(int n) const {
    if (o_.reject.empty() || n == 0) return -1;
    if (o_.reject == "first") return 0;
    if (o_.reject == "middle") return n / 2;
    if (o_.reject == "last") return n - 1;
    return std::stoi(o_.reject);
  }
  // Uniform in [0, 1) from (seed, position): the same position always draws the same number.
  double draw(int64_t at) const {
    uint64_t x = o_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(at) + 1;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<double>(x >> 11) / 9007199254740992.0;
  }
  std::vector<int32_t> seq_;
  ReplayOptions o_;
};

}  // namespace

std::vector<int32_t> read_token_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw FormatError("cannot read replay file " + path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto first = text.find_first_not_of(" \t\r\n");
  std::vector<int32_t> ids;
  try {
    if (first != std::string::npos && text[first] == '{') {
      const auto j = nlohmann::json::parse(text);
      if (j.contains("ids")) return j.at("ids").get<std::vector<int32_t>>();
      ids = j.at("prompt_ids").get<std::vector<int32_t>>();
      const auto g = j.at("generated_ids").get<std::vector<int32_t>>();
      ids.insert(ids.end(), g.begin(), g.end());
      return ids;
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError("replay file " + path + ": needs \"ids\" or \"prompt_ids\" + \"generated_ids\" (" + e.what() +
                      ")");
  }
  std::string tok;
  std::istringstream ss(text);
  while (ss >> tok) {
    for (char& c : tok)
      if (c == ',') c = ' ';
    std::istringstream ts(tok);
    long v = 0;
    while (ts >> v) ids.push_back(static_cast<int32_t>(v));
    if (!ts.eof()) throw FormatError("replay file " + path + ": '" + tok + "' is not a token id");
  }
  return ids;
}

ReplayOptions parse_replay_spec(const std::string& rest) {
  ReplayOptions o;
  std::istringstream ss(rest);
  std::string part;
  bool first = true;
  while (std::getline(ss, part, ',')) {
    if (first) {
      o.file = part;
      first = false;
      continue;
    }
    const auto eq = part.find('=');
    if (eq == std::string::npos) throw ConfigError("--draft replay: option '" + part + "' is not key=value");
    const std::string k = part.substr(0, eq), v = part.substr(eq + 1);
    try {
      if (k == "rate") o.rate = std::stod(v);
      else if (k == "reject") o.reject = v;
      else if (k == "at") o.at.push_back(std::stoll(v));
      else if (k == "len") o.len = std::stoi(v);
      else if (k == "conf") o.conf = std::stof(v);
      else if (k == "lowconf") o.lowconf = std::stoi(v);
      else if (k == "seed") o.seed = std::stoull(v);
      else throw ConfigError("--draft replay: unknown option '" + k + "' (rate, reject, at, len, conf, lowconf, seed)");
    } catch (const std::logic_error&) {
      throw ConfigError("--draft replay: option " + k + "='" + v + "' is not a number");
    }
  }
  if (o.file.empty()) throw ConfigError("--draft replay:FILE needs a file name");
  if (!o.reject.empty() && o.reject != "first" && o.reject != "middle" && o.reject != "last" &&
      o.reject.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError("--draft replay: reject=" + o.reject + " must be first, middle, last or an index");
  return o;
}

std::unique_ptr<Drafter> make_ngram_drafter(int max_n) { return std::make_unique<NgramDrafter>(max_n); }

std::unique_ptr<Drafter> make_replay_drafter(std::vector<int32_t> sequence, const ReplayOptions& o) {
  return std::make_unique<ReplayDrafter>(std::move(sequence), o);
}

std::unique_ptr<Drafter> make_replay_drafter(const ReplayOptions& o) {
  return make_replay_drafter(read_token_file(o.file), o);
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, int threads) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "ngram") {
    if (rest.empty()) return make_ngram_drafter();
    try {
      return make_ngram_drafter(std::stoi(rest));
    } catch (const std::logic_error&) {
      throw ConfigError("--draft ngram:" + rest + ": the n-gram length must be a number");
    }
  }
  if (kind == "replay") return make_replay_drafter(parse_replay_spec(rest));
  if (kind == "qwen3") {
    if (rest.empty()) throw ConfigError("--draft qwen3:DIR needs a checkpoint directory");
    return make_qwen3_drafter(rest, threads);
  }
  throw ConfigError("--draft '" + spec + "': unknown drafter (ngram[:N], replay:FILE[,opts], qwen3:DIR)");
}

}  // namespace ferry
