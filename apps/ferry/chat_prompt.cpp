#include "apps/ferry/chat_prompt.hpp"

#include <string>

#include "io/errors.hpp"
#include "io/tokenizers/tokenizer.hpp"

namespace ferry::cli {

namespace {

int32_t special(const Tokenizer& t, std::string_view name) {
  const int32_t id = t.id_of(name);
  if (id < 0) throw ConfigError("--chat: the model's vocabulary has no " + std::string(name) + " token (Kimi chat template)");
  return id;
}

void append(std::vector<int32_t>& ids, const std::vector<int32_t>& more) { ids.insert(ids.end(), more.begin(), more.end()); }

// <|im_ROLE|>ROLE<|im_middle|>TEXT<|im_end|>
void turn(std::vector<int32_t>& ids, const Tokenizer& t, std::string_view role, std::string_view text, bool close) {
  ids.push_back(special(t, "<|im_" + std::string(role) + "|>"));
  append(ids, t.encode(role, false));
  ids.push_back(special(t, "<|im_middle|>"));
  if (!close) return;
  append(ids, t.encode(text, false));
  ids.push_back(kimi_end_of_turn(t));
}

}  // namespace

int32_t kimi_end_of_turn(const Tokenizer& t) {
  const int32_t id = t.id_of("<|im_end|>");
  return id >= 0 ? id : special(t, "<|end_of_msg|>");
}

std::vector<int32_t> kimi_chat_ids(const Tokenizer& t, std::string_view user, std::string_view system) {
  std::vector<int32_t> ids;
  turn(ids, t, "system", system.empty() ? kKimiDefaultSystem : system, true);
  turn(ids, t, "user", user, true);
  turn(ids, t, "assistant", "", false);  // the generation prompt
  return ids;
}

}  // namespace ferry::cli
