//===- KernelsAVX512.cpp - AVX-512 VNNI kernels -----------------------------===//
//
// The x86 kernels built with AVX-512 F/BW/VL/DQ/VNNI: legacy and row kernels on 256-bit vectors with
// vpdpbusd (decode is memory bound, and 256-bit code keeps the clock high on CPUs that throttle 512-bit
// code), panels of 16 rows on 512-bit vectors (PV below), so one zmm accumulator holds 16 rows of one token.
// Only called when isaAvailable(Isa::AVX512); the target is set by pragma so the library needs no -march
// flag. KernelsVnniEmu.cpp runs the same VNNI branches on AVX2 for the tests.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

// GCC and clang spell "every function below gets this target" differently.
#if defined(__clang__)
#pragma clang attribute push(                                                                                \
    __attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))),             \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

namespace tpc::rt::cpu {
namespace avx512 {
#define TPC_VNNI 1
#define TPC_VNNI_EMULATED 0
#include "runtime/cpu/quant/X86Common.inc"
#include "runtime/cpu/quant/LegacyX86.inc"
#include "runtime/cpu/quant/RowX86.inc"

namespace {
/// The 512-bit panel vector: 16 int32 / float lanes, one per panel row.
struct PV {
  static constexpr int R = 16;
  using I = __m512i;
  using F = __m512;
  static I zeroI() { return _mm512_setzero_si512(); }
  static F zeroF() { return _mm512_setzero_ps(); }
  static I loadI(const void *p) { return _mm512_loadu_si512(p); }
  static F loadF(const void *p) { return _mm512_loadu_ps(p); }
  static void storeF(float *p, F v) { _mm512_storeu_ps(p, v); }
  /// The 4 bytes at p in every lane (folds into vpdpbusd's {1to16} memory operand).
  static I bcast32(const void *p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static I set16(int16_t v) { return _mm512_set1_epi16(v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
  static I maddubs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  static I mullo32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I slli32(I a, int n) { return _mm512_slli_epi32(a, static_cast<unsigned>(n)); }
  static I srai32(I a, int n) { return _mm512_srai_epi32(a, static_cast<unsigned>(n)); }
  static I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
};
} // namespace

#include "runtime/cpu/quant/PanelX86.inc"
#undef TPC_VNNI_EMULATED
#undef TPC_VNNI
} // namespace avx512

KernelTable avx512KernelTable(const KernelTable &base) {
  KernelTable t = base;
  avx512::installLegacy(t);
  avx512::installRowKernels(t);
  avx512::installPanelKernels(t);
  return t;
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
