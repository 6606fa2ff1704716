//===- KernelsAVX512VNNI.cpp - AVX-512 VNNI kernels -------------------------===//
//
// The x86 kernels built with AVX-512 F/BW/VL/DQ/VNNI: legacy, row and rows-in-lanes kernels on 256-bit
// vectors with vpdpbusd (decode is memory bound, and 256-bit code keeps the clock high on CPUs that throttle
// 512-bit code), panels of 16 rows on 512-bit vectors (Vec512X86.inc), so one zmm accumulator holds 16 rows
// of one token. Only called when isaAvailable(Isa::AVX512VNNI); the target is set by pragma so the library
// needs no -march flag. KernelsVnniEmu.cpp runs the same VNNI branches on AVX2 for the tests.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/BlocksIQ.h"
#include "runtime/cpu/quant/ActQ8.h"
#include "runtime/cpu/quant/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

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
namespace avx512vnni {
#define TPC_VNNI 1
#define TPC_VNNI_EMULATED 0
#include "runtime/cpu/quant/X86Common.inc"
#include "runtime/cpu/quant/GridUnpackX86.inc"
#include "runtime/cpu/quant/LegacyX86.inc"
#include "runtime/cpu/quant/RowX86.inc"
#include "runtime/cpu/quant/GridX86.inc"
#include "runtime/cpu/quant/LanesX86.inc"

#include "runtime/cpu/quant/Vec512X86.inc"
#include "runtime/cpu/quant/PanelX86.inc"
#include "runtime/cpu/quant/GridPanelX86.inc"
#undef TPC_VNNI_EMULATED
#undef TPC_VNNI
} // namespace avx512vnni

KernelTable avx512VnniKernelTable(const KernelTable &base) {
  KernelTable t = base;
  avx512vnni::installLegacy(t);
  avx512vnni::installRowKernels(t);
  avx512vnni::installGridRowKernels(t);
  avx512vnni::installLaneKernels(t);
  avx512vnni::installPanelKernels(t);
  avx512vnni::installGridPanelKernels(t);
  return t;
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
