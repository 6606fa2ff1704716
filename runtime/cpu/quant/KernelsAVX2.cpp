//===- KernelsAVX2.cpp - AVX2 + FMA + F16C kernels --------------------------===//
//
// The x86 kernels (LegacyX86.inc, RowX86.inc, PanelX86.inc with 8-row panels) built for AVX2
// (maddubs-based byte dots). Every function here carries the target through `#pragma GCC target`, so the
// rest of the library stays baseline x86-64; callers check isaAvailable(Isa::AVX2) first. Headers are
// included before the pragma so no inline library code is compiled for AVX2 by accident.
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2")
#endif

namespace tpc::rt::cpu {
namespace avx2 {
#define TPC_VNNI 0
#define TPC_VNNI_EMULATED 0
#include "runtime/cpu/quant/X86Common.inc"
#include "runtime/cpu/quant/GridUnpackX86.inc"
#include "runtime/cpu/quant/LegacyX86.inc"
#include "runtime/cpu/quant/RowX86.inc"
#include "runtime/cpu/quant/GridX86.inc"
#include "runtime/cpu/quant/LanesX86.inc"
#include "runtime/cpu/quant/Vec256X86.inc"
#include "runtime/cpu/quant/PanelX86.inc"
#include "runtime/cpu/quant/GridPanelX86.inc"
#undef TPC_VNNI_EMULATED
#undef TPC_VNNI
} // namespace avx2

KernelTable avx2KernelTable(const KernelTable &base) {
  KernelTable t = base;
  avx2::installLegacy(t);
  avx2::installRowKernels(t);
  avx2::installGridRowKernels(t);
  avx2::installLaneKernels(t);
  avx2::installPanelKernels(t);
  avx2::installGridPanelKernels(t);
  return t;
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
