//===- HalfFields.h - where a block keeps its f16 scales (CUDA tests) -*- C++ -*-===//
//
// Shared by the host-only decoder tests (QuantChunkTest.cu) and the GPU tests (CudaTestUtil.h): random
// block bytes are valid quants everywhere except in the f16 scale fields, where they could be inf or NaN.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_CUDA_HALFFIELDS_H
#define TPC_TEST_CUDA_HALFFIELDS_H

#include "runtime/ggml/GGMLTypes.h"

#include <vector>

namespace tpc::rt::test {

/// Byte offsets of the f16 scale fields inside one block of `t` (random bytes there could be inf/NaN).
inline std::vector<int> halfFields(GGMLType t) {
  switch (t) {
  case GGMLType::Q4_0:
  case GGMLType::Q5_0:
  case GGMLType::Q8_0:
  case GGMLType::IQ4_NL:
  case GGMLType::IQ4_XS:
    return {0};
  case GGMLType::Q4_1:
  case GGMLType::Q5_1:
  case GGMLType::Q4_K:
  case GGMLType::Q5_K:
    return {0, 2};
  case GGMLType::Q2_K:
    return {80, 82};
  case GGMLType::Q3_K:
    return {108};
  case GGMLType::Q6_K:
    return {208};
  default:
    return {};
  }
}

} // namespace tpc::rt::test

#endif // TPC_TEST_CUDA_HALFFIELDS_H
