//===- ToolRequest.h - tools, tool_choice and reasoning in chat requests -*- C++ -*-===//
//
// The request side of tool calling and reasoning (the answer side is OutputParser):
//   - `tools` (each {"type": "function", "function": {"name", "description"?, "parameters"?}}),
//     `tool_choice` ("auto", "none", "required" or {"type": "function", "function": {"name"}}),
//     `parallel_tool_calls` and `reasoning_format` ("none", "deepseek", "deepseek-legacy", "auto") are
//     checked here; a malformed one is a 400 naming the field. (parallel_tool_calls is accepted; every
//     call of an answer is read either way. deepseek-legacy is read as deepseek.)
//   - tool_choice "none" does not show the tools to the model (the template gets no `tools`) and reads no
//     calls: OpenAI's "the model will not call any tool".
//   - assistant messages' tool_calls arrive with `arguments` as JSON text (OpenAI clients send a string);
//     templates index and iterate it, so text that parses as a JSON object becomes that object (as
//     llama-server does) and any other string stays a string. A template that concatenates the string
//     (DeepSeek-R1's) fails on an object: Api renders such a conversation again with the strings.
//
// The response side: the message object of a non-streamed answer and the delta objects of a stream, in
// OpenAI's shapes (a call's first delta carries index, id, type, function.name and empty arguments; the
// next one the arguments).
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_TOOLREQUEST_H
#define TPC_SERVER_TOOLREQUEST_H

#include "server/Api.h"
#include "server/OutputParser.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tpc::server {

/// tool_choice.
struct ToolChoice {
  enum class Kind { Auto, None, Required, Named } kind = Kind::Auto;
  std::string name; ///< Named
};

/// The tool and reasoning fields of one chat request.
struct ToolFields {
  nlohmann::json tools; ///< null when the request has none (or an empty array)
  ToolChoice choice;
  std::optional<ReasoningFormat> reasoning; ///< unset: the server's --reasoning-format
};

/// Reads and checks `tools`, `tool_choice`, `parallel_tool_calls` and `reasoning_format` of `body`.
std::optional<ApiError> parseToolFields(const nlohmann::json &body, ToolFields &out);

/// Checks the tool fields of `messages` (tool_calls, tool_call_id) and turns JSON-text arguments into
/// objects (see the file comment). `harmony`: an assistant's reasoning_content is also its `thinking`
/// (the gpt-oss template reads that field). Returns whether any arguments were turned into objects.
std::optional<ApiError> prepareToolMessages(std::vector<ChatMessage> &messages, bool harmony, bool &changed);

/// The message object of a non-streamed answer made of `deltas`.
nlohmann::json chatMessageOf(const std::vector<OutputDelta> &deltas);
/// The `delta` objects of a stream for `deltas`, in order.
std::vector<nlohmann::json> chatDeltasOf(const std::vector<OutputDelta> &deltas);

} // namespace tpc::server

#endif // TPC_SERVER_TOOLREQUEST_H
