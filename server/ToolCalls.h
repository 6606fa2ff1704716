//===- ToolCalls.h - the tool-call formats of the model families -*- C++ -*-===//
//
// Each model family writes its tool calls in its own text format; the chat template names the family by
// the markers it writes (detectToolFormat). Per format this file knows
//   - the call region: the opening marker (and, where there is one, the closing marker) that delimit a
//     call in the output, and how to read the calls in a complete region (parseCallRegion);
//   - the prefix that opens a forced call (tool_choice "required" or a named function) after the
//     generation prompt, and the GBNF grammar of what the model writes after that prefix (forcedCall).
//
//   Hermes   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>        Qwen 2.5 / Qwen 3, Hermes
//   QwenXml  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//                                                                           Qwen3-Coder, Qwen 3.5 / 3.6
//   Glm      <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>        GLM-4.5+
//   Llama3   {"name": "f", "parameters": {...}} as the whole answer, or after <|python_tag|>  Llama 3.x
//   Mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}}] (Nemo) or [TOOL_CALLS]f[ARGS]{...}, with an
//            optional [CALL_ID]id before [ARGS] (Small 3.2, Devstral)
//   Harmony  <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>   gpt-oss
// (Harmony's calls are messages of its channel structure; OutputParser reads them, not parseCallRegion.)
//
// Argument values written as text (QwenXml, Glm) become JSON by the tool's schema: a property typed
// "string" stays a string, any other value that parses as JSON is that JSON, the rest is a string.
// Arguments always come back to the client as compact JSON text of an object.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_TOOLCALLS_H
#define TPC_SERVER_TOOLCALLS_H

#include "runtime/support/Expected.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tpc::server {

/// MistralJson is Nemo's array form; Mistral the [ARGS] form of the later templates (both are read either
/// way; they differ in the prefix of a forced call).
enum class ToolFormat { None, Hermes, QwenXml, Glm, Llama3, MistralJson, Mistral, Harmony };

/// "none", "hermes", "qwen-xml", "glm", "llama3", "mistral-json", "mistral", "harmony".
const char *toolFormatName(ToolFormat f);

/// The format a chat template's text writes tool calls in, by its markers (None when it has none of
/// them: such a server answers with content only and says so at start-up).
ToolFormat detectToolFormat(const std::string &templateText);

/// One parsed call. `arguments` is compact JSON text of an object.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

/// The markers that open a call region of `f` in the output (Llama3's bare JSON form is not among them:
/// OutputParser checks for it at the start of the answer). Empty for None and Harmony.
std::vector<std::string> callOpeners(ToolFormat f);

/// Result of reading a call region that starts at the beginning of `text` (with its opening marker).
struct RegionParse {
  enum class Kind { NeedMore, Calls, Malformed } kind = Kind::NeedMore;
  size_t consumed = 0; ///< bytes of `text` the region spans (Calls and Malformed)
  std::vector<ToolCall> calls; ///< Calls: ids left empty
};

/// Reads the call region at the start of `text` in format `f`. `atEnd`: no more text will come, so an
/// unterminated region is read as it is (and is Malformed if it does not parse). `tools` is the request's
/// tools array (the schemas type the text-valued arguments).
RegionParse parseCallRegion(ToolFormat f, std::string_view text, bool atEnd, const nlohmann::json &tools);

/// Where the JSON object or array that starts at text[pos] ends (one past its last byte): npos when it is
/// not complete yet; npos with `bad` set when it cannot be one (a call is never a scalar).
size_t jsonValueEnd(std::string_view text, size_t pos, bool &bad);

/// A JSON schema -> GBNF rules whose root rule is named `rulePrefix` (the grammar helper's
/// jsonSchemaToGbnf; an error names the unsupported schema feature).
using SchemaToGbnf = std::function<Expected<std::string>(const nlohmann::json &schema, const std::string &rulePrefix)>;

/// What a forced call adds to a generation: the text after the generation prompt that opens the call
/// (the model continues from it) and the GBNF grammar of the rest of the call (root rule `root`; empty
/// without a SchemaToGbnf).
struct ForcedCall {
  std::string prefill;
  std::string gbnf;
};

/// The forced call of format `f` over `tools` (each {"type": "function", "function": {...}}), for the
/// function `name` or, when `name` is empty, any of them (tool_choice "required"). Errors: a format
/// without a call syntax, or a schema the converter refuses (its message).
Expected<ForcedCall> forcedCall(ToolFormat f, const nlohmann::json &tools, const std::string &name,
                                const SchemaToGbnf &toGbnf);

} // namespace tpc::server

#endif // TPC_SERVER_TOOLCALLS_H
