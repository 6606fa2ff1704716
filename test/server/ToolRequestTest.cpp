//===- ToolRequestTest.cpp - tools, tool_choice and reasoning through Api ---===//
//
// Requests with tools against the real templates of test/server/templates: malformed tool fields are 400s
// naming the field; a conversation with a call and its result renders (the arguments the client sent as
// JSON text reach the template as an object) and the call the template wrote reads back through the
// family's parser as the same call; a forced call prefills the prompt and carries the grammar; the
// responses (whole and streamed) have OpenAI's shapes; enable_thinking reaches the Qwen 3.5 and GLM
// templates and decides where the answer starts.
//===----------------------------------------------------------------------===//
#include "server/Api.h"
#include "server/ToolRequest.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace tpc;
using namespace tpc::server;
using json = nlohmann::json;

namespace {

/// Byte tokens (any text encodes and decodes back) plus the format markers as control tokens.
rt::Tokenizer bytesAndMarkers() {
  rt::TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.tokenTypes = {2, 3, 3};
  for (const char *m : {"<|im_start|>", "<|im_end|>", "<|start|>", "<|end|>", "<|channel|>", "<|message|>",
                        "<|call|>", "<|return|>", "<|constrain|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
                        "<|python_tag|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|user|>",
                        "<|assistant|>", "<|observation|>", "<|system|>", "[INST]", "[/INST]",
                        "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                        "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"})
    d.tokens.push_back(m), d.tokenTypes.push_back(3);
  d.tokens.push_back("\xE2\x96\x81"), d.tokenTypes.push_back(1);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    d.tokens.push_back(buf), d.tokenTypes.push_back(6);
  }
  d.unk = 0, d.bos = 1, d.eos = 2;
  rt::addEndOfGenerationTokens(d);
  return rt::Tokenizer(d);
}

std::string readTemplate(const std::string &name) {
  std::ifstream f(std::string(TPC_SOURCE_DIR) + "/test/server/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Served {
  rt::Tokenizer tok = bytesAndMarkers();
  std::unique_ptr<Api> api;
  explicit Served(const std::string &templateFile, const std::string &text = "") {
    auto t = ChatTemplate::fromJinja(text.empty() ? readTemplate(templateFile) : text, templateFile, "<s>", "</s>");
    EXPECT_TRUE(t) << t.message();
    api = std::make_unique<Api>(tok, *t, "", "tiny", 8192, static_cast<int64_t>(tok.size()));
  }
  std::string promptText(const CompletionRequest &r) const { return tok.decode(r.prompt, true); }
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather of a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

/// A conversation with a call (arguments as the JSON text OpenAI clients send) and its result.
json conversation(const std::string &callId = "abc123XYZ") {
  return json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                      {{"role", "assistant"},
                       {"content", nullptr},
                       {"tool_calls", json::array({{{"id", callId},
                                                    {"type", "function"},
                                                    {"function", {{"name", "get_weather"},
                                                                  {"arguments", "{\"city\": \"Paris\"}"}}}}})}},
                      {{"role", "tool"}, {"tool_call_id", callId}, {"content", "22 C and sunny"}}});
}

std::optional<ApiError> parse(const Api &api, const json &body, CompletionRequest &out) {
  return api.parseCompletion(body.dump(), true, out);
}

} // namespace

TEST(ToolRequest, MalformedToolFieldsAre400sNamingTheField) {
  Served s("Qwen-Qwen3-0.6B.jinja");
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto expect400 = [&](json body, const std::string &param) {
    body["messages"] = msgs;
    CompletionRequest r;
    auto e = parse(*s.api, body, r);
    ASSERT_TRUE(e) << body.dump();
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, param) << e->message;
  };
  expect400({{"tools", "get_weather"}}, "tools");
  expect400({{"tools", json::array({42})}}, "tools[0]");
  expect400({{"tools", json::array({{{"type", "code"}, {"function", {{"name", "f"}}}}})}}, "tools[0].type");
  expect400({{"tools", json::array({{{"type", "function"}}})}}, "tools[0].function");
  expect400({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "bad name"}}}}})}},
            "tools[0].function.name");
  expect400({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}})}},
            "tools[0].function.parameters");
  expect400({{"tools", json::array({kTools[0], kTools[0]})}}, "tools[1].function.name");
  expect400({{"tools", kTools}, {"tool_choice", "sometimes"}}, "tool_choice");
  expect400({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
            "tool_choice");
  expect400({{"tool_choice", "required"}}, "tool_choice");
  expect400({{"tools", kTools}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls");
  expect400({{"reasoning_format", "verbose"}}, "reasoning_format");
  // Messages: the tool fields too.
  CompletionRequest r;
  auto e = parse(*s.api, {{"messages", json::array({{{"role", "assistant"}, {"tool_calls", "x"}}})}}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].tool_calls");
  e = parse(*s.api,
            {{"messages", json::array({{{"role", "assistant"}, {"tool_calls", json::array({{{"id", "1"}}})}}})}}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].tool_calls[0]");
  e = parse(*s.api, {{"messages", json::array({{{"role", "tool"}, {"tool_call_id", 5}, {"content", "x"}}})}}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].tool_call_id");
}

TEST(ToolRequest, BuiltInRenderersRefuseTools) {
  rt::Tokenizer tok = bytesAndMarkers();
  Api api(tok, *ChatTemplate::fromFlag("chatml"), "", "tiny", 512, static_cast<int64_t>(tok.size()));
  CompletionRequest r;
  auto e = parse(api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tools", kTools}}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  EXPECT_NE(e->message.find("--chat-template FILE"), std::string::npos);
}

/// Per real template: the call the template writes from the client's message reads back as that call.
struct RoundTrip {
  const char *file;
  ToolFormat format;
  const char *opener; ///< where the assistant's call starts in the prompt (the last one before the result)
};

TEST(ToolRequest, TemplatesRenderCallsAndResultsAndTheCallsReadBack) {
  const RoundTrip cases[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes, "<tool_call>"},
      {"Qwen3.5-4B.jinja", ToolFormat::QwenXml, "<tool_call>"},
      {"GLM-4.6.jinja", ToolFormat::Glm, "<tool_call>"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3, "{\"name\""},
      {"openai-gpt-oss-120b.jinja", ToolFormat::Harmony, "<|start|>assistant to="},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::Mistral, "[TOOL_CALLS]"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::MistralJson, "[TOOL_CALLS]"},
  };
  for (const RoundTrip &c : cases) {
    SCOPED_TRACE(c.file);
    Served s(c.file);
    EXPECT_NE(s.api->outputSummary().find(toolFormatName(c.format)), std::string::npos) << s.api->outputSummary();
    CompletionRequest r;
    auto e = parse(*s.api, {{"messages", conversation()}, {"tools", kTools}}, r);
    ASSERT_FALSE(e) << e->message;
    const std::string prompt = s.promptText(r);
    EXPECT_NE(prompt.find("Current weather of a city"), std::string::npos) << prompt; // the tools
    const size_t result = prompt.find("22 C and sunny");
    ASSERT_NE(result, std::string::npos) << prompt;
    const size_t at = prompt.rfind(c.opener, result);
    ASSERT_NE(at, std::string::npos) << prompt;
    std::string region = prompt.substr(at, result - at);
    for (const char *end : {"<|im_end|>", "<|eot_id|>", "</s>", "<|call|>", "<|observation|>", "[TOOL_RESULTS]"})
      region = region.substr(0, region.find(end));
    OutputConfig cfg;
    cfg.tools = c.format;
    cfg.toolList = kTools;
    cfg.harmony = c.format == ToolFormat::Harmony;
    OutputParser p(cfg);
    std::vector<OutputDelta> d;
    p.push(region, d);
    p.finish(d);
    const json m = chatMessageOf(d);
    ASSERT_TRUE(m.contains("tool_calls")) << region;
    ASSERT_EQ(m["tool_calls"].size(), 1u) << region;
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              json({{"city", "Paris"}}))
        << region;
    EXPECT_TRUE(m["content"].is_null()) << region;
    // tool_choice "none": the tools are not shown to the model.
    CompletionRequest none;
    ASSERT_FALSE(parse(*s.api, {{"messages", conversation()}, {"tools", kTools}, {"tool_choice", "none"}}, none));
    EXPECT_EQ(s.promptText(none).find("Current weather of a city"), std::string::npos);
  }
}

TEST(ToolRequest, ForcedCallPrefillsTheAnswerAndStreamsOpenAIDeltas) {
  Served s("Qwen-Qwen3-0.6B.jinja");
  s.api->setSchemaToGbnf([](const json &schema, const std::string &rule) -> Expected<std::string> {
    return rule + " ::= \"{\" [^}]* \"}\" # " + schema.dump();
  });
  CompletionRequest r;
  auto e = parse(*s.api,
                 {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                  {"tools", kTools},
                  {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                  {"stream", true}},
                 r);
  ASSERT_FALSE(e) << e->message;
  const std::string prompt = s.promptText(r);
  const std::string prefill = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  ASSERT_GE(prompt.size(), prefill.size());
  EXPECT_EQ(prompt.substr(prompt.size() - prefill.size()), prefill);
  EXPECT_EQ(r.gen.gbnf.rfind("root ::= ( tool0-args ) \"}\\n</tool_call>\"\ntool0-args ::= ", 0), 0u) << r.gen.gbnf;
  EXPECT_NE(r.gen.gbnf.find(kTools[0]["function"]["parameters"].dump()), std::string::npos);
  EXPECT_TRUE(r.gen.specialText);
  ASSERT_TRUE(r.output);

  // The model's continuation, streamed in tokens of a few characters.
  bool first = true;
  std::vector<json> chunks;
  for (const char *piece : {"{\"city\"", ": \"Pa", "ris\"}", "}\n</tool", "_call>"}) {
    TokenOut t;
    t.text = piece;
    for (json &c : s.api->chunks(r, "chatcmpl-1", 7, piece, &t, first))
      chunks.push_back(std::move(c));
  }
  Finish f;
  f.reason = FinishReason::Stop;
  for (json &c : s.api->finalChunks(r, "chatcmpl-1", 7, f, first))
    chunks.push_back(std::move(c));
  ASSERT_EQ(chunks.size(), 3u);
  const json &head = chunks[0]["choices"][0]["delta"];
  EXPECT_EQ(head["role"], "assistant");
  EXPECT_FALSE(head.contains("content"));
  const json &call = head["tool_calls"][0];
  EXPECT_EQ(call["index"], 0);
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["id"].get<std::string>().size(), 29u);
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0],
            json({{"index", 0}, {"function", {{"arguments", "{\"city\":\"Paris\"}"}}}}));
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(chunks[2]["object"], "chat.completion.chunk");
}

TEST(ToolRequest, NonStreamedResponseHasToolCallsAndReasoning) {
  Served s("Qwen-Qwen3-0.6B.jinja");
  CompletionRequest r;
  ASSERT_FALSE(parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tools", kTools}}, r));
  CompletionResult res;
  res.text = "<think>\nCall it.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
             "\"Oslo\"}}\n</tool_call>";
  res.finish.reason = FinishReason::Stop;
  const json out = s.api->response(r, res, "chatcmpl-2", 9);
  const json &choice = out["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["reasoning_content"], "Call it.");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\"}");

  // Two calls get distinct ids.
  CompletionRequest r2;
  ASSERT_FALSE(parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tools", kTools}}, r2));
  CompletionResult two;
  two.text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call><tool_call>{\"name\": "
             "\"get_weather\", \"arguments\": {}}</tool_call>";
  const json calls = s.api->response(r2, two, "c", 1)["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);

  // reasoning_format none keeps the think block in the content.
  CompletionRequest raw;
  ASSERT_FALSE(parse(*s.api,
                     {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"reasoning_format", "none"}},
                     raw));
  CompletionResult plain;
  plain.text = "<think>x</think>Hello";
  const json m = s.api->response(raw, plain, "c", 1)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "<think>x</think>Hello");
  EXPECT_FALSE(m.contains("reasoning_content"));
  // The server's default can say none too.
  s.api->setReasoningFormat(ReasoningFormat::None);
  CompletionRequest dflt;
  ASSERT_FALSE(parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, dflt));
  EXPECT_EQ(s.api->response(dflt, plain, "c", 1)["choices"][0]["message"]["content"], "<think>x</think>Hello");
}

TEST(ToolRequest, EnableThinkingReachesQwen35AndGlm) {
  struct Case {
    const char *file, *offTail, *onTail;
    bool onStartsInside;
  } const cases[] = {{"Qwen3.5-4B.jinja", "<think>\n\n</think>\n\n", "<|im_start|>assistant\n<think>\n", true},
                     {"GLM-4.6.jinja", "<|assistant|>\n<think></think>", "<|assistant|>", false}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.file);
    Served s(c.file);
    const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
    auto tailIs = [](const std::string &s, const std::string &tail) {
      return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
    };
    CompletionRequest off, on;
    ASSERT_FALSE(parse(*s.api, {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", false}}}}, off));
    EXPECT_TRUE(tailIs(s.promptText(off), c.offTail)) << s.promptText(off);
    ASSERT_FALSE(parse(*s.api, {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", true}}}}, on));
    EXPECT_TRUE(tailIs(s.promptText(on), c.onTail)) << s.promptText(on);
    // Where the answer starts: inside the reasoning the prompt opened, or before a <think> of its own.
    CompletionResult res;
    res.text = c.onStartsInside ? "Let me think.\n</think>\n\nHello" : "\n<think>Let me think.</think>\nHello";
    const json m = s.api->response(on, res, "c", 1)["choices"][0]["message"];
    EXPECT_EQ(m["reasoning_content"], "Let me think.");
    EXPECT_EQ(m["content"], "Hello");
    CompletionResult plain;
    plain.text = "Hello";
    EXPECT_EQ(s.api->response(off, plain, "c", 1)["choices"][0]["message"]["content"], "Hello");
  }
}

TEST(ToolRequest, HarmonyStopsAtCallAndReturnNotAtEnd) {
  Served s("openai-gpt-oss-120b.jinja");
  CompletionRequest r;
  ASSERT_FALSE(parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, r));
  auto stops = [&](const char *t) {
    const int32_t id = s.tok.find(t);
    return std::find(r.gen.stopTokens.begin(), r.gen.stopTokens.end(), id) != r.gen.stopTokens.end() ||
           s.tok.isEog(id);
  };
  EXPECT_TRUE(stops("<|call|>"));
  EXPECT_TRUE(stops("<|return|>"));
  EXPECT_FALSE(stops("<|end|>")); // closes the analysis message, not the turn
  EXPECT_TRUE(r.gen.specialText);
}

TEST(ToolRequest, ParsedAnswersShowControlTokensToTheParser) {
  rt::Tokenizer tok = bytesAndMarkers();
  const int32_t channel = tok.find("<|channel|>");
  ASSERT_GE(channel, 0);
  TextStream hidden(tok, {}), shown(tok, {}, /*special=*/true);
  EXPECT_EQ(hidden.push(channel), "");
  EXPECT_EQ(shown.push(channel), "<|channel|>");
}

TEST(ToolRequest, RealTemplatesNameTheirFamily) {
  const std::pair<const char *, ToolFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::Hermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes},
      {"Qwen-QwQ-32B.jinja", ToolFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFormat::Hermes},
      {"Qwen3-Coder.jinja", ToolFormat::QwenXml},
      {"Qwen3.5-4B.jinja", ToolFormat::QwenXml},
      {"GLM-4.6.jinja", ToolFormat::Glm},
      {"GLM-4.7-Flash.jinja", ToolFormat::Glm},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::Llama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::Llama3},
      {"openai-gpt-oss-120b.jinja", ToolFormat::Harmony},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::Mistral},
      {"unsloth-mistral-Devstral-Small-2507.jinja", ToolFormat::Mistral},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::MistralJson},
      {"google-gemma-4-31B-it.jinja", ToolFormat::None},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolFormat::None},
  };
  for (const auto &[file, format] : cases) {
    const std::string text = readTemplate(file);
    ASSERT_FALSE(text.empty()) << file;
    EXPECT_EQ(detectToolFormat(text), format) << file;
  }
  // A template without a format still serves tools (rendered) and says it reads no calls.
  Served s("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
  EXPECT_NE(s.api->outputSummary().find("tool calls: none"), std::string::npos) << s.api->outputSummary();
  EXPECT_NE(s.api->outputSummary().find("reasoning: <think> tags"), std::string::npos);
  CompletionRequest r;
  auto e = parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tools", kTools},
                          {"tool_choice", "required"}}, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tool_choice");
  // Its generation prompt opens <think>: the answer starts inside the reasoning.
  ASSERT_FALSE(parse(*s.api, {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}, r));
  CompletionResult res;
  res.text = "Hmm.\n</think>\n\nHello";
  const json m = s.api->response(r, res, "c", 1)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Hmm.");
  EXPECT_EQ(m["content"], "Hello");
}

TEST(ToolRequest, TemplatesThatConcatenateArgumentTextGetTheText) {
  // DeepSeek-R1's template writes `'...' + tool['function']['arguments'] + '...'`: with the arguments as an
  // object that fails, so the conversation is rendered again with the text the client sent.
  Served s("concatenating template",
           "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments + '!' }}"
           "{% else %}{{ m.content }}{% endif %}\n{% endfor %}");
  CompletionRequest r;
  auto e = parse(*s.api, {{"messages", conversation()}}, r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_NE(s.promptText(r).find("assistant:{\"city\": \"Paris\"}!"), std::string::npos) << s.promptText(r);
  // A template that iterates the arguments gets the object (Qwen 3.5's `arguments|items`).
  Served q("Qwen3.5-4B.jinja");
  ASSERT_FALSE(parse(*q.api, {{"messages", conversation()}}, r));
  EXPECT_NE(q.promptText(r).find("<parameter=city>\nParis\n</parameter>"), std::string::npos) << q.promptText(r);
}
