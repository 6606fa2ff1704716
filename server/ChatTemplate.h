//===- ChatTemplate.h - chat messages -> prompt text, by family --*- C++ -*-===//
//
// Debian 12 packages no Jinja engine, so tpc does not run the GGUF's `tokenizer.chat_template`: it
// recognises which family's template it is from key markers in the text (not an exact string, so minor
// revisions of a template still match) and renders that family's format in C++, following the official
// templates' semantics for plain text conversations:
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
// The generation prompt is always added. A template that matches none of these is refused when the server
// starts, with an error naming --chat-template; never a silently wrong prompt.
//
// Usage:
//   auto t = ChatTemplate::recognise(plan.tokenizer.chatTemplate, "plan.bin");
//   auto text = t->apply({{"system", "Be brief."}, {"user", "Hi"}}, "<s>", {});
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_CHATTEMPLATE_H
#define TPC_SERVER_CHATTEMPLATE_H

#include "runtime/support/Expected.h"

#include <optional>
#include <string>
#include <vector>

namespace tpc::server {

/// One message of a conversation (OpenAI roles: system, developer, user, assistant).
struct ChatMessage {
  std::string role;
  std::string content;
};

/// Per-request settings a template may read.
struct ChatOptions {
  std::optional<bool> enableThinking; ///< chat_template_kwargs.enable_thinking (unset: the template's default)
  std::string date;                   ///< llama 3.1+ "Today Date" (empty: the template's own default)
};

/// A recognised chat format (see the file comment).
class ChatTemplate {
public:
  enum class Family { Llama3, ChatML, Gemma3, Gemma4 };

  /// The family of a Jinja template text, by markers. `origin` names where the text came from in the
  /// error, which also names --chat-template.
  static Expected<ChatTemplate> recognise(const std::string &text, const std::string &origin);
  /// --chat-template VALUE: a name (llama3, llama3.1, chatml, qwen3, gemma3, gemma4) or a template file.
  static Expected<ChatTemplate> fromFlag(const std::string &value);
  /// The names fromFlag accepts.
  static const char *names();

  /// The prompt text for `messages` with the generation prompt added; `bos` is the vocabulary's BOS text.
  /// Errors (a role the format cannot place, roles out of order) are one line for a 400 answer.
  Expected<std::string> apply(const std::vector<ChatMessage> &messages, const std::string &bos,
                              const ChatOptions &opts) const;

  Family family() const { return family_; }
  /// "llama3", "llama3.1", "chatml", "qwen3", "gemma3", "gemma4".
  std::string name() const;
  /// The token text that closes a model turn ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<turn|>").
  std::string endOfTurn() const;

private:
  explicit ChatTemplate(Family f) : family_(f) {}
  Family family_;
  bool knowledgeDate_ = false; ///< llama 3.1+: the system preamble with the dates
  std::string defaultDate_ = "26 Jul 2024";
  bool dateFromClock_ = false;     ///< the template asks strftime_now for today's date
  bool thinkTags_ = false;         ///< ChatML: Qwen 3's <think> handling
  bool emptyThought_ = false;      ///< Gemma 4: empty thought channel when thinking is off
  bool systemRejected_ = false;    ///< Gemma (2-style) template that refuses a system message
};

} // namespace tpc::server

#endif // TPC_SERVER_CHATTEMPLATE_H
