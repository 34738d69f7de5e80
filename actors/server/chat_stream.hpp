// From generated token bytes to the text a client sees, one token at a time:
//  1. UTF-8 assembly: a token may end inside a character, so the tail of an incomplete sequence waits
//     for the next token; bytes that can never form a character become U+FFFD (JSON needs valid UTF-8).
//  2. Stop strings: text is held back while it could still be the start of a stop string; when one
//     appears the text before it is the last output.
//  3. Reasoning split: text between the template's open and close markers (e.g. <think> … </think>)
//     goes to `reasoning`, the rest to `content`; markers split across tokens are held back too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct TextDelta {
  std::string content;
  std::string reasoning;
  bool empty() const { return content.empty() && reasoning.empty(); }
};

// Turns a byte stream into valid UTF-8, holding back a trailing incomplete sequence.
class Utf8Assembler {
 public:
  std::string feed(std::string_view bytes);
  std::string flush();  // what is held back becomes U+FFFD

 private:
  std::string pending_;
};

// True when `s` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s);

struct ReasoningMarkers {
  std::string open, close;  // both empty: no reasoning split
  bool starts_in_reasoning = false;  // the generation prompt already opened the reasoning block
};

class TextPipeline {
 public:
  TextPipeline(std::vector<std::string> stop, ReasoningMarkers markers);

  // Bytes of one generated token. After a stop string was seen, stopped() is true and further input
  // is ignored.
  TextDelta feed(std::string_view token_bytes);
  // End of generation: releases everything held back.
  TextDelta finish();
  bool stopped() const { return stopped_; }

 private:
  TextDelta route(std::string text, bool final);  // reasoning split of stop-checked text
  std::string check_stops(bool final);

  Utf8Assembler utf8_;
  std::vector<std::string> stop_;
  ReasoningMarkers markers_;
  std::string held_;       // text not yet released (possible stop-string prefix)
  std::string split_held_; // text not yet routed (possible marker prefix)
  bool in_reasoning_ = false;
  bool stopped_ = false;
};

}  // namespace ferry
