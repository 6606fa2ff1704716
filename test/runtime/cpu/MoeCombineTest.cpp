//===- MoeCombineTest.cpp - MoE down projection with expert_combine per column range ===//
//
// opMulMatIdCombine (the down projection's products combined in a per-thread scratch, never written)
// against the two steps it replaces, opMulMatId then opExpertCombine, at every ISA this CPU can run (the
// others skip visibly). Both run the same kernels on the same token sets and the same combineRow, so the
// results must be equal bit for bit: panels for experts with many tokens, row kernels for the others,
// weight types with and without panels, one or two factors, every expert or an expert-parallel share
// (other devices' experts are zero rows), one thread or three, and token counts below the fusion's
// threshold (the steps as planned), at it and far above it (several column ranges, a scratch of many
// rows). The fallbacks (y over x, the float32 reference) and the session's fusion decision are checked too.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/ops/Ops.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"
#include "test/runtime/cpu/MoeTestUtil.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

/// Routing of t tokens to `slots` slots over `experts` experts: expert 1 takes every token's first slot
/// (many tokens: panels), the others spread over the rest (a few tokens each: row kernels).
std::vector<int32_t> routing(int64_t t, int64_t slots, int64_t experts) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t s = 0; s < slots; ++s)
      ids.push_back(static_cast<int32_t>(s == 0 ? 1 : (1 + s + i * 3 + (i % 5)) % experts));
  return ids;
}

class MoeCombineIsa : public ::testing::TestWithParam<Isa> {};

// matmulIdColumns with combineRow as its consumer against matmulId then combineRow per token, at one ISA.
TEST_P(MoeCombineIsa, ColumnJobEqualsMatmulIdBitForBit) {
  if (!isaAvailable(GetParam()))
    GTEST_SKIP() << "this CPU cannot run the " << isaName(GetParam()) << " kernels";
  const int64_t k = 256, n = 80, slots = 4, eAll = 6; // n: two whole panels and a partial one
  for (GGMLType type : {GGMLType::Q4_K, GGMLType::Q8_0, GGMLType::IQ2_XXS, GGMLType::MXFP4, GGMLType::F32})
    for (int64_t t : {int64_t(1), int64_t(16), int64_t(300)})
      for (int threads : {1, 3})
        for (int64_t first : {int64_t(0), int64_t(2)}) { // every expert, or the share [2, 5)
          SCOPED_TRACE(std::string(ggmlTypeName(type)) + " tokens " + std::to_string(t) + " threads " +
                       std::to_string(threads) + " first expert " + std::to_string(first));
          const int64_t e = first == 0 ? eAll : 3;
          const std::vector<uint8_t> w = expertWeights(type, e, n, k, 41);
          const std::vector<int32_t> ids = routing(t, slots, eAll);
          const std::vector<float> x = randomFloats(t * slots * k, 42), m = randomFloats(t * slots, 43);
          std::vector<int32_t> exps, xRows, yRows;
          for (int64_t r = 0; r < t * slots; ++r)
            if (ids[r] - first >= 0 && ids[r] - first < e) {
              exps.push_back(static_cast<int32_t>(ids[r] - first));
              xRows.push_back(static_cast<int32_t>(r));
              yRows.push_back(static_cast<int32_t>(r));
            }
          std::vector<float> products(t * slots * n, 0.0f), want(t * n), got(t * n, NAN);
          MatmulIdArgs a;
          a.isa = GetParam();
          a.w = w.data();
          a.wType = type;
          a.n = n;
          a.k = k;
          a.wRowStride = rowBytes(type, k);
          a.wExpertStride = a.wRowStride * n;
          a.nExperts = e;
          a.x = x.data();
          a.xRowStride = k;
          a.xRowCount = t * slots;
          a.y = products.data();
          a.yRowStride = n;
          a.experts = exps.data();
          a.xRows = xRows.data();
          a.yRows = yRows.data();
          a.count = static_cast<int64_t>(exps.size());
          ThreadGroup group(threads);
          matmulId(a, group);
          auto combine = [&](const float *base, size_t stride, int64_t c0, int64_t c1, float *y) {
            for (int64_t ti = 0; ti < t; ++ti) {
              const float *rows[slots];
              for (int64_t j = 0; j < slots; ++j) {
                const int64_t r = ti * slots + j;
                rows[j] = ids[r] - first >= 0 && ids[r] - first < e ? base + r * stride : nullptr;
              }
              combineRow(rows, m.data() + ti * slots, slots, c1 - c0, y + ti * n + c0);
            }
          };
          combine(products.data(), n, 0, n, want.data());
          matmulIdColumns(
              a, t * slots,
              [&](const float *scratch, size_t stride, int64_t c0, int64_t c1) { combine(scratch, stride, c0, c1, got.data()); },
              group);
          int64_t nonzero = 0;
          for (size_t j = 0; j < want.size(); ++j) {
            ASSERT_EQ(floatToBits(got[j]), floatToBits(want[j])) << "element " << j;
            nonzero += want[j] != 0.0f;
          }
          EXPECT_GT(nonzero, static_cast<int64_t>(want.size()) / 2); // the products arrived, not zeros
          // An entry's row past the scratch's rows (the last entry's row is the largest).
          EXPECT_THROW(matmulIdColumns(a, yRows.back(), [](const float *, size_t, int64_t, int64_t) {}, group),
                       std::invalid_argument);
        }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MoeCombineIsa,
                         ::testing::Values(Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI),
                         [](const ::testing::TestParamInfo<Isa> &i) { return std::string(isaName(i.param)); });

/// opMulMatIdCombine and the two steps (opMulMatId, opExpertCombine) on the same operands, at the process's
/// kernel level; the products buffer of the fused op must stay unwritten (NaN) where it fuses.
void expectOpEqualsSteps(GGMLType type, int64_t t, int threads, int64_t first, int factors, bool aliasYOverX,
                         bool f32Reference) {
  const int64_t k = 256, n = 80, slots = 4, eAll = 6;
  const int64_t e = first == 0 ? eAll : 3;
  const std::vector<uint8_t> w = expertWeights(type, e, n, k, 51);
  std::vector<int32_t> ids = routing(t, slots, eAll);
  std::vector<float> xv = randomFloats(t * slots * k, 52), m1 = randomFloats(t * slots, 53),
                     m2 = randomFloats(t * slots, 54);
  ThreadGroup group(threads);
  TensorRef wr{const_cast<uint8_t *>(w.data()), DType::F32, true, type, {e, n, k}};
  TensorRef idr{ids.data(), DType::I32, false, GGMLType::I32, {t, slots}};
  std::vector<TensorRef> muls = {TensorRef{m1.data(), DType::F32, false, GGMLType::F32, {t, slots}}};
  if (factors == 2)
    muls.push_back(TensorRef{m2.data(), DType::F32, false, GGMLType::F32, {t, slots}});
  std::vector<float> xCopy = xv, products(t * slots * n), want(t * n);
  TensorRef xc{xCopy.data(), DType::F32, false, GGMLType::F32, {t, slots, k}};
  TensorRef pr{products.data(), DType::F32, false, GGMLType::F32, {t, slots, n}};
  ActivationCache cacheA, cacheB;
  opMulMatId(xc, wr, idr, pr, first, group, &cacheA, f32Reference);
  opExpertCombine(pr, muls, TensorRef{want.data(), DType::F32, false, GGMLType::F32, {t, n}}, group);
  std::vector<float> fusedProducts(t * slots * n, NAN), own(t * n, NAN);
  TensorRef x{xv.data(), DType::F32, false, GGMLType::F32, {t, slots, k}};
  TensorRef y{aliasYOverX ? xv.data() : own.data(), DType::F32, false, GGMLType::F32, {t, n}};
  opMulMatIdCombine(x, wr, idr, TensorRef{fusedProducts.data(), DType::F32, false, GGMLType::F32, {t, slots, n}},
                    first, muls, y, group, &cacheB, f32Reference);
  const bool fused = !aliasYOverX && !f32Reference && t >= kFusedCombineMinTokens;
  int64_t written = 0;
  for (float v : fusedProducts)
    written += !std::isnan(v);
  EXPECT_EQ(written, fused ? 0 : t * slots * n) << (fused ? "the fused job wrote the products" : "no fallback");
  const float *got = static_cast<const float *>(y.data);
  for (int64_t j = 0; j < t * n; ++j)
    ASSERT_EQ(floatToBits(got[j]), floatToBits(want[j])) << "element " << j;
}

TEST(MoeCombineOps, FusedOpEqualsTheSteps) {
  for (GGMLType type : {GGMLType::Q4_K, GGMLType::Q3_K})
    for (int64_t t : {int64_t(3), kFusedCombineMinTokens, int64_t(200)})
      for (int64_t first : {int64_t(0), int64_t(2)}) {
        SCOPED_TRACE(std::string(ggmlTypeName(type)) + " tokens " + std::to_string(t) + " first expert " +
                     std::to_string(first));
        expectOpEqualsSteps(type, t, 2, first, first == 0 ? 1 : 2, false, false);
      }
}

TEST(MoeCombineOps, FallbacksEqualTheSteps) {
  {
    SCOPED_TRACE("y planned over x");
    expectOpEqualsSteps(GGMLType::Q4_K, 40, 2, 0, 1, true, false);
  }
  {
    SCOPED_TRACE("float32 reference");
    expectOpEqualsSteps(GGMLType::Q4_K, 40, 2, 0, 1, false, true);
  }
}

TEST(MoeCombineOps, CombineRowAddsSlotsInOrder) {
  // combineRow's arithmetic: 0 + m0 x0 + m1 x1 (+ m2 * 0 for a null row), left to right in float.
  const float x0[3] = {1e8f, 1.0f, -2.0f}, x1[3] = {-1e8f, 3.0f, 0.5f};
  const float *rows[3] = {x0, x1, nullptr};
  const float m[3] = {1.0f, 1.0f, -5.0f};
  float y[3];
  combineRow(rows, m, 3, 3, y);
  EXPECT_EQ(y[0], 0.0f); // (1e8 - 1e8) exactly; 1 + 3 and -2 + 0.5 below
  EXPECT_EQ(y[1], 4.0f);
  EXPECT_EQ(y[2], -1.5f);
  // Left to right: (1e8 + 1) - 1e8 is 0 in float (1e8 + 1 rounds to 1e8); another order would give 1.
  const float a[1] = {1e8f}, b[1] = {1.0f}, c[1] = {-1e8f};
  const float *order[3] = {a, b, c};
  const float ones[3] = {1.0f, 1.0f, 1.0f};
  combineRow(order, ones, 3, 1, y);
  EXPECT_EQ(y[0], 0.0f);
}

// The session's fusion decision: a lone MulMatId directly followed by the EXPERT_COMBINE that alone reads
// its products.
TEST(MoeCombineSteps, PairsOnlyACombineThatIsTheSoleReader) {
  const auto step = planStep;
  DevicePlan dp;
  // 0: x, 1: ids, 2: down weight, 3: products, 4: weights (factor), 5: combined, 6: gate weight, 7: g.
  dp.steps = {step(OpKind::MulMatId, {0, 6, 1}, {7}), step(OpKind::MulMatId, {7, 2, 1}, {3}),
              step(OpKind::ExpertCombine, {3, 4}, {5})};
  std::vector<size_t> fused = downCombineSteps(dp, matmulBatchEnds(dp));
  EXPECT_EQ(fused, (std::vector<size_t>{0, 2, 0}));
  dp.steps.push_back(step(OpKind::Add, {5, 3}, {8})); // the products read again: they must be written
  EXPECT_EQ(downCombineSteps(dp, matmulBatchEnds(dp))[1], 0u);
  dp.steps.pop_back();
  dp.steps[2].inputs = {4, 3}; // the products as a factor, not as x
  EXPECT_EQ(downCombineSteps(dp, matmulBatchEnds(dp))[1], 0u);
  dp.steps[2].inputs = {3, 4};
  std::swap(dp.steps[1], dp.steps[2]); // the combine before its producer
  EXPECT_EQ(downCombineSteps(dp, matmulBatchEnds(dp)), (std::vector<size_t>{0, 0, 0}));
}

} // namespace
