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
  for (const auto &[id, bias] : p.logitBias)
    if (std::isnan(bias) || bias == INFINITY)
      throw SamplerError("sampler: the logit bias of token " + std::to_string(id) +
                         " is NaN or +inf (use a finite number, or -inf to ban the token)");
}

void Sampler::reseed(uint64_t seed) {
  p.seed = seed;
  rng.seed(seed);
}

int32_t Sampler::greedy(const float *logits, size_t n) {
  if (n == 0)
    throw SamplerError("sampler: empty logits row");
  // Two passes the compiler vectorises (a 262k-entry row is read twice from cache instead of once with a
  // loop-carried index): the maximum in eight independent lanes, then its first id. max(m, x) keeps m when x
  // is NaN, and NaN never equals the maximum, so NaN logits never win.
  float lane[8];
  std::fill(lane, lane + 8, -INFINITY);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      lane[j] = std::max(lane[j], logits[i + j]);
  float mx = -INFINITY;
  for (int j = 0; j < 8; ++j)
    mx = std::max(mx, lane[j]);
  for (; i < n; ++i)
    mx = std::max(mx, logits[i]);
  for (i = 0; i < n; ++i)
    if (logits[i] == mx)
      return static_cast<int32_t>(i);
  throw SamplerError("sampler: every logit is NaN");
}

std::vector<TokenProb> Sampler::candidates(const float *logits, size_t n) const {
  if (n == 0)
    throw SamplerError("sampler: empty logits row");
  std::vector<std::pair<float, int32_t>> c; // (logit, id)
  auto byLogit = [](const std::pair<float, int32_t> &a, const std::pair<float, int32_t> &b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  auto usable = [](float x) { return !std::isnan(x) && x != -INFINITY; };
  const size_t k = p.topK > 0 ? static_cast<size_t>(p.topK) : n;
  if (k < n) {
    // top-k in one pass over the row: a heap of the k best so far (its top the worst of them under
    // byLogit), so a 262k vocabulary costs a compare per entry instead of a 262k-entry candidate list.
    c.reserve(k);
    float worst = -INFINITY; // the heap's worst logit once it holds k: anything below cannot enter
    for (size_t i = 0; i < n; ++i) {
      const float x = logits[i];
      if (!(x >= worst) || !usable(x)) // NaN compares false
        continue;
      const std::pair<float, int32_t> e(x, static_cast<int32_t>(i));
      if (c.size() < k) {
        c.push_back(e);
        std::push_heap(c.begin(), c.end(), byLogit);
      } else if (byLogit(e, c.front())) {
        std::pop_heap(c.begin(), c.end(), byLogit);
        c.back() = e;
        std::push_heap(c.begin(), c.end(), byLogit);
      }
      if (c.size() == k)
        worst = c.front().first;
    }
  } else {
    c.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (usable(logits[i]))
        c.emplace_back(logits[i], static_cast<int32_t>(i));
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

namespace {
/// A draw from `c` (probabilities summing to `total`) with the uniform `u` in [0, 1).
int32_t draw(const std::vector<TokenProb> &c, double u, double total = 1.0) {
  double cum = 0;
  u *= total;
  for (const TokenProb &t : c) {
    cum += t.p;
    if (u < cum)
      return t.id;
  }
  return c.back().id; // rounding left u above the last cumulative sum
}
} // namespace

double Sampler::uniform() {
  // A uniform double in [0, 1) from the top 53 bits: identical on every standard library.
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

const float *Sampler::biased(const float *logits, size_t n) {
  if (p.logitBias.empty())
    return logits;
  // A copy, so the caller's row (its log-probabilities) stays the model's.
  biased_.assign(logits, logits + n);
  for (const auto &[id, bias] : p.logitBias)
    if (id >= 0 && static_cast<size_t>(id) < n)
      biased_[static_cast<size_t>(id)] += bias;
  return biased_.data();
}

int32_t Sampler::sample(const float *logits, size_t n) {
  logits = biased(logits, n);
  if (p.temperature <= 0.0f)
    return greedy(logits, n);
  return draw(candidates(logits, n), uniform());
}

// Why checking the drawn token first gives exactly the constrained distribution. Let q be the chain's
// candidate distribution (the argmax alone when greedy) and A the allowed tokens, Q = q(A) > 0. The first
// draw returns t in A with probability q(t); it is refused with probability 1 - Q, and then a second draw
// from q restricted to A returns t with q(t) / Q. In all: q(t) + (1 - Q) q(t) / Q = q(t) / Q, which is q
// restricted to A. Greedy is the case q = the argmax: kept when allowed, else the best allowed logit (the
// chain over the masked row). When Q = 0 nothing of q is allowed and the chain runs over the masked row.
// The mask (filter.allowed) is needed only after a refusal and, for a small candidate set, not even then:
// each candidate is checked alone.
int32_t Sampler::sample(const float *logits, size_t n, TokenFilter &filter) {
  logits = biased(logits, n);
  const bool greedyMode = p.temperature <= 0.0f;
  std::vector<TokenProb> c;
  int32_t first = 0;
  if (greedyMode) {
    first = greedy(logits, n);
  } else {
    c = candidates(logits, n);
    first = draw(c, uniform());
  }
  if (filter.accepts(first))
    return first;
  constexpr size_t kCheckAlone = 64; // beyond this many candidates the mask is cheaper than single checks
  if (!greedyMode && c.size() <= kCheckAlone) {
    std::vector<TokenProb> kept;
    double total = 0;
    for (const TokenProb &t : c)
      if (t.id != first && filter.accepts(t.id))
        kept.push_back(t), total += t.p;
    if (!kept.empty())
      return draw(kept, uniform(), total);
  }
  std::vector<int32_t> ids;
  filter.allowed(ids);
  if (ids.empty())
    throw SamplerError("sampler: the grammar allows no token here");
  if (!greedyMode && c.size() > kCheckAlone) {
    // q restricted to the mask (c is sorted by probability, ids ascending: a lookup per candidate).
    std::vector<TokenProb> kept;
    double total = 0;
    for (const TokenProb &t : c)
      if (std::binary_search(ids.begin(), ids.end(), t.id))
        kept.push_back(t), total += t.p;
    if (!kept.empty())
      return draw(kept, uniform(), total);
  }
  // Nothing of q is allowed: the chain over the masked row.
  std::vector<float> masked(n, -INFINITY);
  bool any = false;
  for (int32_t id : ids)
    if (id >= 0 && static_cast<size_t>(id) < n) {
      masked[static_cast<size_t>(id)] = logits[id];
      any |= !std::isnan(logits[id]) && logits[id] != -INFINITY;
    }
  if (!any) // every allowed logit is -inf or NaN: the lowest allowed id, deterministically
    return ids.front();
  if (greedyMode)
    return greedy(masked.data(), n);
  return draw(candidates(masked.data(), n), uniform());
}

} // namespace tpc::rt
