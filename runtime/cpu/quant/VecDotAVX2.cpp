//===- VecDotAVX2.cpp - AVX2 + FMA + F16C dot kernels -----------------------===//
//
// The kernels of VecDotX86.inc built for AVX2 (maddubs-based byte dots), plus F16C row conversions. Every
// function here carries the target through `#pragma GCC target`, so the rest of the library stays
// baseline x86-64; callers check isaAvailable(Isa::AVX2) first. Headers are included before the pragma so
// no inline library code is compiled for AVX2 by accident.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/quant/Blocks.h"
#include "runtime/cpu/quant/VecDotTables.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

// GCC and clang spell "every function below gets this target" differently.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2")
#endif

namespace tpc::rt::cpu {
namespace avx2 {
#define TPC_VNNI 0
#include "runtime/cpu/quant/VecDotX86.inc"
#undef TPC_VNNI
} // namespace avx2

VecDotTable avx2VecDotTable(const VecDotTable &base) { return avx2::makeTable(base); }

void fp16ToFp32RowF16C(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
  for (; i < n; ++i)
    dst[i] = _cvtsh_ss(src[i]);
}

void fp32ToFp16RowF16C(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i)
    dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
