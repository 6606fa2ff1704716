//===- Blocks.h - ggml quantization block layouts and half floats -*- C++ -*-===//
//
// The on-disk block structs of the ggml quantization formats that the compiler, `tpc synth` and both
// backends read and write (the layout
// of ggml-common.h, re-derived: field order and sizes must match byte for byte because GGUF tensors are
// used in place), plus exact fp16 <-> fp32 and bf16 <-> fp32 conversion.
//
// Assumes a little-endian host (as GGUF does). The scalar conversions are exact (round to nearest even);
// the row conversions use F16C when the CPU has it (Half.cpp) and give identical results.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_GGML_BLOCKS_H
#define TPC_RUNTIME_GGML_BLOCKS_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpc {

/// Elements per block of the 32-element formats.
constexpr int kQK = 32;
/// Elements per K-quant super-block.
constexpr int kQKK = 256;

/// Q4_0: x = d * (q - 8), q in 0..15; qs[j] low nibble is element j, high nibble element j + 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
/// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
/// Q5_0: x = d * (q - 16); bit j of the little-endian qh is bit 4 of element j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
/// Q5_1: x = d * q + m.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
/// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
/// Q8_1: Q8_0 plus s = d * sum(q), the activation type for weights with an offset (Q4_1, Q5_1).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK];
};
/// Q2_K: 16 groups of 16; scales[i] low nibble scales group i, high nibble is its min; x = d*sc*q - dmin*m.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
/// Q3_K: 2 low bits in qs, the third in hmask (set = no -4 offset), 16 signed 6-bit scales packed in 12
/// bytes.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
/// Q4_K: 8 groups of 32 with 6-bit scale and min packed in 12 bytes (see scaleMinK4).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
/// Q5_K: Q4_K plus a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
/// Q6_K: 4 low bits in ql, 2 high bits in qh, 16 groups of 16 with int8 scales; x = d * sc * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
/// Q8_K: the activation type of the K-quants; float scale and the sums of each group of 16.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
/// IQ4_NL: like Q4_0 but each nibble indexes kIQ4NLValues.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
/// IQ4_XS: super-blocks of 256 = 8 sub-blocks of 32 with IQ4_NL's nibble layout (low nibbles the first 16
/// values, high nibbles the next 16), sub-block ib scaled by d * (ls - 32) with the 6-bit ls split into its
/// low 4 bits (scales_l, two sub-blocks a byte, the even one in the low nibble) and high 2 (scales_h, 2 bits a
/// sub-block from bit 0).
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
/// The signed scale factor (ls - 32) of sub-block ib of an IQ4_XS block.
inline int iq4xsScale(const BlockIQ4_XS &b, int ib) {
  return (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32;
}
/// MXFP4: E8M0 shared exponent e and E2M1 nibbles (kMXFP4Values are doubled, so the scale is 2^(e-128)).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20, "ggml block size");
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24, "ggml block size");
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36, "ggml block size");
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110, "ggml block size");
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176, "ggml block size");
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292, "ggml block size");
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17, "ggml block size");
static_assert(sizeof(BlockIQ4_XS) == 136, "ggml block size");

/// The 16 non-linear levels of IQ4_NL.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
/// E2M1 values times two (sign in bit 3).
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// Bit-cast helpers.
inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Bit-cast helpers.
inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// IEEE half to float, exact (subnormals, infinities and NaN payloads included).
inline float fp16ToFp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    // Subnormal or zero: mant * 2^-24 is exact in float.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31)
    return bitsToFloat(sign | 0x7f800000u | (mant << 13));
  return bitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

/// Float to IEEE half, round to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t fp32ToFp16(float f) {
  uint32_t x = floatToBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffffu;
  if (x >= 0x47800000u) // >= 65536 (or inf/NaN): everything that rounds past the largest half
    return sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00);
  if (x < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5 aligns the half's ulp (2^-24) with the float's last bit,
    // so the FPU does the round-to-nearest-even for us.
    float v = bitsToFloat(x) + 0.5f;
    return sign | static_cast<uint16_t>(floatToBits(v) - 0x3f000000u);
  }
  uint32_t odd = (x >> 13) & 1;
  x += 0xc8000fffu + odd; // rebias exponent (-112 << 23) and round
  return sign | static_cast<uint16_t>(x >> 13);
}

/// bfloat16 to float (exact).
inline float bf16ToFp32(uint16_t h) { return bitsToFloat(static_cast<uint32_t>(h) << 16); }

/// Float to bfloat16, round to nearest even; NaN stays a quiet NaN.
inline uint16_t fp32ToBf16(float f) {
  uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/// 2^(e-128): the MXFP4 block scale, halved because kMXFP4Values are doubled.
inline float e8m0ToFp32Half(uint8_t e) {
  uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return bitsToFloat(bits);
}

/// Scale and min of group j (0..7) of a Q4_K/Q5_K block: 6 bits each, packed into 12 bytes: groups 0-3 in
/// the low 6 bits of bytes 0-3 (scale) and 4-7 (min); groups 4-7 in the nibbles of bytes 8-11 with their
/// top 2 bits in the top bits of bytes 0-7.
inline void scaleMinK4(int j, const uint8_t *q, uint8_t &sc, uint8_t &m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// The 16 signed scales of a Q3_K block (stored biased by 32 in 6 bits: low nibbles in bytes 0-7, groups
/// 0-7 low and 8-15 high nibble; the top 2 bits in bytes 8-11, two bits per group).
inline void unpackScalesQ3K(const uint8_t *s, int8_t out[16]) {
  for (int i = 0; i < 16; ++i) {
    int low = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
    int high = (s[8 + (i % 4)] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

/// Scale of a 32-element activation block with largest magnitude amax: amax / 127 rounded to bfloat16, as
/// the reference engine's activation blocks store it (its Q8_2); the quants are then x / scale, so they
/// agree with the rounded scale. bf16 values are exact in the fp16 field of a Q8_0 block.
inline float activationScale(float amax) { return bf16ToFp32(fp32ToBf16(amax / 127)); }

/// Round half to even, like the reference engine's SIMD activation quantizers. Adding and subtracting
/// 1.5 * 2^23 rounds in the FPU (exact for |x| < 2^22, and callers clamp far below that); std::nearbyint is
/// a library call on baseline x86-64, which made activation quantization cost as much as small matmuls.
inline int roundEven(float x) {
  if (!(std::fabs(x) < 4194304.0f))
    return x > 0 ? 4194304 : -4194304; // also maps NaN to a large negative value, clamped by callers
  const float magic = 12582912.0f;     // IEEE arithmetic: the compiler may not fold (x + m) - m into x
  return static_cast<int>((x + magic) - magic);
}

/// Converts n halves to floats (F16C when available).
void fp16ToFp32Row(const uint16_t *src, float *dst, int64_t n);
/// Converts n floats to halves, round to nearest even (F16C when available).
void fp32ToFp16Row(const float *src, uint16_t *dst, int64_t n);

} // namespace tpc

#endif // TPC_RUNTIME_GGML_BLOCKS_H
