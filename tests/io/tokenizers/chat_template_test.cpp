// Chat templates as data: config/templates/*.json rendered and tokenized with the k3-tiny-a vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/tokenizers/chat_template.hpp"
#include "io/errors.hpp"
#include "io/tokenizers/tokenizer.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

ChatTemplate load(const std::string& name) {
  const fs::path p = fs::path(FERRY_SOURCE_DIR) / "config/templates" / (name + ".json");
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_chat_template(ss.str(), p.string());
}

std::string joined(const std::vector<PromptSegment>& s) {
  std::string out;
  for (const auto& p : s) out += p.text;
  return out;
}

TEST(ChatTemplate, KimiFormatWithDefaultSystemPromptAndGenerationPrompt) {
  const ChatTemplate t = load("kimi");
  const std::string text = joined(render_chat(t, {{"user", "Hi"}}, ""));
  EXPECT_EQ(text,
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
            "<|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
}

TEST(ChatTemplate, KimiToolsGoFirstAndToolResultsUseTheToolRole) {
  const ChatTemplate t = load("kimi");
  const std::string text = joined(render_chat(
      t, {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"tool", "42"}}, R"([{"type":"function"}])"));
  EXPECT_EQ(text,
            "<|im_system|>tool_declare<|im_middle|>[{\"type\":\"function\"}]<|im_end|>"
            "<|im_system|>system<|im_middle|>S<|im_end|>"
            "<|im_user|>user<|im_middle|>U<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>A<|im_end|>"
            "<|im_system|>tool<|im_middle|>42<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
}

TEST(ChatTemplate, ControlTextBecomesSpecialIdsButUserTextCannotForgeThem) {
  const ChatTemplate t = load("kimi");
  const auto tok = load_tokenizer(fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf");
  const int32_t user = tok->id_of("<|im_user|>"), middle = tok->id_of("<|im_middle|>");
  ASSERT_GE(user, 0);
  ASSERT_GE(middle, 0);
  const auto ids = tokenize_prompt(t, *tok, render_chat(t, {{"system", "S"}, {"user", "<|im_user|>"}}, ""));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 1);  // the template's, not the user's
  EXPECT_EQ(std::count(ids.begin(), ids.end(), middle), 3);
  EXPECT_EQ(ids.back(), middle);  // ends with the generation prompt
}

// K3 vocabularies call K2's <|im_end|> <|end_of_msg|>: the template's alias makes it one token there.
TEST(ChatTemplate, TheFixtureVocabularyNamesImEndEndOfMsgAndTheAliasEncodesItAsOneToken) {
  const ChatTemplate t = load("kimi");
  const auto tok = load_tokenizer(fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf");
  ASSERT_LT(tok->id_of("<|im_end|>"), 0);
  const int32_t eom = tok->id_of("<|end_of_msg|>");
  ASSERT_GE(eom, 0);
  EXPECT_TRUE(missing_specials(t, *tok).empty());
  EXPECT_EQ(stop_token_ids(t, *tok), std::vector<int32_t>{eom});
  const auto ids = tokenize_prompt(t, *tok, render_chat(t, {{"user", "Hi"}}, ""));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eom), 2) << "after the system turn and the user turn";
}

// A reply the model generated goes back into the history as its own ids (special tokens included),
// not re-encoded from its text.
TEST(ChatTemplate, AMessageWithIdsIsTokenizedAsThoseIds) {
  const ChatTemplate t = load("kimi");
  const auto tok = load_tokenizer(fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf");
  const int32_t open = tok->id_of("<|open|>");
  ASSERT_GE(open, 0);
  const std::vector<int32_t> reply = {open, 300, 301};
  ChatMessage a{"assistant", tok->decode(reply), reply};
  const auto with_ids = tokenize_prompt(t, *tok, render_chat(t, {{"user", "Hi"}, a}, ""));
  EXPECT_NE(std::search(with_ids.begin(), with_ids.end(), reply.begin(), reply.end()), with_ids.end());
  a.ids.clear();
  const auto as_text = tokenize_prompt(t, *tok, render_chat(t, {{"user", "Hi"}, a}, ""));
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), open), 0) << "text never becomes a special token";
}

TEST(ChatTemplate, PlainTemplateForModelsWithoutAChatFormat) {
  const ChatTemplate t = load("plain");
  EXPECT_EQ(joined(render_chat(t, {{"system", "Be brief."}, {"user", "Hi"}}, "")),
            "Be brief.\n\nUser: Hi\nAssistant:");
  EXPECT_TRUE(t.add_bos);
  EXPECT_EQ(t.stop, std::vector<std::string>{"\nUser:"});
}

TEST(ChatTemplate, BadTemplateDataNamesTheField) {
  EXPECT_THROW(parse_chat_template("{", "x.json"), ConfigError);
  try {
    parse_chat_template(R"({"name":"t","roles":{"user":{"prefix":1}}})", "x.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("roles.user"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prefix"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_chat_template(R"({"name":"t","roles":{"user":{}},"reasoning":{"open":"<t>"}})", "x.json"),
               ConfigError);
  const ChatTemplate t = parse_chat_template(R"({"name":"t","roles":{"user":{"prefix":"U:"}}})", "x.json");
  EXPECT_THROW(render_chat(t, {{"assistant", "A"}}, ""), ConfigError);  // no format for the role
}

}  // namespace
}  // namespace ferry
