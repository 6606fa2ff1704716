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
// The AVX2 versions do the portable loops' float operations in the same order (lane l of the accumulator
// is part[l]; no FMA contraction), so both paths give the same bits: split plans, whose other kernels
// already round differently, stay within the fixtures' N-device tolerances.
__attribute__((target("avx2"))) float dotAVX2(const float *a, const float *b, int64_t n) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  alignas(32) float part[8];
  _mm256_store_ps(part, s);
  float r = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; i < n; ++i)
    r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2"))) void axpyAVX2(float w, const float *x, float *y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(wv, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i)
    y[i] += w * x[i];
}
#endif

using DotFn = float (*)(const float *, const float *, int64_t);
using AxpyFn = void (*)(float, const float *, float *, int64_t);

bool useAVX2() {
#if defined(__x86_64__)
  static const bool yes = fixActiveIsa() != Isa::Scalar;
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
