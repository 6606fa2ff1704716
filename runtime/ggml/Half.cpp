//===- Half.cpp - fp16 <-> fp32 rows ---------------------------------------===//
//
// Row conversions between IEEE halves and floats: F16C where the CPU has it (checked once at run time, the
// function carries its own target so the library stays baseline x86-64), else the exact scalar
// conversions of Blocks.h. Both round to nearest even, so the results are identical.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpc {
namespace {
#if defined(__x86_64__)
bool hasF16C() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

__attribute__((target("avx,f16c"))) void fp16ToFp32RowF16C(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
  for (; i < n; ++i)
    dst[i] = fp16ToFp32(src[i]);
}

__attribute__((target("avx,f16c"))) void fp32ToFp16RowF16C(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i)
    dst[i] = fp32ToFp16(src[i]);
}
#endif
} // namespace

void fp16ToFp32Row(const uint16_t *src, float *dst, int64_t n) {
#if defined(__x86_64__)
  if (hasF16C())
    return fp16ToFp32RowF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = fp16ToFp32(src[i]);
}

void fp32ToFp16Row(const float *src, uint16_t *dst, int64_t n) {
#if defined(__x86_64__)
  if (hasF16C())
    return fp32ToFp16RowF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = fp32ToFp16(src[i]);
}

} // namespace tpc
