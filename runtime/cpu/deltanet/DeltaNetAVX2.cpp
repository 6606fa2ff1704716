//===- DeltaNetAVX2.cpp - gated delta rule head kernels, AVX2 + FMA ---------===//
//
// DeltaNetHead.inc over 8-float vectors (16 ymm registers: tiles of 4 rows x 2 vectors; recurrence blocks
// of 4 vectors, whose 12 accumulators (S^T k, S^T q, d) measured 15 % faster than blocks of 2 despite the
// tight register file). Built on every x86-64 host, run only where isaAvailable(Isa::AVX2).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/deltanet/DeltaNetKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace tpc::rt::cpu::dn {
namespace avx2 {

constexpr int kLanes = 8;
constexpr int kTileR = 4, kTileV = 2;
constexpr int kRecV = 4;

#include "runtime/cpu/deltanet/DeltaNetHead.inc"

} // namespace avx2

Kernels avx2Kernels() { return avx2::makeKernels(); }

} // namespace tpc::rt::cpu::dn

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: the driver never asks for these

namespace tpc::rt::cpu::dn {
Kernels avx2Kernels() { return scalarKernels(); }
} // namespace tpc::rt::cpu::dn

#endif
