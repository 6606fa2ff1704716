//===- KernelRef.h - double-precision references for the matmul kernels -*- C++ -*-===//
//
// Exact decoding of weight rows and ActQ8 rows into doubles, and the tolerance every kernel path is held to.
//
// The tolerance (docs/architecture.md, "CPU matmul tolerance"): the kernels' integer block sums are exact, so
// a kernel result differs from the exact dot product of the quantized operands only by float rounding. Each
// path sums the same terms, per 32-element block a product term (weight scale x activation scale x integer
// sum) and, for formats with an offset or min, an offset term, in some order; each term is formed with at
// most 3 roundings. Higham's bound for a sum of N such terms in any order gives
//   |kernel - exact| <= gamma(N + 3) * M,  gamma(n) = n u / (1 - n u),  u = 2^-24,
// where M is the sum of the terms' magnitudes. M is computed here from the format's own decomposition of each
// weight, sum_i (|scale_i q_i| + |offset_i|) |a_i|, where offset_i is a term of the format's own that the
// kernels add in float (q4_1 / q5_1 m, the K-quants' mins). Formats whose value is one scale times
// (q - offset) have no offset term on any path: wherever a kernel stores their quants unsigned (q4_0 / q5_0
// nibbles, MXFP4 v + 12, VNNI's v + 128, q3_K folded + 127, q6_K and the grid panels' q + 32 / q + 64) it
// subtracts offset sum a in int32, so their bound is that of the signed sums (a float offset term would need
// offset |d| |a| in M, and could no longer be told from a kernel that loses precision: tiny-qwen3moe-Q8_0's
// K projection at avx512vnni rounded a cache element to the other f16 neighbour that way);
// N = 2 k / 32 + 8 for the quantized types (two terms per block, a few more for horizontal sums), k + 8 for the
// float types (one FMA per element).
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_RUNTIME_CPU_KERNELREF_H
#define TPC_TEST_RUNTIME_CPU_KERNELREF_H

#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/BlocksIQ.h"
#include "test/common/GridBlocks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tpc::rt::cpu::test {

/// A weight row decoded exactly: value[i] and the magnitude weight mag[i] = |scale q| + |offset|.
struct DecodedRow {
  std::vector<double> value, mag;
};

/// One element of a grid super-block (BlocksIQ.h) in double, read from the raw bytes at the offsets of ggml's
/// block structs and following dequantize_row_iq* element by element (not our decoder): `value`, and `unit` =
/// the value of one integer step at that element (what the panels' offset of 64 steps multiplies).
struct GridElement {
  double value, unit;
};
inline GridElement gridElement(GGMLType t, const uint8_t *blk, int e) {
  auto le16 = [blk](int o) { return static_cast<uint32_t>(blk[o] | (blk[o + 1] << 8)); };
  auto le32 = [&](int o) { return le16(o) | (le16(o + 2) << 16); };
  auto half = [&](int o) { return double(fp16ToFp32(static_cast<uint16_t>(le16(o)))); };
  auto grid8 = [](uint64_t w, int j) { return static_cast<int>((w >> (8 * j)) & 255); };
  // Bit j of a 7-bit sign code; the eighth sign is the parity of the seven.
  auto sign7 = [](uint32_t code, int j) {
    const int bit = j < 7 ? (code >> j) & 1 : __builtin_popcount(code & 127) & 1;
    return bit ? -1.0 : 1.0;
  };
  const int ib = e / 32, l = (e % 32) / 8, j = e % 8, k4 = (e % 32) / 4;
  switch (t) {
  case GGMLType::IQ2_XXS: {
    const uint32_t w = le32(2 + 8 * ib + 4);
    const double u = half(0) * (0.5 + (w >> 28)) * 0.25;
    return {u * grid8(kIQ2XXSGrid[blk[2 + 8 * ib + l]], j) * sign7((w >> (7 * l)) & 127, j), u};
  }
  case GGMLType::IQ2_XS: {
    const uint32_t w = le16(2 + 2 * (4 * ib + l));
    const double u = half(0) * (0.5 + ((blk[66 + ib] >> (4 * (l / 2))) & 15)) * 0.25;
    return {u * grid8(kIQ2XSGrid[w & 511], j) * sign7(w >> 9, j), u};
  }
  case GGMLType::IQ2_S: {
    const int idx = blk[2 + 4 * ib + l] | (((blk[66 + ib] >> (2 * l)) & 3) << 8);
    const double u = half(0) * (0.5 + ((blk[74 + ib] >> (4 * (l / 2))) & 15)) * 0.25;
    return {u * grid8(kIQ2SGrid[idx], j) * ((blk[2 + 32 + 4 * ib + l] >> j) & 1 ? -1 : 1), u};
  }
  case GGMLType::IQ3_XXS: {
    const uint32_t w = le32(66 + 4 * ib);
    const double u = half(0) * (0.5 + (w >> 28)) * 0.5;
    return {u * grid8(kIQ3XXSGrid[blk[2 + 8 * ib + k4]], e % 4) * sign7((w >> (7 * l)) & 127, j), u};
  }
  case GGMLType::IQ3_S: {
    const int idx = blk[2 + 8 * ib + k4] | (((blk[66 + ib] >> k4) & 1) << 8);
    const double u = half(0) * (1 + 2 * ((blk[106 + ib / 2] >> (4 * (ib % 2))) & 15));
    return {u * grid8(kIQ3SGrid[idx], e % 4) * ((blk[74 + 4 * ib + l] >> j) & 1 ? -1 : 1), u};
  }
  case GGMLType::IQ1_S: {
    const uint32_t h = le16(34 + 2 * ib);
    const int idx = blk[2 + 4 * ib + l] | (((h >> (3 * l)) & 7) << 8);
    const double dl = half(0) * (2 * ((h >> 12) & 7) + 1);
    const double g = static_cast<int8_t>(grid8(kIQ1SGrid[idx], j));
    return {dl * (g + (h & 0x8000 ? -0.125 : 0.125)), dl * 0.125};
  }
  case GGMLType::IQ1_M: {
    uint32_t sc[4];
    for (int w = 0; w < 4; ++w)
      sc[w] = le16(48 + 2 * w);
    const uint16_t dh = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) |
                                              (sc[3] & 0xf000));
    const int nib = (blk[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 15;
    const int idx = blk[4 * ib + l] | ((nib & 7) << 8);
    const double dl = double(fp16ToFp32(dh)) * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
    const double g = static_cast<int8_t>(grid8(kIQ1SGrid[idx], j));
    return {dl * (g + (nib & 8 ? -0.125 : 0.125)), dl * 0.125};
  }
  default:
    return {0, 0};
  }
}

using tpc::gridtest::setGridHalf;

/// Decodes k elements of an ActQ8-format or float weight row in double, exactly.
inline DecodedRow decodeExact(GGMLType t, const void *row, int64_t k) {
  DecodedRow r;
  r.value.resize(static_cast<size_t>(k));
  r.mag.resize(static_cast<size_t>(k));
  auto put = [&](int64_t i, double scale, double q, double offset) {
    r.value[static_cast<size_t>(i)] = scale * q + offset;
    r.mag[static_cast<size_t>(i)] = std::fabs(scale * q) + std::fabs(offset);
  };
  const uint8_t *p = static_cast<const uint8_t *>(row);
  switch (t) {
  case GGMLType::F32:
  case GGMLType::F16:
  case GGMLType::BF16:
    for (int64_t i = 0; i < k; ++i) {
      uint16_t h = 0;
      float f = 0;
      if (t == GGMLType::F32)
        std::memcpy(&f, p + 4 * i, 4);
      else
        std::memcpy(&h, p + 2 * i, 2);
      put(i, t == GGMLType::F32 ? f : t == GGMLType::F16 ? fp16ToFp32(h) : bf16ToFp32(h), 1, 0);
    }
    break;
  case GGMLType::IQ4_NL:
    for (int64_t b = 0; b < k / kQK; ++b) {
      const auto &x = reinterpret_cast<const BlockIQ4_NL *>(p)[b];
      for (int j = 0; j < 16; ++j) {
        put(32 * b + j, fp16ToFp32(x.d), kIQ4NLValues[x.qs[j] & 15], 0);
        put(32 * b + j + 16, fp16ToFp32(x.d), kIQ4NLValues[x.qs[j] >> 4], 0);
      }
    }
    break;
  case GGMLType::IQ4_XS:
    for (int64_t b = 0; b < k / kQK; ++b) {
      const auto &x = reinterpret_cast<const BlockIQ4_XS *>(p)[b / 8];
      const int ib = static_cast<int>(b % 8);
      const double d = double(float(fp16ToFp32(x.d) * static_cast<float>(iq4xsScale(x, ib))));
      for (int j = 0; j < 16; ++j) {
        put(32 * b + j, d, kIQ4NLValues[x.qs[16 * ib + j] & 15], 0);
        put(32 * b + j + 16, d, kIQ4NLValues[x.qs[16 * ib + j] >> 4], 0);
      }
    }
    break;
  case GGMLType::Q4_0:
  case GGMLType::Q5_0:
  case GGMLType::Q8_0: {
    for (int64_t b = 0; b < k / kQK; ++b) {
      if (t == GGMLType::Q8_0) {
        const auto &x = reinterpret_cast<const BlockQ8_0 *>(p)[b];
        for (int j = 0; j < 32; ++j)
          put(32 * b + j, fp16ToFp32(x.d), x.qs[j], 0);
      } else if (t == GGMLType::Q4_0) {
        const auto &x = reinterpret_cast<const BlockQ4_0 *>(p)[b];
        for (int j = 0; j < 16; ++j) {
          put(32 * b + j, fp16ToFp32(x.d), (x.qs[j] & 15) - 8, 0);
          put(32 * b + j + 16, fp16ToFp32(x.d), (x.qs[j] >> 4) - 8, 0);
        }
      } else {
        const auto &x = reinterpret_cast<const BlockQ5_0 *>(p)[b];
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);
        for (int j = 0; j < 16; ++j) {
          put(32 * b + j, fp16ToFp32(x.d), static_cast<int>((x.qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16, 0);
          put(32 * b + j + 16, fp16ToFp32(x.d), static_cast<int>((x.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16,
              0);
        }
      }
    }
    break;
  }
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
    for (int64_t i = 0; i < k / kQKK; ++i) {
      const uint8_t *blk = p + i * (t == GGMLType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K));
      uint16_t dh, mh;
      std::memcpy(&dh, blk, 2);
      std::memcpy(&mh, blk + 2, 2);
      const uint8_t *scales = blk + 4;
      const uint8_t *qh = blk + 16;
      const uint8_t *qs = t == GGMLType::Q4_K ? blk + 16 : blk + 48;
      for (int g = 0; g < 8; ++g) {
        uint8_t sc, m;
        scaleMinK4(g, scales, sc, m);
        for (int l = 0; l < 32; ++l) {
          int q = (g & 1) ? (qs[32 * (g / 2) + l] >> 4) : (qs[32 * (g / 2) + l] & 15);
          if (t == GGMLType::Q5_K)
            q |= ((qh[l] >> g) & 1) << 4;
          put(256 * i + 32 * g + l, double(fp16ToFp32(dh)) * sc, q, -double(fp16ToFp32(mh)) * m);
        }
      }
    }
    break;
  case GGMLType::Q6_K:
    for (int64_t i = 0; i < k / kQKK; ++i) {
      const auto &x = reinterpret_cast<const BlockQ6_K *>(p)[i];
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, pl = (e % 128) / 32, l = e % 32;
        const int lo = (x.ql[64 * h + l + 32 * (pl & 1)] >> (pl >= 2 ? 4 : 0)) & 0xf;
        const int hi = (x.qh[32 * h + l] >> (2 * pl)) & 3;
        const double s = double(fp16ToFp32(x.d)) * x.scales[e / 16];
        put(256 * i + e, s, (lo | (hi << 4)) - 32, 0);
      }
    }
    break;
  case GGMLType::Q4_1: // d q + m, q the nibble (low nibbles the first 16 elements), q5_1 with bit j of qh
  case GGMLType::Q5_1:
    for (int64_t b = 0; b < k / kQK; ++b) {
      const bool five = t == GGMLType::Q5_1;
      const uint8_t *blk = p + b * (five ? 24 : 20);
      uint16_t d, m;
      std::memcpy(&d, blk, 2);
      std::memcpy(&m, blk + 2, 2);
      uint32_t qh = 0;
      if (five)
        std::memcpy(&qh, blk + 4, 4);
      const uint8_t *qs = blk + (five ? 8 : 4);
      for (int j = 0; j < 32; ++j) {
        const int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (five ? static_cast<int>((qh >> j) & 1) << 4 : 0);
        put(32 * b + j, fp16ToFp32(d), q, fp16ToFp32(m));
      }
    }
    break;
  case GGMLType::MXFP4: // 2^(e - 127) times the E2M1 value; the doubled integer levels (|v| <= 12) carry
                        // 2^(e - 128). (The panel's v + 12 and VNNI's v + 128 come off in int32.)
    for (int64_t b = 0; b < k / kQK; ++b) {
      const auto &x = reinterpret_cast<const BlockMXFP4 *>(p)[b];
      const double d = std::ldexp(1.0, static_cast<int>(x.e) - 128);
      for (int j = 0; j < 32; ++j) {
        const int nib = j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
        put(32 * b + j, d, kMXFP4Values[nib], 0);
      }
    }
    break;
  case GGMLType::Q2_K: // d sc q - dmin m per 16 elements; q from 2-bit planes (element 128 h + 32 p + l is
                       // bits 2p of qs[32 h + l])
    for (int64_t i = 0; i < k / kQKK; ++i) {
      const auto &x = reinterpret_cast<const BlockQ2_K *>(p)[i];
      for (int e = 0; e < 256; ++e) {
        const int q = (x.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const uint8_t sm = x.scales[e / 16];
        put(256 * i + e, double(fp16ToFp32(x.d)) * (sm & 15), q, -double(fp16ToFp32(x.dmin)) * (sm >> 4));
      }
    }
    break;
  case GGMLType::Q3_K: // d (s - 32) (q - 4): q = 2 plane bits + 4 * hmask bit e/32 of byte e%32; the 6-bit s of
                       // group g: low nibble from byte g % 8 (high half for g >= 8), top 2 bits from byte
                       // 8 + g % 4 at bit 2 (g / 4)
    for (int64_t i = 0; i < k / kQKK; ++i) {
      const auto &x = reinterpret_cast<const BlockQ3_K *>(p)[i];
      for (int e = 0; e < 256; ++e) {
        const int g = e / 16;
        const int lo = (x.scales[g % 8] >> (g >= 8 ? 4 : 0)) & 15, hi = (x.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
        const int q = ((x.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) +
                      4 * ((x.hmask[e % 32] >> (e / 32)) & 1);
        const double s = double(fp16ToFp32(x.d)) * ((lo | (hi << 4)) - 32);
        put(256 * i + e, s, q - 4, 0);
      }
    }
    break;
  default:
    if (isGridType(t))
      for (int64_t i = 0; i < k / kQKK; ++i)
        for (int e = 0; e < kQKK; ++e) {
          const GridElement g = gridElement(t, p + i * ggmlTypeInfo(t).blockBytes, e);
          put(256 * i + e, g.value, 1, 0); // the panels' q + 64 comes off in int32
        }
    break;
  }
  return r;
}

/// The k values of an ActQ8 row, exactly (d * q).
inline std::vector<double> decodeActQ8(const void *row, int64_t k) {
  const ActQ8Group *g = static_cast<const ActQ8Group *>(row);
  std::vector<double> v(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    v[static_cast<size_t>(i)] = double(g[i / 128].d[(i % 128) / 32]) * g[i / 128].qs[i % 128];
  return v;
}

/// gamma(n) for float32.
inline double gammaN(double n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

/// The exact dot product of a decoded weight row and activation values, and the tolerance of every kernel
/// path (see the file comment).
struct RefDot {
  double value = 0, tol = 0;
};
inline RefDot refDot(GGMLType t, const DecodedRow &w, const std::vector<double> &a) {
  RefDot r;
  double mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    r.value += w.value[i] * a[i];
    mag += w.mag[i] * std::fabs(a[i]);
  }
  const double k = static_cast<double>(a.size());
  const double n = activationFormat(t) == ActFormat::F32 ? k + 8 : 2 * k / 32 + 8;
  r.tol = gammaN(n + 3) * mag;
  return r;
}

} // namespace tpc::rt::cpu::test

#endif // TPC_TEST_RUNTIME_CPU_KERNELREF_H
