// Chat templates as data (config/templates/*.json, format in docs/USAGE.md "Chat templates"): how a
// list of messages becomes the prompt, which strings stop a reply, and which markers delimit
// reasoning. The template's own text (role headers, end markers) is "control" text: special-token
// names in it become their ids. Message content is ordinary text: a user cannot forge a control token.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/server/chat_stream.hpp"

namespace ferry {

class Tokenizer;

struct ChatTurnFormat {
  std::string prefix, suffix;
};

struct ChatTemplate {
  std::string name;
  std::string description;
  std::vector<std::string> model_types;  // config.json model_type values this template is the default for
  bool add_bos = false;                  // prepend the tokenizer's BOS token
  std::string default_system;            // inserted when the first message is not a system message
  ChatTurnFormat tools;                  // wraps the compact JSON of the tool declarations
  std::map<std::string, ChatTurnFormat> roles;  // system, user, assistant, tool, ...
  std::string generation_prompt;         // opens the assistant's reply
  std::vector<std::string> stop;         // stop strings (special names among them also stop by id)
  ReasoningMarkers reasoning;
  // Other names of a special token in other vocabularies of the family, used when the tokenizer lacks
  // the template's name: K3 calls K2's <|im_end|> <|end_of_msg|> (same slot).
  std::map<std::string, std::vector<std::string>> aliases;
};

struct ChatMessage {
  std::string role;
  std::string content;
  std::vector<int32_t> ids;  // when not empty: content's tokens as the model generated them (used as is)
};

// One piece of a rendered prompt. control: template text (specials allowed); else user text. ids, when
// not empty, are used instead of encoding text (a reply the model generated, special tokens included).
struct PromptSegment {
  std::string text;
  bool control = false;
  std::vector<int32_t> ids;
};

// Parses a template's JSON text; `origin` names the file in errors. Throws ConfigError naming the field.
ChatTemplate parse_chat_template(const std::string& json_text, const std::string& origin);

// Renders messages (+ tools as compact JSON, "" for none) into segments. Throws ConfigError when a
// message's role has no format in the template.
std::vector<PromptSegment> render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                       const std::string& tools_json, bool add_generation_prompt = true);

// Token ids of rendered segments (BOS first when the template asks and the vocabulary has one).
std::vector<int32_t> tokenize_prompt(const ChatTemplate& t, const Tokenizer& tok,
                                     const std::vector<PromptSegment>& segments);

// Special-token-looking names (<|name|>) in the template's control text that the tokenizer lacks:
// they are encoded as plain text, so the server warns about them at start-up.
std::vector<std::string> missing_specials(const ChatTemplate& t, const Tokenizer& tok);

// `text` with every special name the tokenizer lacks replaced by its first alias the tokenizer has.
std::string resolve_aliases(const ChatTemplate& t, const Tokenizer& tok, std::string text);

// Stop strings of the template that are single special tokens of the vocabulary (aliases resolved), as ids.
std::vector<int32_t> stop_token_ids(const ChatTemplate& t, const Tokenizer& tok);
// The ids that end a chat reply: the model's end-of-text id (eos_id, when >= 0) and the template's stop
// tokens. `ferry run --chat`, `ferry chat` and ferry-server stop on these.
std::vector<int32_t> chat_stop_ids(const ChatTemplate& t, const Tokenizer& tok, int64_t eos_id);

}  // namespace ferry
