//===- Api.cpp - OpenAI request parsing -------------------------------------===//
//
// Field checks go through Fields, which keeps the first problem as an ApiError naming the field; the
// response writers live in ApiResponses.cpp.
//===----------------------------------------------------------------------===//
#include "server/Api.h"
#include "server/grammar/JsonSchema.h"

#include "server/ApiGrammar.h"

#include <fmt/core.h>

#include <random>

namespace tpc::server {

using json = nlohmann::json;

std::string errorBody(const ApiError &e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dumpJson(json{{"error", err}});
}

std::string dumpJson(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

/// Typed access to optional request fields; the first problem is kept (see the file comment).
class Fields {
public:
  explicit Fields(const json &body) : body_(body) {}
  std::optional<ApiError> error;

  const json *find(const char *key) {
    auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  void fail(const std::string &key, const std::string &what, const std::string &code = {}) {
    if (!error)
      error = ApiError{400, fmt::format("'{}' {}", key, what), "invalid_request_error", key, code};
  }
  bool boolean(const char *key, bool dflt) {
    const json *v = find(key);
    if (!v)
      return dflt;
    if (!v->is_boolean())
      fail(key, "must be a boolean");
    return v->is_boolean() ? v->get<bool>() : dflt;
  }
  std::optional<int64_t> integer(const char *key, int64_t lo, int64_t hi) {
    const json *v = find(key);
    if (!v)
      return std::nullopt;
    if (!v->is_number_integer()) {
      fail(key, "must be an integer");
      return std::nullopt;
    }
    // Unsigned values above int64's range read as out of range, not as negative numbers.
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
      fail(key, fmt::format("must be in {}..{}", lo, hi));
      return std::nullopt;
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) {
      fail(key, fmt::format("must be in {}..{} (got {})", lo, hi, x));
      return std::nullopt;
    }
    return x;
  }
  float number(const char *key, double lo, double hi, float dflt) {
    const json *v = find(key);
    if (!v)
      return dflt;
    if (!v->is_number()) {
      fail(key, "must be a number");
      return dflt;
    }
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) {
      fail(key, fmt::format("must be in {}..{} (got {})", lo, hi, x));
      return dflt;
    }
    return static_cast<float>(x);
  }

private:
  const json &body_;
};

/// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
bool messageText(const json &content, std::string &out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return true;
  }
  if (!content.is_array())
    return false;
  out.clear();
  for (const json &part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return false;
    out += part["text"].get<std::string>();
  }
  return true;
}

} // namespace

Api::Api(const rt::Tokenizer &tok, std::optional<ChatTemplate> tmpl, std::string noTemplateReason,
         std::string modelId, int64_t ctxSize, int64_t nVocab)
    : tok_(tok), tmpl_(std::move(tmpl)), noTemplateReason_(std::move(noTemplateReason)),
      modelId_(std::move(modelId)), ctx_(ctxSize), vocab_(nVocab) {
  toGbnf_ = grammar::jsonSchemaToGbnf; // a forced tool call's arguments follow the tool's parameters schema
  if (tmpl_)
    for (const std::string &end : tmpl_->endOfTurn())
      if (int32_t id = tok_.find(end); id >= 0)
        endOfTurn_.push_back(id);
  if (tmpl_) { // which answers get read for reasoning and tool calls (ToolRequest.cpp)
    const std::string &src = tmpl_->source();
    toolFormat_ = detectToolFormat(src);
    thinkTags_ = tmpl_->name() == "qwen3" || src.find("</think>") != std::string::npos;
  }
}

std::optional<ApiError> Api::chatPrompt(const std::vector<ChatMessage> &messages, const ChatOptions &opts,
                                        std::vector<int32_t> &ids, std::string *textOut) const {
  if (!tmpl_)
    return ApiError{400, noTemplateReason_, "invalid_request_error", "messages", "no_chat_template"};
  const rt::TokenizerData &d = tok_.data();
  const std::string bos = d.bos >= 0 ? tok_.tokenToPiece(d.bos, true) : std::string();
  auto text = tmpl_->apply(messages, bos, opts);
  if (!text)
    return ApiError{400, text.message(), "invalid_request_error", "messages", ""};
  // The template writes the special tokens as text; one BOS where the vocabulary wants it.
  ids = tok_.encode(*text, false, true);
  if (textOut)
    *textOut = *text;
  if (d.addBos && d.bos >= 0 && (ids.empty() || ids.front() != d.bos))
    ids.insert(ids.begin(), d.bos);
  return std::nullopt;
}

std::optional<ApiError> Api::parseCompletion(const std::string &body, bool chat, CompletionRequest &out) const {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
  if (!j.is_object())
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
  Fields f(j);
  out = CompletionRequest{};
  out.chat = chat;

  if (const json *m = f.find("model")) {
    // Any name is served, as llama-server does: clients send their default ("gpt-3.5-turbo").
    if (!m->is_string())
      f.fail("model", "must be a string");
  }
  if (f.error)
    return f.error;
  out.n = static_cast<int32_t>(f.integer("n", 1, 16).value_or(1));
  if (f.error)
    return f.error;

  // The prompt.
  if (chat) {
    const json *msgs = f.find("messages");
    if (!msgs)
      return ApiError{400, "'messages' is required", "invalid_request_error", "messages", ""};
    if (!msgs->is_array() || msgs->empty())
      return ApiError{400, "'messages' must be a non-empty array", "invalid_request_error", "messages", ""};
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json &m = (*msgs)[i];
      const std::string at = fmt::format("messages[{}]", i);
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        return ApiError{400, at + " must be an object with a string 'role'", "invalid_request_error", at, ""};
      ChatMessage cm;
      cm.role = m["role"].get<std::string>();
      const json content = m.value("content", json(nullptr));
      if (!(content.is_null() && cm.role == "assistant") && !messageText(content, cm.content))
        return ApiError{400, at + ".content must be a string or an array of text parts", "invalid_request_error",
                        at + ".content", ""};
      // The other fields reach a Jinja template as the client sent them (tool_calls, tool_call_id, name...).
      // A null content stays "" as llama-server passes it: templates test `'</think>' in content`.
      for (auto it = m.begin(); it != m.end(); ++it)
        if (it.key() != "role" && it.key() != "content")
          cm.extra[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
      messages.push_back(std::move(cm));
    }
    ChatOptions opts;
    if (const json *k = f.find("chat_template_kwargs")) {
      if (!k->is_object())
        f.fail("chat_template_kwargs", "must be an object");
      else
        opts.kwargs = nlohmann::ordered_json::parse(k->dump()); // each key a template variable
      if (k->is_object() && k->contains("enable_thinking")) {
        if (!(*k)["enable_thinking"].is_boolean())
          f.fail("chat_template_kwargs.enable_thinking", "must be a boolean");
        else
          opts.enableThinking = (*k)["enable_thinking"].get<bool>();
      }
    }
    if (f.error)
      return f.error;
    if (auto e = chatRequest(j, std::move(messages), std::move(opts), out))
      return e;
  } else {
    const json *p = f.find("prompt");
    if (!p)
      return ApiError{400, "'prompt' is required", "invalid_request_error", "prompt", ""};
    const json *one = p;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string())
      one = &(*p)[0];
    if (one->is_string()) {
      out.prompt = tok_.encode(one->get<std::string>(), true, true);
    } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const json &x) {
                 return x.is_number_integer();
               })) {
      for (const json &x : *p) {
        const int64_t id = x.get<int64_t>();
        if (id < 0 || id >= vocab_)
          return ApiError{400, fmt::format("'prompt' token id {} is not in 0..{}", id, vocab_ - 1),
                          "invalid_request_error", "prompt", ""};
        out.prompt.push_back(static_cast<int32_t>(id));
      }
    } else {
      return ApiError{400, "'prompt' must be a string, a one-string array or an array of token ids",
                      "invalid_request_error", "prompt", ""};
    }
  }
  if (out.prompt.empty())
    return ApiError{400, "the prompt is empty", "invalid_request_error", chat ? "messages" : "prompt", ""};
  const int64_t promptLen = static_cast<int64_t>(out.prompt.size());
  if (promptLen > ctx_)
    return ApiError{400,
                    fmt::format("This model's maximum context length is {} tokens, but the prompt has {} tokens",
                                ctx_, promptLen),
                    "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"};

  // Generation settings.
  GenerationParams &g = out.gen;
  std::optional<int64_t> maxTokens = f.integer("max_tokens", 1, INT32_MAX);
  if (auto np = f.integer("n_predict", -1, INT32_MAX); np && *np >= 0) // llama-server's name; -1: no limit
    maxTokens = std::max<int64_t>(1, *np);
  if (!maxTokens && defaults_.nPredict > 0)
    maxTokens = std::min<int64_t>(defaults_.nPredict, std::max<int64_t>(1, ctx_ - promptLen));
  if (auto mc = f.integer("max_completion_tokens", 1, INT32_MAX))
    maxTokens = mc;
  if (maxTokens && promptLen + *maxTokens > ctx_ && !f.error)
    return ApiError{400,
                    fmt::format("This model's maximum context length is {} tokens, but {} were requested ({} in "
                                "the prompt, {} max_tokens); lower max_tokens",
                                ctx_, promptLen + *maxTokens, promptLen, *maxTokens),
                    "invalid_request_error", "max_tokens", "context_length_exceeded"};
  // Without max_tokens: until the context is full (at least one token: the last prompt row is sampled).
  g.maxTokens = static_cast<int32_t>(maxTokens ? *maxTokens : std::max<int64_t>(1, ctx_ - promptLen));
  g.sampling.temperature = f.number("temperature", 0.0, 2.0, defaults_.temperature);
  g.sampling.topP = f.number("top_p", 0.0, 1.0, defaults_.topP);
  g.sampling.minP = f.number("min_p", 0.0, 1.0, defaults_.minP);
  g.sampling.topK = static_cast<int32_t>(f.integer("top_k", 0, INT32_MAX).value_or(defaults_.topK));
  std::optional<int64_t> seed = f.integer("seed", INT64_MIN, INT64_MAX);
  if (seed && *seed == -1) // llama-server's "random"
    seed.reset();
  if (!seed && defaults_.seed >= 0)
    seed = defaults_.seed;
  out.seedGiven = seed.has_value();
  if (seed)
    g.sampling.seed = static_cast<uint64_t>(*seed);
  else
    g.sampling.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}();
  if (const json *s = f.find("stop")) {
    if (s->is_string()) {
      g.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16 &&
               std::all_of(s->begin(), s->end(), [](const json &x) { return x.is_string(); })) {
      for (const json &x : *s)
        g.stop.push_back(x.get<std::string>());
    } else {
      f.fail("stop", "must be a string or an array of at most 16 strings");
    }
  }
  if (chat) {
    g.logprobs = f.boolean("logprobs", false);
    g.topLogprobs = static_cast<int32_t>(f.integer("top_logprobs", 0, 20).value_or(0));
    if (g.topLogprobs > 0 && !g.logprobs)
      f.fail("top_logprobs", "needs 'logprobs': true");
  } else if (auto n = f.integer("logprobs", 0, 20)) {
    g.logprobs = true;
    g.topLogprobs = static_cast<int32_t>(*n);
  }
  if (auto n = f.integer("n_probs", 0, 20); n && *n > 0) {
    g.logprobs = true;
    g.topLogprobs = static_cast<int32_t>(*n);
  }
  g.ignoreEos = f.boolean("ignore_eos", false);
  g.stopTokens = endOfTurn_;
  out.stream = f.boolean("stream", false);
  out.returnTokens = f.boolean("return_tokens", false);
  if (const json *so = f.find("stream_options")) {
    if (!so->is_object())
      f.fail("stream_options", "must be an object");
    else if (so->contains("include_usage") && !(*so)["include_usage"].is_boolean())
      f.fail("stream_options.include_usage", "must be a boolean");
    else
      out.includeUsage = so->value("include_usage", false);
  }
  if (f.error)
    return f.error;
  if (auto e = parseLlamaFields(j, tok_, vocab_, slots_, g))
    return e;
  return requestGrammar(j, g); // response_format, json_schema, grammar (and a forced tool call's)
}

std::optional<ApiError> Api::tokenize(const std::string &body, json &out) const {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", "invalid_json"};
  Fields f(j);
  const json *c = f.find("content");
  if (!c || !c->is_string())
    return ApiError{400, "'content' must be a string", "invalid_request_error", "content", ""};
  const bool addSpecial = f.boolean("add_special", false);
  const bool parseSpecial = f.boolean("parse_special", true);
  const bool withPieces = f.boolean("with_pieces", false);
  if (f.error)
    return f.error;
  std::vector<int32_t> ids = tok_.encode(c->get<std::string>(), addSpecial, parseSpecial);
  json tokens = json::array();
  for (int32_t id : ids)
    tokens.push_back(withPieces ? json{{"id", id}, {"piece", piece(id)}} : json(id));
  out = json{{"tokens", tokens}};
  return std::nullopt;
}

std::optional<ApiError> Api::detokenize(const std::string &body, json &out) const {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", "invalid_json"};
  auto it = j.find("tokens");
  if (it == j.end() || !it->is_array())
    return ApiError{400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens", ""};
  std::vector<int32_t> ids;
  for (const json &x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab_)
      return ApiError{400, fmt::format("'tokens' holds {} which is not a token id in 0..{}", x.dump(), vocab_ - 1),
                      "invalid_request_error", "tokens", ""};
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  out = json{{"content", tok_.decode(ids)}};
  return std::nullopt;
}

} // namespace tpc::server
