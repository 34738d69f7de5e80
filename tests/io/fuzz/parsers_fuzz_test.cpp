// Bounded, seeded fuzzing of every parser that reads a file a stranger may hand us: config.json,
// the safetensors header, GGUF, manifest.json and the tokenizer files. Each starts from a valid
// input, applies random mutations (byte flips, truncations, inserted bytes, and for JSON hostile
// values at random fields: 2^62+16, -1, 1e400, strings, nulls), and parses. The parse must succeed or
// throw a ferry::Error; any other exception (bad_alloc, length_error, an escaped nlohmann exception)
// fails the test, and a memory error is caught by scripts/sanitize.sh (ASan/UBSan). Seeded, so a
// failure reproduces; each parser runs for at most ~2 s.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/formats/gguf.hpp"
#include "io/formats/model_config.hpp"
#include "io/formats/safetensors.hpp"
#include "io/store/expert_store.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "tests/io/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {

const fs::path kFix = FERRY_FIXTURES;
constexpr uint64_t kSeed = 16;
constexpr int kMaxIterations = 400;
constexpr double kMaxSeconds = 2.0;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spill(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// Random byte-level damage: flips, a truncation, inserted or duplicated bytes.
std::string mutate_bytes(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + int(rng() % 4);
  for (int i = 0; i < edits && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 5) {
      case 0: s[at] = char(s[at] ^ (1 << (rng() % 8))); break;
      case 1: s[at] = char(rng()); break;
      case 2: s.resize(at); break;
      case 3: s.insert(at, std::string(1 + rng() % 8, char(rng()))); break;
      case 4: s.insert(at, s.substr(at, rng() % 64)); break;
    }
  }
  return s;
}

nlohmann::json hostile_value(std::mt19937_64& rng) {
  switch (rng() % 12) {
    case 0: return (uint64_t(1) << 62) + 16;
    case 1: return -1;
    case 2: return 0;
    case 3: return uint64_t(-1);
    case 4: return (int64_t(1) << 31) + 7;
    case 5: return 1e300;
    case 6: return 1.5;
    case 7: return "x";
    case 8: return nullptr;
    case 9: return nlohmann::json::array();
    case 10: return nlohmann::json::object();
    default: return int64_t(rng() % 100000);
  }
}

// Replaces 1-3 random values (at any depth) with hostile ones; the tree is walked again after each
// edit, since replacing a container frees the values below it.
void mutate_json(nlohmann::json& j, std::mt19937_64& rng) {
  const int edits = 1 + int(rng() % 3);
  for (int i = 0; i < edits; ++i) {
    std::vector<nlohmann::json*> values;
    std::function<void(nlohmann::json&)> walk = [&](nlohmann::json& v) {
      if (v.is_structured())
        for (auto& c : v) walk(c);
      values.push_back(&v);
    };
    walk(j);
    *values[rng() % values.size()] = hostile_value(rng);
  }
}

// A JSON text mutated either structurally (valid JSON, hostile values) or byte by byte.
std::string mutate_json_text(const std::string& text, std::mt19937_64& rng) {
  if (rng() % 3 == 0) return mutate_bytes(text, rng);
  auto j = nlohmann::json::parse(text);
  mutate_json(j, rng);
  // Sometimes a value nlohmann would refuse to dump as a number: 1e400 written by hand.
  std::string out = j.dump();
  if (rng() % 10 == 0) {
    const auto at = out.find("1e+300");
    if (at != std::string::npos) out.replace(at, 6, "1e400");
  }
  return out;
}

// Runs `parse` on `count` mutants of `seed_input`; only ferry::Error may escape.
void fuzz(const char* what, const std::string& seed_input, const std::function<std::string(const std::string&, std::mt19937_64&)>& mutate,
          const std::function<void(const std::string&)>& parse) {
  std::mt19937_64 rng(kSeed);
  const auto t0 = std::chrono::steady_clock::now();
  int n = 0, accepted = 0;
  for (; n < kMaxIterations; ++n) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kMaxSeconds) break;
    const std::string input = mutate(seed_input, rng);
    try {
      parse(input);
      ++accepted;
    } catch (const Error&) {
      // the expected outcome for most mutants: a clear error
    } catch (const std::exception& e) {
      FAIL() << what << " iteration " << n << " (seed " << kSeed << "): escaped " << typeid(e).name() << ": " << e.what();
    }
  }
  EXPECT_GE(n, 50) << what << ": too few iterations to mean anything";
  std::printf("%s: %d mutants, %d accepted\n", what, n, accepted);
}

}  // namespace

TEST(ParserFuzz, ConfigJsonOfEveryFamily) {
  for (const char* rel : {"deepseek_v3-a/config.json", "k3-tiny-a/hf/config.json", "qwen3-a/config.json",
                          "kimi_linear-a/config.json", "configs/kimi-k31-pro-config.json"}) {
    fuzz(rel, slurp(kFix / rel), mutate_json_text, [](const std::string& s) { parse_model_config(s, "fuzz.json"); });
  }
}

TEST(ParserFuzz, SafetensorsHeader) {
  const auto dir = test::temp_dir("fuzz_st");
  // The header of a real fixture plus the first data bytes: mutations land mostly in the header.
  std::string file = slurp(kFix / "qwen3-a/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const std::string header = file.substr(8, n), data = file.substr(8 + n);
  auto mutate = [&](const std::string& h, std::mt19937_64& rng) {
    std::string mh = rng() % 2 ? mutate_json_text(h, rng) : mutate_bytes(h, rng);
    uint64_t len = mh.size();
    if (rng() % 8 == 0) len = rng();  // a hostile length field
    return std::string(reinterpret_cast<const char*>(&len), 8) + mh + data;
  };
  fuzz("safetensors", header, mutate, [&](const std::string& bytes) {
    spill(dir / "m.safetensors", bytes);
    SafetensorsFile f(dir / "m.safetensors");
    for (const auto& name : f.names()) (void)f.get(name);
  });
}

TEST(ParserFuzz, Gguf) {
  const auto dir = test::temp_dir("fuzz_gguf");
  {
    GgufWriter w(dir / "seed.gguf");
    w.set_value<std::string>("general.architecture", "ferry");
    w.set_value<uint32_t>("ferry.n", 7);
    w.set_array<int32_t>("ferry.list", {1, 2, 3});
    w.add_tensor("a", DType::f32, {4, 8});
    w.add_tensor("b", DType::q8_0, {2, 32});
    const std::vector<uint8_t> a(4 * 8 * 4, 1), b(2 * 34, 2);
    w.write("a", a.data(), a.size());
    w.write("b", b.data(), b.size());
    w.finish();
  }
  fuzz("gguf", slurp(dir / "seed.gguf"), mutate_bytes, [&](const std::string& bytes) {
    spill(dir / "m.gguf", bytes);
    GgufFile g(dir / "m.gguf");
    for (const auto& name : g.names()) (void)g.get(name);
    for (const auto& key : g.keys()) (void)g.value(key);
  });
}

TEST(ParserFuzz, ManifestJson) {
  const auto dir = test::temp_dir("fuzz_manifest");
  Manifest m;
  m.config_hash = "0123456789abcdef";
  m.n_layers = 3;
  m.n_experts = 4;
  m.expert_bytes = 4000;
  m.file_bytes = 4096;
  m.dirs = {"/a", "/b"};
  for (int l = 1; l < 3; ++l)
    for (int e = 0; e < 4; ++e) m.experts.push_back({l, e, uint64_t(l * 10 + e), {uint16_t(e % 2), uint16_t(1 - e % 2)}});
  write_manifest(dir / "seed.json", m);
  fuzz("manifest", slurp(dir / "seed.json"), mutate_json_text, [&](const std::string& text) {
    spill(dir / "manifest.json", text);
    (void)read_manifest(dir / "manifest.json");
  });
}

TEST(ParserFuzz, TokenizerFiles) {
  const auto dir = test::temp_dir("fuzz_tok");
  const fs::path src = kFix / "k3-tiny-a/hf";
  const std::string ranks = slurp(src / "tiktoken.model"), config = slurp(src / "tokenizer_config.json");
  auto load = [&](const std::string& r, const std::string& c) {
    spill(dir / "tiktoken.model", r);
    spill(dir / "tokenizer_config.json", c);
    auto tok = load_tokenizer(dir);
    (void)tok->decode(tok->encode("hello <|im_end|> world", true));
  };
  fuzz("tiktoken.model", ranks, mutate_bytes, [&](const std::string& r) { load(r, config); });
  fuzz("tokenizer_config.json", config, mutate_json_text, [&](const std::string& c) { load(ranks, c); });
}
