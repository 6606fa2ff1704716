//===- Dequantize.cpp - ggml block formats to float ------------------------===//
//
// Scalar dequantization of every supported type, written from the block layouts in Blocks.h. These are the
// definitions the SIMD dot kernels are tested against, so they favour clarity over speed (the hot path is
// the dot kernels, which never dequantize to floats).
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/BlocksIQ.h"
#include "runtime/ggml/Quant.h"

#include <stdexcept>
#include <type_traits>
#include <string>

namespace tpc {
namespace {

/// Throws unless n is a whole number of blocks of t.
void checkWholeBlocks(GGMLType t, int64_t n, const char *what) {
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  if (n < 0 || n % info.blockElems != 0)
    throw std::invalid_argument(std::string(what) + ": row of " + std::to_string(n) + " elements is not a " +
                                "whole number of " + info.name + " blocks (" +
                                std::to_string(info.blockElems) + " elements each)");
}

/// Dequantizes nb Q4_0 blocks into y.
void dequantQ4_0(const BlockQ4_0 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * ((b[i].qs[j] & 0xf) - 8);
      y[j + kQK / 2] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

/// Dequantizes nb Q4_1 blocks into y.
void dequantQ4_1(const BlockQ4_1 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d), m = fp16ToFp32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * (b[i].qs[j] & 0xf) + m;
      y[j + kQK / 2] = d * (b[i].qs[j] >> 4) + m;
    }
  }
}

/// Little-endian 32-bit load from an unaligned pointer.
uint32_t load32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// Dequantizes nb Q5_0 blocks into y.
void dequantQ5_0(const BlockQ5_0 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d);
    uint32_t qh = load32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      int lo = (b[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
      int hi = (b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = d * (lo - 16);
      y[j + kQK / 2] = d * (hi - 16);
    }
  }
}

/// Dequantizes nb Q5_1 blocks into y.
void dequantQ5_1(const BlockQ5_1 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d), m = fp16ToFp32(b[i].m);
    uint32_t qh = load32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      int lo = (b[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
      int hi = (b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = d * lo + m;
      y[j + kQK / 2] = d * hi + m;
    }
  }
}

/// Dequantizes nb Q8_0 blocks into y.
void dequantQ8_0(const BlockQ8_0 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d);
    for (int j = 0; j < kQK; ++j)
      y[j] = d * b[i].qs[j];
  }
}

/// Dequantizes nb Q8_1 blocks into y.
void dequantQ8_1(const BlockQ8_1 *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = fp16ToFp32(b[i].d);
    for (int j = 0; j < kQK; ++j)
      y[j] = d * b[i].qs[j];
  }
}

/// Dequantizes nb Q2_K blocks into y.
void dequantQ2_K(const BlockQ2_K *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = fp16ToFp32(b[i].d), dmin = fp16ToFp32(b[i].dmin);
    const uint8_t *q = b[i].qs;
    int is = 0;
    // Two halves of 128; within a half, 4 bit-planes (shift 0, 2, 4, 6) of 32 bytes, each 2 groups of 16.
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int g = 0; g < 2; ++g) {
          uint8_t sc = b[i].scales[is++];
          float dl = d * (sc & 0xf), ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * ((q[l + 16 * g] >> shift) & 3) - ml;
        }
      }
    }
  }
}

/// Dequantizes nb Q3_K blocks into y.
void dequantQ3_K(const BlockQ3_K *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = fp16ToFp32(b[i].d);
    int8_t scales[16];
    unpackScalesQ3K(b[i].scales, scales);
    const uint8_t *q = b[i].qs;
    int is = 0;
    uint8_t m = 1; // hmask bit for the current bit-plane: elements 32*p + l use bit p of hmask[l]
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int g = 0; g < 2; ++g) {
          float dl = d * scales[is++];
          for (int l = 16 * g; l < 16 * g + 16; ++l)
            *y++ = dl * (((q[l] >> shift) & 3) - ((b[i].hmask[l] & m) ? 0 : 4));
        }
      }
    }
  }
}

/// Dequantizes nb Q4_K or Q5_K blocks into y (Q5_K: group j takes its fifth bit from bit j of qh[l]).
template <typename Block> void dequantK45(const Block *b, float *y, int64_t nb) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  for (int64_t i = 0; i < nb; ++i) {
    float d = fp16ToFp32(b[i].d), dmin = fp16ToFp32(b[i].dmin);
    const uint8_t *q = b[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      scaleMinK4(j, b[i].scales, sc0, m0);
      scaleMinK4(j + 1, b[i].scales, sc1, m1);
      float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        int v = q[l] & 0xf;
        if constexpr (kQ5)
          v += ((b[i].qh[l] >> j) & 1) << 4;
        *y++ = d0 * v - mm0;
      }
      for (int l = 0; l < 32; ++l) {
        int v = q[l] >> 4;
        if constexpr (kQ5)
          v += ((b[i].qh[l] >> (j + 1)) & 1) << 4;
        *y++ = d1 * v - mm1;
      }
    }
  }
}

/// Dequantizes nb Q6_K blocks into y.
void dequantQ6_K(const BlockQ6_K *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float d = fp16ToFp32(b[i].d);
    const uint8_t *ql = b[i].ql, *qh = b[i].qh;
    const int8_t *sc = b[i].scales;
    // Each half of 128: element l (0..31) + 32*p takes the low nibble (p even) or high nibble (p odd) of
    // ql[l + 32*(p&1)] and bits 2p..2p+1 of qh[l].
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

/// Dequantizes nb Q8_K blocks into y.
void dequantQ8_K(const BlockQ8_K *b, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQKK; ++j)
      *y++ = b[i].d * b[i].qs[j];
}

template <typename Block, typename Scale>
void dequantTable4(const Block *b, float *y, int64_t nb, const int8_t *table, Scale scale) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    float d = scale(b[i]);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * table[b[i].qs[j] & 0xf];
      y[j + kQK / 2] = d * table[b[i].qs[j] >> 4];
    }
  }
}

/// Dequantizes nb grid super-blocks of type t (BlocksIQ.h): x = scale * sc * q, exact in float.
void dequantGrid(GGMLType t, const uint8_t *src, float *y, int64_t nb) {
  const size_t bytes = ggmlTypeInfo(t).blockBytes;
  GridUnpacked u;
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    unpackGridBlock(t, src + static_cast<size_t>(i) * bytes, u);
    for (int e = 0; e < kQKK; ++e)
      y[e] = (u.scale * static_cast<float>(u.sc[e / 16])) * static_cast<float>(u.q[e]);
  }
}

} // namespace

bool supportsDequantize(GGMLType t) {
  switch (t) {
  case GGMLType::F32:
  case GGMLType::F16:
  case GGMLType::BF16:
  case GGMLType::Q4_0:
  case GGMLType::Q4_1:
  case GGMLType::Q5_0:
  case GGMLType::Q5_1:
  case GGMLType::Q8_0:
  case GGMLType::Q2_K:
  case GGMLType::Q3_K:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
  case GGMLType::Q6_K:
  case GGMLType::Q8_K:
  case GGMLType::IQ4_NL:
  case GGMLType::IQ4_XS:
  case GGMLType::MXFP4:
    return true;
  default:
    return isGridType(t);
  }
}

void dequantizeRow(GGMLType t, const void *src, float *dst, int64_t n) {
  // Q8_1 is only an activation type, but dequantizing it helps tests; it is not advertised by supportsType.
  if (!supportsDequantize(t) && t != GGMLType::Q8_1)
    throw std::invalid_argument(std::string("dequantize: unsupported ggml type ") + ggmlTypeName(t) +
                                " (the CPU backend handles f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                                "q2_K..q8_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4; "
                                "requantize the model)");
  checkWholeBlocks(t, n, "dequantize");
  int64_t nb = n / ggmlTypeInfo(t).blockElems;
  switch (t) {
  case GGMLType::F32:
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  case GGMLType::F16:
    fp16ToFp32Row(static_cast<const uint16_t *>(src), dst, n);
    return;
  case GGMLType::BF16: {
    const uint16_t *s = static_cast<const uint16_t *>(src);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16ToFp32(s[i]);
    return;
  }
  case GGMLType::Q4_0:
    return dequantQ4_0(static_cast<const BlockQ4_0 *>(src), dst, nb);
  case GGMLType::Q4_1:
    return dequantQ4_1(static_cast<const BlockQ4_1 *>(src), dst, nb);
  case GGMLType::Q5_0:
    return dequantQ5_0(static_cast<const BlockQ5_0 *>(src), dst, nb);
  case GGMLType::Q5_1:
    return dequantQ5_1(static_cast<const BlockQ5_1 *>(src), dst, nb);
  case GGMLType::Q8_0:
    return dequantQ8_0(static_cast<const BlockQ8_0 *>(src), dst, nb);
  case GGMLType::Q8_1:
    return dequantQ8_1(static_cast<const BlockQ8_1 *>(src), dst, nb);
  case GGMLType::Q2_K:
    return dequantQ2_K(static_cast<const BlockQ2_K *>(src), dst, nb);
  case GGMLType::Q3_K:
    return dequantQ3_K(static_cast<const BlockQ3_K *>(src), dst, nb);
  case GGMLType::Q4_K:
    return dequantK45(static_cast<const BlockQ4_K *>(src), dst, nb);
  case GGMLType::Q5_K:
    return dequantK45(static_cast<const BlockQ5_K *>(src), dst, nb);
  case GGMLType::Q6_K:
    return dequantQ6_K(static_cast<const BlockQ6_K *>(src), dst, nb);
  case GGMLType::Q8_K:
    return dequantQ8_K(static_cast<const BlockQ8_K *>(src), dst, nb);
  case GGMLType::IQ4_NL:
    return dequantTable4(static_cast<const BlockIQ4_NL *>(src), dst, nb, kIQ4NLValues,
                         [](const BlockIQ4_NL &b) { return fp16ToFp32(b.d); });
  case GGMLType::IQ4_XS: {
    const BlockIQ4_XS *x = static_cast<const BlockIQ4_XS *>(src);
    for (int64_t i = 0; i < nb; ++i) {
      const float d = fp16ToFp32(x[i].d);
      for (int ib = 0; ib < kQKK / kQK; ++ib, dst += kQK) {
        const float dl = d * static_cast<float>(iq4xsScale(x[i], ib));
        const uint8_t *qs = x[i].qs + ib * (kQK / 2);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[j] = dl * kIQ4NLValues[qs[j] & 0xf];
          dst[j + kQK / 2] = dl * kIQ4NLValues[qs[j] >> 4];
        }
      }
    }
    return;
  }
  case GGMLType::MXFP4:
    return dequantTable4(static_cast<const BlockMXFP4 *>(src), dst, nb, kMXFP4Values,
                         [](const BlockMXFP4 &b) { return e8m0ToFp32Half(b.e); });
  default:
    if (isGridType(t))
      return dequantGrid(t, static_cast<const uint8_t *>(src), dst, nb);
    break;
  }
}

} // namespace tpc
