//===- ElementwiseAVX512.cpp - the element-wise row kernels for AVX-512 ----===//
//
// ElementwiseX86.inc over 16 float lanes with mask registers. Built on every x86-64 host, run only where
// isaAvailable(Isa::AVX512) (the target is set by pragma; headers come first).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ew/Elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq")
#endif

namespace tpc::rt::cpu::ew {
namespace avx512ew {

struct V {
  static constexpr int W = 16;
  using F = __m512;
  using D = __m512d;
  using M = __mmask16;
  static F load(const float *p) { return _mm512_loadu_ps(p); }
  static void store(float *p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F zero() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  /// (x1, x0, x3, x2, ...): the partner of each element in RoPE's adjacent pairs.
  static F swapPairs(F a) { return _mm512_permute_ps(a, 0xB1); }
  static F copysign(F mag, F sgn) {
    const __m512i m = _mm512_set1_epi32(int(0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(m, _mm512_castps_si512(mag)),
                                               _mm512_and_si512(m, _mm512_castps_si512(sgn))));
  }
  static F roundv(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F truncv(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F pow2(F n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static D zeroD() { return _mm512_setzero_pd(); }
  static D addD(D a, D b) { return _mm512_add_pd(a, b); }
  static void accSquares(D &a0, D &a1, F x) {
    const D lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const D hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    a0 = _mm512_fmadd_pd(lo, lo, a0);
    a1 = _mm512_fmadd_pd(hi, hi, a1);
  }
  static void accSum(D &a0, D &a1, F x) {
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
  }
  static double hsumD(D v) {
    alignas(64) double l[8];
    _mm512_store_pd(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
};

#include "runtime/cpu/ew/ElementwiseX86.inc"

} // namespace avx512ew

const ElementwiseKernels *avx512Table() { return &avx512ew::kTable; }

} // namespace tpc::rt::cpu::ew

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
namespace tpc::rt::cpu::ew {
const ElementwiseKernels *avx512Table() { return nullptr; }
} // namespace tpc::rt::cpu::ew
#endif
