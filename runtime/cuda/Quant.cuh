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
// Device-only; included by the .cu files that read weights.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANT_CUH
#define TPC_RUNTIME_CUDA_QUANT_CUH

#include "runtime/ggml/GGMLTypes.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

/// The (scale, min) of group j of a Q4_K/Q5_K super-block (Blocks.h scaleMinK4).
__host__ __device__ __forceinline__ void scaleMinK4(int j, const uint8_t *q, int &sc, int &m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
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

/// Elements [32c, 32c + 32) of a row of k elements of type T, as floats.
template <GGMLType T>
__host__ __device__ __forceinline__ void loadChunk(const uint8_t *row, int64_t c, int64_t k, float w[32]) {
  if constexpr (T == GGMLType::F32 || T == GGMLType::F16 || T == GGMLType::BF16) {
    const int64_t base = c * 32;
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
    constexpr int kBytes = QuantTraits<T>::kBytes;
    const uint8_t *b = row + (c >> 3) * kBytes;
    const int g = int(c & 7), pair = g >> 1, shift = 4 * (g & 1);
    const uint32_t dm = ld32(b);
    // scaleMinK4 on the three scale words with shifts only (a byte array indexed by g would live in
    // local memory).
    const uint32_t s0 = ld32(b + 4), s1 = ld32(b + 8), s2 = ld32(b + 12);
    int sc, mn;
    if (g < 4) {
      sc = byteOf(s0, g) & 63;
      mn = byteOf(s1, g) & 63;
    } else {
      sc = (byteOf(s2, g - 4) & 0xf) | ((byteOf(s0, g - 4) >> 6) << 4);
      mn = (byteOf(s2, g - 4) >> 4) | ((byteOf(s1, g - 4) >> 6) << 4);
    }
    const float d = halfBits(dm & 0xffff) * float(sc), m = halfBits(dm >> 16) * float(mn);
    const uint8_t *qs = b + (T == GGMLType::Q4_K ? 16 : 48) + 32 * pair;
    const uint4 q0 = reinterpret_cast<const uint4 *>(qs)[0], q1 = reinterpret_cast<const uint4 *>(qs)[1];
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
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t q = (byteOf(qw[i], j) >> shift) & 0xf;
        if constexpr (T == GGMLType::Q5_K)
          q |= ((byteOf(hw[i], j) >> g) & 1) << 4;
        w[4 * i + j] = fmaf(d, qf(q), -m);
      }
  } else if constexpr (T == GGMLType::Q6_K) {
    const uint8_t *b = row + (c >> 3) * 210;
    const int g = int(c & 7), half = g >> 2, p = g & 3;
    const uint8_t *ql = b + 64 * half + 32 * (p & 1), *qh = b + 128 + 32 * half;
    const int lshift = 4 * (p >> 1), hshift = 2 * p;
    const float d = halfBits(ld16(b + 208));
    const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192) + 8 * half + 2 * p;
    const float d0 = d * float(scales[0]), d1 = d * float(scales[1]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t l4 = ld32h(ql + 4 * i), h4 = ld32h(qh + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t q = ((byteOf(l4, j) >> lshift) & 0xf) | (((byteOf(h4, j) >> hshift) & 3) << 4);
        w[4 * i + j] = (i < 4 ? d0 : d1) * qf(q, 32);
      }
    }
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
    constexpr int kBytes = QuantTraits<T>::kBytes;
    const uint8_t *b = row + (c >> 3) * kBytes;
    const int g = int(c & 7), pair = g >> 1, shift = 4 * (g & 1), g4 = g & 3;
    const uint32_t dm = ld32(b), s0 = ld32(b + 4), s1 = ld32(b + 8), s2 = ld32(b + 12);
    // Both scale encodings, selected without a branch (lanes of a warp hold different groups).
    const uint32_t scLo = byteOf(s0, g4) & 63, mnLo = byteOf(s1, g4) & 63;
    const uint32_t scHi = (byteOf(s2, g4) & 0xf) | ((byteOf(s0, g4) >> 6) << 4);
    const uint32_t mnHi = (byteOf(s2, g4) >> 4) | ((byteOf(s1, g4) >> 6) << 4);
    const float d = halfBits(dm & 0xffff) * float(g < 4 ? scLo : scHi);
    const float m = halfBits(dm >> 16) * float(g < 4 ? mnLo : mnHi);
    const uint8_t *qs = b + (T == GGMLType::Q4_K ? 16 : 48) + 32 * pair;
    const uint4 q0 = reinterpret_cast<const uint4 *>(qs)[0], q1 = reinterpret_cast<const uint4 *>(qs)[1];
    const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    uint32_t hw[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if constexpr (T == GGMLType::Q5_K) {
      const uint4 h0 = reinterpret_cast<const uint4 *>(b + 16)[0],
                  h1 = reinterpret_cast<const uint4 *>(b + 16)[1];
      hw[0] = h0.x, hw[1] = h0.y, hw[2] = h0.z, hw[3] = h0.w, hw[4] = h1.x, hw[5] = h1.y, hw[6] = h1.z,
      hw[7] = h1.w;
    }
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t v = (qw[i] >> shift) & 0x0F0F0F0Fu;
      if constexpr (T == GGMLType::Q5_K)
        v |= ((hw[i] >> g) & 0x01010101u) << 4;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        sum = fmaf(byteF(v, j), xv[4 * i + j], sum);
    }
    return d * sum - m * xs.all;
  } else if constexpr (T == GGMLType::Q6_K) {
    const uint8_t *b = row + (c >> 3) * 210;
    const int g = int(c & 7), half = g >> 2, p = g & 3;
    const uint8_t *ql = b + 64 * half + 32 * (p & 1), *qh = b + 128 + 32 * half;
    const int lshift = 4 * (p >> 1), hshift = 2 * p;
    const float d = halfBits(ld16(b + 208));
    const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192) + 8 * half + 2 * p;
    float lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = ((ld32h(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu) |
                         (((ld32h(qh + 4 * i) >> hshift) & 0x03030303u) << 4);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (i < 4)
          lo = fmaf(byteF(v, j), xv[4 * i + j], lo);
        else
          hi = fmaf(byteF(v, j), xv[4 * i + j], hi);
      }
    }
    return d * (float(scales[0]) * (lo - 32 * xs.lo) + float(scales[1]) * (hi - 32 * (xs.all - xs.lo)));
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
#undef TPC_CASE
  default:
    return false;
  }
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANT_CUH
