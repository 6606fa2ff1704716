//===- DeltaNetKernels.h - per-ISA gated delta rule kernels (internal) -*- C++ -*-===//
//
// What DeltaNet.cpp's driver calls per work item: the tokens of one sequence for one value head, built
// once per ISA from DeltaNetHead.inc. The driver owns the grouping of tokens into sequences, zeroing the
// states of sequences that start at position 0, and the threads; the head kernels own the arithmetic.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_DELTANET_DELTANETKERNELS_H
#define TPC_RUNTIME_CPU_DELTANET_DELTANETKERNELS_H

#include "runtime/cpu/DeltaNet.h"

#include <algorithm>
#include <cstdint>

namespace tpc::rt::cpu::dn {

/// Tokens per chunk of the chunked (WY) form.
inline constexpr int64_t kChunk = 64;
/// Value columns are processed in vectors; a state whose dv is not a multiple of this runs on a padded
/// copy (zero columns), so the kernels never read or write past a row.
inline constexpr int64_t kColAlign = 16;

inline int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// One work item: the n tokens tok[0..n) (batch indices, in order) of one sequence, value head h, whose
/// [dk, dv] state is at `state` (already zeroed by the driver when the sequence starts at position 0).
struct Head {
  const DeltaNetArgs *a = nullptr;
  const int64_t *tok = nullptr;
  int64_t n = 0;
  int64_t h = 0;
  float *state = nullptr;
  bool zeroState = false; ///< the state is known to be zero (lets the chunked form skip S0 products)
};

/// Floats of scratch one head needs for the token recurrence / the chunked form. Both work on a copy of
/// the state (and the chunked form on [kChunk, dv] buffers) whose rows are padded to dv rounded up to
/// kColAlign, plus kColAlign: a stride off multiples of 4 KiB (DeltaNetHead.inc).
inline int64_t paddedStride(int64_t dv) { return roundUp(dv, kColAlign) + kColAlign; }
inline int64_t recurrentScratchFloats(const DeltaNetArgs &a, int64_t n) {
  const int64_t dvp = roundUp(a.dv, kColAlign);
  int64_t f = 3 * roundUp(n, kColAlign); // exp(g), beta, k . q per token
  if (n > 2 || dvp != a.dv)
    f += a.dk * paddedStride(a.dv); // the state copy
  if (dvp != a.dv)
    f += 2 * n * dvp; // padded v and y rows
  return f + kColAlign;
}
inline int64_t chunkedScratchFloats(const DeltaNetArgs &a) {
  const int64_t ld = paddedStride(a.dv), dkp = roundUp(a.dk, kColAlign);
  return dkp * kChunk          // K transposed
         + 3 * kChunk * ld     // V, X (then D), Z (then Y)
         + 2 * kChunk * kChunk // K K^T (then A), Q K^T (then P)
         + 4 * kChunk          // G, exp(G), beta, exp(G_last - G)
         + a.dk * ld           // the state copy
         + kColAlign;
}

/// Runs one head with `scratch` (the floats above, 64-byte aligned).
using HeadFn = void (*)(const Head &hd, float *scratch);
/// One causal-conv output row over cn channels: y[c] = sum_j w[j * cn + c] * xs[j][c], j = 0..k-1 in order
/// (xs: the k input rows of the window, oldest first; w: the taps transposed, one row of cn per tap).
using ConvRowFn = void (*)(const float *const *xs, const float *w, float *y, int64_t cn, int64_t k);

struct Kernels {
  HeadFn recurrent; ///< token by token (decode, short runs)
  HeadFn chunked;   ///< chunks of kChunk tokens (long runs)
  ConvRowFn convRow; ///< ssmConv's row
};
Kernels scalarKernels();
Kernels avx2Kernels();
Kernels avx512Kernels();

} // namespace tpc::rt::cpu::dn

#endif // TPC_RUNTIME_CPU_DELTANET_DELTANETKERNELS_H
