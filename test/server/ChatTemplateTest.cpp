//===- ChatTemplateTest.cpp - chat template recognition and rendering ------===//
//
// The fixed conversation (system, user, assistant, user, generation prompt) rendered by every family is
// compared with text written out by hand from the official templates' semantics (the Jinja expressions
// are quoted in ChatTemplate.cpp), and then, through Api::chatPrompt (special tokens parsed, one BOS), with
// exact token ids. Where the ids come from: the real vocabularies in $TPC_SHARED_DIR/tokenizer-tests
// (gpt-2 BPE for llama 3 and ChatML, llama SPM without a space prefix for the Gemmas, as Gemma's own
// tokenizer has none), with the family's special tokens appended as control tokens, since those
// vocabularies lack them. The message texts were chosen from llama.cpp's tokenizer test strings, so their
// ids are also in the .out files ("Hello world" = 15496 995, "Hello, world!" = 15496 11 995 0 for gpt-2);
// the test checks those sub-sequences against the .out file as well.
//===----------------------------------------------------------------------===//
#include "server/Api.h"
#include "server/ChatTemplate.h"

#include "compiler/gguf/GGUFFile.h"
#include "compiler/tokenizer/GGUFTokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace tpc;
using namespace tpc::server;

namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Hello world"}, {"user", "Hello, world!"}, {"assistant", "Hello World"}, {"user", "Hello"}};

ChatTemplate byName(const std::string &name) {
  auto t = ChatTemplate::fromFlag(name);
  EXPECT_TRUE(t) << t.message();
  return *t;
}

std::string render(const std::string &name, const std::string &bos, ChatOptions opts = {},
                   const std::vector<ChatMessage> &msgs = kConversation) {
  auto text = byName(name).apply(msgs, bos, opts);
  EXPECT_TRUE(text) << text.message();
  return text ? *text : std::string();
}

const char *const kLlama3Text =
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHello world<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello, world!<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello World<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n";
const char *const kLlama31Text =
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\nHello world<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello, world!<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello World<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n";
const char *const kChatmlText = "<|im_start|>system\nHello world<|im_end|>\n"
                                "<|im_start|>user\nHello, world!<|im_end|>\n"
                                "<|im_start|>assistant\nHello World<|im_end|>\n"
                                "<|im_start|>user\nHello<|im_end|>\n"
                                "<|im_start|>assistant\n";
const char *const kGemma3Text = "<s><start_of_turn>user\nHello world\n\nHello, world!<end_of_turn>\n"
                                "<start_of_turn>model\nHello World<end_of_turn>\n"
                                "<start_of_turn>user\nHello<end_of_turn>\n"
                                "<start_of_turn>model\n";
const char *const kGemma4Text = "<s><|turn>system\nHello world<turn|>\n"
                                "<|turn>user\nHello, world!<turn|>\n"
                                "<|turn>model\nHello World<turn|>\n"
                                "<|turn>user\nHello<turn|>\n"
                                "<|turn>model\n<|channel>thought\n<channel|>";

} // namespace

TEST(ChatTemplate, RecognisesFamiliesByMarkers) {
  // Excerpts of the official templates (enough of each to carry its markers).
  const std::string llama3 = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                             "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
                             "message['content'] | trim + '<|eot_id|>' %}";
  const std::string llama32 = "{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set "
                              "date_string = strftime_now(\"%d %b %Y\") %}{%- else %}{%- set date_string = \"26 Jul "
                              "2024\" %}{{- \"Cutting Knowledge Date: December 2023\\n\" }}" +
                              llama3;
  const std::string qwen3 = "{%- if '</think>' in content %}...{{- '<|im_start|>' + message.role + '\\n' + content + "
                            "'<|im_end|>' + '\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}";
  const std::string chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
  const std::string gemma3 = "{{ bos_token }}{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first "
                             "else \"\") }}{{ '<end_of_turn>\\n' }}";
  const std::string gemma2 = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
                             "supported') }}{% endif %}" + gemma3;
  const std::string gemma4 = "{{- '<|turn>' + role + '\\n' }}{{- '<turn|>\\n' -}}{%- if not enable_thinking | "
                             "default(false) -%}{{- '<|channel>thought\\n<channel|>' -}}";
  const std::string gemma4Old = "{{- '<|turn>' + role + '\\n' }}{{- '<turn|>\\n' -}}{{- '<|turn>model\\n' -}}";
  struct Case {
    std::string text, name;
  } cases[] = {{llama3, "llama3"}, {llama32, "llama3.1"}, {qwen3, "qwen3"},   {chatml, "chatml"},
               {gemma3, "gemma3"}, {gemma2, "gemma3"},    {gemma4, "gemma4"}, {gemma4Old, "gemma4"}};
  for (const Case &c : cases) {
    auto t = ChatTemplate::recognise(c.text, "model.gguf");
    ASSERT_TRUE(t) << t.message();
    EXPECT_EQ(t->name(), c.name) << c.text;
  }
  // The 3.2 template's date is today's (strftime_now); the fallback literal is read from the text.
  auto t32 = ChatTemplate::recognise(llama32, "x");
  ChatOptions fixed;
  fixed.date = "01 Jan 2030";
  EXPECT_NE(t32->apply({{"user", "hi"}}, "", fixed)->find("Today Date: 01 Jan 2030\n"), std::string::npos);
  // The older Gemma 4 template opens the model turn without the empty thought channel.
  auto old = ChatTemplate::recognise(gemma4Old, "x");
  EXPECT_EQ(*old->apply({{"user", "hi"}}, "", {}), "<|turn>user\nhi<turn|>\n<|turn>model\n");
  // The Gemma 2 style template refuses a system message.
  auto g2 = ChatTemplate::recognise(gemma2, "x");
  EXPECT_FALSE(g2->apply(kConversation, "", {}));
}

TEST(ChatTemplate, UnrecognisedTemplateIsRefusedNamingTheFlag) {
  auto t = ChatTemplate::recognise("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "plan 'p.bin'");
  ASSERT_FALSE(t);
  EXPECT_NE(t.message().find("plan 'p.bin'"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("--chat-template"), std::string::npos) << t.message();
  auto none = ChatTemplate::recognise("", "plan 'p.bin'");
  ASSERT_FALSE(none);
  EXPECT_NE(none.message().find("has no chat template"), std::string::npos);
  auto flag = ChatTemplate::fromFlag("vicuna");
  ASSERT_FALSE(flag);
  EXPECT_NE(flag.message().find("--chat-template: 'vicuna'"), std::string::npos) << flag.message();
}

TEST(ChatTemplate, TemplateFileIsRendered) {
  const std::string path = std::string(TPC_BINARY_DIR) + "/chat-template-test.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                         "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
                         "}}{% endif %}";
  auto t = ChatTemplate::fromFlag(path);
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ(t->name(), "jinja");
  EXPECT_EQ(t->endOfTurn(), std::vector<std::string>{"<|im_end|>"});
  auto text = t->apply(kConversation, "", {});
  ASSERT_TRUE(text) << text.message();
  EXPECT_EQ(*text, kChatmlText);
  std::ofstream(path) << "line one\n{% for m in messages %}{{ m.content }}";
  auto bad = ChatTemplate::fromFlag(path);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("--chat-template file '" + path + "': the chat template cannot be parsed: line 2: "
                               "missing '{% endfor %}'"),
            std::string::npos)
      << bad.message();
  std::remove(path.c_str());
}

std::string readTemplate(const std::string &name) {
  std::ifstream f(std::string(TPC_SOURCE_DIR) + "/test/server/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

TEST(ChatTemplate, GgufTemplateIsRenderedAsTheBuiltinRenderers) {
  // The official Llama 3.1 and Qwen 3 templates, rendered by the interpreter, give the built-in renderers'
  // text for the fixed conversation (the built-ins stay as --chat-template overrides).
  auto llama = ChatTemplate::fromJinja(readTemplate("meta-llama-Llama-3.1-8B-Instruct.jinja"), "plan 'l.bin'",
                                       "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(llama) << llama.message();
  EXPECT_EQ(*llama->apply(kConversation, "", {}), kLlama31Text);
  auto qwen = ChatTemplate::fromJinja(readTemplate("Qwen-Qwen3-0.6B.jinja"), "plan 'q.bin'", "", "<|im_end|>");
  ASSERT_TRUE(qwen) << qwen.message();
  EXPECT_EQ(*qwen->apply(kConversation, "", {}), kChatmlText);
  ChatOptions off;
  off.enableThinking = false;
  EXPECT_EQ(*qwen->apply({{"user", "Hello"}}, "", off), render("qwen3", "", off, {{"user", "Hello"}}));
  // A tool message and an assistant tool call reach the template with their fields.
  ChatMessage call{"assistant", ""};
  call.extra["tool_calls"] = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": "x"}}}])");
  ChatMessage result{"tool", "42"};
  auto text = qwen->apply({{"user", "Hi"}, call, result}, "", {});
  ASSERT_TRUE(text) << text.message();
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"x\"}}\n</tool_call>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_response>\n42\n</tool_response>"), std::string::npos) << *text;
}

TEST(ChatTemplate, ToolUseVariantServesRequestsWithTools) {
  auto t = ChatTemplate::fromJinja("plain {{ messages | length }}", "plan 'p.bin'", "", "",
                                   "tools {{ tools | map(attribute='function.name') | join(',') }}");
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ(*t->apply({{"user", "Hi"}}, "", {}), "plain 1");
  ChatOptions withTools;
  withTools.tools = nlohmann::ordered_json::parse(R"([{"function": {"name": "f"}}, {"function": {"name": "g"}}])");
  EXPECT_EQ(*t->apply({{"user", "Hi"}}, "", withTools), "tools f,g");
  auto bad = ChatTemplate::fromJinja("ok", "plan 'p.bin'", "", "", "{% if %}");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("plan 'p.bin': the chat template tool_use cannot be parsed: line 1: {% if %}: "
                               "expected an expression"),
            std::string::npos)
      << bad.message();
}

TEST(ChatTemplate, BrokenGgufTemplateIsRefusedAtStartNamingLineAndConstruct) {
  auto syntax = ChatTemplate::fromJinja("{% for m in messages %}\n{{ m.content | }}{% endfor %}", "plan 'p.bin'", "", "");
  ASSERT_FALSE(syntax);
  EXPECT_EQ(syntax.message(), "plan 'p.bin': the chat template cannot be parsed: line 2: {{ }}: expected a filter "
                              "name; start tpc serve with --chat-template NAME|FILE (NAME: " +
                                  std::string(ChatTemplate::names()) + ")");
  auto probe = ChatTemplate::fromJinja("{% for m in messages %}\n\n{{ m.content | frobnicate }}{% endfor %}",
                                       "plan 'p.bin'", "", "");
  ASSERT_FALSE(probe);
  EXPECT_NE(probe.message().find("plan 'p.bin': the chat template fails on a one-message conversation: line 3: "
                                 "unknown filter 'frobnicate'"),
            std::string::npos)
      << probe.message();
  auto none = ChatTemplate::fromJinja("", "plan 'p.bin'", "", "");
  ASSERT_FALSE(none);
  EXPECT_NE(none.message().find("has no chat template"), std::string::npos);
  // A template's own refusal of a conversation is a 400 for that request, not a refusal at start.
  auto gemma2 = ChatTemplate::fromJinja(readTemplate("google-gemma-2-2b-it.jinja"), "plan 'g.bin'", "<bos>", "<eos>");
  ASSERT_TRUE(gemma2) << gemma2.message();
  auto sys = gemma2->apply(kConversation, "", {});
  ASSERT_FALSE(sys);
  EXPECT_EQ(sys.message(), "the model's chat template: line 1: the template raised an exception: System role not "
                           "supported");
}

TEST(ChatTemplate, FixedConversationText) {
  ChatOptions opts;
  EXPECT_EQ(render("llama3", "<|begin_of_text|>"), kLlama3Text);
  EXPECT_EQ(render("llama3.1", "<|begin_of_text|>"), kLlama31Text);
  EXPECT_EQ(render("chatml", ""), kChatmlText);
  EXPECT_EQ(render("qwen3", ""), kChatmlText); // no <think> in this conversation: plain ChatML
  EXPECT_EQ(render("gemma3", "<s>"), kGemma3Text);
  EXPECT_EQ(render("gemma4", "<s>"), kGemma4Text);
}

TEST(ChatTemplate, FamilyDetails) {
  // llama 3 and Gemma trim message content; ChatML keeps it.
  const std::vector<ChatMessage> spaced = {{"user", "  hi \n"}};
  EXPECT_EQ(render("llama3", "", {}, spaced),
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render("chatml", "", {}, spaced), "<|im_start|>user\n  hi \n<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("gemma3", "", {}, spaced), "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  // Qwen 3: reasoning of earlier assistant turns is dropped; thinking off closes an empty think block.
  ChatOptions noThink;
  noThink.enableThinking = false;
  EXPECT_EQ(render("qwen3", "", noThink,
                   {{"user", "a"}, {"assistant", "<think>\nplan\n</think>\n\nanswer"}, {"user", "b"}}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nanswer<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Gemma 3: roles must alternate; Gemma 4 drops the model's thinking from history.
  EXPECT_FALSE(byName("gemma3").apply({{"user", "a"}, {"user", "b"}}, "", {}));
  EXPECT_EQ(render("gemma4", "", {}, {{"user", "a"}, {"assistant", "<|channel>thought\nx<channel|>ok"}, {"user", "b"}}),
            "<|turn>user\na<turn|>\n<|turn>model\nok<turn|>\n<|turn>user\nb<turn|>\n<|turn>model\n"
            "<|channel>thought\n<channel|>");
  ChatOptions think;
  think.enableThinking = true;
  EXPECT_EQ(render("gemma4", "", think, {{"user", "a"}}),
            "<|turn>system\n<|think|>\n<turn|>\n<|turn>user\na<turn|>\n<|turn>model\n");
  // Roles outside system/developer/user/assistant are refused; developer is the system role.
  auto tool = byName("chatml").apply({{"tool", "x"}}, "", {});
  ASSERT_FALSE(tool);
  EXPECT_NE(tool.message().find("messages[0].role 'tool'"), std::string::npos);
  EXPECT_EQ(render("chatml", "", {}, {{"developer", "d"}}), "<|im_start|>system\nd<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(byName("gemma4").endOfTurn(), std::vector<std::string>{"<turn|>"});
  EXPECT_EQ(byName("llama3").endOfTurn(), std::vector<std::string>{"<|eot_id|>"});
}

namespace {

std::string sharedDir() {
  const char *d = std::getenv("TPC_SHARED_DIR");
  return d && std::ifstream(std::string(d) + "/tokenizer-tests/README.md") ? d : "";
}

/// A shared vocabulary with `specials` appended as control tokens (the first one is the BOS when `bosFirst`).
std::unique_ptr<rt::Tokenizer> vocabWith(const std::string &file, const std::vector<std::string> &specials,
                                         bool spaceFree, bool bosFirst = false) {
  auto f = gguf::GGUFFile::open(sharedDir() + "/tokenizer-tests/" + file);
  if (!f) {
    ADD_FAILURE() << f.message();
    return nullptr;
  }
  auto d = tokenizerFromGGUF(**f);
  if (!d) {
    ADD_FAILURE() << d.message();
    return nullptr;
  }
  for (const std::string &s : specials) {
    d->tokens.push_back(s);
    d->tokenTypes.resize(d->tokens.size() - 1, 1);
    d->tokenTypes.push_back(3);
    if (!d->scores.empty())
      d->scores.push_back(0.0f);
  }
  if (spaceFree)
    d->addSpacePrefix = false;
  if (bosFirst)
    d->bos = static_cast<rt::TokenId>(d->tokens.size() - specials.size()), d->addBos = true;
  return std::make_unique<rt::Tokenizer>(d.take());
}

/// Ids of `name`'s prompt for the fixed conversation, through the server's prompt builder.
std::vector<int32_t> promptIds(const rt::Tokenizer &tok, const std::string &name) {
  Api api(tok, byName(name), "", "m", 4096, static_cast<int64_t>(tok.size()));
  std::vector<int32_t> ids;
  auto err = api.chatPrompt(kConversation, {}, ids);
  EXPECT_FALSE(err) << (err ? err->message : "");
  return ids;
}

bool containsRun(const std::vector<int32_t> &ids, const std::vector<int32_t> &run) {
  return std::search(ids.begin(), ids.end(), run.begin(), run.end()) != ids.end();
}

} // namespace

TEST(ChatTemplate, ExactIdsBpeFamilies) {
  if (sharedDir().empty())
    GTEST_SKIP() << "TPC_SHARED_DIR is not set or lacks tokenizer-tests/ (set it to the shared folder)";
  // gpt-2 has 50257 tokens: the appended specials get ids 50257 onwards.
  auto llama = vocabWith("ggml-vocab-gpt-2.gguf",
                         {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, false,
                         /*bosFirst=*/true);
  ASSERT_TRUE(llama);
  const int32_t BOT = 50257, SH = 50258, EH = 50259, EOT = 50260;
  // "system" 10057, "user" 7220, "assistant" 562 10167; "\n" 198 twice ("\n\n" before a letter splits as
  // \s+(?!\S) then \s+); messages as in the .out file.
  const std::vector<int32_t> llama3 = {
      BOT, SH, 10057, EH, 198, 198, 15496, 995, EOT, SH, 7220, EH, 198, 198, 15496, 11, 995, 0, EOT,
      SH,  562, 10167, EH, 198, 198, 15496, 2159, EOT, SH, 7220, EH, 198, 198, 15496, EOT, SH, 562, 10167, EH, 628};
  EXPECT_EQ(llama->encode(kLlama3Text, false, true), llama3);
  EXPECT_EQ(promptIds(*llama, "llama3"), llama3);
  EXPECT_TRUE(containsRun(llama3, {15496, 11, 995, 0})); // .out: "Hello, world!"

  auto qwen = vocabWith("ggml-vocab-gpt-2.gguf", {"<|im_start|>", "<|im_end|>"}, false);
  ASSERT_TRUE(qwen);
  const int32_t IS = 50257, IE = 50258;
  const std::vector<int32_t> chatml = {IS, 10057, 198, 15496, 995, IE, 198, IS, 7220, 198, 15496, 11, 995, 0, IE,
                                       198, IS, 562, 10167, 198, 15496, 2159, IE, 198, IS, 7220, 198, 15496, IE, 198,
                                       IS, 562, 10167, 198};
  EXPECT_EQ(qwen->encode(kChatmlText, false, true), chatml);
  EXPECT_EQ(promptIds(*qwen, "chatml"), chatml);
  EXPECT_EQ(promptIds(*qwen, "qwen3"), chatml);
}

TEST(ChatTemplate, ExactIdsSpmFamilies) {
  if (sharedDir().empty())
    GTEST_SKIP() << "TPC_SHARED_DIR is not set or lacks tokenizer-tests/ (set it to the shared folder)";
  // llama SPM has 32000 tokens (<s> = 1 is the BOS): the appended specials get ids 32000 onwards.
  auto gemma = vocabWith("ggml-vocab-llama-spm.gguf",
                         {"<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>", "<|channel>", "<channel|>"}, true);
  ASSERT_TRUE(gemma);
  const int32_t SOT = 32000, EOT = 32001, TO = 32002, TC = 32003, CO = 32004, CC = 32005;
  // "user" 1792, "model" 4299, "system" 5205, "\n" 13 (<0x0A>); without a space prefix "Hello" is 10994,
  // and " world" 3186, " World" 2787, "," 29892, "!" 29991 are the .out file's ("Hello, world!" = 15043
  // 29892 3186 29991 there, 15043 being the space-prefixed "Hello").
  const std::vector<int32_t> gemma3 = {1,     SOT, 1792, 13,  10994, 3186, 13,  13,   10994, 29892,
                                       3186,  29991, EOT, 13, SOT,   4299, 13,  10994, 2787, EOT,
                                       13,    SOT, 1792, 13,  10994, EOT,  13,  SOT,  4299, 13};
  EXPECT_EQ(gemma->encode(kGemma3Text, false, true), gemma3);
  EXPECT_EQ(promptIds(*gemma, "gemma3"), gemma3);
  // ... and "thought" = 386 1774 inside the empty thought channel.
  const std::vector<int32_t> gemma4 = {1,  TO,  5205,  13,   10994, 3186, TC,  13,    TO,   1792, 13,  10994,
                                       29892, 3186, 29991, TC, 13,    TO,   4299, 13,    10994, 2787, TC, 13,
                                       TO, 1792, 13,    10994, TC,    13,   TO,  4299,  13,   CO,   386, 1774,
                                       13, CC};
  EXPECT_EQ(gemma->encode(kGemma4Text, false, true), gemma4);
  EXPECT_EQ(promptIds(*gemma, "gemma4"), gemma4);
}
