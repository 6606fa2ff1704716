//===- Quant.cuh - device-side dequantization of 32-element chunks -*- CUDA -*-===//
//
// loadChunk<T>(row, c, k, w) writes elements [32c, 32c + 32) of a weight row of ggml type T as floats,
// following runtime/cpu/quant/Dequantize.cpp (the reference the kernel tests compare with). A chunk is a
// whole block for the 32-element formats and one of eight 32-element groups of a K-quant super-block,
// so a warp spreads a row over its lanes even when the row holds few super-blocks. Plain types (f32,
// f16, bf16) guard the row end (their rows need not be a multiple of 32); block formats never need to.
//
// Loads are as wide as the block layout allows from a 16-byte aligned row: Q4_K/Q5_K quants as 16-byte
// vectors, Q4_1/Q5_1 as words, the 2-byte aligned formats (Q4_0, Q5_0, Q8_0, Q6_K) as half-words.
// The IQ grid types are QuantGrid.cuh (included below). Device-only; included by the .cu files that read
// weights.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANT_CUH
#define TPC_RUNTIME_CUDA_QUANT_CUH

#include "runtime/ggml/GGMLTypes.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace tpc::rt::cuda {

__host__ __device__ __forceinline__ float halfBits(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/// bf16 bits to float (the high half of an f32).
__host__ __device__ __forceinline__ float bf16Bits(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/// The float with bits u.
__host__ __device__ __forceinline__ float floatOfBits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/// float(q) - off for 0 <= q < 2^22, exactly: on the GPU one OR and one FADD (2^23 + q read as float)
/// instead of the quarter-rate integer-to-float conversion, which otherwise bounds the GEMV kernels.
__host__ __device__ __forceinline__ float qf(uint32_t q, float off = 0) {
#ifdef __CUDA_ARCH__
  return __int_as_float(0x4B000000u | q) - (8388608.0f + off);
#else
  return float(q) - off;
#endif
}
__host__ __device__ __forceinline__ uint16_t ld16(const uint8_t *p) {
  return *reinterpret_cast<const uint16_t *>(p);
}
__host__ __device__ __forceinline__ uint32_t ld32(const uint8_t *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}
/// Four bytes from two aligned half-words.
__host__ __device__ __forceinline__ uint32_t ld32h(const uint8_t *p) {
  return ld16(p) | (uint32_t(ld16(p + 2)) << 16);
}
__host__ __device__ __forceinline__ uint32_t byteOf(uint32_t v, int i) { return (v >> (8 * i)) & 0xff; }

/// The (scale, min) of group g of a Q4_K/Q5_K super-block (Blocks.h scaleMinK4) from its three scale
/// words, with shifts only and both encodings computed, one selected: lanes of a warp hold different
/// groups, and a byte array indexed by g would live in local memory.
__host__ __device__ __forceinline__ void scaleMinK4(uint32_t s0, uint32_t s1, uint32_t s2, int g, uint32_t &sc,
                                                    uint32_t &mn) {
  const int g4 = g & 3;
  const uint32_t scLo = byteOf(s0, g4) & 63, mnLo = byteOf(s1, g4) & 63;
  const uint32_t scHi = (byteOf(s2, g4) & 0xf) | ((byteOf(s0, g4) >> 6) << 4);
  const uint32_t mnHi = (byteOf(s2, g4) >> 4) | ((byteOf(s1, g4) >> 6) << 4);
  sc = g < 4 ? scLo : scHi;
  mn = g < 4 ? mnLo : mnHi;
}

/// Element count of a type's block.
template <GGMLType T> struct QuantTraits;
#define TPC_QUANT_TRAITS(T, elems, bytes, plainType)                                                         \
  template <> struct QuantTraits<GGMLType::T> {                                                              \
    static constexpr int kElems = elems, kBytes = bytes;                                                     \
    static constexpr bool kPlain = plainType;                                                                \
  };
TPC_QUANT_TRAITS(F32, 1, 4, true)
TPC_QUANT_TRAITS(F16, 1, 2, true)
TPC_QUANT_TRAITS(BF16, 1, 2, true)
TPC_QUANT_TRAITS(Q4_0, 32, 18, false)
TPC_QUANT_TRAITS(Q4_1, 32, 20, false)
TPC_QUANT_TRAITS(Q5_0, 32, 22, false)
TPC_QUANT_TRAITS(Q5_1, 32, 24, false)
TPC_QUANT_TRAITS(Q8_0, 32, 34, false)
TPC_QUANT_TRAITS(Q4_K, 256, 144, false)
TPC_QUANT_TRAITS(Q5_K, 256, 176, false)
TPC_QUANT_TRAITS(Q6_K, 256, 210, false)
#undef TPC_QUANT_TRAITS

/// Chunk c (group c % 8 of super-block c / 8) of a Q4_K/Q5_K row: its scale d * sc and offset dmin * m,
/// and its 32 quants as the bytes of q[8] (element 4i + j is byte j of q[i]; Q5_K's fifth bit included).
struct KGroup {
  float d, m;
  uint32_t q[8];
};
template <GGMLType T> __host__ __device__ __forceinline__ KGroup k45Group(const uint8_t *row, int64_t c) {
  const uint8_t *b = row + (c >> 3) * QuantTraits<T>::kBytes;
  const int g = int(c & 7), shift = 4 * (g & 1);
  const uint32_t dm = ld32(b);
  uint32_t sc, mn;
  scaleMinK4(ld32(b + 4), ld32(b + 8), ld32(b + 12), g, sc, mn);
  KGroup r;
  r.d = halfBits(dm & 0xffff) * float(sc);
  r.m = halfBits(dm >> 16) * float(mn);
  const uint4 *qs = reinterpret_cast<const uint4 *>(b + (T == GGMLType::Q4_K ? 16 : 48) + 32 * (g >> 1));
  const uint4 q0 = qs[0], q1 = qs[1];
  const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  uint32_t hw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if constexpr (T == GGMLType::Q5_K) {
    const uint4 h0 = reinterpret_cast<const uint4 *>(b + 16)[0], h1 = reinterpret_cast<const uint4 *>(b + 16)[1];
    hw[0] = h0.x, hw[1] = h0.y, hw[2] = h0.z, hw[3] = h0.w, hw[4] = h1.x, hw[5] = h1.y, hw[6] = h1.z, hw[7] = h1.w;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    r.q[i] = ((qw[i] >> shift) & 0x0F0F0F0Fu) | (((hw[i] >> g) & 0x01010101u) << 4);
  return r;
}

/// Chunk c of a Q6_K row: d times the scales of its two halves of 16, and its 32 six-bit quants
/// (unsigned, 32 = zero) as the bytes of q[8].
struct Q6Group {
  float d0, d1;
  int8_t sc0, sc1;
  float d;
  uint32_t q[8];
};
__host__ __device__ __forceinline__ Q6Group q6Group(const uint8_t *row, int64_t c) {
  const uint8_t *b = row + (c >> 3) * 210;
  const int g = int(c & 7), half = g >> 2, p = g & 3;
  const uint8_t *ql = b + 64 * half + 32 * (p & 1), *qh = b + 128 + 32 * half;
  const int lshift = 4 * (p >> 1), hshift = 2 * p;
  const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192) + 8 * half + 2 * p;
  Q6Group r;
  r.d = halfBits(ld16(b + 208));
  r.sc0 = scales[0], r.sc1 = scales[1];
  r.d0 = r.d * float(r.sc0), r.d1 = r.d * float(r.sc1);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    r.q[i] = ((ld32h(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu) | (((ld32h(qh + 4 * i) >> hshift) & 0x03030303u) << 4);
  return r;
}

/// The IQ grid types (QuantGrid.cuh, included below: their decoder needs the integer helpers too).
__host__ __device__ constexpr bool isGridQuant(GGMLType t) {
  return t == GGMLType::IQ2_XXS || t == GGMLType::IQ2_XS || t == GGMLType::IQ2_S || t == GGMLType::IQ3_XXS ||
         t == GGMLType::IQ3_S || t == GGMLType::IQ1_S || t == GGMLType::IQ1_M;
}
template <GGMLType T>
__host__ __device__ __forceinline__ void gridChunk(const uint8_t *row, int64_t c, float w[32]);

/// Elements [32c, 32c + 32) of a row of k elements of type T, as floats.
template <GGMLType T>
__host__ __device__ __forceinline__ void loadChunk(const uint8_t *row, int64_t c, int64_t k, float w[32]) {
  if constexpr (T == GGMLType::F32 || T == GGMLType::F16 || T == GGMLType::BF16) {
    const int64_t base = c * 32;
    constexpr int kEs = T == GGMLType::F32 ? 4 : 2;
    const uint8_t *p = row + base * kEs;
    if (base + 32 <= k && reinterpret_cast<uintptr_t>(p) % 16 == 0) { // whole chunk: 16-byte loads
      const uint4 *v = reinterpret_cast<const uint4 *>(p);
#pragma unroll
      for (int i = 0; i < 8 * kEs / 4; ++i) {
        const uint4 q = v[i];
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if constexpr (T == GGMLType::F32) {
            w[4 * i + j] = floatOfBits(u[j]);
          } else {
            const uint16_t lo = uint16_t(u[j] & 0xffff), hi = uint16_t(u[j] >> 16);
            w[8 * i + 2 * j] = T == GGMLType::F16 ? halfBits(lo) : bf16Bits(lo);
            w[8 * i + 2 * j + 1] = T == GGMLType::F16 ? halfBits(hi) : bf16Bits(hi);
          }
        }
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int64_t e = base + i;
      float v = 0;
      if (e < k) {
        if constexpr (T == GGMLType::F32)
          v = reinterpret_cast<const float *>(row)[e];
        else if constexpr (T == GGMLType::F16)
          v = halfBits(reinterpret_cast<const uint16_t *>(row)[e]);
        else
          v = bf16Bits(reinterpret_cast<const uint16_t *>(row)[e]);
      }
      w[i] = v;
    }
  } else if constexpr (T == GGMLType::Q4_0) {
    const uint8_t *b = row + c * 18;
    const float d = halfBits(ld16(b));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32h(b + 2 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[4 * i + j] = d * qf(byteOf(q, j) & 0xf, 8);
        w[4 * i + j + 16] = d * qf(byteOf(q, j) >> 4, 8);
      }
    }
  } else if constexpr (T == GGMLType::Q4_1) {
    const uint8_t *b = row + c * 20;
    const uint32_t dm = ld32(b);
    const float d = halfBits(dm & 0xffff), m = halfBits(dm >> 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32(b + 4 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[4 * i + j] = fmaf(d, qf(byteOf(q, j) & 0xf), m);
        w[4 * i + j + 16] = fmaf(d, qf(byteOf(q, j) >> 4), m);
      }
    }
  } else if constexpr (T == GGMLType::Q5_0) {
    const uint8_t *b = row + c * 22;
    const float d = halfBits(ld16(b));
    const uint32_t qh = ld32h(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32h(b + 6 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int l = 4 * i + j;
        w[l] = d * qf((byteOf(q, j) & 0xf) | (((qh >> l) & 1) << 4), 16);
        w[l + 16] = d * qf((byteOf(q, j) >> 4) | (((qh >> (l + 16)) & 1) << 4), 16);
      }
    }
  } else if constexpr (T == GGMLType::Q5_1) {
    const uint8_t *b = row + c * 24;
    const uint32_t dm = ld32(b);
    const float d = halfBits(dm & 0xffff), m = halfBits(dm >> 16);
    const uint32_t qh = ld32(b + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32(b + 8 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int l = 4 * i + j;
        w[l] = fmaf(d, qf((byteOf(q, j) & 0xf) | (((qh >> l) & 1) << 4)), m);
        w[l + 16] = fmaf(d, qf((byteOf(q, j) >> 4) | (((qh >> (l + 16)) & 1) << 4)), m);
      }
    }
  } else if constexpr (T == GGMLType::Q8_0) {
    const uint8_t *b = row + c * 34;
    const float d = halfBits(ld16(b));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = ld32h(b + 2 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        w[4 * i + j] = d * qf(byteOf(q, j) ^ 0x80, 128); // int8 + 128, unsigned
    }
  } else if constexpr (T == GGMLType::Q4_K || T == GGMLType::Q5_K) {
    const KGroup k = k45Group<T>(row, c);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        w[4 * i + j] = fmaf(k.d, qf(byteOf(k.q[i], j)), -k.m);
  } else if constexpr (T == GGMLType::Q6_K) {
    const Q6Group k = q6Group(row, c);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        w[4 * i + j] = (i < 4 ? k.d0 : k.d1) * qf(byteOf(k.q[i], j), 32);
  } else if constexpr (isGridQuant(T)) {
    gridChunk<T>(row, c, w);
  }
}

/// Byte j of v as an exact float (one PRMT builds the bits of 2^23 + byte on the GPU; see qf()).
__host__ __device__ __forceinline__ float byteF(uint32_t v, int j) {
#ifdef __CUDA_ARCH__
  return __int_as_float(__byte_perm(v, 0x4B000000u, 0x7540u | j)) - 8388608.0f;
#else
  return float((v >> (8 * j)) & 0xff);
#endif
}

/// Sums of a chunk's x values that dotChunk needs: all 32, and the two halves (Q6_K scales per 16).
struct XSums {
  float all = 0, lo = 0;
};
__host__ __device__ __forceinline__ XSums xSums(const float xv[32]) {
  XSums r;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    r.lo += xv[i];
  r.all = r.lo;
#pragma unroll
  for (int i = 16; i < 32; ++i)
    r.all += xv[i];
  return r;
}

/// Dot product of chunk c of a weight row with xv (the chunk's 32 x values; xs their sums). The block
/// formats that decode (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0) accumulate sum(q * x) over the raw quants and
/// apply scale and offset once per chunk: d * (sum(q x) - off * sum(x)) - m * sum(x), three instructions
/// per weight; the other types dequantize with loadChunk first.
template <GGMLType T>
__host__ __device__ __forceinline__ float dotChunk(const uint8_t *row, int64_t c, int64_t k,
                                                   const float xv[32], const XSums &xs) {
  if constexpr (T == GGMLType::Q4_K || T == GGMLType::Q5_K) {
    const KGroup k = k45Group<T>(row, c);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        sum = fmaf(byteF(k.q[i], j), xv[4 * i + j], sum);
    return k.d * sum - k.m * xs.all;
  } else if constexpr (T == GGMLType::Q6_K) {
    const Q6Group k = q6Group(row, c);
    float lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (i < 4)
          lo = fmaf(byteF(k.q[i], j), xv[4 * i + j], lo);
        else
          hi = fmaf(byteF(k.q[i], j), xv[4 * i + j], hi);
      }
    return k.d * (float(k.sc0) * (lo - 32 * xs.lo) + float(k.sc1) * (hi - 32 * (xs.all - xs.lo)));
  } else if constexpr (T == GGMLType::Q8_0) {
    const uint8_t *b = row + c * 34;
    const float d = halfBits(ld16(b));
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = ld32h(b + 2 + 4 * i) ^ 0x80808080u; // int8 + 128
#pragma unroll
      for (int j = 0; j < 4; ++j)
        sum = fmaf(byteF(v, j), xv[4 * i + j], sum);
    }
    return d * (sum - 128 * xs.all);
  } else if constexpr (T == GGMLType::Q4_0) {
    const uint8_t *b = row + c * 18;
    const float d = halfBits(ld16(b));
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32h(b + 2 + 4 * i), lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sum = fmaf(byteF(lo, j), xv[4 * i + j], sum);
        sum = fmaf(byteF(hi, j), xv[4 * i + j + 16], sum);
      }
    }
    return d * (sum - 8 * xs.all);
  } else {
    float w[32];
    loadChunk<T>(row, c, k, w);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i)
      sum = fmaf(w[i], xv[i], sum);
    return sum;
  }
}

//===----------------------------------------------------------------------===//
// Integer dot products (decode GEMV)
//
// Decode multiplies each weight once per token, so the GEMV is bound by instructions as much as by
// bytes unless the inner loop is short. The activations are quantized once per row to 8 bits per
// 32-element block (quantizeBlock32) and the quant nibbles are multiplied four at a time by dp4a: about
// half an instruction per weight instead of three. The block's sums (halves of 16) carry the offset
// terms (Q4_K's min, Q6_K's 32, Q4_0's 8). A unit's weight side is unpacked once (prep: dp4a words and
// the scales) and dotted with any number of activation rows (the batched GEMV dots it with each token's).
// Every unit below is __host__ __device__ so the CPU-side test checks the bit manipulation without a GPU.
//===----------------------------------------------------------------------===//

/// Scale and sums of one 32-element activation block: x ~= d * q; lo, hi = d * (sum of q over [0, 16),
/// [16, 32)).
struct XQBlock {
  float d, lo, hi, pad;
};

/// Quantizes 32 floats to int8 the way the reference engine and the CPU backend (quantActivation) do:
/// d = amax / 127 rounded to bf16, q = round-to-even(x / d) clamped to +-127, d kept as f16. The offset
/// terms use the quantized sums, as theirs do; matching their rounding keeps the logits nearer theirs
/// than exact f32 activations would (runtime/cpu/quant/Quant.h).
__host__ __device__ __forceinline__ void quantizeBlock32(const float x[32], int8_t q[32], XQBlock &b) {
  float amax = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i)
    amax = fmaxf(amax, fabsf(x[i]));
  const float d = __bfloat162float(__float2bfloat16_rn(amax / 127.0f)), id = d > 0 ? 1.0f / d : 0.0f;
  int lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int v = static_cast<int>(fminf(fmaxf(rintf(x[i] * id), -127.0f), 127.0f));
    q[i] = static_cast<int8_t>(v);
    (i < 16 ? lo : hi) += v;
  }
  const float dh = __half2float(__float2half_rn(d));
  b = XQBlock{dh, dh * float(lo), dh * float(hi), 0};
}

#ifdef __CUDACC__
/// quantizeBlock32 by a warp whose lane i holds element i of the block (bit-identical to it): for the
/// producers that write a GEMV's x and its quantized copy in one pass (rms_norm, glu).
__device__ __forceinline__ void warpQuantize32(float v, int8_t *q, XQBlock *b) {
  const int lane = threadIdx.x % 32;
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __bfloat162float(__float2bfloat16_rn(amax / 127.0f)), id = d > 0 ? 1.0f / d : 0.0f;
  const int qv = static_cast<int>(fminf(fmaxf(rintf(v * id), -127.0f), 127.0f));
  q[lane] = static_cast<int8_t>(qv);
  int sum = qv; // sums within each half-warp (elements 0..15, 16..31)
  for (int o = 8; o > 0; o >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int hi = __shfl_sync(0xffffffffu, sum, 16);
  if (lane == 0) {
    const float dh = __half2float(__float2half_rn(d));
    *b = XQBlock{dh, dh * float(sum), dh * float(hi), 0};
  }
}
#endif

/// Sum of the four signed byte products plus c.
__host__ __device__ __forceinline__ int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return c;
#endif
}

/// N words from a 2-byte aligned address: aligned word loads joined by funnel shifts (the 2-byte block
/// formats Q8_0, Q4_0, Q6_K have no wider alignment). The word past the end is read only when the
/// address is unaligned, and then it is the aligned word holding the last wanted byte (same page).
template <int N> __host__ __device__ __forceinline__ void loadWords(const uint8_t *p, uint32_t out[N]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t *w = reinterpret_cast<const uint32_t *>(a & ~uintptr_t(3));
  const uint32_t sh = uint32_t(a & 3) * 8;
  uint32_t prev = w[0];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t next = (sh || i + 1 < N) ? w[i + 1] : 0;
    out[i] = sh ? (prev >> sh) | (next << (32 - sh)) : prev;
    prev = next;
  }
}

/// Four words of 16 int8 activations (16-byte aligned).
__host__ __device__ __forceinline__ void loadX16(const int8_t *p, int x[4]) {
  const int4 v = *reinterpret_cast<const int4 *>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

/// Signed byte j of v.
__host__ __device__ __forceinline__ int sbyte(uint32_t v, int j) { return int(int8_t(v >> (8 * j))); }

/// Per-type unit of the integer decode GEMV: kUnit weights of a row, X the matching activation data a
/// thread keeps in registers across rows, loadX/dot as the name says. `q` is the row's int8
/// activations, `s` its block records.
template <GGMLType T> struct IntDot;

/// Q4_K/Q5_K: a unit is 16 quant bytes of one group pair (p = pair, h = which half of the 32 bytes): the
/// low nibbles are elements [16h, 16h + 16) of group 2p, the high nibbles the same of group 2p + 1.
template <GGMLType T> struct IntDotK45 {
  static constexpr int kUnit = 32;
  struct X {
    int lo[4], hi[4];
    float dlo, dhi, slo, shi;
  };
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    const int64_t sb = u >> 3;
    const int i = int(u & 7), p = i >> 1, h = i & 1;
    X x;
    loadX16(q + sb * 256 + 64 * p + 16 * h, x.lo);
    loadX16(q + sb * 256 + 64 * p + 32 + 16 * h, x.hi);
    const XQBlock &a = s[sb * 8 + 2 * p], &b = s[sb * 8 + 2 * p + 1];
    x.dlo = a.d, x.dhi = b.d, x.slo = h ? a.hi : a.lo, x.shi = h ? b.hi : b.lo;
    return x;
  }
  /// The unit's weight bytes: the super-block head (d, dmin, 12 scale bytes), its 16 quant bytes (and
  /// Q5_K's 16 high-bit bytes). fetch/dot are split so the GEMV can issue many rows' loads at once.
  struct Raw {
    uint4 hd, qv, hv;
  };
  static constexpr int kFetchRows = T == GGMLType::Q4_K ? 8 : 4; // rows of Raw a thread keeps in flight
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) {
    constexpr int kBytes = QuantTraits<T>::kBytes;
    const uint8_t *b = row + (u >> 3) * kBytes;
    const int i = int(u & 7), p = i >> 1, h = i & 1;
    Raw r;
    r.hd = *reinterpret_cast<const uint4 *>(b);
    r.qv = *reinterpret_cast<const uint4 *>(b + (T == GGMLType::Q4_K ? 16 : 48) + 32 * p + 16 * h);
    r.hv = T == GGMLType::Q5_K ? *reinterpret_cast<const uint4 *>(b + 16 + 16 * h) : uint4{0, 0, 0, 0};
    return r;
  }
  /// The unit's weights ready for any number of activation rows (prep once per row unit, dot per token):
  /// the 16 low-nibble and 16 high-nibble quants as dp4a words, and the two groups' scales and offsets.
  struct W {
    int lo[4], hi[4];
    float dl, dh, ml, mh; ///< d * sc and dmin * m of groups 2p and 2p + 1
  };
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    const int i = int(u & 7), p = i >> 1;
    const uint32_t qw[4] = {r.qv.x, r.qv.y, r.qv.z, r.qv.w};
    const uint32_t hw[4] = {r.hv.x, r.hv.y, r.hv.z, r.hv.w};
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t l = qw[j] & 0x0F0F0F0Fu, hh = (qw[j] >> 4) & 0x0F0F0F0Fu;
      if constexpr (T == GGMLType::Q5_K) {
        l |= ((hw[j] >> (2 * p)) & 0x01010101u) << 4;
        hh |= ((hw[j] >> (2 * p + 1)) & 0x01010101u) << 4;
      }
      w.lo[j] = int(l);
      w.hi[j] = int(hh);
    }
    uint32_t sc0, m0, sc1, m1;
    scaleMinK4(r.hd.y, r.hd.z, r.hd.w, 2 * p, sc0, m0);
    scaleMinK4(r.hd.y, r.hd.z, r.hd.w, 2 * p + 1, sc1, m1);
    const float d = halfBits(r.hd.x & 0xffff), dmin = halfBits(r.hd.x >> 16);
    w.dl = d * float(sc0), w.dh = d * float(sc1), w.ml = dmin * float(m0), w.mh = dmin * float(m1);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    int dl = 0, dh = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      dl = dp4a(w.lo[j], x.lo[j], dl);
      dh = dp4a(w.hi[j], x.hi[j], dh);
    }
    return w.dl * x.dlo * float(dl) + w.dh * x.dhi * float(dh) - (w.ml * x.slo + w.mh * x.shi);
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) { return dot(prep(r, u), x); }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) { return dot(fetch(row, u), u, x); }
};
template <> struct IntDot<GGMLType::Q4_K> : IntDotK45<GGMLType::Q4_K> {};
template <> struct IntDot<GGMLType::Q5_K> : IntDotK45<GGMLType::Q5_K> {};

/// Q6_K: a unit is the 64 weights that share 16 ql bytes of each quarter pair and 16 qh bytes: elements
/// 128H + 32qd + [e0, e0 + 16) for the four quadrants qd (u = 4 sb + 2H + e0 / 16).
template <> struct IntDot<GGMLType::Q6_K> {
  static constexpr int kUnit = 64;
  struct X {
    int q[4][4];
    float d[4], s[4];
  };
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    const int64_t sb = u >> 2;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    X x;
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
      loadX16(q + sb * 256 + 128 * H + 32 * qd + e0, x.q[qd]);
      const XQBlock &b = s[sb * 8 + 4 * H + qd];
      x.d[qd] = b.d;
      x.s[qd] = e0 ? b.hi : b.lo;
    }
    return x;
  }
  /// The unit's bytes: ql of two quarter pairs, qh, the 8 scales of its half and d.
  struct Raw {
    uint32_t ql0[4], ql1[4], qh[4], sc[2];
    uint16_t d;
  };
  static constexpr int kFetchRows = 4;
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + (u >> 2) * 210;
    const int H = int(u >> 1) & 1, e0 = 16 * int(u & 1);
    Raw r;
    loadWords<4>(b + 64 * H + e0, r.ql0);
    loadWords<4>(b + 64 * H + 32 + e0, r.ql1);
    loadWords<4>(b + 128 + 32 * H + e0, r.qh);
    loadWords<2>(b + 192 + 8 * H, r.sc); // scales[8H .. 8H + 8)
    r.d = ld16(b + 208);
    return r;
  }
  /// The unit's 64 six-bit quants as dp4a words per quadrant, and d times each quadrant's scale.
  struct W {
    int q[4][4];
    float s[4];
  };
  __host__ __device__ static W prep(const Raw &r, int64_t u) {
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t h = r.qh[j];
      w.q[0][j] = int((r.ql0[j] & 0x0F0F0F0Fu) | ((h << 4) & 0x30303030u));
      w.q[1][j] = int((r.ql1[j] & 0x0F0F0F0Fu) | ((h << 2) & 0x30303030u));
      w.q[2][j] = int(((r.ql0[j] >> 4) & 0x0F0F0F0Fu) | (h & 0x30303030u));
      w.q[3][j] = int(((r.ql1[j] >> 4) & 0x0F0F0F0Fu) | ((h >> 2) & 0x30303030u));
    }
    const int e = int(u & 1); // scale of quadrant qd: scales[8H + e + 2qd]
    const float d = halfBits(r.d);
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
      const int idx = e + 2 * qd; // byte within sc[0..1]
      w.s[qd] = d * float(sbyte(r.sc[idx >> 2], idx & 3));
    }
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    float sum = 0;
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
      int dq = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        dq = dp4a(w.q[qd][j], x.q[qd][j], dq);
      sum += w.s[qd] * (x.d[qd] * float(dq) - 32.0f * x.s[qd]);
    }
    return sum;
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) { return dot(prep(r, u), x); }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) { return dot(fetch(row, u), u, x); }
};

/// The 32-element block formats: a unit is one block (an f16 scale, then kWords words of quants); X is its
/// 32 activations, scale and sum. D supplies dot(Raw, u, X) (CRTP).
template <class D, int kWords, int kRows> struct IntDotBlock32 {
  static constexpr int kUnit = 32, kFetchRows = kRows;
  struct X {
    int q[8];
    float d, s;
  };
  struct Raw {
    uint32_t w[kWords];
    uint16_t d;
  };
  /// The block's 32 quants as 8 signed dp4a words and its scale (D::prep makes it from Raw).
  struct W {
    int q[8];
    float d;
  };
  /// Sum of the block's quants times the activations' (D::dot applies the scales).
  __host__ __device__ static int dotQ(const W &w, const X &x) {
    int sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      sum = dp4a(w.q[j], x.q[j], sum);
    return sum;
  }
  __host__ __device__ static X loadX(const int8_t *q, const XQBlock *s, int64_t u) {
    X x;
    loadX16(q + 32 * u, x.q);
    loadX16(q + 32 * u + 16, x.q + 4);
    x.d = s[u].d;
    x.s = s[u].lo + s[u].hi;
    return x;
  }
  __host__ __device__ static Raw fetch(const uint8_t *row, int64_t u) {
    const uint8_t *b = row + u * (2 + 4 * kWords);
    Raw r;
    loadWords<kWords>(b + 2, r.w);
    r.d = ld16(b);
    return r;
  }
  __host__ __device__ static float dot(const Raw &r, int64_t u, const X &x) { return D::dot(D::prep(r, u), x); }
  __host__ __device__ static float dot(const uint8_t *row, int64_t u, const X &x) { return dot(fetch(row, u), u, x); }
};

/// Q8_0: signed quants straight into dp4a.
template <> struct IntDot<GGMLType::Q8_0> : IntDotBlock32<IntDot<GGMLType::Q8_0>, 8, 4> {
  using IntDotBlock32::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t) {
    W w;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      w.q[j] = int(r.w[j]);
    w.d = halfBits(r.d);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) { return w.d * x.d * float(dotQ(w, x)); }
};

/// Q4_0: low nibbles are elements 0..15, high nibbles 16..31, offset 8.
template <> struct IntDot<GGMLType::Q4_0> : IntDotBlock32<IntDot<GGMLType::Q4_0>, 4, 8> {
  using IntDotBlock32::dot;
  __host__ __device__ static W prep(const Raw &r, int64_t) {
    W w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w.q[j] = int(r.w[j] & 0x0F0F0F0Fu);
      w.q[j + 4] = int((r.w[j] >> 4) & 0x0F0F0F0Fu);
    }
    w.d = halfBits(r.d);
    return w;
  }
  __host__ __device__ static float dot(const W &w, const X &x) {
    return w.d * (x.d * float(dotQ(w, x)) - 8.0f * x.s);
  }
};

} // namespace tpc::rt::cuda

#include "runtime/cuda/QuantGrid.cuh"

namespace tpc::rt::cuda {

/// True for the types with an integer decode unit.
constexpr bool hasIntDot(GGMLType t) {
  return t == GGMLType::Q4_0 || t == GGMLType::Q8_0 || t == GGMLType::Q4_K || t == GGMLType::Q5_K ||
         t == GGMLType::Q6_K || isGridQuant(t);
}

/// Calls f.template operator()<T>() for a runtime type; returns false for an unsupported type.
template <typename F> bool dispatchType(GGMLType t, F &&f) {
  switch (t) {
#define TPC_CASE(T)                                                                                          \
  case GGMLType::T:                                                                                          \
    f.template operator()<GGMLType::T>();                                                                    \
    return true;
    TPC_CASE(F32)
    TPC_CASE(F16)
    TPC_CASE(BF16)
    TPC_CASE(Q4_0)
    TPC_CASE(Q4_1)
    TPC_CASE(Q5_0)
    TPC_CASE(Q5_1)
    TPC_CASE(Q8_0)
    TPC_CASE(Q4_K)
    TPC_CASE(Q5_K)
    TPC_CASE(Q6_K)
    TPC_CASE(IQ2_XXS)
    TPC_CASE(IQ2_XS)
    TPC_CASE(IQ2_S)
    TPC_CASE(IQ3_XXS)
    TPC_CASE(IQ3_S)
    TPC_CASE(IQ1_S)
    TPC_CASE(IQ1_M)
#undef TPC_CASE
  default:
    return false;
  }
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANT_CUH
