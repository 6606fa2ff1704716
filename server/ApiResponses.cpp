//===- ApiResponses.cpp - OpenAI response, chunk and model objects --------===//
//
// Log-probabilities come in OpenAI's two shapes: chat's logprobs.content[] entries
// ({token, logprob, bytes, top_logprobs}) and the legacy completions' parallel arrays (tokens,
// token_logprobs, top_logprobs as {token: logprob} maps, text_offset). `timings` is llama-server's
// extension (milliseconds), which the benchmark reads.
//===----------------------------------------------------------------------===//
#include "server/Api.h"
#include "server/ToolRequest.h"

namespace tpc::server {

using json = nlohmann::json;

namespace {
json bytesOf(const std::string &s) {
  json b = json::array();
  for (unsigned char c : s)
    b.push_back(int(c));
  return b;
}
} // namespace

json Api::timings(const Finish &f) {
  // llama-server's names: prompt_n counts the prompt tokens read (not those kept in the cache: cache_n).
  const int32_t read = f.promptTokens - f.cachedTokens;
  auto per = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
  auto rate = [](double ms, int32_t n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
  return json{{"queued_ms", f.queuedMs},
              {"cache_n", f.cachedTokens},
              {"prompt_n", read},
              {"prompt_ms", f.promptMs},
              {"prompt_per_token_ms", per(f.promptMs, read)},
              {"prompt_per_second", rate(f.promptMs, read)},
              {"predicted_n", f.completionTokens},
              {"predicted_ms", f.decodeMs},
              {"predicted_per_token_ms", per(f.decodeMs, f.completionTokens)},
              {"predicted_per_second", rate(f.decodeMs, f.completionTokens)}};
}

std::string Api::piece(int32_t id) const { return tok_.tokenToPiece(id, true); }

json Api::usage(const Finish &f) {
  return json{{"prompt_tokens", f.promptTokens},
              {"completion_tokens", f.completionTokens},
              {"total_tokens", f.promptTokens + f.completionTokens},
              {"prompt_tokens_details", {{"cached_tokens", f.cachedTokens}}}};
}

json Api::logprobsOf(const CompletionRequest &req, const std::vector<TokenOut> &toks, size_t textOffset) const {
  if (!req.gen.logprobs)
    return nullptr;
  if (req.chat) {
    json content = json::array();
    for (const TokenOut &t : toks) {
      json top = json::array();
      for (const TokenLogprob &a : t.top)
        top.push_back({{"token", piece(a.id)}, {"logprob", a.logprob}, {"bytes", bytesOf(piece(a.id))}});
      content.push_back({{"token", piece(t.id)},
                         {"logprob", t.logprob},
                         {"bytes", bytesOf(piece(t.id))},
                         {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenOut &t : toks) {
    tokens.push_back(piece(t.id));
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob &a : t.top)
      top[piece(a.id)] = a.logprob;
    tops.push_back(top);
    offsets.push_back(textOffset);
    textOffset += t.text.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json Api::response(const CompletionRequest &req, const CompletionResult &r, const std::string &id,
                   int64_t created) const {
  json choice = {{"index", 0}, {"logprobs", logprobsOf(req, r.tokens, 0)},
                 {"finish_reason", finishReasonName(r.finish.reason)}};
  if (req.chat && req.output) { // content, reasoning_content and tool_calls (ToolRequest.h)
    std::vector<OutputDelta> d;
    req.output->push(r.text, d);
    req.output->finish(d);
    choice["message"] = chatMessageOf(d);
    if (req.output->calls() > 0 && r.finish.reason == FinishReason::Stop)
      choice["finish_reason"] = "tool_calls";
  } else if (req.chat)
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  else
    choice["text"] = r.text;
  if (req.returnTokens) {
    json ids = json::array();
    for (const TokenOut &t : r.tokens)
      ids.push_back(t.id);
    choice["tokens"] = ids;
  }
  return json{{"id", id},
              {"object", req.chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", modelId_},
              {"system_fingerprint", "tpc"},
              {"choices", json::array({choice})},
              {"usage", usage(r.finish)},
              {"timings", timings(r.finish)}};
}

json Api::chunk(const CompletionRequest &req, const std::string &id, int64_t created, const std::string &text,
                const TokenOut *tok, const Finish *finish, bool first) const {
  json choice = {{"index", 0}, {"finish_reason", finish ? json(finishReasonName(finish->reason)) : json(nullptr)}};
  choice["logprobs"] = tok ? logprobsOf(req, {*tok}, 0) : json(nullptr);
  if (req.chat) {
    // The first chunk carries the role alone (as OpenAI and llama-server send it).
    json delta = json::object();
    if (first)
      delta["role"] = "assistant";
    else if (!finish || !text.empty())
      delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  if (req.returnTokens && tok)
    choice["tokens"] = json::array({tok->id});
  json out = {{"id", id},
              {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", modelId_},
              {"system_fingerprint", "tpc"},
              {"choices", json::array({choice})}};
  if (finish)
    out["timings"] = timings(*finish);
  return out;
}

json Api::models(int64_t created) const {
  json meta = {{"n_ctx", ctx_}, {"n_vocab", vocab_},
               {"chat_template", tmpl_ ? json(tmpl_->name()) : json(nullptr)}};
  json data = json::array();
  data.push_back(
      {{"id", modelId_}, {"object", "model"}, {"created", created}, {"owned_by", "tpc"}, {"meta", meta}});
  for (const std::string &a : aliases_) // the same model under --alias's other names
    data.push_back(
        {{"id", a}, {"object", "model"}, {"created", created}, {"owned_by", "tpc"}, {"meta", meta}});
  return json{{"object", "list"}, {"data", data}};
}

} // namespace tpc::server
