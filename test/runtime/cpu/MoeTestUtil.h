//===- MoeTestUtil.h - helpers of the fused MoE jobs' tests -------*- C++ -*-===//
//
// MoeGluTest and MoeCombineTest: stacked expert weights of any type, and bare plan steps for the session's
// fusion decisions. Test-only.
//===----------------------------------------------------------------------===//
#ifndef TPC_TEST_RUNTIME_CPU_MOETESTUTIL_H
#define TPC_TEST_RUNTIME_CPU_MOETESTUTIL_H

#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"
#include "runtime/plan/PlanFormat.h"
#include "test/common/GridBlocks.h"
#include "test/runtime/cpu/TestUtil.h"

#include <cstring>
#include <random>
#include <vector>

namespace tpc::rt::cpu::test {

/// E experts of n rows of k, type t, packed densely ([E][n] rows). Types without a quantizer here (MXFP4, the
/// grid types) get random blocks with a sane scale.
inline std::vector<uint8_t> expertWeights(GGMLType t, int64_t e, int64_t n, int64_t k, uint32_t seed) {
  const size_t rb = rowBytes(t, k);
  std::vector<uint8_t> w(rb * static_cast<size_t>(e * n));
  const std::vector<float> src = randomFloats(e * n * k, seed, 0.1f);
  std::mt19937 rng(seed);
  const GGMLTypeInfo &info = ggmlTypeInfo(t);
  for (int64_t r = 0; r < e * n; ++r) {
    uint8_t *dst = w.data() + rb * r;
    if (t == GGMLType::F32) {
      std::memcpy(dst, src.data() + r * k, rb);
    } else if (supportsQuantize(t)) {
      quantizeRow(t, src.data() + r * k, dst, k);
    } else {
      for (size_t off = 0; off < rb; off += info.blockBytes) {
        for (uint32_t b = 0; b < info.blockBytes; ++b)
          dst[off + b] = static_cast<uint8_t>(rng());
        if (t == GGMLType::MXFP4)
          dst[off] = static_cast<uint8_t>(120 + rng() % 4);
        else
          tpc::gridtest::setGridHalf(t, dst + off, fp32ToFp16(0.001f * (1 + rng() % 8)));
      }
    }
  }
  return w;
}

/// A step of `op` reading `in` and writing `out`, nothing else set (the fusion decisions read only these).
inline Step planStep(OpKind op, std::vector<int32_t> in, std::vector<int32_t> out) {
  Step s;
  s.op = op;
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  return s;
}

} // namespace tpc::rt::cpu::test

#endif // TPC_TEST_RUNTIME_CPU_MOETESTUTIL_H
