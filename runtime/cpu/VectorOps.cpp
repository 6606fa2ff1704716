//===- VectorOps.cpp - f32 vector primitives with SIMD dispatch -------------===//
//
// The AVX2 versions carry their target per function (like quant/VecDotAVX2.cpp), so the file stays
// baseline x86-64 and the choice is made at run time from activeIsa().
//===----------------------------------------------------------------------===//
#include "runtime/cpu/VectorOps.h"

#include "runtime/cpu/quant/Quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpc::rt::cpu {
namespace {

float dotPortable(const float *a, const float *b, int64_t n) {
  // Eight independent partial sums so the compiler can vectorise with SSE.
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      part[l] += a[i + l] * b[i + l];
  float s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

void axpyPortable(float w, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += w * x[i];
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float dotAVX2(const float *a, const float *b, int64_t n) {
  // Two FMA chains: one would be bound by the FMA latency for attention's short rows.
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  __m256 s = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i)
    r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2,fma"))) void axpyAVX2(float w, const float *x, float *y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i)
    y[i] += w * x[i];
}
#endif

using DotFn = float (*)(const float *, const float *, int64_t);
using AxpyFn = void (*)(float, const float *, float *, int64_t);

bool useAVX2() {
#if defined(__x86_64__)
  static const bool yes = activeIsa() != Isa::Scalar;
  return yes;
#else
  return false;
#endif
}

} // namespace

float dotF32(const float *a, const float *b, int64_t n) {
#if defined(__x86_64__)
  if (useAVX2())
    return dotAVX2(a, b, n);
#endif
  return dotPortable(a, b, n);
}

void axpyF32(float w, const float *x, float *y, int64_t n) {
#if defined(__x86_64__)
  if (useAVX2())
    return axpyAVX2(w, x, y, n);
#endif
  axpyPortable(w, x, y, n);
}

} // namespace tpc::rt::cpu
