//===- PrecisionTest.cpp - activation rounding and the float32 reference ---===//
//
// Two properties the perplexity work relies on (docs/architecture.md, "Precision"):
//  - the float32 reference (MatmulOptions::f32Reference) computes dequantized W . x with f32 activations,
//    for every weight type, in matmul and matmulId alike, while the quantized path differs from it;
//  - Q6_K rows are dotted with 32-element activation blocks (ActQ8), so an outlier costs precision in its
//    own block only. With one scale per 256 elements (Q8_K) the small values next to an outlier rounded to
//    a few levels and the product lost about ten times more.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/quant/Quant.h"
#include "runtime/ggml/Quant.h"
#include "test/runtime/cpu/KernelRef.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace tpc;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

/// n rows of type t quantized from random floats (random blocks for the types without a quantizer),
/// and their dequantized values.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  size_t stride;
  Weights(GGMLType t, int64_t n, int64_t k, uint32_t seed) : stride(rowBytes(t, k)) {
    bytes.resize(stride * n);
    values.resize(static_cast<size_t>(n * k));
    std::vector<float> src = randomFloats(n * k, seed, 0.1f);
    std::mt19937 rng(seed);
    for (int64_t r = 0; r < n; ++r) {
      uint8_t *row = bytes.data() + r * stride;
      if (supportsQuantize(t)) {
        quantizeRow(t, src.data() + r * k, row, k);
      } else { // IQ4_NL / MXFP4: random nibbles, a sane scale
        for (size_t b = 0; b < stride; ++b)
          row[b] = static_cast<uint8_t>(rng());
        for (size_t off = 0; off < stride; off += ggmlTypeInfo(t).blockBytes) {
          if (isGridType(t)) { // IQ1_M keeps d in its scale words
            setGridHalf(t, row + off, 0x1400);
            continue;
          }
          row[off] = t == GGMLType::MXFP4 ? 121 : 0, row[off + 1] = t == GGMLType::MXFP4 ? row[off + 1] : 0x14;
        }
      }
      dequantizeRow(t, row, values.data() + r * k, k);
    }
  }
};

/// Largest |y - W . x| over |W| . |x| per output (the double-precision product of dequantized W and f32 x).
double worstRelativeError(const Weights &w, const std::vector<float> &x, const float *y, int64_t n, int64_t k,
                          int64_t m, const int32_t *xRows = nullptr) {
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, mag = 0;
      const float *xr = x.data() + (xRows ? xRows[i] : i) * k;
      for (int64_t j = 0; j < k; ++j) {
        s += double(w.values[r * k + j]) * xr[j];
        mag += std::fabs(double(w.values[r * k + j]) * xr[j]);
      }
      worst = std::max(worst, std::fabs(y[i * n + r] - s) / (mag + 1e-30));
    }
  return worst;
}

/// The arguments of y = x . W^T for m tokens (dense rows).
MatmulArgs productArgs(const Weights &w, GGMLType t, int64_t n, int64_t k, const std::vector<float> &x, int64_t m,
                       std::vector<float> &y) {
  MatmulArgs a;
  a.w = w.bytes.data();
  a.wType = t;
  a.n = n;
  a.k = k;
  a.wRowStride = w.stride;
  a.x = x.data();
  a.m = m;
  a.xRowStride = k;
  a.y = y.data();
  a.yRowStride = n;
  return a;
}

} // namespace

class F32Reference : public ::testing::TestWithParam<GGMLType> {};

// The reference mode leaves only f32 rounding (~1e-7 of sum |w x|), for decode and prefill shapes and any
// thread count; the quantized path on the same inputs is at least ten times further off (8-bit x), so the
// flag demonstrably changes the computation.
TEST_P(F32Reference, MatmulEqualsDequantizedProduct) {
  const GGMLType t = GetParam();
  const int64_t k = 512, n = 37;
  const Weights w(t, n, k, 11 + static_cast<uint32_t>(t));
  for (int64_t m : {1, 4, 70}) {
    const std::vector<float> x = randomFloats(m * k, 5 + static_cast<uint32_t>(m));
    for (int threads : {1, 3}) {
      ThreadGroup g(threads);
      std::vector<float> y(m * n), yq(m * n);
      MatmulArgs a = productArgs(w, t, n, k, x, m, y);
      a.f32Reference = true;
      matmul(a, g);
      EXPECT_LT(worstRelativeError(w, x, y.data(), n, k, m), 2e-6) << ggmlTypeName(t) << " m " << m;
      a.f32Reference = false;
      a.y = yq.data();
      matmul(a, g);
      if (activationFormat(t) != ActFormat::F32)
        EXPECT_GT(worstRelativeError(w, x, yq.data(), n, k, m), 2e-5) << ggmlTypeName(t) << " m " << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, F32Reference, ::testing::ValuesIn(supportedTypes()),
                         [](const auto &info) { return std::string(ggmlTypeName(info.param)); });

// Expert products in the reference mode: every routed entry (any order, repeated experts, shared inputs)
// gets the dequantized product of its expert.
TEST(F32ReferenceExperts, MatmulIdGivesEachEntrysProduct) {
  const int64_t k = 256, n = 19, experts = 3, xCount = 4;
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q6_K, GGMLType::Q8_0}) {
    SCOPED_TRACE(ggmlTypeName(t));
    std::vector<Weights> ws;
    std::vector<uint8_t> all;
    for (int e = 0; e < experts; ++e) {
      ws.emplace_back(t, n, k, 40 + e);
      all.insert(all.end(), ws.back().bytes.begin(), ws.back().bytes.end());
    }
    const std::vector<float> x = randomFloats(xCount * k, 9);
    const std::vector<int32_t> exps = {2, 2, 0}, xRows = {3, 1, 0}, yRows = {0, 1, 2};
    ThreadGroup g(2);
    std::vector<float> y(3 * n, -1.0f);
    MatmulIdArgs a;
    a.w = all.data();
    a.wType = t;
    a.n = n;
    a.k = k;
    a.wRowStride = ws[0].stride;
    a.wExpertStride = ws[0].stride * n;
    a.nExperts = experts;
    a.x = x.data();
    a.xRowStride = k;
    a.xRowCount = xCount;
    a.y = y.data();
    a.yRowStride = n;
    a.experts = exps.data();
    a.xRows = xRows.data();
    a.yRows = yRows.data();
    a.count = 3;
    a.f32Reference = true;
    matmulId(a, g);
    for (size_t i = 0; i < exps.size(); ++i)
      EXPECT_LT(worstRelativeError(ws[exps[i]], x, y.data() + yRows[i] * n, n, k, 1, &xRows[i]), 2e-6) << i;
  }
}

// One large value per 256 elements (Gemma 3's FFN down input has such outliers), alone in its 32-element
// block: with 32-element activation blocks the other blocks keep their own fine scales and the Q6_K
// product stays within ~1.5% of the f32 reference; with one scale per 256 elements every small value
// rounded on the outlier's coarse grid (step 60/127) and the product was ~10% off.
TEST(ActivationBlocks, Q6KOutlierStaysInItsBlock) {
  const int64_t k = 2048, n = 64;
  const Weights w(GGMLType::Q6_K, n, k, 21);
  for (int64_t m : {4, 40}) { // row kernels and panels
    std::vector<float> x = randomFloats(m * k, 22);
    for (int64_t i = 0; i < m * k; i += 256) {
      std::fill(x.begin() + i, x.begin() + i + 32, 0.0f);
      x[i + 7] = 60.0f;
    }
    ThreadGroup g(2);
    std::vector<float> y(m * n), ref(m * n);
    MatmulArgs a = productArgs(w, GGMLType::Q6_K, n, k, x, m, y);
    matmul(a, g);
    a.y = ref.data();
    a.f32Reference = true;
    matmul(a, g);
    EXPECT_LT(relRms(y.data(), ref.data(), m * n), 0.015) << "m " << m;
  }
}
