//===- AnthropicApi.cpp - Anthropic's Messages API (POST /v1/messages) -----===//
//
// The body ({model, max_tokens, system, messages with string or text-block content, stop_sequences,
// temperature, top_p, top_k, stream}) becomes an OpenAI chat body for Api::parseCompletion, so the chat
// template and every check are the same as /v1/chat/completions'. The answer is a "message" object
// (content blocks, stop_reason end_turn / max_tokens / stop_sequence, usage in input/output tokens);
// streamed, Anthropic's typed events: message_start, content_block_start, ping, content_block_delta
// (text_delta), content_block_stop, message_delta (stop_reason, usage), message_stop. Errors carry
// Anthropic's {"type": "error", "error": {...}} around OpenAI's error fields. Clients send the key as
// x-api-key (Server.cpp accepts it). POST /v1/messages/count_tokens answers {"input_tokens"}.
// Image, document and tool blocks are refused with a 400 naming the block.
//===----------------------------------------------------------------------===//
#include "server/DropInRoutes.h"

#include <fmt/core.h>
#include <httplib.h>

namespace tpc::server {

using json = nlohmann::json;

namespace {

void sendAnthropicError(httplib::Response &res, const ApiError &e) {
  json body = json::parse(errorBody(e));
  body["type"] = "error";
  res.status = e.status;
  res.set_content(dumpJson(body), "application/json");
}

ApiError bad(const std::string &param, const std::string &what) {
  return ApiError{400, fmt::format("'{}' {}", param, what), "invalid_request_error", param, ""};
}

/// Text of a string or of an array of {"type": "text", "text"} blocks.
std::optional<ApiError> blocksText(const json &content, const std::string &at, std::string &out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return bad(at, "must be a string or an array of content blocks");
  out.clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const json &b = content[i];
    const std::string where = fmt::format("{}[{}]", at, i);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return bad(where, "must be a content block with a string 'type'");
    const std::string type = b["type"].get<std::string>();
    if (type != "text")
      return bad(where, fmt::format("is a '{}' block; tpc serve takes text blocks only", type));
    if (!b.contains("text") || !b["text"].is_string())
      return bad(where + ".text", "must be a string");
    out += b["text"].get<std::string>();
  }
  return std::nullopt;
}

/// The OpenAI chat body for an Anthropic one (see the file comment).
std::optional<ApiError> toChatBody(const json &body, bool needMaxTokens, json &oa) {
  if (needMaxTokens && (!body.contains("max_tokens") || body["max_tokens"].is_null()))
    return bad("max_tokens", "is required");
  oa = body;
  for (const char *k : {"system", "stop_sequences", "metadata", "n", "stream_options", "logprobs", "tools",
                        "tool_choice", "thinking"})
    oa.erase(k);
  json msgs = json::array();
  if (body.contains("system") && !body["system"].is_null()) {
    std::string text;
    if (auto e = blocksText(body["system"], "system", text))
      return e;
    msgs.push_back({{"role", "system"}, {"content", text}});
  }
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty())
    return bad("messages", "must be a non-empty array");
  for (size_t i = 0; i < m->size(); ++i) {
    const json &x = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!x.is_object() || !x.contains("role") || !x["role"].is_string())
      return bad(at, "must be an object with a string 'role'");
    const std::string role = x["role"].get<std::string>();
    if (role != "user" && role != "assistant")
      return bad(at + ".role", "must be 'user' or 'assistant' (the system prompt is the top-level 'system')");
    std::string text;
    if (auto e = blocksText(x.value("content", json(nullptr)), at + ".content", text))
      return e;
    msgs.push_back({{"role", role}, {"content", text}});
  }
  oa["messages"] = msgs;
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null())
    oa["stop"] = body["stop_sequences"];
  if (body.contains("tools") && body["tools"].is_array() && !body["tools"].empty())
    return bad("tools", "is not supported by tpc serve's /v1/messages");
  return std::nullopt;
}

json usageOf(const Finish &f) {
  return json{{"input_tokens", f.promptTokens - f.cachedTokens},
              {"cache_read_input_tokens", f.cachedTokens},
              {"cache_creation_input_tokens", 0},
              {"output_tokens", f.completionTokens}};
}

std::string stopReason(const Finish &f) {
  if (f.reason == FinishReason::Length)
    return "max_tokens";
  return f.stoppedByWord ? "stop_sequence" : "end_turn";
}

json stopSequence(const CompletionRequest &cr, const Finish &f) {
  return f.stoppedByWord && cr.gen.stop.size() == 1 ? json(cr.gen.stop[0]) : json(nullptr);
}

class MessagesWriter : public StreamWriter {
public:
  MessagesWriter(const Api &api, CompletionRequest cr, std::string id)
      : api_(api), cr_(std::move(cr)), id_(std::move(id)) {}
  void start(std::string &out) override {
    json msg = {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", api_.modelId()},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", cr_.prompt.size()}, {"output_tokens", 0}}}};
    out += sseEvent("message_start", {{"type", "message_start"}, {"message", msg}});
    out += sseEvent(
        "content_block_start",
        {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    out += sseEvent("ping", {{"type", "ping"}});
  }
  void token(size_t, const TokenOut &t, std::string &out) override { delta(t.text, out); }
  void finish(size_t, const Finish &f, std::string &out) override {
    delta(f.trailingText, out);
    out += sseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
    out += sseEvent("message_delta",
                    {{"type", "message_delta"},
                     {"delta", {{"stop_reason", stopReason(f)}, {"stop_sequence", stopSequence(cr_, f)}}},
                     {"usage", usageOf(f)}});
    out += sseEvent("message_stop", {{"type", "message_stop"}});
  }
  void error(const std::string &message, std::string &out) override {
    out += sseEvent("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}});
  }

private:
  void delta(const std::string &text, std::string &out) {
    if (!text.empty())
      out += sseEvent("content_block_delta", {{"type", "content_block_delta"},
                                              {"index", 0},
                                              {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }
  const Api &api_;
  CompletionRequest cr_;
  std::string id_;
};

void messages(const RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  json body, oa;
  if (auto e = parseObject(req.body, body))
    return sendAnthropicError(res, *e);
  if (auto e = toChatBody(body, true, oa))
    return sendAnthropicError(res, *e);
  CompletionRequest cr;
  if (auto e = ctx.api.parseCompletion(dumpJson(oa), true, cr))
    return sendAnthropicError(res, *e);
  cr.n = 1;
  std::vector<std::shared_ptr<Request>> reqs;
  if (auto e = submitChoices(ctx.sched, cr, reqs))
    return sendAnthropicError(res, *e);
  const std::string id = newId("msg");
  ctx.enter();
  if (cr.stream)
    return streamChoices(ctx, res, std::move(reqs), std::make_shared<MessagesWriter>(ctx.api, cr, id));
  std::vector<CompletionResult> results;
  auto err = collectChoices(reqs, results);
  ctx.leave();
  if (err)
    return sendAnthropicError(res, *err);
  const CompletionResult &r = results[0];
  res.set_content(dumpJson(json{{"id", id},
                                {"type", "message"},
                                {"role", "assistant"},
                                {"model", ctx.api.modelId()},
                                {"content", json::array({{{"type", "text"}, {"text", r.text}}})},
                                {"stop_reason", stopReason(r.finish)},
                                {"stop_sequence", stopSequence(cr, r.finish)},
                                {"usage", usageOf(r.finish)}}),
                  "application/json");
}

} // namespace

void addAnthropicRoutes(httplib::Server &h, const RouteContext &ctx) {
  h.Post("/v1/messages",
         [ctx](const httplib::Request &req, httplib::Response &res) { messages(ctx, req, res); });
  h.Post("/v1/messages/count_tokens", [ctx](const httplib::Request &req, httplib::Response &res) {
    json body, oa;
    if (auto e = parseObject(req.body, body))
      return sendAnthropicError(res, *e);
    if (auto e = toChatBody(body, false, oa))
      return sendAnthropicError(res, *e);
    oa.erase("max_tokens");
    CompletionRequest cr;
    if (auto e = ctx.api.parseCompletion(dumpJson(oa), true, cr))
      return sendAnthropicError(res, *e);
    res.set_content(dumpJson(json{{"input_tokens", cr.prompt.size()}}), "application/json");
  });
}

} // namespace tpc::server
