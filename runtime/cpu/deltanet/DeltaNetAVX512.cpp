//===- DeltaNetAVX512.cpp - gated delta rule head kernels, AVX-512 -----------===//
//
// DeltaNetHead.inc over 16-float vectors (32 zmm registers: tiles of 4 rows x 4 vectors, which measured
// the same as 6 x 4 and 8 x 3; recurrence blocks of 4 vectors = 64 columns, 32 KiB of a 128-row state in
// L1, measured 25 % faster than blocks of 2 and 20 % faster than whole 128-column rows). Built on every
// x86-64 host, run only where isaAvailable(Isa::AVX512).
//===----------------------------------------------------------------------===//
#include "runtime/cpu/deltanet/DeltaNetKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))),         \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
#endif

namespace tpc::rt::cpu::dn {
namespace avx512 {

constexpr int kLanes = 16;
constexpr int kTileR = 4, kTileV = 4;
constexpr int kRecV = 4;

#include "runtime/cpu/deltanet/DeltaNetHead.inc"

} // namespace avx512

Kernels avx512Kernels() { return avx512::makeKernels(); }

} // namespace tpc::rt::cpu::dn

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: the driver never asks for these

namespace tpc::rt::cpu::dn {
Kernels avx512Kernels() { return scalarKernels(); }
} // namespace tpc::rt::cpu::dn

#endif
