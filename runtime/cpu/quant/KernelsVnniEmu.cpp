//===- KernelsVnniEmu.cpp - the VNNI code paths on AVX2, for tests ----------===//
//
// RowX86.inc and PanelX86.inc compiled with TPC_VNNI = 1 for AVX2, vpdpbusd emulated exactly with two
// madds (X86Common.inc) and 8-row panels. The AVX-512 build runs the same source with 16-row panels and the
// real instruction; this table lets a machine without AVX-512 check every VNNI branch (q8_0 stored as
// q + 128, q6_K scaled with mullo, the hadd trees of the dpbusd row kernels). Only tests use it.
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2")
#endif

namespace tpc::rt::cpu {
namespace vnniemu {
#define TPC_VNNI 1
#define TPC_VNNI_EMULATED 1
#include "runtime/cpu/quant/X86Common.inc"
#include "runtime/cpu/quant/GridUnpackX86.inc"
#include "runtime/cpu/quant/RowX86.inc"
#include "runtime/cpu/quant/GridX86.inc"
#include "runtime/cpu/quant/LanesX86.inc"
#include "runtime/cpu/quant/Vec256X86.inc"
#include "runtime/cpu/quant/PanelX86.inc"
#include "runtime/cpu/quant/GridPanelX86.inc"
#undef TPC_VNNI_EMULATED
#undef TPC_VNNI
} // namespace vnniemu

KernelTable emulatedVnniKernelTable(const KernelTable &base) {
  KernelTable t = base;
  vnniemu::installRowKernels(t);
  vnniemu::installGridRowKernels(t);
  vnniemu::installLaneKernels(t);
  vnniemu::installPanelKernels(t);
  vnniemu::installGridPanelKernels(t);
  return t;
}

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
