//===- AttentionAVX512.cpp - attention item kernel, AVX-512 -----------------===//
//
// AttendItem.inc with 16-lane primitives (masked tails). Built on every x86-64 machine, run only where
// isaAvailable(Isa::AVX512) (the tests of AttentionTest.cpp then compare it with the reference too).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention/AttentionKernels.h"
#include "runtime/ggml/Blocks.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))),           \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif

namespace tpc::rt::cpu::attn {
namespace avx512 {

inline __mmask16 tailMask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1); }

/// exp(x) as in AttentionAVX2.cpp's exp8, 16 lanes at a time.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~tiny), p, _mm512_castsi512_ps(e));
}

struct Ops {
  static float dot(const float *a, const float *b, int64_t n) {
    __m512 s = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      s = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s);
    if (i < n) {
      const __mmask16 m = tailMask(n - i);
      s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s);
    }
    return _mm512_reduce_add_ps(s);
  }
  static void dot4(const float *q, const float *k, int64_t ks, int64_t n, float *out) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tailMask(n - i);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + i), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + ks + i), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + 2 * ks + i), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + 3 * ks + i), a3);
    }
    out[0] = _mm512_reduce_add_ps(a0), out[1] = _mm512_reduce_add_ps(a1);
    out[2] = _mm512_reduce_add_ps(a2), out[3] = _mm512_reduce_add_ps(a3);
  }
  static float expShiftSum(float *x, int64_t n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tailMask(n - i);
      const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh)));
      _mm512_mask_storeu_ps(x + i, m, e);
      sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
  }
  static void axpy(float w, const float *x, float *y, int64_t n) {
    const __m512 wv = _mm512_set1_ps(w);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tailMask(n - i);
      _mm512_mask_storeu_ps(y + i, m,
                            _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
  }
  static void axpy4(const float *w, const float *x, int64_t xs, float *y, int64_t n) {
    const __m512 w0 = _mm512_set1_ps(w[0]), w1 = _mm512_set1_ps(w[1]), w2 = _mm512_set1_ps(w[2]),
                 w3 = _mm512_set1_ps(w[3]);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tailMask(n - i);
      __m512 acc = _mm512_maskz_loadu_ps(m, y + i);
      acc = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + i), acc);
      acc = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m, x + xs + i), acc);
      acc = _mm512_fmadd_ps(w2, _mm512_maskz_loadu_ps(m, x + 2 * xs + i), acc);
      acc = _mm512_fmadd_ps(w3, _mm512_maskz_loadu_ps(m, x + 3 * xs + i), acc);
      _mm512_mask_storeu_ps(y + i, m, acc);
    }
  }
  static void scale(float *y, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tailMask(n - i);
      _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), sv));
    }
  }
  static void toF32(const uint16_t *h, float *f, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(f + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i))));
    for (; i < n; ++i)
      f[i] = fp16ToFp32(h[i]);
  }
  /// 16 int8 quants at q -> floats times d (exact widening, one rounding in the product).
  static __m512 q8x16(__m128i q, __m512 d) {
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
  static void q8ToF32(const BlockQ8_0 *b, float *f, int64_t n) {
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const __m512 d = _mm512_set1_ps(fp16ToFp32(b[i].d));
      _mm512_storeu_ps(f, q8x16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs)), d));
      _mm512_storeu_ps(f + 16, q8x16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs + 16)), d));
    }
  }
  static void q4ToF32(const BlockQ4_0 *b, float *f, int64_t n) {
    const __m128i low = _mm_set1_epi8(0xf), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / kQK; ++i, f += kQK) {
      const __m512 d = _mm512_set1_ps(fp16ToFp32(b[i].d));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs));
      // Low nibbles are elements 0..15, high nibbles 16..31 (BlockQ4_0); minus 8 as signed bytes.
      _mm512_storeu_ps(f, q8x16(_mm_sub_epi8(_mm_and_si128(q, low), eight), d));
      _mm512_storeu_ps(f + 16, q8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight), d));
    }
  }
};

#include "runtime/cpu/attention/AttendItem.inc"

} // namespace avx512

Kernels avx512Kernels() { return avx512::makeKernels(); }

} // namespace tpc::rt::cpu::attn

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: the driver never asks for these

namespace tpc::rt::cpu::attn {
Kernels avx512Kernels() { return scalarKernels(); }
} // namespace tpc::rt::cpu::attn

#endif
