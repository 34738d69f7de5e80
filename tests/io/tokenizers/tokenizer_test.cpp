// Tokenizer unit tests that need no external implementation: the Kimi tiktoken fixture
// (tests/fixtures/k3-tiny-a/hf), the regex translation, the merge order and the error paths.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "io/tokenizers/tokenizer_bpe.hpp"
#include "io/tokenizers/tokenizer_regex.hpp"
#include "io/tokenizers/tokenizer_text.hpp"
#include "io/tokenizers/tokenizer_tiktoken.hpp"

namespace ferry {
namespace {

const std::filesystem::path kKimiDir = std::filesystem::path(FERRY_FIXTURES) / "k3-tiny-a" / "hf";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> corpus_lines() {
  std::vector<std::string> lines;
  std::istringstream in(read_file(std::filesystem::path(FERRY_FIXTURES) / "tokenizer_corpus.txt"));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path(FERRY_BINARY_DIR) / "tokenizer_test" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(KimiTiktoken, FixtureSpecialsFollowTokenizationKimi) {
  auto tok = load_tokenizer(kKimiDir);
  EXPECT_EQ(tok->vocab_size(), 768 + 256);
  EXPECT_EQ(tok->bos_id(), 768);
  EXPECT_EQ(tok->eos_id(), 769);
  EXPECT_EQ(tok->id_of("<|im_middle|>"), 785);
  EXPECT_EQ(tok->id_of("[PAD]"), 1023);
  EXPECT_EQ(tok->id_of("<|reserved_token_773|>"), 773);  // unnamed ids get the reserved fill
  EXPECT_EQ(tok->id_of("<|no_such_token|>"), -1);
  EXPECT_EQ(tok->token_bytes(785), "<|im_middle|>");
}

TEST(KimiTiktoken, PromptFixtureIdsArePrefixOfBosPlusEncoding) {
  auto tok = load_tokenizer(kKimiDir);
  auto prompt = nlohmann::json::parse(read_file(kKimiDir / "prompt.json"));
  auto expected = prompt["ids"].get<std::vector<int32_t>>();
  std::string text = prompt["text"].get<std::string>();
  std::vector<int32_t> ids{tok->bos_id()};
  for (int32_t id : tok->encode(text, true)) ids.push_back(id);
  // prompt.json's note says the ids were truncated to 24: the full encoding is longer, and its
  // first 24 ids are the fixture's.
  ASSERT_EQ(expected.size(), 24u);
  EXPECT_GT(ids.size(), expected.size()) << "the fixture's ids would not be a truncation";
  std::vector<int32_t> head(ids.begin(), ids.begin() + std::min(ids.size(), expected.size()));
  EXPECT_EQ(head, expected);
  RecordProperty("full_length", static_cast<int>(ids.size()));  // BOS + the whole sentence
  EXPECT_EQ(tok->decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), text);
}

TEST(KimiTiktoken, SpecialStringsBecomeIdsOnlyWhenAllowed) {
  auto tok = load_tokenizer(kKimiDir);
  std::string text = "<|im_user|>user<|im_middle|>hi [BOS]<|reserved_token_800|>";
  auto with = tok->encode(text, true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), 771);
  EXPECT_EQ(with.back(), 800);
  EXPECT_NE(std::find(with.begin(), with.end(), 768), with.end());
  auto without = tok->encode(text, false);
  for (int32_t id : without) EXPECT_LT(id, 768) << "a special id came out of plain text";
  EXPECT_EQ(tok->decode(with), text);
  EXPECT_EQ(tok->decode(without), text);
}

TEST(KimiTiktoken, CorpusRoundTripsByteForByte) {
  auto tok = load_tokenizer(kKimiDir);
  std::string all = read_file(std::filesystem::path(FERRY_FIXTURES) / "tokenizer_corpus.txt");
  for (bool special : {true, false}) EXPECT_EQ(tok->decode(tok->encode(all, special)), all);
  for (const auto& line : corpus_lines()) EXPECT_EQ(tok->decode(tok->encode(line, false)), line) << line;
}

TEST(TokenizerRegex, TranslatesRustIntersectionAndWhitespace) {
  EXPECT_EQ(translate_rust_regex(R"([\p{Lu}\p{M}&&[^\p{Han}]]+)"), R"((?:(?![\p{Han}])[\p{Lu}\p{M}])+)");
  EXPECT_EQ(translate_rust_regex(R"(\s+(?!\S)|[^\s\p{L}])"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}])");
  EXPECT_EQ(translate_rust_regex(R"([\[\]a-z]\\s)"), R"([\[\]a-z]\\s)");  // escaped brackets, literal "\s"
  EXPECT_THROW(translate_rust_regex("[a&&b]"), FormatError);
  EXPECT_THROW(translate_rust_regex("[abc"), FormatError);
}

std::vector<std::string> pieces(const PretokenRegex& re, std::string_view text) {
  std::vector<std::string> out;
  for (auto m : re.matches(text)) out.emplace_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

TEST(TokenizerRegex, KimiPatternSeparatesHanFromOtherLetters) {
  PretokenRegex re(kimi_pattern(), "kimi");
  EXPECT_EQ(pieces(re, "Hello世界World's 12345"),
            (std::vector<std::string>{"Hello", "世界", "World's", " ", "123", "45"}));
  // U+180E is not White_Space for Rust (PCRE2's UCP \s would take it): it must not join "a  b"'s run.
  EXPECT_EQ(pieces(re, "a\xE1\xA0\x8E  b"), (std::vector<std::string>{"a", "\xE1\xA0\x8E", " ", " b"}));
}

TEST(TokenizerBpe, MergesLowestRankThenLeftmost) {
  // "aaaa" with ranks {aa: 1}: left pair first -> [aa][aa]; "aaa" -> [aa][a].
  auto rank = [](std::string_view s) -> uint32_t { return s == "aa" ? 1 : s == "aaaa" ? 2 : kNoMerge; };
  for (auto [text, want] : std::vector<std::pair<std::string, std::vector<uint32_t>>>{
           {"aaa", {0, 2, 3}}, {"aaaa", {0, 4}}, {"ab", {0, 1, 2}}}) {
    std::vector<BpePart> parts;
    for (uint32_t i = 0; i < text.size(); ++i) parts.push_back({i, i + 1, 0});
    bpe_merge(parts, [&](const BpePart& l, const BpePart& r) -> std::pair<uint32_t, int32_t> {
      return {rank(std::string_view(text).substr(l.begin, r.end - l.begin)), 0};
    });
    std::vector<uint32_t> bounds{0};
    for (const auto& p : parts) bounds.push_back(p.end);
    EXPECT_EQ(bounds, want) << text;
  }
}

TEST(TokenizerText, Utf8ValidationAndBase64) {
  EXPECT_FALSE(utf8_error_offset("héllo 世界 👍").has_value());
  EXPECT_EQ(utf8_error_offset("ab\xC0\x80"), 2u);       // overlong
  EXPECT_EQ(utf8_error_offset("a\xED\xA0\x80"), 1u);    // surrogate
  EXPECT_EQ(utf8_error_offset("abc\xE4\xB8"), 3u);      // truncated
  EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(base64_decode("4pyo"), "\xE2\x9C\xA8");
  EXPECT_FALSE(base64_decode("a$==").has_value());
  EXPECT_EQ(nfc("cafe\xCC\x81"), "caf\xC3\xA9");
}

TEST(TokenizerErrors, MissingAndMalformedFilesNameTheFile) {
  auto empty = scratch_dir("empty");
  try {
    load_tokenizer(empty);
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(empty.string()), std::string::npos) << e.what();
  }
  auto bad = scratch_dir("bad_ranks");
  write_file(bad / "tiktoken.model", "AA== 0\nnot-base64! 1\n");
  write_file(bad / "tokenizer_config.json", R"({"added_tokens_decoder": {}})");
  try {
    load_tokenizer(bad);
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tiktoken.model:2"), std::string::npos) << e.what();
  }
  auto no_config = scratch_dir("no_config");
  std::filesystem::copy_file(kKimiDir / "tiktoken.model", no_config / "tiktoken.model");
  EXPECT_THROW(load_tokenizer(no_config), FormatError);
  auto hf = scratch_dir("hf_bad");
  write_file(hf / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  try {
    load_tokenizer(hf);
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Unigram"), std::string::npos) << e.what();
  }
  write_file(hf / "tokenizer.json", "{ not json");
  EXPECT_THROW(load_tokenizer(hf), FormatError);
}

TEST(TokenizerErrors, InvalidUtf8AndUnknownIds) {
  auto tok = load_tokenizer(kKimiDir);
  EXPECT_THROW(tok->encode("ok \xFF bad", false), FormatError);
  EXPECT_THROW(tok->token_bytes(1024), LimitError);
  EXPECT_THROW(tok->decode({1, -1}), LimitError);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// Runs far longer than any regex backtracking stack or the 25,000-character chunking of
// tokenization_kimi.py: still encoded, still round-tripped, in reasonable time.
TEST(KimiTiktoken, LongRunsEncodeAndRoundTrip) {
  auto tok = load_tokenizer(kKimiDir);
  for (std::string run : {std::string(60'000, ' '), std::string(60'000, 'a'), std::string(30'000, '7'),
                          std::string(20'000, '\n') + "x", std::string(40'000, '=')}) {
    std::string text = "start " + run + " end";
    auto ids = tok->encode(text, false);
    EXPECT_EQ(tok->decode(ids), text) << "run of " << run.size() << " x '" << run[0] << "'";
  }
}

}  // namespace
}  // namespace ferry
