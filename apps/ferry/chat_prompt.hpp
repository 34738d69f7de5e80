// `ferry run --chat`: the prompt wrapped in the Kimi chat template (MODEL_SPEC.md §10):
//   <|im_system|>system<|im_middle|>SYSTEM<|im_end|><|im_user|>user<|im_middle|>TEXT<|im_end|>
//   <|im_assistant|>assistant<|im_middle|>
// A minimal built-in template: the server's config/templates/kimi.json carries the same turns as data
// and should replace this once both are on main. K3 vocabularies name the end-of-turn token
// <|end_of_msg|> (same id slot as K2's <|im_end|>); either is accepted.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry {
class Tokenizer;
}

namespace ferry::cli {

inline constexpr std::string_view kKimiDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";

// Template tokens are looked up as specials; the user's text is encoded as ordinary text, so it can
// never forge a control token. Throws ConfigError naming a special token the vocabulary lacks.
std::vector<int32_t> kimi_chat_ids(const Tokenizer& t, std::string_view user, std::string_view system);

// The end-of-turn id (<|im_end|> or <|end_of_msg|>): chat generation stops there.
int32_t kimi_end_of_turn(const Tokenizer& t);

}  // namespace ferry::cli
