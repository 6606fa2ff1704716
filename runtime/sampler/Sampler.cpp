//===- Sampler.cpp - next-token sampling from logits -----------------------===//
//
// The filters work on a candidate list sorted by logit (descending, ties by id, so results never depend
// on sort stability). Probabilities are computed in double from max-subtracted logits. top-p keeps the
// shortest prefix whose cumulative probability reaches p (at least one token); min-p compares against
// the most likely token's probability; temperature divides the logits of the kept set.
//===----------------------------------------------------------------------===//
#include "runtime/sampler/Sampler.h"

#include <algorithm>
#include <cmath>

namespace tpc::rt {

Sampler::Sampler(const SamplerParams &params) : p(params), rng(params.seed) {
  if (std::isnan(p.temperature))
    throw SamplerError("sampler: temperature is NaN (use 0 for greedy or a positive value)");
  if (!(p.topP >= 0.0f && p.topP <= 1.0f))
    throw SamplerError("sampler: top-p " + std::to_string(p.topP) + " is outside [0, 1]");
  if (!(p.minP >= 0.0f && p.minP <= 1.0f))
    throw SamplerError("sampler: min-p " + std::to_string(p.minP) + " is outside [0, 1]");
}

void Sampler::reseed(uint64_t seed) {
  p.seed = seed;
  rng.seed(seed);
}

int32_t Sampler::greedy(const float *logits, size_t n) {
  if (n == 0)
    throw SamplerError("sampler: empty logits row");
  size_t best = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i]))
      continue;
    if (best == n || logits[i] > logits[best]) // strict: the first (lowest id) maximum stays
      best = i;
  }
  if (best == n)
    throw SamplerError("sampler: every logit is NaN");
  return static_cast<int32_t>(best);
}

std::vector<TokenProb> Sampler::candidates(const float *logits, size_t n) const {
  if (n == 0)
    throw SamplerError("sampler: empty logits row");
  auto byLogit = [](const std::pair<float, int32_t> &a, const std::pair<float, int32_t> &b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // With top-k the candidates are gathered in a heap of k (worst on top): a 262k vocabulary then needs
  // no 2 MiB candidate list per token. byLogit is a total order, so the kept set is the same as sorting.
  const bool bounded = p.topK > 0 && static_cast<size_t>(p.topK) < n;
  const size_t k = bounded ? static_cast<size_t>(p.topK) : n;
  std::vector<std::pair<float, int32_t>> c; // (logit, id)
  c.reserve(k);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i]) || logits[i] == -INFINITY)
      continue;
    std::pair<float, int32_t> x(logits[i], static_cast<int32_t>(i));
    if (!bounded || c.size() < k) {
      c.push_back(x);
      if (bounded)
        std::push_heap(c.begin(), c.end(), byLogit);
    } else if (byLogit(x, c.front())) {
      std::pop_heap(c.begin(), c.end(), byLogit);
      c.back() = x;
      std::push_heap(c.begin(), c.end(), byLogit);
    }
  }
  if (c.empty())
    throw SamplerError("sampler: every logit is NaN or -inf");
  std::sort(c.begin(), c.end(), byLogit);
  auto softmax = [&](float temp) {
    std::vector<double> prob(c.size());
    double mx = c[0].first, sum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      prob[i] = std::exp((static_cast<double>(c[i].first) - mx) / temp);
      sum += prob[i];
    }
    for (double &x : prob)
      x /= sum;
    return prob;
  };
  // top-p and min-p on the untempered distribution (llama.cpp's default chain applies temperature last).
  std::vector<double> prob = softmax(1.0f);
  if (p.topP < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < c.size()) {
      cum += prob[k++];
      if (cum >= p.topP)
        break;
    }
    c.resize(std::max<size_t>(k, 1));
    prob.resize(c.size());
  }
  if (p.minP > 0.0f) {
    double cut = p.minP * prob[0];
    size_t k = 1;
    while (k < c.size() && prob[k] >= cut)
      ++k;
    c.resize(k);
  }
  float temp = p.temperature > 0.0f ? p.temperature : 1.0f;
  prob = softmax(temp);
  std::vector<TokenProb> out;
  out.reserve(c.size());
  for (size_t i = 0; i < c.size(); ++i)
    out.push_back({c[i].second, static_cast<float>(prob[i])});
  return out;
}

int32_t Sampler::sample(const float *logits, size_t n) {
  if (p.temperature <= 0.0f)
    return greedy(logits, n);
  std::vector<TokenProb> c = candidates(logits, n);
  // A uniform double in [0, 1) from the top 53 bits: identical on every standard library.
  double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
  double cum = 0;
  for (const TokenProb &t : c) {
    cum += t.p;
    if (u < cum)
      return t.id;
  }
  return c.back().id; // rounding left u above the last cumulative sum
}

} // namespace tpc::rt
