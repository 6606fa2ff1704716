//===- KernelsAVX512.cpp - AVX-512 kernels without VNNI ---------------------===//
//
// Panels of 16 rows on 512-bit vectors (Vec512X86.inc) with maddubs + madd byte dots, for AVX-512 CPUs
// without VNNI (Skylake-SP); legacy and row kernels stay AVX2's (the table starts from the AVX2 one). Only
// called when isaAvailable(Isa::AVX512); the target is set by pragma so the library needs no -march flag.
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

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq")
#endif

namespace tpc::rt::cpu {
namespace avx512 {
#define TPC_VNNI 0
#define TPC_VNNI_EMULATED 0
#include "runtime/cpu/quant/X86Common.inc"
#include "runtime/cpu/quant/GridUnpackX86.inc"
#include "runtime/cpu/quant/Vec512X86.inc"
#include "runtime/cpu/quant/PanelX86.inc"
#include "runtime/cpu/quant/GridPanelX86.inc"
#undef TPC_VNNI_EMULATED
#undef TPC_VNNI
} // namespace avx512

KernelTable avx512KernelTable(const KernelTable &base) {
  KernelTable t = base;
  avx512::installPanelKernels(t);
  avx512::installGridPanelKernels(t);
  return t;
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
