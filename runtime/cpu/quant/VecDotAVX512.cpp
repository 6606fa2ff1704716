//===- VecDotAVX512.cpp - AVX-512 VNNI dot kernels --------------------------===//
//
// The kernels of VecDotX86.inc built with AVX-512 F/BW/VL/VNNI: byte dot products become one vpdpbusd on
// 256-bit vectors (no maddubs saturation, half the instructions). Only called when
// isaAvailable(Isa::AVX512); the target is set by pragma so the library needs no -march flag.
//===----------------------------------------------------------------------===//
#include "runtime/ggml/Blocks.h"
#include "runtime/cpu/quant/VecDotTables.h"

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
#include "runtime/cpu/quant/VecDotX86.inc"
#undef TPC_VNNI
} // namespace avx512

VecDotTable avx512VecDotTable(const VecDotTable &base) { return avx512::makeTable(base); }

} // namespace tpc::rt::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
