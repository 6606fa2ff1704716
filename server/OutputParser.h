//===- OutputParser.h - generated text -> content, reasoning, tool calls -*- C++ -*-===//
//
// A chat answer's text is split, as it streams, into what a client sees in three places: `content`,
// `reasoning_content` (llama-server's field) and `tool_calls`. The parser is fed the text in whatever
// pieces the detokenizer releases and gives back deltas in order:
//
//   - reasoning: <think>...</think> at the start of the answer (Qwen 3 / 3.5, GLM, DeepSeek-R1), or the
//     whole answer's start when the prompt already opened <think> (startInReasoning); harmony's
//     `analysis` channel (gpt-oss), whose `final` channel and header-less text are content.
//   - tool calls in the request's format (ToolCalls.h): text that could be the start of an opening
//     marker is held back (as TextStream holds back stop strings) until it is known not to be one; a
//     call region is held whole until it closes, then comes out as one Call delta (name and arguments
//     complete), so a call that does not parse is still given back as the content it was, never lost
//     and never half-announced to the client.
//   - content: the rest, with the white space before its first character dropped (the separator after
//     </think> or a call is the format's, not the model's answer).
//
// reasoning_format "none" (splitReasoning false) keeps <think> blocks as text in the content; harmony's
// analysis text then goes to the content too (its channel markers never do).
//
// Usage:
//   OutputParser p(cfg);
//   std::vector<OutputDelta> d;
//   p.push("<think>hm</think>Hi", d); ... p.finish(d);
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_OUTPUTPARSER_H
#define TPC_SERVER_OUTPUTPARSER_H

#include "server/ToolCalls.h"

#include <functional>
#include <string>
#include <vector>

namespace tpc::server {

/// reasoning_format (request field) and --reasoning-format (server flag), as llama-server spells them:
/// none keeps the reasoning in the content; deepseek (and deepseek-legacy) and auto split it off.
enum class ReasoningFormat { None, Deepseek, Auto };
/// "none", "deepseek", "deepseek-legacy", "auto" -> the format; false for anything else.
bool parseReasoningFormat(const std::string &s, ReasoningFormat &out);

/// How one answer is read (Api builds it per request from the template and the request's fields).
struct OutputConfig {
  ToolFormat tools = ToolFormat::None; ///< the call format to read (None: no calls are read)
  nlohmann::json toolList;             ///< the request's tools (types text-valued arguments)
  bool thinkTags = false;              ///< the template uses <think>...</think>
  bool harmony = false;                ///< gpt-oss channels (read even without tools)
  bool splitReasoning = true;          ///< reasoning_format != none
  bool startInReasoning = false;       ///< the prompt ends inside an open <think>
  std::string prefill;                 ///< text the prompt already holds of the answer (a forced call's
                                       ///< opening): read first, never sent as content (a forced call
                                       ///< that does not parse gives only what the model wrote)
  /// The ids of the calls ("call_" + 24 letters and digits; Mistral's templates take 9 alphanumerics).
  std::function<std::string()> newId;
};

/// One piece of the answer.
struct OutputDelta {
  enum class Kind { Content, Reasoning, Call } kind = Kind::Content;
  std::string text; ///< Content, Reasoning
  ToolCall call;    ///< Call (with its id)
  int index = 0;    ///< Call: 0, 1, ... in the answer
};

/// See the file comment.
class OutputParser {
public:
  explicit OutputParser(OutputConfig cfg);
  /// Adds `text`; appends the deltas it completes.
  void push(std::string_view text, std::vector<OutputDelta> &out);
  /// The end of the answer: releases what is held (an unterminated call as content when it does not
  /// parse).
  void finish(std::vector<OutputDelta> &out);
  int calls() const { return calls_; }

private:
  enum class State { Content, Reasoning, Call, Header, Body };
  enum class Body { Content, Reasoning, Call };
  void run(bool atEnd, std::vector<OutputDelta> &out);
  bool stepGeneric(bool atEnd, std::vector<OutputDelta> &out);
  bool stepHarmony(bool atEnd, std::vector<OutputDelta> &out);
  void content(std::string_view s, std::vector<OutputDelta> &out);
  void reasoning(std::string_view s, std::vector<OutputDelta> &out);
  void call(ToolCall c, std::vector<OutputDelta> &out);

  OutputConfig cfg_;
  State state_ = State::Content;
  Body body_ = Body::Content;
  std::string callName_; ///< harmony: the recipient function of the current message
  std::string buf_;      ///< text not released yet
  std::string pendingSpace_; ///< white space before a call region: dropped for a call, kept for text
  std::string forcedHead_;   ///< the prefill's call prefix: not the model's text when the call fails
  bool contentSeen_ = false;      ///< content released (no <think> and no bare JSON call after it)
  bool reasoningSeen_ = false;    ///< a <think> was opened
  bool reasoningStarted_ = false; ///< reasoning text released
  int calls_ = 0;
};

/// "call_" + 24 random letters and digits.
std::string newToolCallId();
/// 9 random letters and digits (Mistral's templates refuse any other id).
std::string newMistralToolCallId();

} // namespace tpc::server

#endif // TPC_SERVER_OUTPUTPARSER_H
