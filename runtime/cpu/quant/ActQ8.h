//===- ActQ8.h - the shared 8-bit activation format ---------------*- C++ -*-===//
//
// Activations for the integer matmul kernels of q4_0, q5_0, q8_0, q4_K, q5_K, q6_K, iq4_nl, iq4_xs and the grid
// types' weights: one format for all, so an input read by several matmuls (Q/K/V, gate/up, every expert) is
// quantized once, whatever the weight types of its readers (a Q4_K_M layer mixes q4_K, q6_K, q5_0 and q8_0).
//
// A row of k elements (k a multiple of 32) is ceil(k / 128) groups of four 32-element blocks. Per block:
// the scale d = amax / 127 rounded to bf16 (the reference engine's rounding, see activationScale), the
// quants q = round-half-even(x / d) clamped to +-127 (never -128: the SIMD sign trick cannot negate it),
// and what the weight formats need besides the dot product: d * sum(q) for the formats' own per-block terms
// (q4_1's m, the K-quants' mins; exact in float: 8 significant bits times a 12-bit sum) and the sums of each
// 16-element half, from which the kernels take an implied offset (q4_0's 8, q6_K's 32 per 16 with its own
// scale, the +128 of unsigned VNNI quants) off their int32 sums exactly. Blocks past k in the last group
// are zero (d = 0), so kernels may read whole groups.
//
// Layout per group (176 bytes): d[4], ds[4], hs[8], qs[128]; block b of a row is group b / 4, slot b % 4.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_QUANT_ACTQ8_H
#define TPC_RUNTIME_CPU_QUANT_ACTQ8_H

#include <cstddef>
#include <cstdint>

namespace tpc::rt::cpu {

/// Four 32-element activation blocks (see the file comment).
struct ActQ8Group {
  float d[4];      ///< block scales
  float ds[4];     ///< d * (sum of the block's 32 quants)
  int16_t hs[8];   ///< sum of each 16-element half: hs[2 * slot] first half, hs[2 * slot + 1] second
  int8_t qs[128];  ///< quants, block `slot` at qs[32 * slot]
};
static_assert(sizeof(ActQ8Group) == 176, "ActQ8Group layout");

/// Elements per group.
constexpr int kActQ8GroupElems = 128;

/// Groups of a row of k elements.
inline int64_t actQ8Groups(int64_t k) { return (k + kActQ8GroupElems - 1) / kActQ8GroupElems; }

/// Bytes of a row of k elements.
inline size_t actQ8RowBytes(int64_t k) { return static_cast<size_t>(actQ8Groups(k)) * sizeof(ActQ8Group); }

/// The reference quantizer (portable): k floats (a multiple of 32) into actQ8RowBytes(k) bytes at dst. The
/// SIMD quantizers (Kernels.h) give the same bytes.
void quantizeActQ8Row(const float *x, void *dst, int64_t k);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_QUANT_ACTQ8_H
