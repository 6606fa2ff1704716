//===- NativeApi.cpp - llama-server's own routes ---------------------------===//
//
// POST /completion: llama-server's completion. The prompt is a string, token ids, or a mix of both
// (strings are tokenized, the first with BOS); n_predict, cache_prompt, n_probs, logit_bias, samplers,
// id_slot and return_tokens mean what they mean there. The answer is llama-server's object (content,
// stop, id_slot, tokens_predicted, tokens_evaluated, tokens_cached, stop_type, generation_settings,
// timings, completion_probabilities); streamed, every token is {"content", "stop": false} and the last
// event the whole object with stop true (no [DONE], as there).
// GET /props, GET /slots (unless --no-slots), POST /apply-template ({"messages"} -> {"prompt"}),
// GET /models (the OpenAI list, also under "models" as llama-server's newer shape).
//===----------------------------------------------------------------------===//
#include "server/DropInRoutes.h"

#include <fmt/core.h>
#include <httplib.h>

namespace tpc::server {

using json = nlohmann::json;

std::optional<ApiError> parseObject(const std::string &body, json &out) {
  out = json::parse(body, nullptr, false);
  if (out.is_discarded())
    return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", "invalid_json"};
  if (!out.is_object())
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
  return std::nullopt;
}

json generationSettings(const Api &api, const GenerationParams &g) {
  json bias = json::array();
  for (const auto &[id, b] : g.sampling.logitBias)
    bias.push_back(json::array({id, std::isinf(b) ? json(false) : json(b)}));
  return json{{"n_ctx", api.ctxSize()},
              {"model", api.modelId()},
              {"n_predict", g.maxTokens},
              {"seed", g.sampling.seed},
              {"temperature", g.sampling.temperature},
              {"top_k", g.sampling.topK},
              {"top_p", g.sampling.topP},
              {"min_p", g.sampling.minP},
              {"stop", g.stop},
              {"ignore_eos", g.ignoreEos},
              {"n_probs", g.topLogprobs},
              {"logit_bias", bias},
              {"samplers", json::array({"top_k", "top_p", "min_p", "temperature"})},
              {"cache_prompt", g.cachePrompt},
              {"id_slot", g.idSlot}};
}

namespace {

/// /completion's prompt as OpenAI's: a string or token ids (a mixed array is tokenized here).
std::optional<ApiError> nativePrompt(const Api &api, json &body) {
  auto it = body.find("prompt");
  if (it == body.end() || !it->is_array())
    return std::nullopt; // a string, or missing: parseCompletion says what is wrong
  const json &p = *it;
  const bool anyString = std::any_of(p.begin(), p.end(), [](const json &x) { return x.is_string(); });
  if (!anyString || p.size() == 1)
    return std::nullopt;
  if (std::all_of(p.begin(), p.end(), [](const json &x) { return x.is_string(); }))
    return ApiError{400, "'prompt' holds several prompts; tpc serve answers one prompt per request",
                    "invalid_request_error", "prompt", ""};
  json ids = json::array();
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].is_string()) {
      for (int32_t id : api.tokenizer().encode(p[i].get<std::string>(), i == 0, true))
        ids.push_back(id);
    } else if (p[i].is_number_integer()) {
      ids.push_back(p[i]);
    } else {
      return ApiError{400, fmt::format("'prompt[{}]' must be a string or a token id", i),
                      "invalid_request_error", "prompt", ""};
    }
  }
  body["prompt"] = ids;
  return std::nullopt;
}

const char *stopType(const Finish &f) {
  if (f.reason == FinishReason::Length)
    return "limit";
  return f.stoppedByWord ? "word" : "eos";
}

/// completion_probabilities entries: llama-server's newer fields (id, token, logprob, bytes,
/// top_logprobs) and the older ones (content, probs of {tok_str, prob}) side by side.
json probabilities(const Api &api, const std::vector<TokenOut> &toks) {
  const rt::Tokenizer &tok = api.tokenizer();
  auto bytes = [](const std::string &s) {
    json b = json::array();
    for (unsigned char c : s)
      b.push_back(int(c));
    return b;
  };
  json out = json::array();
  for (const TokenOut &t : toks) {
    json top = json::array(), probs = json::array();
    for (const TokenLogprob &a : t.top) {
      const std::string piece = tok.tokenToPiece(a.id, true);
      top.push_back({{"id", a.id}, {"token", piece}, {"logprob", a.logprob}, {"bytes", bytes(piece)}});
      probs.push_back({{"tok_str", piece}, {"prob", std::exp(a.logprob)}});
    }
    const std::string piece = tok.tokenToPiece(t.id, true);
    out.push_back({{"id", t.id},
                   {"token", piece},
                   {"logprob", t.logprob},
                   {"bytes", bytes(piece)},
                   {"top_logprobs", top},
                   {"content", piece},
                   {"probs", probs}});
  }
  return out;
}

/// The whole /completion object (the non-streamed answer, and the last streamed event with `content`
/// the trailing text only).
json completionObject(const RouteContext &ctx, const CompletionRequest &cr, const std::string &content,
                      const std::vector<TokenOut> &toks, const Finish &f, bool withTokens) {
  json o = {{"content", content},
            {"id_slot", f.slot},
            {"stop", true},
            {"model", ctx.api.modelId()},
            {"tokens_predicted", f.completionTokens},
            {"tokens_evaluated", f.promptTokens},
            {"tokens_cached", f.cachedTokens},
            {"generation_settings", generationSettings(ctx.api, cr.gen)},
            {"prompt", ctx.api.tokenizer().decode(cr.prompt)},
            {"has_new_line", content.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stopType(f)},
            {"stopped_eos", f.reason == FinishReason::Stop && !f.stoppedByWord},
            {"stopped_limit", f.reason == FinishReason::Length},
            {"stopped_word", f.stoppedByWord},
            {"stopping_word", f.stoppedByWord && cr.gen.stop.size() == 1 ? cr.gen.stop[0] : std::string()},
            {"timings", Api::timings(f)}};
  if (withTokens) {
    json ids = json::array();
    for (const TokenOut &t : toks)
      ids.push_back(t.id);
    o["tokens"] = ids;
  }
  if (cr.gen.topLogprobs > 0 || cr.gen.logprobs)
    o["completion_probabilities"] = probabilities(ctx.api, toks);
  return o;
}

class CompletionWriter : public StreamWriter {
public:
  CompletionWriter(const RouteContext &ctx, CompletionRequest cr) : ctx_(ctx), cr_(std::move(cr)) {}
  void token(size_t, const TokenOut &t, std::string &out) override {
    const bool probs = cr_.gen.topLogprobs > 0 || cr_.gen.logprobs;
    if (t.text.empty() && !probs && !cr_.returnTokens)
      return;
    json o = {{"content", t.text}, {"stop", false}};
    if (cr_.returnTokens)
      o["tokens"] = json::array({t.id});
    if (probs)
      o["completion_probabilities"] = probabilities(ctx_.api, {t});
    out += sse(o);
  }
  void finish(size_t, const Finish &f, std::string &out) override {
    out += sse(completionObject(ctx_, cr_, f.trailingText, {}, f, false));
  }
  void error(const std::string &message, std::string &out) override {
    out += "data: " + errorBody(ApiError{500, message, "server_error", "", ""}) + "\n\n";
  }

private:
  const RouteContext &ctx_;
  CompletionRequest cr_;
};

void completion(const RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  json body;
  if (auto e = parseObject(req.body, body))
    return sendError(res, *e);
  if (auto e = nativePrompt(ctx.api, body))
    return sendError(res, *e);
  body.erase("n"); // not a /completion field: one answer per request
  body.erase("logprobs");
  CompletionRequest cr;
  if (auto e = ctx.api.parseCompletion(dumpJson(body), false, cr))
    return sendError(res, *e);
  std::vector<std::shared_ptr<Request>> reqs;
  if (auto e = submitChoices(ctx.sched, cr, reqs))
    return sendError(res, *e);
  ctx.enter();
  if (cr.stream)
    return streamChoices(ctx, res, std::move(reqs), std::make_shared<CompletionWriter>(ctx, cr));
  std::vector<CompletionResult> results;
  auto err = collectChoices(reqs, results);
  ctx.leave();
  if (err)
    return sendError(res, *err);
  const CompletionResult &r = results[0];
  res.set_content(dumpJson(completionObject(ctx, cr, r.text, r.tokens, r.finish, cr.returnTokens)),
                  "application/json");
}

/// The settings a request gets when it sets nothing (the server-wide defaults).
json defaultSettings(const Api &api) {
  const ServerDefaults &d = api.defaults();
  GenerationParams g;
  g.sampling.temperature = d.temperature;
  g.sampling.topK = d.topK;
  g.sampling.topP = d.topP;
  g.sampling.minP = d.minP;
  g.maxTokens = d.nPredict;
  g.cachePrompt = true;
  json o = generationSettings(api, g);
  o["seed"] = d.seed; // -1: random per request
  return o;
}

json slotsJson(const RouteContext &ctx) {
  json out = json::array();
  for (const SlotState &s : ctx.sched.slotStates()) {
    json o = s.busy ? generationSettings(ctx.api, s.params) : defaultSettings(ctx.api);
    o["id"] = s.id;
    o["id_task"] = -1;
    o["state"] = s.busy ? 1 : 0; // llama-server: 0 idle, 1 processing
    o["is_processing"] = s.busy;
    o["n_ctx"] = ctx.api.ctxSize();
    o["n_past"] = s.cachedPositions;
    o["tokens_cached"] = s.busy ? s.cached : s.cachedPositions;
    o["next_token"] = {{"has_next_token", s.busy},
                       {"n_remain", s.busy ? s.params.maxTokens - s.generated : -1},
                       {"n_decoded", s.generated},
                       {"n_prompt_tokens", s.promptTokens},
                       {"n_prompt_tokens_processed", s.promptDone}};
    out.push_back(o);
  }
  return out;
}

} // namespace

std::string llamaMetricsText(const SchedulerStats &s, const std::vector<SlotState> &slots,
                             int64_t ctxPerSlot) {
  int64_t kvTokens = 0;
  for (const SlotState &st : slots)
    kvTokens += st.cachedPositions;
  struct One {
    const char *name, *type, *help;
    double value;
  } const ones[] = {
      {"llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
       double(s.promptTokens)},
      {"llamacpp:prompt_seconds_total", "counter", "Prompt process time.", s.promptSeconds},
      {"llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
       double(s.generatedTokens)},
      {"llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time.", s.decodeSeconds},
      {"llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
       s.promptTokensPerSecond},
      {"llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
       s.decodeTokensPerSecond},
      {"llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", double(kvTokens)},
      {"llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.",
       slots.empty() || ctxPerSlot <= 0 ? 0.0
                                        : double(kvTokens) / double(ctxPerSlot * int64_t(slots.size()))},
      {"llamacpp:requests_processing", "gauge", "Number of requests processing.", double(s.slotsBusy)},
      {"llamacpp:requests_deferred", "gauge", "Number of requests deferred.", double(s.queued)},
      {"llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls.", double(s.steps)},
      {"llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call.",
       s.decodeSteps > 0 ? double(s.decodeEntries) / double(s.decodeSteps) : 0.0},
      {"llamacpp:prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache (tpc).",
       double(s.cachedTokens)}};
  std::string out;
  for (const One &m : ones)
    out +=
        fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", m.name, m.help, m.name, m.type, m.name, m.value);
  return out;
}

void addDropInRoutes(httplib::Server &h, const RouteContext &ctx) {
  h.Post("/completion",
         [ctx](const httplib::Request &req, httplib::Response &res) { completion(ctx, req, res); });
  h.Get("/props", [ctx](const httplib::Request &, httplib::Response &res) {
    const auto &t = ctx.api.chatTemplate();
    res.set_content(dumpJson(json{{"default_generation_settings", defaultSettings(ctx.api)},
                                  {"total_slots", ctx.sched.stats().slotsTotal},
                                  {"model_path", ctx.opts.modelPath},
                                  {"model_alias", ctx.api.modelId()},
                                  {"chat_template", t ? t->name() : std::string()},
                                  {"modalities", {{"vision", false}, {"audio", false}}},
                                  {"build_info", "tpc"}}),
                    "application/json");
  });
  h.Get("/slots", [ctx](const httplib::Request &, httplib::Response &res) {
    if (!ctx.opts.slots)
      return sendError(res, ApiError{501, "this server does not serve /slots (started with --no-slots)",
                                     "not_supported_error", "", ""});
    res.set_content(dumpJson(slotsJson(ctx)), "application/json");
  });
  h.Post("/apply-template", [ctx](const httplib::Request &req, httplib::Response &res) {
    json body;
    if (auto e = parseObject(req.body, body))
      return sendError(res, *e);
    CompletionRequest cr;
    body.erase("stream");
    body.erase("n");
    if (auto e = ctx.api.parseCompletion(dumpJson(body), true, cr))
      return sendError(res, *e);
    // The template's text, special tokens written out, as a client would send it to /completion.
    res.set_content(dumpJson(json{{"prompt", cr.promptText}}), "application/json");
  });
  h.Get("/models", [ctx](const httplib::Request &, httplib::Response &res) {
    json m = ctx.api.models(ctx.started);
    m["models"] = json::array({{{"name", ctx.api.modelId()},
                                {"model", ctx.api.modelId()},
                                {"type", "model"},
                                {"capabilities", json::array({"completion"})}}});
    res.set_content(dumpJson(m), "application/json");
  });
  addAnthropicRoutes(h, ctx);
  addResponsesRoutes(h, ctx);
}

} // namespace tpc::server
