//===- Sampler.h - next-token sampling from logits ----------------*- C++ -*-===//
//
// Picks the next token from a row of logits: greedy (argmax, lowest id on ties) or a stochastic chain in
// llama.cpp's usual order: top-k -> top-p -> min-p -> temperature -> softmax -> draw. The RNG is
// std::mt19937_64 seeded explicitly, so the same seed and logits give the same tokens on every machine
// (the draw uses the RNG's raw 64-bit output, not std::uniform_real_distribution, whose algorithm is
// implementation-defined).
//
// Usage:
//   tpc::rt::SamplerParams p;  p.temperature = 0.8f;  p.topK = 40;  p.seed = 42;
//   tpc::rt::Sampler s(p);
//   int32_t id = s.sample(logits.data(), nVocab);
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_SAMPLER_SAMPLER_H
#define TPC_RUNTIME_SAMPLER_SAMPLER_H

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tpc::rt {

/// Sampling settings. temperature <= 0 means greedy; the filters apply only when sampling.
struct SamplerParams {
  float temperature = 0.0f; ///< <= 0: greedy argmax
  int32_t topK = 0;         ///< keep the k most likely tokens; <= 0: off
  float topP = 1.0f;        ///< keep the smallest set whose probability reaches p; >= 1: off
  float minP = 0.0f;        ///< drop tokens below minP * max probability; <= 0: off
  uint64_t seed = 0;        ///< RNG seed (same seed -> same tokens)
  /// (token id, bias) added to the logits before anything else, greedy included (OpenAI's and
  /// llama-server's logit_bias); -inf bans the token. Ids outside the row are ignored.
  std::vector<std::pair<int32_t, float>> logitBias;
};

/// Error for invalid parameters or logits (names the parameter and what is allowed).
struct SamplerError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// A candidate after filtering: token id and its probability (renormalized over the kept set).
struct TokenProb {
  int32_t id;
  float p;
};

/// A constraint on the next token (a grammar): the sampler asks the cheap question first and the expensive
/// one only when the answer was no (see Sampler::sample with a filter).
class TokenFilter {
public:
  virtual ~TokenFilter() = default;
  /// Whether token `id` may come next (called for the token the sampler picked: cheap).
  virtual bool accepts(int32_t id) = 0;
  /// Every token that may come next, ascending (the mask: called only after a refusal).
  virtual void allowed(std::vector<int32_t> &ids) = 0;
};

/// Samples token ids from logits with the configured chain; holds the RNG state between calls.
class Sampler {
public:
  /// Throws SamplerError when a parameter is out of range (topP/minP outside [0, 1], NaN temperature).
  explicit Sampler(const SamplerParams &params);

  /// The next token for one row of `n` logits. Throws SamplerError for n == 0 or when every logit is
  /// NaN / -inf.
  int32_t sample(const float *logits, size_t n);
  int32_t sample(const std::vector<float> &logits) { return sample(logits.data(), logits.size()); }
  /// The next token among those `filter` allows: the chain's candidate distribution restricted to the
  /// allowed tokens (renormalized), or, when no candidate is allowed, the chain run over the logits with
  /// every refused token at -inf. The token drawn first is checked first, so the mask is computed only on a
  /// refusal (Sampler.cpp says why this is exactly that distribution). Throws SamplerError when the filter
  /// allows no token.
  int32_t sample(const float *logits, size_t n, TokenFilter &filter);

  /// The candidate set the stochastic chain draws from (after top-k, top-p, min-p and temperature),
  /// sorted by probability (descending; equal probabilities by id). Exposed for tests and `--verbose`.
  std::vector<TokenProb> candidates(const float *logits, size_t n) const;

  /// Restarts the RNG from `seed`.
  void reseed(uint64_t seed);
  const SamplerParams &params() const { return p; }

  /// Argmax with the lowest id on ties; NaN logits never win. Throws SamplerError when n == 0.
  static int32_t greedy(const float *logits, size_t n);

private:
  double uniform();
  /// `logits`, or the reused copy with logitBias added when the request has one.
  const float *biased(const float *logits, size_t n);
  SamplerParams p;
  std::mt19937_64 rng;
  std::vector<float> biased_; ///< the row with logitBias applied (reused between calls)
};

} // namespace tpc::rt

#endif // TPC_RUNTIME_SAMPLER_SAMPLER_H
