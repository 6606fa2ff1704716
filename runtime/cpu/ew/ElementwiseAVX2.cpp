//===- ElementwiseAVX2.cpp - the element-wise row kernels for AVX2 + FMA ---===//
//
// ElementwiseX86.inc over 8 float lanes. Every function carries the target through the pragma (headers
// come first), so the library stays baseline x86-64; elementwiseKernels() checks the CPU first.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ew/Elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace tpc::rt::cpu::ew {
namespace avx2ew {

struct V {
  static constexpr int W = 8;
  using F = __m256;
  using D = __m256d;
  using M = __m256;
  static F load(const float *p) { return _mm256_loadu_ps(p); }
  static void store(float *p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  /// (x1, x0, x3, x2, ...): the partner of each element in RoPE's adjacent pairs.
  static F swapPairs(F a) { return _mm256_permute_ps(a, 0xB1); }
  static F copysign(F mag, F sgn) {
    const F m = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(m, mag), _mm256_and_ps(m, sgn));
  }
  static F roundv(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F truncv(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  /// 2^n for integral n in [-126, 127].
  static F pow2(F n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M isnan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static F select(M m, F a, F b) { return _mm256_blendv_ps(b, a, m); }
  static float hmax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static D zeroD() { return _mm256_setzero_pd(); }
  static D addD(D a, D b) { return _mm256_add_pd(a, b); }
  static void accSquares(D &a0, D &a1, F x) {
    const D lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  static void accSum(D &a0, D &a1, F x) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  static double hsumD(D v) {
    alignas(32) double l[4];
    _mm256_store_pd(l, v);
    return (l[0] + l[1]) + (l[2] + l[3]);
  }
};

#include "runtime/cpu/ew/ElementwiseX86.inc"

} // namespace avx2ew

const ElementwiseKernels *avx2Table() { return &avx2ew::kTable; }

} // namespace tpc::rt::cpu::ew

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
namespace tpc::rt::cpu::ew {
const ElementwiseKernels *avx2Table() { return nullptr; }
} // namespace tpc::rt::cpu::ew
#endif
