// TextPipeline: UTF-8 assembly across tokens, stop strings, reasoning split (actors/server/chat_stream.hpp).
#include <gtest/gtest.h>

#include "actors/server/chat_stream.hpp"

namespace ferry {
namespace {

// Feeds pieces one by one and concatenates everything released, as a streaming client would see it.
TextDelta run(TextPipeline& p, const std::vector<std::string>& pieces) {
  TextDelta all;
  for (const auto& s : pieces) {
    TextDelta d = p.feed(s);
    all.content += d.content;
    all.reasoning += d.reasoning;
  }
  TextDelta d = p.finish();
  all.content += d.content;
  all.reasoning += d.reasoning;
  return all;
}

TEST(Utf8Assembler, HoldsBackACharacterSplitAcrossTokens) {
  Utf8Assembler a;
  EXPECT_EQ(a.feed("caf\xC3"), "caf");
  EXPECT_EQ(a.feed("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(a.feed("\xE2\x82"), "");
  EXPECT_EQ(a.feed("\xAC"), "\xE2\x82\xAC");
}

TEST(Utf8Assembler, ReplacesBytesThatCanNeverBeValid) {
  Utf8Assembler a;
  EXPECT_EQ(a.feed("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(a.feed("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(a.feed("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(a.feed("\xF0\x9F"), "");
  EXPECT_EQ(a.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end
  EXPECT_TRUE(valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

TEST(TextPipeline, StopStringSplitAcrossTokensEndsTheTextBeforeIt) {
  TextPipeline p({"<|im_end|>", "STOP"}, {});
  TextDelta d = run(p, {"Hello wor", "ld<|im", "_en", "d|>never shown"});
  EXPECT_EQ(d.content, "Hello world");
  EXPECT_TRUE(p.stopped());
}

TEST(TextPipeline, APartialStopStringIsReleasedWhenItDoesNotComplete) {
  TextPipeline p({"STOP"}, {});
  EXPECT_EQ(p.feed("abST").content, "ab");
  EXPECT_EQ(p.feed("Ox").content, "STOx");
  EXPECT_EQ(p.finish().content, "");
  EXPECT_FALSE(p.stopped());
}

TEST(TextPipeline, ThinkingGoesToReasoningAndTheRestToContent) {
  TextPipeline p({}, {"<think>", "</think>", false});
  TextDelta d = run(p, {"<th", "ink>let me see", "</thi", "nk>The answer is 4."});
  EXPECT_EQ(d.reasoning, "let me see");
  EXPECT_EQ(d.content, "The answer is 4.");
}

TEST(TextPipeline, ReasoningCanStartOpenAndStreamsAsDeltas) {
  TextPipeline p({}, {"<think>", "</think>", true});
  EXPECT_EQ(p.feed("step one").reasoning, "step one");
  TextDelta d = p.feed("</think>done");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "done");
}

TEST(TextPipeline, StopStringInsideReasoningStillStops) {
  TextPipeline p({"<|im_end|>"}, {"<think>", "</think>", false});
  TextDelta d = run(p, {"<think>hm<|im_end|>", "x"});
  EXPECT_EQ(d.reasoning, "hm");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(p.stopped());
}

}  // namespace
}  // namespace ferry
