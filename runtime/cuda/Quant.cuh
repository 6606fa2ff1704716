//===- Quant.cuh - the weight formats the CUDA kernels read -*- CUDA -*-===//
//
// One header for the kernels: the chunk decoders (QuantChunk.cuh: loadChunk, dotChunk), the integer
// units (QuantInt.cuh: IntDot, hasIntDot; the IQ grid types' decoder and units in QuantGrid.cuh, which it
// includes) and dispatchType, the list of types every kernel reads (a type
// added here must have a loadChunk decoder; cudaSupportsType and the session's weight check follow it).
//===----------------------------------------------------------------------===//
#ifndef TPC_RUNTIME_CUDA_QUANT_CUH
#define TPC_RUNTIME_CUDA_QUANT_CUH

#include "runtime/cuda/QuantChunk.cuh"
#include "runtime/cuda/QuantInt.cuh"

namespace tpc::rt::cuda {

/// Calls f.template operator()<T>() for a runtime type; returns false for an unsupported type.
template <typename F> bool dispatchType(GGMLType t, F &&f) {
  switch (t) {
#define TPC_CASE(T)                                                                                          \
  case GGMLType::T:                                                                                          \
    f.template operator()<GGMLType::T>();                                                                    \
    return true;
    TPC_CASE(F32)
    TPC_CASE(F16)
    TPC_CASE(BF16)
    TPC_CASE(Q4_0)
    TPC_CASE(Q4_1)
    TPC_CASE(Q5_0)
    TPC_CASE(Q5_1)
    TPC_CASE(Q8_0)
    TPC_CASE(Q4_K)
    TPC_CASE(Q5_K)
    TPC_CASE(Q6_K)
    TPC_CASE(Q2_K)
    TPC_CASE(Q3_K)
    TPC_CASE(IQ4_NL)
    TPC_CASE(IQ4_XS)
    TPC_CASE(MXFP4)
    TPC_CASE(IQ2_XXS)
    TPC_CASE(IQ2_XS)
    TPC_CASE(IQ2_S)
    TPC_CASE(IQ3_XXS)
    TPC_CASE(IQ3_S)
    TPC_CASE(IQ1_S)
    TPC_CASE(IQ1_M)
#undef TPC_CASE
  default:
    return false;
  }
}

} // namespace tpc::rt::cuda

#endif // TPC_RUNTIME_CUDA_QUANT_CUH
