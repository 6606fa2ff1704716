//===- ChatTemplate.h - chat messages -> prompt text ---------------*- C++ -*-===//
//
// The model's own chat template (the GGUF's `tokenizer.chat_template`, Jinja source) is rendered by the
// sandboxed interpreter of server/jinja, as transformers' apply_chat_template renders it: `messages`,
// `tools`, `add_generation_prompt`, `bos_token`, `eos_token` and the request's chat_template_kwargs
// (`enable_thinking`...) as variables. It is parsed and rendered once on a probe conversation when the
// server starts; a template that fails is refused then, with its line and construct named.
//
// `--chat-template NAME` picks one of the built-in renderers instead (kept as overrides for a GGUF whose
// template is missing or broken); they follow the official templates' semantics for plain text:
//
//   llama3  <|start_header_id|>role<|end_header_id|>\n\n CONTENT(trimmed) <|eot_id|>, after bos. A template
//           that mentions "Cutting Knowledge Date" (3.1 and later) always opens with a system turn holding
//           "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" and the first system message.
//   chatml  <|im_start|>role\nCONTENT<|im_end|>\n (no bos). "qwen3": a ChatML template that handles
//           <think> (Qwen 3) drops the reasoning part of assistant turns before the last user message and
//           adds "<think>\n\n</think>\n\n" to the generation prompt when thinking is turned off.
//   gemma3  bos, a first system message becomes the prefix of the first user turn ("SYSTEM\n\n"), then
//           <start_of_turn>user|model\nCONTENT(trimmed)<end_of_turn>\n; roles must alternate user/model.
//   gemma4  bos, <|turn>system\n...<turn|>\n when there is a system message (or thinking is on: <|think|>),
//           then <|turn>user|model\nCONTENT(trimmed; model turns without their thinking)<turn|>\n. Templates
//           that close an empty thought channel when thinking is off ("<|channel>thought\n<channel|>" in
//           the generation prompt) get it.
// `--chat-template FILE` renders a Jinja file with the interpreter. recognise() still names the family of a
// template text by its markers (for the built-in renderers' tests and the end-of-turn token).
//
// Usage:
//   auto t = ChatTemplate::fromJinja(plan.tokenizer.chatTemplate, "plan 'm.plan'", "<s>", "</s>");
//   auto text = t->apply({{"system", "Be brief."}, {"user", "Hi"}}, "<s>", {});
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_CHATTEMPLATE_H
#define TPC_SERVER_CHATTEMPLATE_H

#include "runtime/support/Expected.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpc::server {

namespace jinja {
class Template;
}

/// One message of a conversation (OpenAI roles: system, developer, user, assistant; tool for templates).
struct ChatMessage {
  std::string role;
  std::string content;
  /// The message's other fields as the client sent them (tool_calls, tool_call_id, name,
  /// reasoning_content): a Jinja template sees them, the built-in renderers do not.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

/// Per-request settings a template may read.
struct ChatOptions {
  std::optional<bool> enableThinking; ///< chat_template_kwargs.enable_thinking (unset: the template's default)
  std::string date;                   ///< llama 3.1+ "Today Date" (empty: the template's own default)
  nlohmann::ordered_json tools;       ///< the request's tools (null: none); a Jinja template's `tools`
  /// chat_template_kwargs: each key a variable of a Jinja template, as transformers passes them.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool addGenerationPrompt = true;
};

/// A recognised chat format (see the file comment).
class ChatTemplate {
public:
  enum class Family { Llama3, ChatML, Gemma3, Gemma4, Jinja };

  /// The Jinja template `text`, rendered by the interpreter with `bos`/`eos` as bos_token/eos_token. Parsed
  /// and rendered on a probe conversation here: the error names `origin`, the template line and construct.
  /// `toolUse` (optional): the GGUF's tokenizer.chat_template.tool_use, rendered instead for requests with
  /// tools (as llama-server and transformers choose); probed too.
  static Expected<ChatTemplate> fromJinja(const std::string &text, const std::string &origin, const std::string &bos,
                                          const std::string &eos, const std::string &toolUse = "");

  /// The family of a Jinja template text, by markers. `origin` names where the text came from in the
  /// error, which also names --chat-template.
  static Expected<ChatTemplate> recognise(const std::string &text, const std::string &origin);
  /// --chat-template VALUE: a name (llama3, llama3.1, chatml, qwen3, gemma3, gemma4) or a Jinja template
  /// file (rendered by the interpreter with bos/eos).
  static Expected<ChatTemplate> fromFlag(const std::string &value, const std::string &bos = "",
                                         const std::string &eos = "");
  /// The names fromFlag accepts.
  static const char *names();

  /// The prompt text for `messages` with the generation prompt added; `bos` is the vocabulary's BOS text.
  /// Errors (a role the format cannot place, roles out of order) are one line for a 400 answer.
  Expected<std::string> apply(const std::vector<ChatMessage> &messages, const std::string &bos,
                              const ChatOptions &opts) const;

  Family family() const { return family_; }
  /// "llama3", "llama3.1", "chatml", "qwen3", "gemma3", "gemma4"; "jinja" for a rendered template.
  std::string name() const;
  /// The Jinja source (with the tool_use variant's after it); "" for a built-in renderer. The tool-call
  /// and reasoning formats are read from its markers.
  const std::string &source() const { return source_; }
  /// The token texts that close a model turn ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<turn|>"...;
  /// for a Jinja template, those of the markers its text holds).
  std::vector<std::string> endOfTurn() const;

private:
  explicit ChatTemplate(Family f) : family_(f) {}
  Family family_;
  bool knowledgeDate_ = false; ///< llama 3.1+: the system preamble with the dates
  std::string defaultDate_ = "26 Jul 2024";
  bool dateFromClock_ = false;     ///< the template asks strftime_now for today's date
  bool thinkTags_ = false;         ///< ChatML: Qwen 3's <think> handling
  bool emptyThought_ = false;      ///< Gemma 4: empty thought channel when thinking is off
  bool systemRejected_ = false;    ///< Gemma (2-style) template that refuses a system message
  std::shared_ptr<const jinja::Template> jinja_; ///< Family::Jinja
  std::shared_ptr<const jinja::Template> toolUse_; ///< Family::Jinja: for requests with tools (may be null)
  std::vector<std::string> ends_;                ///< Family::Jinja: the end-of-turn markers in its text
  std::string bos_, eos_;                        ///< Family::Jinja: bos_token, eos_token
  std::string source_;                           ///< Family::Jinja: the template text(s)
};

} // namespace tpc::server

#endif // TPC_SERVER_CHATTEMPLATE_H
