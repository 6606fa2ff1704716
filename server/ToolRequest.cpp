//===- ToolRequest.cpp - tools, tool_choice and reasoning in chat requests -===//
//
// Api::chatRequest renders the prompt with the request's tools and sets up the answer's OutputParser;
// Api::chunks / finalChunks stream what the parser gives. The field checks keep Api.cpp's style: the
// first problem is a 400 naming the field.
//===----------------------------------------------------------------------===//
#include "server/ToolRequest.h"

#include <fmt/core.h>

#include <set>

namespace tpc::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

ApiError bad(const std::string &param, const std::string &what) {
  return ApiError{400, fmt::format("'{}' {}", param, what), "invalid_request_error", param, ""};
}

/// OpenAI's function names: letters, digits, '_' and '-' (and '.', which namespaced tools use), 1..64.
bool validName(const std::string &s) {
  if (s.empty() || s.size() > 64)
    return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

std::optional<ApiError> checkTools(const json &tools) {
  if (!tools.is_array())
    return bad("tools", "must be an array of {\"type\": \"function\", \"function\": {...}}");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json &t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object())
      return bad(at, "must be an object");
    if (t.value("type", json()) != "function")
      return bad(at + ".type", "must be \"function\"");
    if (!t.contains("function") || !t["function"].is_object())
      return bad(at + ".function", "must be an object with a 'name'");
    const json &fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || !validName(fn["name"].get<std::string>()))
      return bad(at + ".function.name", "must be a string of 1 to 64 letters, digits, '_', '-' or '.'");
    if (!names.insert(fn["name"].get<std::string>()).second)
      return bad(at + ".function.name", fmt::format("'{}' names two tools", fn["name"].get<std::string>()));
    if (fn.contains("description") && !fn["description"].is_string() && !fn["description"].is_null())
      return bad(at + ".function.description", "must be a string");
    if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
      return bad(at + ".function.parameters", "must be a JSON schema object");
    if (fn.contains("strict") && !fn["strict"].is_boolean() && !fn["strict"].is_null())
      return bad(at + ".function.strict", "must be a boolean");
  }
  return std::nullopt;
}

bool hasTool(const json &tools, const std::string &name) {
  if (tools.is_array())
    for (const json &t : tools)
      if (t["function"]["name"] == name)
        return true;
  return false;
}

} // namespace

std::optional<ApiError> parseToolFields(const json &body, ToolFields &out) {
  out = ToolFields{};
  auto find = [&](const char *key) -> const json * {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json *t = find("tools")) {
    if (auto e = checkTools(*t))
      return e;
    if (!t->empty())
      out.tools = *t;
  }
  if (const json *c = find("tool_choice")) {
    const std::string what = "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
                             "{\"name\": NAME}}";
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "auto")
        out.choice.kind = ToolChoice::Kind::Auto;
      else if (s == "none")
        out.choice.kind = ToolChoice::Kind::None;
      else if (s == "required")
        out.choice.kind = ToolChoice::Kind::Required;
      else
        return bad("tool_choice", what);
    } else if (c->is_object() && c->value("type", json()) == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      out.choice.kind = ToolChoice::Kind::Named;
      out.choice.name = (*c)["function"]["name"].get<std::string>();
      if (!hasTool(out.tools, out.choice.name))
        return bad("tool_choice", fmt::format("names the function '{}', which is not in 'tools'", out.choice.name));
    } else {
      return bad("tool_choice", what);
    }
    if (out.choice.kind == ToolChoice::Kind::Required && out.tools.is_null())
      return bad("tool_choice", "is \"required\" but the request has no 'tools'");
  }
  if (const json *p = find("parallel_tool_calls"); p && !p->is_boolean())
    return bad("parallel_tool_calls", "must be a boolean");
  if (const json *r = find("reasoning_format")) {
    ReasoningFormat f;
    if (!r->is_string() || !parseReasoningFormat(r->get<std::string>(), f))
      return bad("reasoning_format", "must be \"none\", \"deepseek\", \"deepseek-legacy\" or \"auto\"");
    out.reasoning = f;
  }
  return std::nullopt;
}

std::optional<ApiError> prepareToolMessages(std::vector<ChatMessage> &messages, bool harmony, bool &changed) {
  changed = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    ChatMessage &m = messages[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (m.extra.contains("tool_call_id") && !m.extra["tool_call_id"].is_string())
      return bad(at + ".tool_call_id", "must be a string");
    if (harmony && m.role == "assistant" && m.extra.contains("reasoning_content") &&
        m.extra["reasoning_content"].is_string() && !m.extra.contains("thinking"))
      m.extra["thinking"] = m.extra["reasoning_content"];
    if (!m.extra.contains("tool_calls") || m.extra["tool_calls"].is_null())
      continue;
    ojson &calls = m.extra["tool_calls"];
    if (m.role != "assistant")
      return bad(at + ".tool_calls", "is only for assistant messages");
    if (!calls.is_array())
      return bad(at + ".tool_calls", "must be an array of {\"id\", \"type\": \"function\", \"function\": {...}}");
    for (size_t k = 0; k < calls.size(); ++k) {
      ojson &c = calls[k];
      const std::string cat = fmt::format("{}.tool_calls[{}]", at, k);
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string())
        return bad(cat, "must be an object with function.name (a string) and function.arguments");
      if (c.contains("id") && !c["id"].is_string())
        return bad(cat + ".id", "must be a string");
      ojson &args = c["function"]["arguments"];
      if (args.is_string()) {
        ojson parsed = ojson::parse(args.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object())
          args = std::move(parsed), changed = true;
      } else if (args.is_null()) {
        args = ojson::object();
      } else if (!args.is_object()) {
        return bad(cat + ".function.arguments", "must be a JSON object or its text");
      }
    }
  }
  return std::nullopt;
}

json chatMessageOf(const std::vector<OutputDelta> &deltas) {
  std::string content, reasoning;
  json calls = json::array();
  for (const OutputDelta &d : deltas) {
    if (d.kind == OutputDelta::Kind::Content)
      content += d.text;
    else if (d.kind == OutputDelta::Kind::Reasoning)
      reasoning += d.text;
    else
      calls.push_back({{"id", d.call.id},
                       {"type", "function"},
                       {"function", {{"name", d.call.name}, {"arguments", d.call.arguments}}}});
  }
  if (!calls.empty()) // the separator before a call is the format's
    while (!content.empty() && std::isspace(static_cast<unsigned char>(content.back())))
      content.pop_back();
  json m = {{"role", "assistant"}, {"content", content.empty() && !calls.empty() ? json(nullptr) : json(content)}};
  if (!reasoning.empty())
    m["reasoning_content"] = reasoning;
  if (!calls.empty())
    m["tool_calls"] = calls;
  return m;
}

std::vector<json> chatDeltasOf(const std::vector<OutputDelta> &deltas) {
  std::vector<json> out;
  for (const OutputDelta &d : deltas) {
    if (d.kind == OutputDelta::Kind::Content) {
      out.push_back({{"content", d.text}});
    } else if (d.kind == OutputDelta::Kind::Reasoning) {
      out.push_back({{"reasoning_content", d.text}});
    } else {
      out.push_back({{"tool_calls", json::array({{{"index", d.index},
                                                   {"id", d.call.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", d.call.name}, {"arguments", ""}}}}})}});
      out.push_back(
          {{"tool_calls", json::array({{{"index", d.index}, {"function", {{"arguments", d.call.arguments}}}}})}});
    }
  }
  return out;
}

std::optional<ApiError> Api::chatRequest(const json &body, std::vector<ChatMessage> messages, ChatOptions opts,
                                         CompletionRequest &out) const {
  ToolFields tf;
  if (auto e = parseToolFields(body, tf))
    return e;
  const bool jinja = tmpl_ && tmpl_->family() == ChatTemplate::Family::Jinja;
  if (!tf.tools.is_null() && tmpl_ && !jinja)
    return ApiError{400,
                    fmt::format("'tools': the chat template '{}' is a built-in renderer that cannot show tools to "
                                "the model; serve with the GGUF's own template or --chat-template FILE",
                                tmpl_->name()),
                    "invalid_request_error", "tools", ""};
  const bool useTools = !tf.tools.is_null() && tf.choice.kind != ToolChoice::Kind::None;
  const bool forced = tf.choice.kind == ToolChoice::Kind::Required || tf.choice.kind == ToolChoice::Kind::Named;
  if (forced && toolFormat_ == ToolFormat::None)
    return bad("tool_choice", "forces a call, but the model's chat template has no tool-call format tpc knows "
                              "(see tpc serve's start-up line); use \"auto\"");
  const std::vector<ChatMessage> asSent = messages;
  bool changed = false;
  if (auto e = prepareToolMessages(messages, toolFormat_ == ToolFormat::Harmony, changed))
    return e;
  if (useTools)
    opts.tools = tf.tools;
  std::string text;
  auto err = chatPrompt(messages, opts, out.prompt, &text);
  if (err && changed && !chatPrompt(asSent, opts, out.prompt, &text)) // a template that takes the text
    err.reset();
  if (err)
    return err;
  out.promptText = text;

  OutputConfig cfg;
  cfg.harmony = toolFormat_ == ToolFormat::Harmony;
  cfg.thinkTags = thinkTags_;
  cfg.splitReasoning = tf.reasoning.value_or(reasoning_) != ReasoningFormat::None;
  if (useTools)
    cfg.tools = toolFormat_, cfg.toolList = tf.tools;
  // A prompt that ends inside <think> (Qwen 3.5, DeepSeek-R1): the answer starts with its reasoning.
  std::string_view tail = text;
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back())))
    tail.remove_suffix(1);
  cfg.startInReasoning = thinkTags_ && tail.size() >= 7 && tail.substr(tail.size() - 7) == "<think>";
  if (useTools && forced) {
    auto fc = forcedCall(toolFormat_, tf.tools, tf.choice.name, toGbnf_);
    if (!fc)
      return bad(fc.message().rfind("tools[", 0) == 0 ? "tools" : "tool_choice", fc.message());
    // A forced call skips the reasoning a prompt opened: the call must come first.
    const std::string prefill = (cfg.startInReasoning ? "</think>\n\n" : "") + fc->prefill;
    std::vector<int32_t> ids = tok_.encode(prefill, false, true);
    out.prompt.insert(out.prompt.end(), ids.begin(), ids.end());
    cfg.prefill = prefill;
    out.promptText += prefill;
    out.gen.gbnf = fc->gbnf;
  }
  if (cfg.harmony || cfg.thinkTags || cfg.tools != ToolFormat::None) {
    out.output = std::make_shared<OutputParser>(cfg);
    out.gen.specialText = true;
  }
  return std::nullopt;
}

std::string Api::outputSummary() const {
  std::string calls = toolFormat_ == ToolFormat::None
                          ? std::string("none (the chat template writes no tool-call format tpc knows: requests "
                                        "with tools are answered with content only)")
                          : std::string(toolFormatName(toolFormat_)) + " format";
  std::string reasoning = toolFormat_ == ToolFormat::Harmony ? "harmony analysis channel"
                          : thinkTags_                      ? "<think> tags"
                                                            : "none";
  const char *fmtName = reasoning_ == ReasoningFormat::None ? "none" : reasoning_ == ReasoningFormat::Deepseek ? "deepseek" : "auto";
  return fmt::format("tool calls: {}; reasoning: {} (--reasoning-format {})", calls, reasoning, fmtName);
}

std::vector<json> Api::chunks(const CompletionRequest &req, const std::string &id, int64_t created,
                              const std::string &text, const TokenOut *tok, bool &first) const {
  std::vector<json> out;
  std::vector<json> deltas;
  if (req.output) {
    std::vector<OutputDelta> d;
    req.output->push(text, d);
    deltas = chatDeltasOf(d);
  } else if (!text.empty()) {
    deltas.push_back({{"content", text}});
  }
  if (deltas.empty() && (req.gen.logprobs || req.returnTokens))
    deltas.push_back({{"content", ""}}); // the token's log-probabilities or id still go out
  for (size_t i = 0; i < deltas.size(); ++i) {
    const std::string piece = deltas[i].contains("content") ? deltas[i]["content"].get<std::string>() : "";
    json c = chunk(req, id, created, piece, i == 0 ? tok : nullptr, nullptr, first);
    if (req.chat) {
      json &delta = c["choices"][0]["delta"];
      delta.erase("content");
      delta.update(deltas[i]);
    }
    first = false;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<json> Api::finalChunks(const CompletionRequest &req, const std::string &id, int64_t created,
                                   const Finish &f, bool &first) const {
  std::vector<json> out;
  if (req.output) {
    std::vector<OutputDelta> d;
    req.output->push(f.trailingText, d);
    req.output->finish(d);
    for (const json &delta : chatDeltasOf(d)) {
      json c = chunk(req, id, created, "", nullptr, nullptr, first);
      json &cd = c["choices"][0]["delta"];
      cd.erase("content");
      cd.update(delta);
      first = false;
      out.push_back(std::move(c));
    }
  } else if (!f.trailingText.empty()) {
    out.push_back(chunk(req, id, created, f.trailingText, nullptr, nullptr, first));
    first = false;
  }
  json last = chunk(req, id, created, "", nullptr, &f, first);
  if (req.output && req.output->calls() > 0 && f.reason == FinishReason::Stop)
    last["choices"][0]["finish_reason"] = "tool_calls";
  out.push_back(std::move(last));
  return out;
}

} // namespace tpc::server
