//===- QuantChunk.cuh - dequantization of 32-element chunks -*- CUDA -*-===//
//
// loadChunk<T>(row, c, k, w) writes elements [32c, 32c + 32) of a weight row of ggml type T as floats,
// following runtime/ggml/Dequantize.cpp (the reference the kernel tests compare with). A chunk is a
// whole block for the 32-element formats and one of eight 32-element groups of a 256-element super-block,
// so a warp spreads a row over its lanes even when the row holds few super-blocks. Plain types (f32,
// f16, bf16) guard the row end (their rows need not be a multiple of 32); block formats never need to.
//
// Loads are as wide as the block layout allows from a 16-byte aligned row: Q4_K/Q5_K quants as 16-byte
// vectors, Q4_1/Q5_1/Q2_K/IQ4_XS as words, the 2-byte aligned formats (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K,
// IQ4_NL) as half-words, MXFP4 (17-byte blocks) as aligned words joined by funnel shifts.
// __host__ __device__, so the host test checks every decoder; included through Quant.cuh.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANTCHUNK_CUH
#define TPC_RUNTIME_CUDA_QUANTCHUNK_CUH

#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/GGMLTypes.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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

/// N words from any address: aligned word loads joined by funnel shifts (the 2-byte aligned block formats
/// Q8_0, Q4_0, Q3_K, Q6_K, IQ4_NL and MXFP4's 17-byte blocks have no wider alignment). The word past the end
/// is read only when the address is unaligned, and then it is the aligned word holding the last wanted byte
/// (same page).
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

/// The byte permutation of __byte_perm (the low 3 bits of selector nibble i pick byte i of the result from
/// the 8 bytes y:x), with its documented semantics on the host, so the host tests run the table lookups below
/// as the GPU does.
__host__ __device__ __forceinline__ uint32_t bytePerm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= uint32_t((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
#endif
}

/// Word i of the 16 int8 levels v (levels 4i .. 4i + 3, little-endian), evaluated at compile time.
__host__ __device__ constexpr uint32_t packLevels(const int8_t *v, int i) {
  return uint32_t(uint8_t(v[4 * i])) | uint32_t(uint8_t(v[4 * i + 1])) << 8 |
         uint32_t(uint8_t(v[4 * i + 2])) << 16 | uint32_t(uint8_t(v[4 * i + 3])) << 24;
}
/// The levels of the nibble-indexed formats as four words (Blocks.h's tables): registers for prmt instead of
/// a table in memory.
template <GGMLType T> struct NibbleLevels {
  static_assert(T == GGMLType::IQ4_NL || T == GGMLType::IQ4_XS || T == GGMLType::MXFP4,
                "a nibble table format");
  static constexpr const int8_t *kV = T == GGMLType::MXFP4 ? kMXFP4Values : kIQ4NLValues;
  static constexpr uint32_t w0 = packLevels(kV, 0), w1 = packLevels(kV, 1), w2 = packLevels(kV, 2),
                            w3 = packLevels(kV, 3);
};

/// The levels of the four nibbles in the low half of s (nibble i of s is the index of byte i): levels [0, 8)
/// and [8, 16) each by one prmt whose selector is s itself, then one more picks per byte by the index's
/// bit 3 (selector i + 4 where it is set).
template <GGMLType T> __host__ __device__ __forceinline__ uint32_t levels4(uint32_t s) {
  using L = NibbleLevels<T>;
  const uint32_t lo8 = bytePerm(L::w0, L::w1, s), hi8 = bytePerm(L::w2, L::w3, s);
  return bytePerm(lo8, hi8, 0x3210u | ((s & 0x8888u) >> 1));
}
/// The int8 levels of the eight nibbles of q, four bytes of a 32-block of IQ4_NL's layout (byte j: element j
/// in the low nibble, element j + 16 in the high one): lo gets the low nibbles' levels, hi the high ones'.
/// Eight prmt for eight weights and no memory: q's bytes hold their two nibbles next to each other, so q and
/// q >> 16 are ready selectors (levels of l0 h0 l1 h1 and of l2 h2 l3 h3), and two prmt sort the bytes.
template <GGMLType T>
__host__ __device__ __forceinline__ void lookupNibbles(uint32_t q, uint32_t &lo, uint32_t &hi) {
  const uint32_t a = levels4<T>(q), b = levels4<T>(q >> 16);
  lo = bytePerm(a, b, 0x6420u);
  hi = bytePerm(a, b, 0x7531u);
}

/// 2^(e - 128), MXFP4's block scale halved for the doubled levels (Blocks.h e8m0ToFp32Half, bit for bit).
__host__ __device__ __forceinline__ float e8m0Half(uint32_t e) {
  return floatOfBits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}
/// The signed scale (ls - 32) of sub-block ib of an IQ4_XS block from its head words h0 = d | scales_h << 16
/// and h1 = scales_l (Blocks.h iq4xsScale).
__host__ __device__ __forceinline__ int iq4xsScaleOf(uint32_t h0, uint32_t h1, int ib) {
  return int(((h1 >> (4 * ib)) & 0xf) | (((h0 >> (16 + 2 * ib)) & 3) << 4)) - 32;
}
/// Signed scale i (0..15) of a Q3_K block from its 12 scale bytes as words s0, s1, s2 (Blocks.h
/// unpackScalesQ3K): low nibble from byte i % 8 (nibble i / 8), top 2 bits from byte 8 + i % 4 at bit
/// 2 (i / 4); shifts only, since lanes hold different i.
__host__ __device__ __forceinline__ int q3Scale(uint32_t s0, uint32_t s1, uint32_t s2, int i) {
  const uint32_t low = (((i & 4) ? s1 : s0) >> (8 * (i & 3) + 4 * (i >> 3))) & 0xf;
  const uint32_t high = (s2 >> (8 * (i & 3) + 2 * (i >> 2))) & 3;
  return int(low | (high << 4)) - 32;
}

/// The (scale, min) of group g of a Q4_K/Q5_K super-block (Blocks.h scaleMinK4) from its three scale
/// words, with shifts only and both encodings computed, one selected: lanes of a warp hold different
/// groups, and a byte array indexed by g would live in local memory.
__host__ __device__ __forceinline__ void scaleMinK4(uint32_t s0, uint32_t s1, uint32_t s2, int g,
                                                    uint32_t &sc, uint32_t &mn) {
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
TPC_QUANT_TRAITS(Q2_K, 256, 84, false)
TPC_QUANT_TRAITS(Q3_K, 256, 110, false)
TPC_QUANT_TRAITS(IQ4_NL, 32, 18, false)
TPC_QUANT_TRAITS(IQ4_XS, 256, 136, false)
TPC_QUANT_TRAITS(MXFP4, 32, 17, false)
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
    const uint4 h0 = reinterpret_cast<const uint4 *>(b + 16)[0],
                h1 = reinterpret_cast<const uint4 *>(b + 16)[1];
    hw[0] = h0.x, hw[1] = h0.y, hw[2] = h0.z, hw[3] = h0.w, hw[4] = h1.x, hw[5] = h1.y, hw[6] = h1.z,
    hw[7] = h1.w;
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
    r.q[i] =
        ((ld32h(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu) | (((ld32h(qh + 4 * i) >> hshift) & 0x03030303u) << 4);
  return r;
}

/// Chunk c (group g = c % 8 of super-block c / 8) of a Q2_K or Q3_K row: elements 128H + 32p + [0, 32),
/// H = g / 4, p = g % 4, are bits 2p, 2p + 1 of the 32 bytes qs[32H, 32H + 32) (Q3_K: bit g of hmask[0, 32)
/// the third bit); each half of 16 has its own scale (Q2_K: and min). q: the 32 quants as bytes (Q3_K's
/// unsigned, 4 = zero); x = d * q - m (Q2_K) or d * (q - 4) (Q3_K).
struct K16Group {
  float d0, d1, m0, m1;
  uint32_t q[8];
};
template <GGMLType T> __host__ __device__ __forceinline__ K16Group k16Group(const uint8_t *row, int64_t c) {
  const uint8_t *b = row + (c >> 3) * QuantTraits<T>::kBytes;
  const int g = int(c & 7), H = g >> 2, p = g & 3;
  K16Group r;
  if constexpr (T == GGMLType::Q2_K) {
    // 84-byte blocks: 4-byte aligned. scales[2g], [2g + 1] (the halves'): scale | min << 4.
    const uint32_t dm = ld32(b + 80), sc = ld16(b + 2 * g);
    const float d = halfBits(dm & 0xffff), dmin = halfBits(dm >> 16);
    r.d0 = d * float(sc & 0xf), r.m0 = dmin * float((sc >> 4) & 0xf);
    r.d1 = d * float((sc >> 8) & 0xf), r.m1 = dmin * float(sc >> 12);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      r.q[i] = (ld32(b + 16 + 32 * H + 4 * i) >> (2 * p)) & 0x03030303u;
  } else { // Q3_K, 110-byte blocks: 2-byte aligned
    uint32_t s[3];
    loadWords<3>(b + 96, s);
    const float d = halfBits(ld16(b + 108));
    r.d0 = d * float(q3Scale(s[0], s[1], s[2], 2 * g));
    r.d1 = d * float(q3Scale(s[0], s[1], s[2], 2 * g + 1));
    r.m0 = r.m1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      r.q[i] = ((ld32h(b + 32 + 32 * H + 4 * i) >> (2 * p)) & 0x03030303u) |
               (((ld32h(b + 4 * i) >> g) & 0x01010101u) << 2);
  }
  return r;
}

/// Chunk c of a nibble-table row (IQ4_NL, MXFP4: block c; IQ4_XS: sub-block c % 8 of super-block c / 8):
/// its scale and its 16 quant bytes (byte j: element j low, j + 16 high nibble).
struct TableGroup {
  float d;
  uint32_t q[4];
};
template <GGMLType T>
__host__ __device__ __forceinline__ TableGroup tableGroup(const uint8_t *row, int64_t c) {
  TableGroup r;
  if constexpr (T == GGMLType::IQ4_NL) {
    const uint8_t *b = row + c * 18;
    r.d = halfBits(ld16(b));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      r.q[i] = ld32h(b + 2 + 4 * i);
  } else if constexpr (T == GGMLType::MXFP4) {
    const uint8_t *b = row + c * 17;
    r.d = e8m0Half(b[0]);
    loadWords<4>(b + 1, r.q);
  } else { // IQ4_XS, 136-byte blocks: 8-byte aligned
    const uint8_t *b = row + (c >> 3) * 136;
    const int ib = int(c & 7);
    r.d = halfBits(ld16(b)) * float(iq4xsScaleOf(ld32(b), ld32(b + 4), ib));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      r.q[i] = ld32(b + 8 + 16 * ib + 4 * i);
  }
  return r;
}

/// The IQ grid types (QuantGrid.cuh, included by QuantInt.cuh: their decoder needs the integer helpers too).
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
  } else if constexpr (T == GGMLType::Q2_K) { // d * q is exact (15 + 2 bits), so the fma rounds as d*q - m
    const K16Group k = k16Group<T>(row, c);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        w[4 * i + j] =
            i < 4 ? fmaf(k.d0, qf(byteOf(k.q[i], j)), -k.m0) : fmaf(k.d1, qf(byteOf(k.q[i], j)), -k.m1);
  } else if constexpr (T == GGMLType::Q3_K) {
    const K16Group k = k16Group<T>(row, c);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        w[4 * i + j] = (i < 4 ? k.d0 : k.d1) * qf(byteOf(k.q[i], j), 4);
  } else if constexpr (T == GGMLType::IQ4_NL || T == GGMLType::IQ4_XS || T == GGMLType::MXFP4) {
    const TableGroup k = tableGroup<T>(row, c);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t lo, hi;
      lookupNibbles<T>(k.q[i], lo, hi);
      lo ^= 0x80808080u, hi ^= 0x80808080u; // int8 + 128, unsigned (as Q8_0)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[4 * i + j] = k.d * qf(byteOf(lo, j), 128);
        w[4 * i + j + 16] = k.d * qf(byteOf(hi, j), 128);
      }
    }
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
} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANTCHUNK_CUH
