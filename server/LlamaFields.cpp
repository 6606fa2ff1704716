//===- LlamaFields.cpp - llama-server's extensions of a completion body ----===//
//
// Shared by every completion route (OpenAI's, /completion, the Anthropic and Responses shapes), so a
// field means the same wherever a client sends it. A string in logit_bias biases every token of its
// encoding (without special tokens), as llama-server does; `false` as the bias bans the token(s).
//===----------------------------------------------------------------------===//
#include "server/Api.h"

#include <fmt/core.h>

#include <cmath>

namespace tpc::server {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string &param, const std::string &what) {
  return ApiError{400, fmt::format("'{}' {}", param, what), "invalid_request_error", param, ""};
}

/// One (token or string, bias) pair of logit_bias; appends to `out`.
std::optional<ApiError> biasEntry(const json &key, const json &value, const std::string &at,
                                  const rt::Tokenizer &tok, int64_t nVocab,
                                  std::vector<std::pair<int32_t, float>> &out) {
  float bias = 0;
  if (value.is_boolean() && !value.get<bool>())
    bias = -INFINITY;
  else if (value.is_number() && std::isfinite(value.get<double>()) && std::fabs(value.get<double>()) <= 1e6)
    bias = static_cast<float>(value.get<double>());
  else
    return bad(at, "must be a finite number (OpenAI: -100..100) or false (ban the token)");
  std::vector<int32_t> ids;
  if (key.is_number_integer()) {
    ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(key.get<int64_t>(), -1, nVocab)));
  } else if (key.is_string()) {
    const std::string k = key.get<std::string>();
    // OpenAI sends the ids as the object's keys: a decimal string is an id.
    if (!k.empty() && k.find_first_not_of("0123456789") == std::string::npos && k.size() <= 10)
      ids.push_back(static_cast<int32_t>(std::min<int64_t>(std::stoll(k), nVocab)));
    else
      ids = tok.encode(k, false, false);
    if (ids.empty())
      return bad(at, "names an empty string");
  } else {
    return bad(at, "must name a token id or a string");
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= nVocab)
      return bad(at, fmt::format("names token {} which is not in 0..{}", key.dump(), nVocab - 1));
    // OpenAI's -100 means "ban"; a finite bias that large is the same in practice.
    out.push_back({id, bias <= -100.0f ? -INFINITY : bias});
  }
  return std::nullopt;
}

} // namespace

std::optional<ApiError> parseLlamaFields(const json &body, const rt::Tokenizer &tok, int64_t nVocab,
                                         int32_t slots, GenerationParams &g) {
  auto has = [&](const char *k) { return body.contains(k) && !body[k].is_null(); };
  if (has("logit_bias")) {
    const json &lb = body["logit_bias"];
    if (lb.is_object()) {
      for (auto it = lb.begin(); it != lb.end(); ++it)
        if (auto e = biasEntry(json(it.key()), it.value(), "logit_bias." + it.key(), tok, nVocab,
                               g.sampling.logitBias))
          return e;
    } else if (lb.is_array()) {
      for (size_t i = 0; i < lb.size(); ++i) {
        const std::string at = fmt::format("logit_bias[{}]", i);
        if (!lb[i].is_array() || lb[i].size() != 2)
          return bad(at, "must be a [token id or string, bias] pair");
        if (auto e = biasEntry(lb[i][0], lb[i][1], at, tok, nVocab, g.sampling.logitBias))
          return e;
      }
    } else {
      return bad("logit_bias",
                 "must be an object {\"token id\": bias} or an array of [token or string, bias]");
    }
    if (g.sampling.logitBias.size() > 4096)
      return bad("logit_bias", "has more than 4096 entries");
  }
  g.cachePrompt = true;
  if (has("cache_prompt")) {
    if (!body["cache_prompt"].is_boolean())
      return bad("cache_prompt", "must be a boolean");
    g.cachePrompt = body["cache_prompt"].get<bool>();
  }
  if (has("id_slot")) {
    const json &v = body["id_slot"];
    if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() >= slots)
      return bad("id_slot", fmt::format("must be -1 (any) or a slot in 0..{}", slots - 1));
    g.idSlot = static_cast<int32_t>(v.get<int64_t>());
  }
  if (has("samplers")) {
    // tpc's chain has a fixed order (top-k, top-p, min-p, temperature); the list says which filters run.
    const json &v = body["samplers"];
    if (!v.is_array())
      return bad("samplers", "must be an array of sampler names");
    bool topK = false, topP = false, minP = false, temp = false;
    for (const json &x : v) {
      const std::string n = x.is_string() ? x.get<std::string>() : "";
      if (n == "top_k" || n == "k")
        topK = true;
      else if (n == "top_p" || n == "p")
        topP = true;
      else if (n == "min_p" || n == "m")
        minP = true;
      else if (n == "temperature" || n == "t")
        temp = true;
      else if (!(n == "penalties" || n == "dry" || n == "typ_p" || n == "typical_p" || n == "xtc" ||
                 n == "top_n_sigma" || n == "infill" || n == "y" || n == "d" || n == "x" || n == "e"))
        return bad("samplers",
                   fmt::format("names {} which is not a sampler (top_k, top_p, min_p, temperature; "
                               "penalties, dry, typ_p, xtc, top_n_sigma are accepted and not run)",
                               x.dump()));
    }
    if (!topK)
      g.sampling.topK = 0;
    if (!topP)
      g.sampling.topP = 1.0f;
    if (!minP)
      g.sampling.minP = 0.0f;
    if (!temp && g.sampling.temperature > 0)
      g.sampling.temperature = 1.0f;
  }
  return std::nullopt;
}

} // namespace tpc::server
