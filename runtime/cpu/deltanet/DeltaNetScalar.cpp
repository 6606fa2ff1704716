//===- DeltaNetScalar.cpp - gated delta rule head kernels, portable ---------===//
//
// DeltaNetHead.inc over 4-float vectors: the x86-64 baseline (SSE2, no FMA) or the host's 128-bit SIMD
// elsewhere. The path of TPC_CPU_ISA=scalar and of CPUs without AVX2.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/deltanet/DeltaNetKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace tpc::rt::cpu::dn {
namespace scalar {

constexpr int kLanes = 4;
constexpr int kTileR = 4, kTileV = 2; // 8 accumulators of 16 xmm registers
constexpr int kRecV = 4;              // measured 20 % faster than 2

#include "runtime/cpu/deltanet/DeltaNetHead.inc"

} // namespace scalar

Kernels scalarKernels() { return scalar::makeKernels(); }

} // namespace tpc::rt::cpu::dn
