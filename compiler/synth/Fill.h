//===- Fill.h - random tensor contents in ggml formats -----------*- C++ -*-===//
//
// Writes random but valid tensor rows directly in their ggml encoding. Quantized blocks are generated, not
// quantized from floats: random quants plus scales chosen so that the dequantized values have mean ~0 and
// the requested standard deviation (K-quant sub-block scales vary between 1/2 and 1 of their maximum, like
// real blocks; mins are set so each sub-block is centred). This is ~10x faster than quantizing floats, which
// matters at tens of GB. Scales are finite fp16 values (subnormal for very small targets, as in real
// files), so every dequantized value is finite.
//
// Distributions other than a zero-mean normal in a quantized type (not used by the presets) go through
// floats and the CPU backend's reference quantizer, which is slower but exact in meaning.
//===----------------------------------------------------------------------===//
#ifndef TPC_COMPILER_SYNTH_FILL_H
#define TPC_COMPILER_SYNTH_FILL_H

#include "runtime/ggml/GGMLTypes.h"

#include <cstdint>

namespace tpc::synth {

/// A small fast generator (wyrand): 64 random bits per call, seeded from any 64-bit value.
class Rng {
public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    s_ += 0xa0761d6478bd642fULL;
    __uint128_t t = static_cast<__uint128_t>(s_ ^ 0xe7037ed1a0b428dbULL) * s_;
    return static_cast<uint64_t>(t >> 64) ^ static_cast<uint64_t>(t);
  }
  /// Uniform in [0, 1).
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  /// Approximately standard normal (sum of four uniforms, rescaled: mean 0, variance 1, |x| < 3.47).
  float normal() {
    uint64_t r = next();
    float s = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }

private:
  uint64_t s_;
};

/// splitmix64's finaliser: decorrelates seeds built from small integers.
uint64_t mixSeed(uint64_t a, uint64_t b);

/// How a tensor's values are drawn.
struct Init {
  enum Kind {
    Normal,    ///< mean a, standard deviation b
    Uniform,   ///< uniform in [a, b)
    RopeFreqs, ///< element i: 1 for i < a (rotated pairs), 1e30 after (gemma4 proportional RoPE)
  };
  Kind kind = Normal;
  float a = 0.f, b = 1.f;

  static Init normal(float mean, float stddev) { return {Normal, mean, stddev}; }
  static Init uniform(float lo, float hi) { return {Uniform, lo, hi}; }
  static Init ropeFreqs(float rotatedPairs) { return {RopeFreqs, rotatedPairs, 0.f}; }
};

/// True when fillRows can write type `t`.
bool canFill(GGMLType t);

/// Writes `rows` rows of `rowElems` values (whole blocks of `t`) at `dst`. `firstElem` is the index of the
/// first value within the tensor (RopeFreqs depends on it). Deterministic in `rng`'s state.
void fillRows(GGMLType t, const Init &init, uint8_t *dst, uint64_t rows, uint64_t rowElems,
              uint64_t firstElem, Rng &rng);

} // namespace tpc::synth

#endif // TPC_COMPILER_SYNTH_FILL_H
