#include "io/tokenizers/tokenizer_special.hpp"

#include <algorithm>

namespace ferry {

void SpecialMatcher::add(std::string content, int32_t id) {
  if (content.empty()) return;  // an empty special would match everywhere; no vocabulary has one
  by_content_[content] = id;
  auto& list = by_first_byte_[static_cast<unsigned char>(content[0])];
  auto same = std::find_if(list.begin(), list.end(), [&](const Entry& e) { return e.content == content; });
  if (same != list.end()) {
    same->id = id;
    return;
  }
  list.push_back({std::move(content), id});
  std::stable_sort(list.begin(), list.end(),
                   [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
}

std::vector<SpecialMatcher::Segment> SpecialMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain = 0;
  for (size_t i = 0; i < text.size();) {
    const auto& list = by_first_byte_[static_cast<unsigned char>(text[i])];
    const Entry* hit = nullptr;
    for (const Entry& e : list) {
      if (text.compare(i, e.content.size(), e.content) == 0) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > plain) out.push_back({text.substr(plain, i - plain), -1});
    out.push_back({text.substr(i, hit->content.size()), hit->id});
    i += hit->content.size();
    plain = i;
  }
  if (plain < text.size()) out.push_back({text.substr(plain), -1});
  return out;
}

int32_t SpecialMatcher::id_of(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? -1 : it->second;
}

}  // namespace ferry
