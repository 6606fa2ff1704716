//===- ToolCallsTest.cpp - tool calls and reasoning read from answers -----===//
//
// Model answers written by hand per family go through OutputParser whole and streamed (one character at
// a time and in odd chunkings); both must give the exact message OpenAI's clients expect (content,
// reasoning_content, tool_calls with ids from a counter), and the stream must never show a marker. A
// malformed call must come back as the content it was.
//===----------------------------------------------------------------------===//
#include "server/OutputParser.h"
#include "server/ToolRequest.h"

#include <gtest/gtest.h>

using namespace tpc;
using namespace tpc::server;
using json = nlohmann::json;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "zip": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"tz": {"type": "string"}}}}}])");

OutputConfig config(ToolFormat f, bool thinkTags = false) {
  OutputConfig c;
  c.tools = f;
  c.toolList = kTools;
  c.thinkTags = thinkTags;
  c.harmony = f == ToolFormat::Harmony;
  return c;
}

/// A parser whose ids count call_0, call_1...
OutputParser parserOf(OutputConfig c) {
  auto n = std::make_shared<int>(0);
  c.newId = [n] { return "call_" + std::to_string((*n)++); };
  return OutputParser(c);
}

json whole(const OutputConfig &c, const std::string &text) {
  OutputParser p = parserOf(c);
  std::vector<OutputDelta> d;
  p.push(text, d);
  p.finish(d);
  return chatMessageOf(d);
}

/// The message a client rebuilds from the stream's deltas (as the openai client's accumulators do); fails
/// the test when a content or reasoning delta shows a format marker.
json streamed(const OutputConfig &c, const std::string &text, size_t chunk) {
  OutputParser p = parserOf(c);
  std::vector<json> deltas;
  for (size_t i = 0; i < text.size(); i += chunk) {
    std::vector<OutputDelta> d;
    p.push(std::string_view(text).substr(i, chunk), d);
    for (json &x : chatDeltasOf(d))
      deltas.push_back(std::move(x));
  }
  std::vector<OutputDelta> d;
  p.finish(d);
  for (json &x : chatDeltasOf(d))
    deltas.push_back(std::move(x));
  std::string content, reasoning;
  json calls = json::array();
  for (const json &x : deltas) {
    if (x.contains("content"))
      content += x["content"].get<std::string>();
    if (x.contains("reasoning_content")) {
      const std::string r = x["reasoning_content"];
      EXPECT_EQ(r.find("think>"), std::string::npos) << r;
      EXPECT_EQ(r.find("<|"), std::string::npos) << r;
      reasoning += r;
    }
    if (x.contains("tool_calls")) {
      const json &tc = x["tool_calls"][0];
      const size_t index = tc["index"];
      if (tc.contains("id")) { // a call's first delta: id, type, name, empty arguments
        EXPECT_EQ(index, calls.size());
        EXPECT_EQ(tc["type"], "function");
        EXPECT_EQ(tc["function"]["arguments"], "");
        calls.push_back({{"id", tc["id"]}, {"type", "function"},
                         {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
      } else {
        EXPECT_LT(index, calls.size());
        calls[index]["function"]["arguments"] =
            calls[index]["function"]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
    }
  }
  if (!calls.empty())
    while (!content.empty() && std::isspace(static_cast<unsigned char>(content.back())))
      content.pop_back();
  json m = {{"role", "assistant"}, {"content", content.empty() && !calls.empty() ? json(nullptr) : json(content)}};
  if (!reasoning.empty())
    m["reasoning_content"] = reasoning;
  if (!calls.empty())
    m["tool_calls"] = calls;
  return m;
}

json callJson(int i, const std::string &name, const std::string &args) {
  return {{"id", "call_" + std::to_string(i)}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

json message(const json &content, const std::vector<json> &calls = {}, const std::string &reasoning = "") {
  json m = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty())
    m["reasoning_content"] = reasoning;
  if (!calls.empty())
    m["tool_calls"] = calls;
  return m;
}

/// `text` read whole and streamed in several chunkings all give `expected`.
void expectMessage(const OutputConfig &c, const std::string &text, const json &expected) {
  EXPECT_EQ(whole(c, text), expected) << text;
  for (size_t chunk : {1, 2, 3, 5, 7, 13, 64})
    EXPECT_EQ(streamed(c, text, chunk), expected) << "chunks of " << chunk << ": " << text;
}

} // namespace

TEST(ToolCalls, DetectsTheFormatFromTheTemplateMarkers) {
  EXPECT_EQ(detectToolFormat("{{'<tool_call>\\n' + tool_call | tojson}}"), ToolFormat::Hermes);
  EXPECT_EQ(detectToolFormat("<tool_call>\\n<function=' + name + '>\\n<parameter=' + k"), ToolFormat::QwenXml);
  EXPECT_EQ(detectToolFormat("<tool_call>' + tc.name <arg_key>{{ k }}</arg_key><arg_value>"), ToolFormat::Glm);
  EXPECT_EQ(detectToolFormat("<|start|>assistant<|channel|>analysis<|message|>"), ToolFormat::Harmony);
  EXPECT_EQ(detectToolFormat("[TOOL_CALLS][' ... "), ToolFormat::MistralJson);
  EXPECT_EQ(detectToolFormat("'[TOOL_CALLS]' + name + '[ARGS]'"), ToolFormat::Mistral);
  EXPECT_EQ(detectToolFormat("<|start_header_id|> <|python_tag|>"), ToolFormat::Llama3);
  EXPECT_EQ(detectToolFormat("<start_of_turn>user"), ToolFormat::None);
}

TEST(ToolCalls, HermesWithThinkingAndTwoCalls) {
  const std::string text = "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
                           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
                           "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n"
                           "</tool_call>";
  expectMessage(config(ToolFormat::Hermes, true), text,
                message("Let me check.",
                        {callJson(0, "get_weather", R"({"city":"Paris","days":2})"),
                         callJson(1, "get_time", R"({"tz":"CET"})")},
                        "The user wants the weather."));
}

TEST(ToolCalls, HermesCallLeavesTheStreamWhenItCloses) {
  OutputParser p = parserOf(config(ToolFormat::Hermes));
  std::vector<OutputDelta> d;
  p.push("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_", d);
  EXPECT_TRUE(d.empty()); // the region is held until it closes
  p.push("call>\n<tool", d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, OutputDelta::Kind::Call);
  EXPECT_EQ(d[0].call.name, "get_time");
  EXPECT_EQ(d[0].call.arguments, "{}");
}

TEST(ToolCalls, HermesMalformedCallsAreContent) {
  const OutputConfig c = config(ToolFormat::Hermes);
  expectMessage(c, "<tool_call>\n{\"name\": get_weather}\n</tool_call> then text",
                message("<tool_call>\n{\"name\": get_weather}\n</tool_call> then text"));
  expectMessage(c, "Sure. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":",
                message("Sure. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":"));
  expectMessage(c, "<tool_call>[1, 2]</tool_call>", message("<tool_call>[1, 2]</tool_call>"));
  // A '<' that opens no marker is content, also at the very end.
  expectMessage(c, "a < b, and <tool", message("a < b, and <tool"));
}

TEST(ToolCalls, QwenXmlStartsInsideReasoningAndTypesValuesBySchema) {
  OutputConfig c = config(ToolFormat::QwenXml, true);
  c.startInReasoning = true; // Qwen 3.5's generation prompt ends with "<think>\n"
  const std::string text = "The user wants the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                           "<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                           "<parameter=zip>\n10001\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                           "<function=get_time>\n<parameter=tz>\nEST\n</parameter>\n</function>\n</tool_call>";
  expectMessage(c, text,
                message(nullptr,
                        {callJson(0, "get_weather", R"({"city":"New York","days":2,"zip":"10001"})"),
                         callJson(1, "get_time", R"({"tz":"EST"})")},
                        "The user wants the weather."));
  expectMessage(c, "Thinking.</think><tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
                message("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>", {},
                        "Thinking."));
}

TEST(ToolCalls, Glm) {
  const std::string text = "<think>Weather is needed.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                           "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
                           "</tool_call>";
  expectMessage(config(ToolFormat::Glm, true), text,
                message(nullptr, {callJson(0, "get_weather", R"({"city":"Paris","days":3})")}, "Weather is needed."));
  expectMessage(config(ToolFormat::Glm), "<tool_call>\n<arg_key>city</arg_key></tool_call>",
                message("<tool_call>\n<arg_key>city</arg_key></tool_call>"));
}

TEST(ToolCalls, Llama3JsonAndPythonTag) {
  const OutputConfig c = config(ToolFormat::Llama3);
  expectMessage(c, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                message(nullptr, {callJson(0, "get_weather", R"({"city":"Paris"})")}));
  expectMessage(c, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
                   "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}",
                message(nullptr, {callJson(0, "get_weather", R"({"city":"Paris"})"),
                                  callJson(1, "get_time", R"({"tz":"CET"})")}));
  // JSON that is no call, and JSON after text, are content.
  expectMessage(c, "{\"answer\": 42}", message("{\"answer\": 42}"));
  expectMessage(c, "It is {\"name\": \"x\"}", message("It is {\"name\": \"x\"}"));
  expectMessage(c, "<|python_tag|>print(1)", message("<|python_tag|>print(1)"));
}

TEST(ToolCalls, MistralBothForms) {
  const json two = json::array({callJson(0, "get_weather", R"({"city":"Paris"})"), callJson(1, "get_time", R"({"tz":"CET"})")});
  expectMessage(config(ToolFormat::MistralJson),
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
                message(nullptr, two));
  expectMessage(config(ToolFormat::Mistral),
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]"
                "{\"tz\": \"CET\"}",
                message(nullptr, two));
  expectMessage(config(ToolFormat::Mistral), "[TOOL_CALLS]not a call", message("[TOOL_CALLS]not a call"));
  expectMessage(config(ToolFormat::Mistral), "[TOOL_CALLS]get_weather[ARGS]{\"city\"",
                message("[TOOL_CALLS]get_weather[ARGS]{\"city\""));
  // Mistral's templates take only 9 alphanumerics as ids.
  OutputConfig c = config(ToolFormat::Mistral);
  OutputParser p(c);
  std::vector<OutputDelta> d;
  p.push("[TOOL_CALLS]get_time[ARGS]{}", d);
  p.finish(d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].call.id.size(), 9u);
}

TEST(ToolCalls, HarmonyChannels) {
  const OutputConfig c = config(ToolFormat::Harmony);
  // The answer after "<|start|>assistant": analysis, then a call in either header order.
  expectMessage(c,
                "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
                message(nullptr, {callJson(0, "get_weather", R"({"city":"Paris"})")}, "Need the weather."));
  expectMessage(c, "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"tz\": \"CET\"}",
                message(nullptr, {callJson(0, "get_time", R"({"tz":"CET"})")}));
  OutputConfig forced = c;
  forced.prefill = " to=functions.get_time<|channel|>commentary json<|message|>";
  expectMessage(forced, "{\"tz\": \"CET\"}", message(nullptr, {callJson(0, "get_time", R"({"tz":"CET"})")}));
  expectMessage(c, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
                message("Hello!", {}, "Think."));
  expectMessage(c, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":",
                message("{\"city\":"));
  // Without tools the channels are still read; text without a header is the answer.
  OutputConfig noTools = c;
  noTools.tools = ToolFormat::None;
  expectMessage(noTools, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
                message("Hi", {}, "Hm."));
  expectMessage(noTools, "Plain answer", message("Plain answer"));
}

TEST(ToolCalls, ReasoningFormatNoneKeepsTheText) {
  OutputConfig c = config(ToolFormat::None, true);
  c.splitReasoning = false;
  expectMessage(c, "<think>\nHm.\n</think>\n\nHello", message("<think>\nHm.\n</think>\n\nHello"));
  OutputConfig h = config(ToolFormat::None);
  h.harmony = true;
  h.splitReasoning = false;
  expectMessage(h, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
                message("Hm.Hi"));
}

TEST(ToolCalls, ReasoningSplitWithoutTools) {
  const OutputConfig c = config(ToolFormat::None, true);
  expectMessage(c, "<think>\nStep 1.\nStep 2.\n</think>\n\nThe answer.", message("The answer.", {}, "Step 1.\nStep 2."));
  // <think> after the answer began is text; a reasoning that never closes is all reasoning.
  expectMessage(c, "Hello <think>x</think>", message("Hello <think>x</think>"));
  OutputConfig open = c;
  open.startInReasoning = true;
  expectMessage(open, "Still thinking", message("", {}, "Still thinking"));
  // No <think> at all: plain content, nothing held back at the end.
  expectMessage(c, "Just text\n", message("Just text\n"));
}

TEST(ToolCalls, ForcedCallsReadTheirPrefill) {
  OutputConfig c = config(ToolFormat::Hermes, true);
  c.prefill = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": ";
  expectMessage(c, "{\"tz\": \"CET\"}}\n</tool_call>", message(nullptr, {callJson(0, "get_time", R"({"tz":"CET"})")}));
  // A continuation that makes no call: the client sees what the model wrote, not the prefill.
  expectMessage(c, "sorry, no", message("sorry, no"));
  // After a reasoning the prompt opened (Qwen 3.5): the prefill closes it first.
  OutputConfig q = config(ToolFormat::QwenXml, true);
  q.startInReasoning = true;
  q.prefill = "</think>\n\n<tool_call>\n<function=get_time>\n";
  expectMessage(q, "<parameter=tz>\nUTC\n</parameter>\n</function>\n</tool_call>",
                message(nullptr, {callJson(0, "get_time", R"({"tz":"UTC"})")}));
  expectMessage(q, "garbage", message("garbage"));
  OutputConfig l = config(ToolFormat::Llama3);
  l.prefill = "{\"name\": \"";
  expectMessage(l, "get_time\", \"parameters\": {}}", message(nullptr, {callJson(0, "get_time", "{}")}));
}

TEST(ToolCalls, ForcedCallPrefixAndGrammar) {
  auto toGbnf = [](const json &schema, const std::string &rule) -> Expected<std::string> {
    return rule + " ::= \"{}\" # " + schema.dump();
  };
  auto named = forcedCall(ToolFormat::Hermes, kTools, "get_time", toGbnf);
  ASSERT_TRUE(named) << named.message();
  EXPECT_EQ(named->prefill, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": ");
  EXPECT_EQ(named->gbnf, "root ::= ( tool0-args ) \"}\\n</tool_call>\"\ntool0-args ::= \"{}\" # " +
                             kTools[1]["function"]["parameters"].dump() + "\n");
  auto any = forcedCall(ToolFormat::Mistral, kTools, "", toGbnf);
  ASSERT_TRUE(any);
  EXPECT_EQ(any->prefill, "[TOOL_CALLS]");
  EXPECT_NE(any->gbnf.find("root ::= ( \"get_weather[ARGS]\" tool0-args | \"get_time[ARGS]\" tool1-args )"),
            std::string::npos)
      << any->gbnf;
  auto xml = forcedCall(ToolFormat::QwenXml, kTools, "get_weather", toGbnf);
  ASSERT_TRUE(xml);
  EXPECT_EQ(xml->prefill, "<tool_call>\n<function=get_weather>\n");
  EXPECT_NE(xml->gbnf.find("\"city\" | \"days\" | \"zip\""), std::string::npos) << xml->gbnf;
  // Without a converter the call is only prefilled.
  auto bare = forcedCall(ToolFormat::Harmony, kTools, "get_time", nullptr);
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->prefill, " to=functions.get_time<|channel|>commentary json<|message|>");
  EXPECT_TRUE(bare->gbnf.empty());
  auto refused = forcedCall(ToolFormat::Llama3, kTools, "get_time",
                            [](const json &, const std::string &) -> Expected<std::string> {
                              return Error{"'patternProperties' is not supported"};
                            });
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("tools[0].function.parameters: 'patternProperties'"), std::string::npos)
      << refused.message();
  EXPECT_FALSE(forcedCall(ToolFormat::None, kTools, "get_time", nullptr));
}
