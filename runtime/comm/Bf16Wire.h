//===- Bf16Wire.h - all-reduce payloads as bf16 on the wire --------*- C++ -*-===//
//
// `tpc compile --comm-dtype bf16` halves the bytes every all-reduce moves: each rank's addend crosses the
// wire as bf16 (the upper 16 bits of the f32: sign, the 8 exponent bits, 7 stored mantissa bits, so 8
// significant bits), the receiver widens it back to f32 exactly and sums in f32, in rank order, and the sum
// crosses the wire back as bf16 too. Every path that carries an all-reduce (the in-process communicator's
// small and split algorithms, the MPI communicator, the CPU session's SharedReduceNorm) computes the same
//   y = bf16( (..((bf16(x0) + bf16(x1)) + bf16(x2)) + ...) )        (f32 additions, rank order)
// so in-process and MPI runs of one plan give the same bits, as they do with f32 payloads. A residual a
// fused all-reduce + norm joins is added to y afterwards, in f32, on every rank (it is the same on every
// rank, so it never needs to cross the wire, and the hidden state keeps its f32 precision).
//
// Rounding is to nearest, ties to even, on the bits (no FTZ: subnormals round like any other value), as
// hardware conversions (AVX512-BF16 vcvtneps2bf16, CUDA __float2bfloat16_rn) do; a finite value beyond
// the largest bf16 (+ half an ulp) becomes infinity; a NaN stays a NaN (quiet, sign kept), even one whose
// payload lies only in the 16 bits dropped (truncating those would make it an infinity).
//
// Error bound (docs/architecture.md, "bf16 all-reduce payloads"): with p = 8 significant bits the unit
// roundoff is u = 2^-8, so |bf16(x) - x| <= u |x| (at most u/(1+u) |x| relative, reached at the ties
// 1 + 2^-8). The all-reduce result then satisfies
//   |y - sum_d x_d| <= u sum_d |x_d| + u |sum_d x_d| + (N-1) 2^-24 sum_d |x_d| + O(u^2)
//                   <= (2u + (N-1) 2^-24) sum_d |x_d|   (to first order)
// against the exact sum: twice the unit roundoff of the sum of the magnitudes of the ranks' partial sums.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_COMM_BF16WIRE_H
#define TPC_RUNTIME_COMM_BF16WIRE_H

#include <cstdint>
#include <cstring>

// The CUDA loopback all-reduce (runtime/cuda/Collective.cu) rounds with these very functions, so that its
// bits are the CPU communicators'.
#ifdef __CUDACC__
#define TPC_BF16_HD __host__ __device__
#else
#define TPC_BF16_HD
#endif

namespace tpc::rt::comm {

/// The bf16 bits of `x`, rounded to nearest, ties to even (see the file comment for NaN, Inf, overflow).
TPC_BF16_HD inline uint16_t toBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it one (quiet bit set), whatever its payload
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff rounds the dropped half up when it is above the midpoint; the kept lsb breaks the tie
  // towards even. A carry runs into the exponent exactly as the rounded value does (up to infinity).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The f32 value of bf16 bits `b` (exact).
TPC_BF16_HD inline float fromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// `x` rounded to the nearest bf16 and widened back: what a peer receives for `x`.
TPC_BF16_HD inline float roundBf16(float x) { return fromBf16(toBf16(x)); }

/// Packs `n` floats into bf16 (rounded).
inline void packBf16(const float *x, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = toBf16(x[i]);
}

/// Widens `n` bf16 values into floats.
inline void unpackBf16(const uint16_t *b, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fromBf16(b[i]);
}

} // namespace tpc::rt::comm

#endif // TPC_RUNTIME_COMM_BF16WIRE_H
