//===- AttentionAVX2.cpp - attention item kernel, AVX2 + FMA + F16C ---------===//
//
// AttendItem.inc with 8-lane primitives. Every function here carries the target through the pragma (the
// headers come first, so no library code is compiled for AVX2 by accident); the driver calls in only when
// isaAvailable(Isa::AVX2).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention/AttentionKernels.h"
#include "runtime/ggml/Blocks.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace tpc::rt::cpu::attn {
namespace avx2 {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// exp(x) for x <= 88: x = n ln2 + r (ln2 split in two for an exact product), e^r by Cephes' degree-6
/// polynomial, 2^n through the exponent bits; x below -87.3 (where 2^n leaves the normal range) gives 0.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

struct Ops {
  // One accumulator per key in dot and dot4 alike, the tail after the horizontal sum: the same bits.
  static float dot(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(s0);
    for (; i < n; ++i)
      s = __builtin_fmaf(a[i], b[i], s);
    return s;
  }
  static void dot4(const float *q, const float *k, int64_t ks, int64_t n, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + ks + i), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * ks + i), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * ks + i), a3);
    }
    out[0] = hsum(a0), out[1] = hsum(a1), out[2] = hsum(a2), out[3] = hsum(a3);
    for (; i < n; ++i)
      for (int j = 0; j < 4; ++j)
        out[j] = __builtin_fmaf(q[i], k[j * ks + i], out[j]);
  }
  /// dot4 of q and of q2 over the same keys: each key row is loaded once for both.
  static void dot4x2(const float *q, const float *q2, const float *k, int64_t ks, int64_t n, float *out,
                     float *out2) {
    __m256 a[4], b[4];
    for (int j = 0; j < 4; ++j)
      a[j] = b[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i), qv2 = _mm256_loadu_ps(q2 + i);
      for (int j = 0; j < 4; ++j) {
        const __m256 kv = _mm256_loadu_ps(k + j * ks + i);
        a[j] = _mm256_fmadd_ps(qv, kv, a[j]);
        b[j] = _mm256_fmadd_ps(qv2, kv, b[j]);
      }
    }
    for (int j = 0; j < 4; ++j)
      out[j] = hsum(a[j]), out2[j] = hsum(b[j]);
    for (; i < n; ++i)
      for (int j = 0; j < 4; ++j) {
        out[j] = __builtin_fmaf(q[i], k[j * ks + i], out[j]);
        out2[j] = __builtin_fmaf(q2[i], k[j * ks + i], out2[j]);
      }
  }
  /// axpy4 into y and into y2 from the same 4 rows of x, each loaded once.
  static void axpy4x2(const float *w, const float *w2, const float *x, int64_t xs, float *y, float *y2,
                      int64_t n) {
    __m256 wv[4], wv2[4];
    for (int j = 0; j < 4; ++j)
      wv[j] = _mm256_set1_ps(w[j]), wv2[j] = _mm256_set1_ps(w2[j]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 xv[4];
      for (int j = 0; j < 4; ++j)
        xv[j] = _mm256_loadu_ps(x + j * xs + i);
      __m256 acc = _mm256_loadu_ps(y + i), acc2 = _mm256_loadu_ps(y2 + i);
      for (int j = 0; j < 4; ++j) {
        acc = _mm256_fmadd_ps(wv[j], xv[j], acc);
        acc2 = _mm256_fmadd_ps(wv2[j], xv[j], acc2);
      }
      _mm256_storeu_ps(y + i, acc);
      _mm256_storeu_ps(y2 + i, acc2);
    }
    for (; i < n; ++i)
      for (int j = 0; j < 4; ++j) {
        y[i] = __builtin_fmaf(w[j], x[j * xs + i], y[i]);
        y2[i] = __builtin_fmaf(w2[j], x[j * xs + i], y2[i]);
      }
  }
  static float expShiftSum(float *x, int64_t n, float shift) {
    const __m256 sh = _mm256_set1_ps(shift);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
      _mm256_storeu_ps(x + i, e);
      sum = _mm256_add_ps(sum, e);
    }
    if (i < n) { // the tail through one masked vector, so every element gets the same exp
      alignas(32) float buf[8] = {};
      for (int64_t j = i; j < n; ++j)
        buf[j - i] = x[j] - shift;
      const __m256 e = exp8(_mm256_load_ps(buf));
      _mm256_store_ps(buf, e);
      for (int64_t j = i; j < n; ++j)
        x[j] = buf[j - i];
      float s = hsum(sum);
      for (int64_t j = i; j < n; ++j)
        s += x[j];
      return s;
    }
    return hsum(sum);
  }
  static void axpy(float w, const float *x, float *y, int64_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i)
      y[i] = __builtin_fmaf(w, x[i], y[i]);
  }
  static void axpy4(const float *w, const float *x, int64_t xs, float *y, int64_t n) {
    const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]),
                 w3 = _mm256_set1_ps(w[3]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 acc = _mm256_loadu_ps(y + i);
      acc = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc);
      acc = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + xs + i), acc);
      acc = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 2 * xs + i), acc);
      acc = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 3 * xs + i), acc);
      _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; ++i)
      for (int j = 0; j < 4; ++j)
        y[i] = __builtin_fmaf(w[j], x[j * xs + i], y[i]);
  }
  static void scale(float *y, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
    for (; i < n; ++i)
      y[i] *= s;
  }
  static void toF32(const uint16_t *h, float *f, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
    for (; i < n; ++i)
      f[i] = fp16ToFp32(h[i]);
  }
  /// The low 8 int8 quants of q -> floats times d (exact widening, one rounding in the product).
  static __m256 q8x8(__m128i q, __m256 d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
  /// 16 int8 quants -> f[0..16).
  static void q8x16(__m128i q, __m256 d, float *f) {
    _mm256_storeu_ps(f, q8x8(q, d));
    _mm256_storeu_ps(f + 8, q8x8(_mm_srli_si128(q, 8), d));
  }
  static void q8ToF32(const BlockQ8_0 *b, float *f, int64_t n) {
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const __m256 d = _mm256_set1_ps(fp16ToFp32(b[i].d));
      q8x16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs)), d, f);
      q8x16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs + 16)), d, f + 16);
    }
  }
  static void q4ToF32(const BlockQ4_0 *b, float *f, int64_t n) {
    const __m128i low = _mm_set1_epi8(0xf), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const __m256 d = _mm256_set1_ps(fp16ToFp32(b[i].d));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs));
      // Low nibbles are elements 0..15, high nibbles 16..31 (BlockQ4_0); minus 8 as signed bytes.
      q8x16(_mm_sub_epi8(_mm_and_si128(q, low), eight), d, f);
      q8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight), d, f + 16);
    }
  }
};

#include "runtime/cpu/attention/AttendItem.inc"

} // namespace avx2

Kernels avx2Kernels() { return avx2::makeKernels(); }

} // namespace tpc::rt::cpu::attn

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: the driver never asks for these

namespace tpc::rt::cpu::attn {
Kernels avx2Kernels() { return scalarKernels(); }
} // namespace tpc::rt::cpu::attn

#endif
