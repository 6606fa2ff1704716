//===- ResponsesApi.cpp - OpenAI's Responses API (POST /v1/responses) ------===//
//
// The body ({model, input: a string or message items, instructions, max_output_tokens, temperature,
// top_p, stream}) becomes a chat body for Api::parseCompletion: `instructions` a system message, a string
// input one user message, each item {role, content: a string or input_text / output_text parts} a
// message (developer counts as system). The answer is a "response" object whose output is one assistant
// message of one output_text part; usage in input/output tokens with input_tokens_details.cached_tokens.
// Streamed: response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, response.completed, each with its
// sequence_number. Stateless: previous_response_id, store: true and tools are refused (400) rather than
// ignored.
//===----------------------------------------------------------------------===//
#include "server/DropInRoutes.h"

#include <fmt/core.h>
#include <httplib.h>

#include <ctime>

namespace tpc::server {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string &param, const std::string &what) {
  return ApiError{400, fmt::format("'{}' {}", param, what), "invalid_request_error", param, ""};
}

std::optional<ApiError> partsText(const json &content, const std::string &at, std::string &out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return bad(at, "must be a string or an array of input_text parts");
  out.clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const json &p = content[i];
    const std::string where = fmt::format("{}[{}]", at, i);
    const std::string type =
        p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
    if (type != "input_text" && type != "output_text" && type != "text")
      return bad(where, "must be an input_text or output_text part (tpc serve takes text only)");
    if (!p.contains("text") || !p["text"].is_string())
      return bad(where + ".text", "must be a string");
    out += p["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> toChatBody(const json &body, json &oa) {
  for (const char *k : {"previous_response_id", "tools", "conversation"})
    if (body.contains(k) && !body[k].is_null() && !(body[k].is_array() && body[k].empty()))
      return bad(k, "is not supported: tpc serve's /v1/responses is stateless and runs no tools");
  oa = body;
  for (const char *k : {"input", "instructions", "max_output_tokens", "store", "n", "text", "reasoning",
                        "metadata", "tools", "tool_choice", "truncation", "stream_options", "logprobs"})
    oa.erase(k);
  json msgs = json::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string())
      return bad("instructions", "must be a string");
    msgs.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  auto in = body.find("input");
  if (in == body.end() || in->is_null())
    return bad("input", "is required");
  if (in->is_string()) {
    msgs.push_back({{"role", "user"}, {"content", *in}});
  } else if (in->is_array() && !in->empty()) {
    for (size_t i = 0; i < in->size(); ++i) {
      const json &x = (*in)[i];
      const std::string at = fmt::format("input[{}]", i);
      if (!x.is_object() || !x.contains("role") || !x["role"].is_string() ||
          (x.contains("type") && x["type"] != "message"))
        return bad(at, "must be a message item {role, content} (tpc serve takes no other items)");
      std::string role = x["role"].get<std::string>();
      if (role == "developer")
        role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        return bad(at + ".role", "must be user, assistant, system or developer");
      std::string text;
      if (auto e = partsText(x.value("content", json(nullptr)), at + ".content", text))
        return e;
      msgs.push_back({{"role", role}, {"content", text}});
    }
  } else {
    return bad("input", "must be a string or a non-empty array of message items");
  }
  oa["messages"] = msgs;
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null())
    oa["max_tokens"] = body["max_output_tokens"];
  return std::nullopt;
}

/// The response object; `text` null: still in progress (no output yet).
json responseObject(const Api &api, const std::string &id, int64_t created, const std::string &msgId,
                    const std::string *text, const Finish *f) {
  json r = {{"id", id},
            {"object", "response"},
            {"created_at", created},
            {"model", api.modelId()},
            {"status", "in_progress"},
            {"output", json::array()},
            {"incomplete_details", nullptr},
            {"error", nullptr},
            {"usage", nullptr}};
  if (!f)
    return r;
  const bool cut = f->reason == FinishReason::Length;
  r["status"] = cut ? "incomplete" : "completed";
  if (cut)
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  r["output"] = json::array(
      {{{"type", "message"},
        {"id", msgId},
        {"status", cut ? "incomplete" : "completed"},
        {"role", "assistant"},
        {"content",
         json::array({{{"type", "output_text"}, {"text", *text}, {"annotations", json::array()}}})}}});
  r["output_text"] = *text;
  r["usage"] = {{"input_tokens", f->promptTokens},
                {"input_tokens_details", {{"cached_tokens", f->cachedTokens}}},
                {"output_tokens", f->completionTokens},
                {"output_tokens_details", {{"reasoning_tokens", 0}}},
                {"total_tokens", f->promptTokens + f->completionTokens}};
  return r;
}

class ResponsesWriter : public StreamWriter {
public:
  ResponsesWriter(const Api &api)
      : api_(api), id_(newId("resp")), msgId_(newId("msg")), created_(std::time(nullptr)) {}
  void start(std::string &out) override {
    const json r = responseObject(api_, id_, created_, msgId_, nullptr, nullptr);
    event("response.created", {{"response", r}}, out);
    event("response.in_progress", {{"response", r}}, out);
    event("response.output_item.added",
          {{"output_index", 0},
           {"item",
            {{"type", "message"},
             {"id", msgId_},
             {"status", "in_progress"},
             {"role", "assistant"},
             {"content", json::array()}}}},
          out);
    event("response.content_part.added", part(""), out);
  }
  void token(size_t, const TokenOut &t, std::string &out) override { delta(t.text, out); }
  void finish(size_t, const Finish &f, std::string &out) override {
    delta(f.trailingText, out);
    json done = part(text_);
    done.erase("part");
    done["text"] = text_;
    event("response.output_text.done", done, out);
    event("response.content_part.done", part(text_), out);
    const json r = responseObject(api_, id_, created_, msgId_, &text_, &f);
    event("response.output_item.done", {{"output_index", 0}, {"item", r["output"][0]}}, out);
    event(f.reason == FinishReason::Length ? "response.incomplete" : "response.completed", {{"response", r}},
          out);
  }
  void error(const std::string &message, std::string &out) override {
    event("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}}, out);
  }

private:
  json part(const std::string &text) const {
    return {{"item_id", msgId_},
            {"output_index", 0},
            {"content_index", 0},
            {"part", {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}}};
  }
  void delta(const std::string &text, std::string &out) {
    if (text.empty())
      return;
    text_ += text;
    event("response.output_text.delta",
          {{"item_id", msgId_}, {"output_index", 0}, {"content_index", 0}, {"delta", text}}, out);
  }
  void event(const std::string &type, json data, std::string &out) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    out += sseEvent(type, data);
  }
  const Api &api_;
  std::string id_, msgId_, text_;
  int64_t created_;
  int64_t seq_ = 0;
};

void responses(const RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  json body, oa;
  if (auto e = parseObject(req.body, body))
    return sendError(res, *e);
  if (auto e = toChatBody(body, oa))
    return sendError(res, *e);
  CompletionRequest cr;
  if (auto e = ctx.api.parseCompletion(dumpJson(oa), true, cr))
    return sendError(res, *e);
  cr.n = 1;
  std::vector<std::shared_ptr<Request>> reqs;
  if (auto e = submitChoices(ctx.sched, cr, reqs))
    return sendError(res, *e);
  ctx.enter();
  if (cr.stream)
    return streamChoices(ctx, res, std::move(reqs), std::make_shared<ResponsesWriter>(ctx.api));
  std::vector<CompletionResult> results;
  auto err = collectChoices(reqs, results);
  ctx.leave();
  if (err)
    return sendError(res, *err);
  res.set_content(dumpJson(responseObject(ctx.api, newId("resp"), std::time(nullptr), newId("msg"),
                                          &results[0].text, &results[0].finish)),
                  "application/json");
}

} // namespace

void addResponsesRoutes(httplib::Server &h, const RouteContext &ctx) {
  h.Post("/v1/responses",
         [ctx](const httplib::Request &req, httplib::Response &res) { responses(ctx, req, res); });
}

} // namespace tpc::server
