//===- ApiTest.cpp - OpenAI request validation and response shapes ---------===//
//
// Every malformed body the server must refuse gets an ApiError with the status, the field (param) and, where
// OpenAI has one, the code; a valid body gives the prompt ids and settings the scheduler runs.
//===----------------------------------------------------------------------===//
#include "server/Api.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tpc;
using namespace tpc::server;
using json = nlohmann::json;

namespace {

rt::Tokenizer letters() {
  rt::TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
  d.tokenTypes = {2, 3, 3, 3, 3};
  for (char c = 'a'; c <= 'z'; ++c)
    d.tokens.emplace_back(1, c), d.tokenTypes.push_back(1);
  d.tokens.push_back("\xE2\x96\x81"), d.tokenTypes.push_back(1);
  d.tokens.push_back("<0x0A>"), d.tokenTypes.push_back(6);
  d.unk = 0, d.bos = 1, d.eos = 2;
  d.addBos = true;
  return rt::Tokenizer(d);
}

struct Fixture {
  rt::Tokenizer tok = letters();
  Api api{tok, *ChatTemplate::fromFlag("chatml"), "", "tiny", 32, static_cast<int64_t>(tok.size())};
  Api bare{tok, std::nullopt, "plan 'p.bin' has no chat template; start tpc serve with --chat-template NAME|FILE",
           "tiny", 32, static_cast<int64_t>(tok.size())};
};

std::optional<ApiError> parse(const Api &api, const std::string &body, bool chat, CompletionRequest *out = nullptr) {
  CompletionRequest r;
  auto e = api.parseCompletion(body, chat, r);
  if (out)
    *out = r;
  return e;
}

void expectError(const Api &api, const std::string &body, bool chat, int status, const std::string &param,
                 const std::string &code = {}) {
  auto e = parse(api, body, chat);
  ASSERT_TRUE(e) << body;
  EXPECT_EQ(e->status, status) << body << ": " << e->message;
  EXPECT_EQ(e->param, param) << body << ": " << e->message;
  if (!code.empty()) {
    EXPECT_EQ(e->code, code) << body;
  }
  json j = json::parse(errorBody(*e));
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param") && j["error"].contains("code"));
}

} // namespace

TEST(Api, MalformedRequestsGetOpenAIErrors) {
  Fixture f;
  const Api &a = f.api;
  expectError(a, "{not json", true, 400, "", "invalid_json");
  expectError(a, "[1, 2]", true, 400, "");
  expectError(a, "{}", true, 400, "messages");
  expectError(a, R"({"messages": "hi"})", true, 400, "messages");
  expectError(a, R"({"messages": []})", true, 400, "messages");
  expectError(a, R"({"messages": [{"content": "x"}]})", true, 400, "messages[0]");
  expectError(a, R"({"messages": [{"role": "user", "content": 5}]})", true, 400, "messages[0].content");
  expectError(a, R"({"messages": [{"role": "tool", "content": "x"}]})", true, 400, "messages");
  // Any model name is served, as llama-server does (clients send their default name).
  EXPECT_FALSE(parse(a, R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})", true));
  expectError(a, R"({"model": 3, "prompt": "ab"})", false, 400, "model");
  expectError(a, R"({"prompt": "ab", "max_tokens": -1})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": 0})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": 1099511627776})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": 18446744073709551615})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": "5"})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": 2.5})", false, 400, "max_tokens");
  expectError(a, R"({"prompt": "ab", "max_tokens": 30})", false, 400, "max_tokens", "context_length_exceeded");
  expectError(a, R"({"prompt": "abcdefghijklmnopqrstuvwxyzabcdefghij"})", false, 400, "prompt", "context_length_exceeded");
  expectError(a, R"({"prompt": 5})", false, 400, "prompt");
  expectError(a, R"({"prompt": [1, 999]})", false, 400, "prompt");
  expectError(a, R"({"prompt": ["a", "b"]})", false, 400, "prompt");
  expectError(a, R"({})", false, 400, "prompt");
  expectError(a, R"({"prompt": "ab", "temperature": -1})", false, 400, "temperature");
  expectError(a, R"({"prompt": "ab", "temperature": "hot"})", false, 400, "temperature");
  expectError(a, R"({"prompt": "ab", "top_p": 1.5})", false, 400, "top_p");
  expectError(a, R"({"prompt": "ab", "top_k": -2})", false, 400, "top_k");
  expectError(a, R"({"prompt": "ab", "stop": [1]})", false, 400, "stop");
  expectError(a, R"({"prompt": "ab", "n": 17})", false, 400, "n");
  expectError(a, R"({"prompt": "ab", "n": 0})", false, 400, "n");
  // llama-server's fields.
  expectError(a, R"({"prompt": "ab", "logit_bias": 5})", false, 400, "logit_bias");
  expectError(a, R"({"prompt": "ab", "logit_bias": {"999": 1}})", false, 400, "logit_bias.999");
  expectError(a, R"({"prompt": "ab", "logit_bias": {"5": "x"}})", false, 400, "logit_bias.5");
  expectError(a, R"({"prompt": "ab", "logit_bias": [[5]]})", false, 400, "logit_bias[0]");
  expectError(a, R"({"prompt": "ab", "logit_bias": [[5, true]]})", false, 400, "logit_bias[0]");
  expectError(a, R"({"prompt": "ab", "logit_bias": [[{}, 1]]})", false, 400, "logit_bias[0]");
  expectError(a, R"({"prompt": "ab", "cache_prompt": "yes"})", false, 400, "cache_prompt");
  expectError(a, R"({"prompt": "ab", "id_slot": 1})", false, 400, "id_slot"); // one slot: 0 only
  expectError(a, R"({"prompt": "ab", "samplers": ["top_k", "bogus"]})", false, 400, "samplers");
  expectError(a, R"({"prompt": "ab", "n_predict": -2})", false, 400, "n_predict");
  expectError(a, R"({"prompt": "ab", "stream": "yes"})", false, 400, "stream");
  expectError(a, R"({"prompt": "ab", "stream_options": {"include_usage": 1}})", false, 400,
              "stream_options.include_usage");
  expectError(a, R"({"prompt": "ab", "logprobs": 50})", false, 400, "logprobs");
  expectError(a, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true, 400, "top_logprobs");
  expectError(a, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})", true, 400,
              "chat_template_kwargs");
}

TEST(Api, LlamaServerFieldsBecomeSettings) {
  Fixture f;
  f.api.setSlots(2);
  CompletionRequest r;
  // OpenAI's map (ids as keys; -100 bans) and llama-server's pairs (a string biases each of its tokens).
  ASSERT_FALSE(parse(f.api, R"({"prompt": "ab", "logit_bias": {"5": -100, "6": 2.5}})", false, &r));
  ASSERT_EQ(r.gen.sampling.logitBias.size(), 2u);
  EXPECT_EQ(r.gen.sampling.logitBias[0].first, 5);
  EXPECT_TRUE(std::isinf(r.gen.sampling.logitBias[0].second) && r.gen.sampling.logitBias[0].second < 0);
  EXPECT_EQ(r.gen.sampling.logitBias[1], (std::pair<int32_t, float>{6, 2.5f}));
  ASSERT_FALSE(parse(f.api, R"({"prompt": "ab", "logit_bias": [["cd", 3], [9, false]]})", false, &r));
  ASSERT_EQ(r.gen.sampling.logitBias.size(), 3u);
  EXPECT_EQ(r.gen.sampling.logitBias[0], (std::pair<int32_t, float>{7, 3.0f})); // c
  EXPECT_EQ(r.gen.sampling.logitBias[1], (std::pair<int32_t, float>{8, 3.0f})); // d
  EXPECT_EQ(r.gen.sampling.logitBias[2].first, 9);
  EXPECT_TRUE(r.gen.cachePrompt); // on by default, as in llama-server
  EXPECT_EQ(r.gen.idSlot, -1);
  ASSERT_FALSE(parse(f.api, R"({"prompt": "ab", "cache_prompt": false, "id_slot": 1, "n_predict": 3, "n": 3,
                                "samplers": ["top_k", "temperature"], "seed": -1})",
                     false, &r));
  EXPECT_FALSE(r.gen.cachePrompt);
  EXPECT_EQ(r.gen.idSlot, 1);
  EXPECT_EQ(r.gen.maxTokens, 3);
  EXPECT_EQ(r.n, 3);
  EXPECT_FALSE(r.seedGiven);
  EXPECT_EQ(r.gen.sampling.topK, 40);   // kept
  EXPECT_EQ(r.gen.sampling.topP, 1.0f); // not listed: off
  EXPECT_EQ(r.gen.sampling.minP, 0.0f);
  // Server-wide defaults (--temp, --top-k, --seed, -n) where the request sets nothing.
  ServerDefaults d;
  d.temperature = 0.25f, d.topK = 7, d.seed = 11, d.nPredict = 5;
  f.api.setDefaults(d);
  ASSERT_FALSE(parse(f.api, R"({"prompt": "ab"})", false, &r));
  EXPECT_EQ(r.gen.sampling.temperature, 0.25f);
  EXPECT_EQ(r.gen.sampling.topK, 7);
  EXPECT_EQ(r.gen.sampling.seed, 11u);
  EXPECT_TRUE(r.seedGiven);
  EXPECT_EQ(r.gen.maxTokens, 5);
  ASSERT_FALSE(
      parse(f.api, R"({"prompt": "ab", "temperature": 1.5, "max_tokens": 2, "seed": 3})", false, &r));
  EXPECT_EQ(r.gen.sampling.temperature, 1.5f);
  EXPECT_EQ(r.gen.maxTokens, 2);
  EXPECT_EQ(r.gen.sampling.seed, 3u);
}

TEST(Api, ChatWithoutTemplateNamesTheFlag) {
  Fixture f;
  auto e = parse(f.bare, R"({"messages": [{"role": "user", "content": "x"}]})", true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("--chat-template"), std::string::npos);
  EXPECT_FALSE(parse(f.bare, R"({"prompt": "ab"})", false)); // completions still work
}

TEST(Api, ValidRequestsBecomePromptAndSettings) {
  Fixture f;
  CompletionRequest r;
  ASSERT_FALSE(parse(f.api, R"({"prompt": "abc", "model": "tiny"})", false, &r));
  EXPECT_EQ(r.prompt, (std::vector<int32_t>{1, 5, 6, 7})); // BOS + a b c
  EXPECT_EQ(r.gen.maxTokens, 28);                          // the rest of the context
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.8f);
  EXPECT_EQ(r.gen.sampling.topK, 40);
  ASSERT_FALSE(parse(f.api,
                     R"({"prompt": [5, 6], "max_tokens": 3, "temperature": 0, "seed": 42, "stop": ["x", "yz"],
                         "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}})",
                     false, &r));
  EXPECT_EQ(r.prompt, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.gen.maxTokens, 3);
  EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.gen.logprobs);
  EXPECT_EQ(r.gen.topLogprobs, 2);
  EXPECT_TRUE(r.stream && r.includeUsage);
  // Chat: the ChatML text with its special tokens parsed, BOS added once, <|im_end|> ends the turn.
  ASSERT_FALSE(parse(f.api, R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}]}],
                                "max_completion_tokens": 2, "logprobs": true, "top_logprobs": 3})",
                     true, &r));
  EXPECT_EQ(r.prompt, f.tok.encode("<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n", true, true));
  EXPECT_EQ(r.prompt.front(), 1);
  EXPECT_EQ(r.prompt[1], 3);
  EXPECT_EQ(r.gen.maxTokens, 2);
  EXPECT_EQ(r.gen.stopTokens, (std::vector<int32_t>{4}));
  EXPECT_EQ(r.gen.topLogprobs, 3);
}

TEST(Api, ResponseAndChunkShapes) {
  Fixture f;
  CompletionRequest chat;
  ASSERT_FALSE(parse(f.api, R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 1})",
                     true, &chat));
  CompletionResult r;
  r.text = "bc";
  TokenOut t;
  t.id = 6, t.text = "b", t.logprob = -0.5f, t.top = {{6, -0.5f}};
  r.tokens = {t};
  r.finish.reason = FinishReason::Length;
  r.finish.promptTokens = 4, r.finish.completionTokens = 2;
  json j = f.api.response(chat, r, "chatcmpl-1", 100);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "bc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "b");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json c = f.api.chunk(chat, "chatcmpl-1", 100, "", nullptr, nullptr, true);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"], json({{"role", "assistant"}})); // the role alone
  c = f.api.chunk(chat, "chatcmpl-1", 100, "b", &t, nullptr, false);
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "b");
  EXPECT_FALSE(c["choices"][0]["delta"].contains("role"));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  json last = f.api.chunk(chat, "chatcmpl-1", 100, "", nullptr, &r.finish, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());

  CompletionRequest cmpl;
  ASSERT_FALSE(parse(f.api, R"({"prompt": "a", "logprobs": 1, "return_tokens": true})", false, &cmpl));
  j = f.api.response(cmpl, r, "cmpl-1", 100);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "bc");
  EXPECT_EQ(j["choices"][0]["tokens"], json::array({6}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json::array({"b"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json::array({0}));
}

TEST(Api, TokenizeAndDetokenize) {
  Fixture f;
  json out;
  ASSERT_FALSE(f.api.tokenize(R"({"content": "ab", "add_special": true, "with_pieces": true})", out));
  EXPECT_EQ(out["tokens"][0]["id"], 1);
  EXPECT_EQ(out["tokens"][1]["piece"], "a");
  ASSERT_FALSE(f.api.detokenize(R"({"tokens": [5, 6]})", out));
  EXPECT_EQ(out["content"], "ab");
  EXPECT_TRUE(f.api.tokenize(R"({"content": 3})", out));
  EXPECT_TRUE(f.api.detokenize(R"({"tokens": [5, 1000]})", out));
  EXPECT_TRUE(f.api.detokenize(R"({"tokens": "ab"})", out));
  EXPECT_TRUE(f.api.detokenize("nope", out));
}
