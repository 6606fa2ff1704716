//===- Api.h - OpenAI request parsing and response shapes ---------*- C++ -*-===//
//
// Everything that knows OpenAI's JSON: parsing and validating /v1/completions and /v1/chat/completions
// bodies into a prompt (token ids) and GenerationParams, and writing the response objects, the streamed
// chunks and the error object {"error": {"message", "type", "param", "code"}}. A malformed request is an
// ApiError (status + message naming the field), never an exception that escapes and never a state change.
//
// Defaults follow llama-server where OpenAI has none of its own: temperature 0.8, top_k 40, top_p 0.95,
// min_p 0.05, max_tokens = what is left of the context, a random seed. temperature 0 is greedy.
// Extensions accepted as in llama-server: top_k, min_p, n_probs (top log-probabilities), ignore_eos,
// return_tokens (choices[0].tokens: the generated ids), chat_template_kwargs.enable_thinking, and those of
// parseLlamaFields below. Any "model" is served (as llama-server does); n asks for up to 16 choices.
//===----------------------------------------------------------------------===//
#ifndef TPC_SERVER_API_H
#define TPC_SERVER_API_H

#include "server/ChatTemplate.h"
#include "server/OutputParser.h"
#include "server/Request.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpc::server {

/// A 4xx/5xx answer in OpenAI's error shape.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param; ///< the offending field, if one
  std::string code;  ///< e.g. "model_not_found", "context_length_exceeded", "invalid_api_key"
};
/// {"error": {...}} for `e`.
std::string errorBody(const ApiError &e);

/// Server-wide sampling defaults (llama-server's --temp, --top-k, --top-p, --min-p, --seed, -n), used
/// where a request does not set the field.
struct ServerDefaults {
  float temperature = 0.8f, topP = 0.95f, minP = 0.05f;
  int32_t topK = 40;
  int64_t seed = -1;     ///< -1: a random seed per request
  int32_t nPredict = -1; ///< -1: until the context is full
};

/// A validated completion request.
struct CompletionRequest {
  bool chat = false;
  int32_t n = 1;          ///< independent choices (seeds seed, seed + 1, ...)
  bool seedGiven = false; ///< the request named its seed
  bool stream = false;
  bool includeUsage = false; ///< stream_options.include_usage
  bool returnTokens = false;
  std::vector<int32_t> prompt;
  std::string promptText; ///< a chat prompt's rendered text (POST /apply-template answers it)
  GenerationParams gen;
  /// Chat answers read for reasoning and tool calls (ToolRequest.cpp); null: the text is the content.
  std::shared_ptr<OutputParser> output;
};

/// What a finished request produced (the non-streamed response is built from it).
struct CompletionResult {
  std::string text;
  std::vector<TokenOut> tokens;
  Finish finish;
};

/// Request parsing and response writing for one served model.
class Api {
public:
  /// `tmpl` empty: the model has no usable chat template (chat requests get a 400 naming the flag).
  Api(const rt::Tokenizer &tok, std::optional<ChatTemplate> tmpl, std::string noTemplateReason,
      std::string modelId, int64_t ctxSize, int64_t nVocab);

  /// Parses a /v1/completions (chat = false) or /v1/chat/completions body.
  std::optional<ApiError> parseCompletion(const std::string &body, bool chat, CompletionRequest &out) const;
  /// The chat prompt for `messages` (template, special tokens, one BOS where the vocabulary wants it).
  /// `text` (optional): the rendered prompt text.
  std::optional<ApiError> chatPrompt(const std::vector<ChatMessage> &messages, const ChatOptions &opts,
                                     std::vector<int32_t> &ids, std::string *text = nullptr) const;

  /// The non-streamed response object.
  nlohmann::json response(const CompletionRequest &req, const CompletionResult &r, const std::string &id,
                          int64_t created) const;
  /// One streamed chunk carrying `text` (and `tok` for log-probabilities when non-null), or the final one
  /// when `finish` is given. `first`: a chat stream's first chunk, which carries the role alone.
  nlohmann::json chunk(const CompletionRequest &req, const std::string &id, int64_t created,
                       const std::string &text, const TokenOut *tok, const Finish *finish, bool first) const;
  /// The chunks a streamed token's `text` gives: one content chunk, or for a request with an output
  /// parser its content, reasoning_content and tool_calls deltas (`tok` rides on the first). `first` is
  /// cleared once a chunk carried the role.
  std::vector<nlohmann::json> chunks(const CompletionRequest &req, const std::string &id, int64_t created,
                                     const std::string &text, const TokenOut *tok, bool &first) const;
  /// The last chunks of a stream: what was held back, then the one with finish_reason ("tool_calls"
  /// when the answer called tools).
  std::vector<nlohmann::json> finalChunks(const CompletionRequest &req, const std::string &id, int64_t created,
                                          const Finish &f, bool &first) const;
  /// The usage object (prompt, completion and total tokens; prompt_tokens_details.cached_tokens).
  static nlohmann::json usage(const Finish &f);
  /// llama-server's timings object (milliseconds, counts, rates).
  static nlohmann::json timings(const Finish &f);

  /// POST /tokenize and /detokenize bodies.
  std::optional<ApiError> tokenize(const std::string &body, nlohmann::json &out) const;
  std::optional<ApiError> detokenize(const std::string &body, nlohmann::json &out) const;

  /// GET /v1/models.
  nlohmann::json models(int64_t created) const;
  void setDefaults(const ServerDefaults &d) { defaults_ = d; }
  /// More names /v1/models lists beside modelId() (llama-server's --alias A,B).
  void setAliases(std::vector<std::string> more) { aliases_ = std::move(more); }
  /// Slots of the scheduler (id_slot is checked against it).
  void setSlots(int32_t n) { slots_ = n; }
  int32_t slots() const { return slots_; }
  const ServerDefaults &defaults() const { return defaults_; }
  const rt::Tokenizer &tokenizer() const { return tok_; }
  int64_t ctxSize() const { return ctx_; }
  int64_t nVocab() const { return vocab_; }
  const std::string &modelId() const { return modelId_; }
  /// --reasoning-format: the default of requests without reasoning_format (auto).
  void setReasoningFormat(ReasoningFormat r) { reasoning_ = r; }
  /// The JSON schema -> GBNF converter for forced tool calls (unset: a forced call is only prefilled).
  void setSchemaToGbnf(SchemaToGbnf f) { toGbnf_ = std::move(f); }
  /// One line for start-up: the tool-call format and the reasoning the template's answers are read for.
  std::string outputSummary() const;
  const std::optional<ChatTemplate> &chatTemplate() const { return tmpl_; }

private:
  nlohmann::json logprobsOf(const CompletionRequest &req, const std::vector<TokenOut> &toks,
                            size_t textOffset) const;
  std::string piece(int32_t id) const;
  /// The chat prompt with the request's tools, tool_choice and reasoning_format, and the output parser
  /// (ToolRequest.cpp).
  std::optional<ApiError> chatRequest(const nlohmann::json &body, std::vector<ChatMessage> messages,
                                      ChatOptions opts, CompletionRequest &out) const;

  const rt::Tokenizer &tok_;
  std::optional<ChatTemplate> tmpl_;
  std::string noTemplateReason_;
  std::string modelId_;
  int64_t ctx_, vocab_;
  std::vector<int32_t> endOfTurn_; ///< the template's end-of-turn token, when the vocabulary has it
  ToolFormat toolFormat_ = ToolFormat::None; ///< the template's tool-call format
  bool thinkTags_ = false;                   ///< the template writes <think>...</think>
  ReasoningFormat reasoning_ = ReasoningFormat::Auto;
  SchemaToGbnf toGbnf_;
  ServerDefaults defaults_;
  int32_t slots_ = 1;
  std::vector<std::string> aliases_;
};

/// llama-server's extensions of a completion body (server/LlamaFields.cpp): logit_bias (OpenAI's
/// {"id": bias} map, or llama-server's [[id or string, bias or false], ...]), cache_prompt (default on),
/// id_slot, samplers (the names of the chain's filters to keep), n_predict. The first problem is an error.
std::optional<ApiError> parseLlamaFields(const nlohmann::json &body, const rt::Tokenizer &tok, int64_t nVocab,
                                         int32_t slots, GenerationParams &g);

/// Serializes with invalid UTF-8 replaced (a token may end inside a character).
std::string dumpJson(const nlohmann::json &j);

} // namespace tpc::server

#endif // TPC_SERVER_API_H
