//===- VectorOps.h - f32 vector primitives with SIMD dispatch -----*- C++ -*-===//
//
// The f32 inner loops of the executor's ops that the compiler cannot vectorise well for baseline x86-64
// (the library is built without -march): dot products and scaled adds, as in attention's score and
// weighted-sum loops. Dispatched once to AVX2 where the CPU has it (and TPC_CPU_ISA allows), else portable
// loops; both do the same float operations in the same order, so they give the same bits.
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CPU_VECTOROPS_H
#define TPC_RUNTIME_CPU_VECTOROPS_H

#include <cstdint>

namespace tpc::rt::cpu {

/// sum_i a[i] * b[i].
float dotF32(const float *a, const float *b, int64_t n);

/// y[i] += w * x[i].
void axpyF32(float w, const float *x, float *y, int64_t n);

} // namespace tpc::rt::cpu

#endif // TPC_RUNTIME_CPU_VECTOROPS_H
