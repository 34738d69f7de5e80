// Finds special/added token strings in text: the leftmost occurrence, the longest one when several
// start there (Hugging Face's added-token matcher is leftmost-longest; tiktoken's alternation agrees
// whenever no special is a prefix of another, which holds for every vocabulary here).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry {

class SpecialMatcher {
 public:
  struct Segment {
    std::string_view text;  // plain text when id < 0
    int32_t id = -1;
  };

  void add(std::string content, int32_t id);
  // `text` cut into plain runs and special tokens, in order; plain runs are never empty.
  std::vector<Segment> split(std::string_view text) const;
  int32_t id_of(std::string_view content) const;  // -1 if not a special
  bool empty() const { return by_content_.empty(); }

 private:
  struct Entry {
    std::string content;
    int32_t id;
  };
  std::unordered_map<std::string, int32_t> by_content_;
  std::array<std::vector<Entry>, 256> by_first_byte_;  // each list longest first
};

}  // namespace ferry
