//===- Quantize.cpp - float rows to ggml block formats ---------------------===//
//
// Reference quantizers. The 32-element formats follow ggml's reference rounding (so activations quantized
// here round like the reference engine's); the K-quants use a plain min/max fit per group followed by
// quantizing the group scales, which gives valid blocks with finite scales and errors close to (not equal
// to) ggml's iterative search. `tpc synth` writes random models with these; the CPU backend's activation
// quantizers (runtime/cpu/quant/Activation.cpp) round like quantQ8_0 but with a bf16-rounded scale.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tpc {
namespace {


/// The element with the largest magnitude, sign kept (first one on ties).
float signedAbsMax(const float *x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

/// Quantizes nb blocks of Q4_0 from x.
void quantQ4_0(const float *x, BlockQ4_0 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float d = signedAbsMax(x, kQK) / -8;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      int hi = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

/// Quantizes nb blocks of Q5_0 from x.
void quantQ5_0(const float *x, BlockQ5_0 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float d = signedAbsMax(x, kQK) / -16;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      int hi = std::min(31, static_cast<int>(x[j + kQK / 2] * id + 16.5f));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

/// Q4_1 / Q5_1: x = d * q + m with q in 0..NMax from the block min/max.
template <typename Block, int NMax> void quantAffine(const float *x, Block *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    float d = (mx - mn) / NMax;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    y[i].m = fp32ToFp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int lo = std::min(NMax, static_cast<int>((x[j] - mn) * id + 0.5f));
      int hi = std::min(NMax, static_cast<int>((x[j + kQK / 2] - mn) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    if constexpr (NMax == 31)
      std::memcpy(y[i].qh, &qh, 4);
  }
}

/// Quantizes nb blocks of Q8_0 from x.
void quantQ8_0(const float *x, BlockQ8_0 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(x[j]));
    float d = amax / 127;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    for (int j = 0; j < kQK; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::clamp(roundEven(x[j] * id), -127, 127));
  }
}

void quantQ8_1(const float *x, BlockQ8_1 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(x[j]));
    float d = amax / 127;
    float id = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::clamp(roundEven(x[j] * id), -127, 127));
      sum += y[i].qs[j];
    }
    y[i].d = fp32ToFp16(d);
    y[i].s = fp32ToFp16(d * static_cast<float>(sum));
  }
}

/// Quantizes nb blocks of Q8_K from x.
void quantQ8_K(const float *x, BlockQ8_K *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max = signedAbsMax(x, kQKK);
    if (max == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // Symmetric +-127 so that the SIMD kernels' sign trick never meets -128.
    float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::clamp(roundEven(iscale * x[j]), -127, 127));
    for (int g = 0; g < kQKK / 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l)
        s += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(s);
    }
    y[i].d = 1 / iscale;
  }
}

/// Fits x ~ scale * q - minv with q in 0..nmax and minv >= 0 (the K-quant form) for one group: tries a
/// range of grid spacings around (max - min) / nmax and, for each assignment of q, the least-squares scale
/// and offset; keeps the lowest squared error. About 25 % less error than the plain min/max fit.
void fitGroup(const float *x, int n, int nmax, float &scale, float &minv) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  mn = std::min(mn, 0.0f); // the offset -minv can only be <= 0
  if (mx <= mn) {
    scale = 0;
    minv = -mn;
    return;
  }
  scale = (mx - mn) / nmax;
  minv = -mn;
  auto error = [&](float s, float b) {
    double e = 0;
    for (int j = 0; j < n; ++j) {
      int q = std::clamp(static_cast<int>(std::lround((x[j] - b) / s)), 0, nmax);
      double d = double(s) * q + b - x[j];
      e += d * d;
    }
    return e;
  };
  double best = error(scale, mn);
  for (int step = -8; step <= 8; ++step) {
    float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (mx - mn);
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
      int q = std::clamp(static_cast<int>(std::lround(iscale * (x[j] - mn))), 0, nmax);
      sq += q;
      sx += x[j];
      sqq += double(q) * q;
      sqx += double(q) * x[j];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0)
      continue;
    double s = (n * sqx - sq * sx) / det, b = (sx - s * sq) / n;
    if (b > 0) { // the format has no positive offset: refit the scale alone
      b = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s <= 0)
      continue;
    double e = error(static_cast<float>(s), static_cast<float>(b));
    if (e < best) {
      best = e;
      scale = static_cast<float>(s);
      minv = static_cast<float>(-b);
    }
  }
}

/// Quantizes group scales (>= 0) to `bits`-bit integers under one fp16 super-scale; returns the decoded
/// super-scale (the value the dequantizer will use).
float quantizeScales(const float *s, int n, int bits, uint8_t *out, uint16_t &stored) {
  float mx = 0;
  for (int j = 0; j < n; ++j)
    mx = std::max(mx, s[j]);
  int qmax = (1 << bits) - 1;
  stored = fp32ToFp16(mx / qmax);
  float d = fp16ToFp32(stored);
  for (int j = 0; j < n; ++j)
    out[j] = d > 0 ? static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(s[j] / d)), 0, qmax)) : 0;
  return d;
}

/// Quantizes one element against a decoded group scale/min.
inline int quantAt(float x, float scale, float minv, int nmax) {
  if (scale <= 0)
    return 0;
  return std::clamp(static_cast<int>(std::lround((x + minv) / scale)), 0, nmax);
}

/// Packs 8 six-bit scales and mins the way scaleMinK4 reads them.
void packScaleMinK4(const uint8_t sc[8], const uint8_t m[8], uint8_t *q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] |= sc[j] & 63;
      q[j + 4] |= m[j] & 63;
    } else {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((m[j] & 0xf) << 4));
      q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

/// Q4_K (bits 4) and Q5_K (bits 5): 8 groups of 32.
template <typename Block, int Bits> void quantQ45_K(const float *x, Block *y, int64_t nb) {
  constexpr int nmax = (1 << Bits) - 1;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[8], mins[8];
    for (int g = 0; g < 8; ++g)
      fitGroup(x + 32 * g, 32, nmax, scales[g], mins[g]);
    uint8_t sc[8], m[8];
    float d = quantizeScales(scales, 8, 6, sc, y[i].d);
    float dmin = quantizeScales(mins, 8, 6, m, y[i].dmin);
    packScaleMinK4(sc, m, y[i].scales);
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    if constexpr (Bits == 5)
      std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int e = 0; e < kQKK; ++e) {
      int g = e / 32;
      int q = quantAt(x[e], d * sc[g], dmin * m[g], nmax);
      int byte = 32 * (e / 64) + e % 32;
      y[i].qs[byte] |= static_cast<uint8_t>((q & 0xf) << ((e % 64) < 32 ? 0 : 4));
      if constexpr (Bits == 5)
        y[i].qh[e % 32] |= static_cast<uint8_t>((q >> 4) << g);
    }
  }
}

/// Quantizes nb blocks of Q2_K from x.
void quantQ2_K(const float *x, BlockQ2_K *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16], mins[16];
    for (int g = 0; g < 16; ++g)
      fitGroup(x + 16 * g, 16, 3, scales[g], mins[g]);
    uint8_t sc[16], m[16];
    float d = quantizeScales(scales, 16, 4, sc, y[i].d);
    float dmin = quantizeScales(mins, 16, 4, m, y[i].dmin);
    for (int g = 0; g < 16; ++g)
      y[i].scales[g] = static_cast<uint8_t>(sc[g] | (m[g] << 4));
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    for (int e = 0; e < kQKK; ++e) {
      int g = e / 16;
      int q = quantAt(x[e], d * sc[g], dmin * m[g], 3);
      y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
    }
  }
}

/// Symmetric groups of 16 for Q3_K (q in -nlow..nlow-1) and Q6_K: starts from mapping the group's
/// largest-magnitude element to the most negative level, then tries nearby grid spacings with the
/// least-squares scale for each assignment and keeps the lowest squared error.
void fitSymmetric(const float *x, int nlow, float scales[16]) {
  for (int g = 0; g < 16; ++g) {
    const float *v = x + 16 * g;
    float max = signedAbsMax(v, 16);
    scales[g] = max / -static_cast<float>(nlow);
    if (max == 0)
      continue;
    auto error = [&](float s) {
      double e = 0;
      for (int j = 0; j < 16; ++j) {
        int q = std::clamp(static_cast<int>(std::lround(v[j] / s)), -nlow, nlow - 1);
        double d = double(s) * q - v[j];
        e += d * d;
      }
      return e;
    };
    double best = error(scales[g]);
    for (int step = -8; step <= 8; ++step) {
      float iscale = -(static_cast<float>(nlow) + 0.1f * static_cast<float>(step)) / max;
      double sqq = 0, sqx = 0;
      for (int j = 0; j < 16; ++j) {
        int q = std::clamp(static_cast<int>(std::lround(iscale * v[j])), -nlow, nlow - 1);
        sqq += double(q) * q;
        sqx += double(q) * v[j];
      }
      if (sqq <= 0)
        continue;
      float s = static_cast<float>(sqx / sqq);
      double e = error(s);
      if (s != 0 && e < best) {
        best = e;
        scales[g] = s;
      }
    }
  }
}

/// Quantizes nb blocks of Q3_K from x.
void quantQ3_K(const float *x, BlockQ3_K *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16];
    fitSymmetric(x, 4, scales);
    float amax = 0;
    for (float s : scales)
      amax = std::max(amax, std::fabs(s));
    y[i].d = fp32ToFp16(amax / 31);
    float d = fp16ToFp32(y[i].d);
    int sc[16];
    std::memset(y[i].scales, 0, 12);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d > 0 ? std::clamp(static_cast<int>(std::lround(scales[g] / d)), -32, 31) : 0;
      int l = sc[g] + 32;
      if (g < 8)
        y[i].scales[g] |= static_cast<uint8_t>(l & 0xf);
      else
        y[i].scales[g - 8] |= static_cast<uint8_t>((l & 0xf) << 4);
      y[i].scales[8 + g % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (g / 4)));
    }
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int e = 0; e < kQKK; ++e) {
      float s = d * sc[e / 16];
      int q = s != 0 ? std::clamp(static_cast<int>(std::lround(x[e] / s)), -4, 3) : 0;
      int u = q + 4;
      y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((u & 3) << (2 * ((e % 128) / 32)));
      y[i].hmask[e % 32] |= static_cast<uint8_t>((u >> 2) << (e / 32));
    }
  }
}

/// Quantizes nb blocks of Q6_K from x.
void quantQ6_K(const float *x, BlockQ6_K *y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16];
    fitSymmetric(x, 32, scales);
    float amax = 0;
    for (float s : scales)
      amax = std::max(amax, std::fabs(s));
    y[i].d = fp32ToFp16(amax / 127);
    float d = fp16ToFp32(y[i].d);
    for (int g = 0; g < 16; ++g)
      y[i].scales[g] = static_cast<int8_t>(
          d > 0 ? std::clamp(static_cast<int>(std::lround(scales[g] / d)), -127, 127) : 0);
    std::memset(y[i].ql, 0, sizeof(y[i].ql));
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int e = 0; e < kQKK; ++e) {
      float s = d * y[i].scales[e / 16];
      int q = s != 0 ? std::clamp(static_cast<int>(std::lround(x[e] / s)), -32, 31) : 0;
      int u = q + 32;
      int h = e / 128, p = (e % 128) / 32, l = e % 32;
      y[i].ql[64 * h + l + 32 * (p & 1)] |= static_cast<uint8_t>((u & 0xf) << (p >= 2 ? 4 : 0));
      y[i].qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * p));
    }
  }
}

} // namespace

bool supportsQuantize(GGMLType t) {
  switch (t) {
  case GGMLType::F32:
  case GGMLType::F16:
  case GGMLType::BF16:
  case GGMLType::Q4_0:
  case GGMLType::Q4_1:
  case GGMLType::Q5_0:
  case GGMLType::Q5_1:
  case GGMLType::Q8_0:
  case GGMLType::Q8_1:
  case GGMLType::Q2_K:
  case GGMLType::Q3_K:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
  case GGMLType::Q6_K:
  case GGMLType::Q8_K:
    return true;
  default:
    return false;
  }
}

void quantizeRow(GGMLType t, const float *src, void *dst, int64_t n) {
  if (!supportsQuantize(t))
    throw std::invalid_argument(
        std::string("quantize: no quantizer for ggml type ") + ggmlTypeName(t) +
        " (available: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K..q8_K)");
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  if (n < 0 || n % info.blockElems != 0)
    throw std::invalid_argument("quantize: row of " + std::to_string(n) +
                                " elements is not a whole number of " + info.name + " blocks (" +
                                std::to_string(info.blockElems) + " elements each)");
  int64_t nb = n / info.blockElems;
  switch (t) {
  case GGMLType::F32:
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  case GGMLType::F16:
    return fp32ToFp16Row(src, static_cast<uint16_t *>(dst), n);
  case GGMLType::BF16: {
    uint16_t *d = static_cast<uint16_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = fp32ToBf16(src[i]);
    return;
  }
  case GGMLType::Q4_0:
    return quantQ4_0(src, static_cast<BlockQ4_0 *>(dst), nb);
  case GGMLType::Q4_1:
    return quantAffine<BlockQ4_1, 15>(src, static_cast<BlockQ4_1 *>(dst), nb);
  case GGMLType::Q5_0:
    return quantQ5_0(src, static_cast<BlockQ5_0 *>(dst), nb);
  case GGMLType::Q5_1:
    return quantAffine<BlockQ5_1, 31>(src, static_cast<BlockQ5_1 *>(dst), nb);
  case GGMLType::Q8_0:
    return quantQ8_0(src, static_cast<BlockQ8_0 *>(dst), nb);
  case GGMLType::Q8_1:
    return quantQ8_1(src, static_cast<BlockQ8_1 *>(dst), nb);
  case GGMLType::Q2_K:
    return quantQ2_K(src, static_cast<BlockQ2_K *>(dst), nb);
  case GGMLType::Q3_K:
    return quantQ3_K(src, static_cast<BlockQ3_K *>(dst), nb);
  case GGMLType::Q4_K:
    return quantQ45_K<BlockQ4_K, 4>(src, static_cast<BlockQ4_K *>(dst), nb);
  case GGMLType::Q5_K:
    return quantQ45_K<BlockQ5_K, 5>(src, static_cast<BlockQ5_K *>(dst), nb);
  case GGMLType::Q6_K:
    return quantQ6_K(src, static_cast<BlockQ6_K *>(dst), nb);
  case GGMLType::Q8_K:
    return quantQ8_K(src, static_cast<BlockQ8_K *>(dst), nb);
  default:
    return;
  }
}

} // namespace tpc
