//===- MoeGluTest.cpp - MoE gate/up with the GLU applied per tile -----------===//
//
// matmulIdGlu (the fused MoE gate/up job) against the unfused steps, at every ISA this CPU can run (the
// others skip visibly): gate/up products through matmulIdBatch, then the GLU row kernel of the same ISA.
// The fused job runs the same kernels on the same token sets (panels for an expert with many tokens, row
// kernels for the others) and the same GLU kernel, so the results must be equal bit for bit, which is
// stricter than the GLU tolerance. Through opGateUpGlu: a merged gate_up weight ([gate | up] rows), an
// expert-parallel share (other devices' experts give zeros) and a GLU output placed over the input (the
// unfused fallback) must equal opMulMatId + opGlu; the dense FFN's gate/up (Matmul) opMatmul + opGlu.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/Matmul.h"
#include "runtime/cpu/ew/Elementwise.h"
#include "runtime/cpu/ops/Ops.h"
#include "runtime/ggml/Blocks.h"
#include "runtime/ggml/Quant.h"
#include "test/runtime/cpu/MoeTestUtil.h"
#include "test/runtime/cpu/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tpc;
using namespace tpc::rt;
using namespace tpc::rt::cpu;
using namespace tpc::rt::cpu::test;

namespace {

/// Routing of xCount tokens to 2 slots: expert 1 takes every token's first slot (the panel path), the
/// second slots spread over experts 0, 2, 3 (a few tokens each: the row path).
void routing(int64_t xCount, std::vector<int32_t> &exps, std::vector<int32_t> &xRows, std::vector<int32_t> &yRows) {
  for (int64_t i = 0; i < xCount; ++i)
    for (int s = 0; s < 2; ++s) {
      exps.push_back(s == 0 ? 1 : (i % 7 == 0 ? 3 : i % 5 == 0 ? 0 : 2));
      xRows.push_back(static_cast<int32_t>(i));
      yRows.push_back(static_cast<int32_t>(2 * i + s));
    }
}

class MoeGluIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(MoeGluIsa, FusedEqualsUnfusedBitForBit) {
  if (!isaAvailable(GetParam()))
    GTEST_SKIP() << "this CPU cannot run the " << isaName(GetParam()) << " kernels";
  const ElementwiseKernels &ew = elementwiseKernels(GetParam());
  const int64_t k = 256, n = 80, e = 4; // n: two whole panels and a partial one
  for (auto [tg, tu] : {std::pair<GGMLType, GGMLType>{GGMLType::Q4_K, GGMLType::Q6_K},
                        {GGMLType::Q8_0, GGMLType::Q8_0},
                        {GGMLType::F32, GGMLType::F32}})
    for (int64_t xCount : {int64_t(3), int64_t(48)})
      for (UnaryFn fn : {UnaryFn::Silu, UnaryFn::GeluTanh})
        for (int threads : {1, 3}) {
          SCOPED_TRACE(std::string(ggmlTypeName(tg)) + "/" + ggmlTypeName(tu) + " tokens " +
                       std::to_string(xCount) + " threads " + std::to_string(threads));
          const std::vector<uint8_t> wg = expertWeights(tg, e, n, k, 7), wu = expertWeights(tu, e, n, k, 8);
          const std::vector<float> x = randomFloats(xCount * k, 9);
          std::vector<int32_t> exps, xRows, yRows;
          routing(xCount, exps, xRows, yRows);
          const int64_t rows = static_cast<int64_t>(exps.size());
          std::vector<float> g(rows * n), u(rows * n), want(rows * n), got(rows * n, NAN);
          ThreadGroup group(threads);
          ActivationCache cache;
          auto args = [&](GGMLType t, const std::vector<uint8_t> &w, float *y) {
            MatmulIdArgs a;
            a.isa = GetParam();
            a.cache = &cache;
            a.w = w.data();
            a.wType = t;
            a.n = n;
            a.k = k;
            a.wRowStride = rowBytes(t, k);
            a.wExpertStride = a.wRowStride * n;
            a.nExperts = e;
            a.x = x.data();
            a.xRowStride = k;
            a.xRowCount = xCount;
            a.y = y;
            a.yRowStride = n;
            a.experts = exps.data();
            a.xRows = xRows.data();
            a.yRows = yRows.data();
            a.count = rows;
            return a;
          };
          const MatmulIdArgs parts[2] = {args(tg, wg, g.data()), args(tu, wu, u.data())};
          matmulIdBatch(parts, 2, group);
          ew.glu(fn, g.data(), u.data(), want.data(), rows * n);
          matmulIdGlu(args(tg, wg, got.data()), args(tu, wu, got.data()), fn, ew.glu, group);
          for (size_t j = 0; j < want.size(); ++j)
            ASSERT_EQ(floatToBits(got[j]), floatToBits(want[j])) << "element " << j;
          // Against the definition: the GLU of the products within the GLU bound (a real check that the
          // pairs of gate and up are the matching ones).
          for (size_t j = 0; j < want.size(); j += 13) {
            const double gv = g[j], ref = (fn == UnaryFn::Silu ? gv / (1 + std::exp(-gv))
                                                                 : gv / (1 + std::exp(-1.5957691216057308 *
                                                                                      (gv + 0.044715 * gv * gv * gv)))) *
                                          u[j];
            ASSERT_NEAR(got[j], ref, 1e-6 * std::fabs(ref) + 2e-7 * std::fabs(gv * u[j]) + 1e-30);
          }
          MatmulIdArgs bad = args(tu, wu, got.data());
          bad.n = n - 1;
          EXPECT_THROW(matmulIdGlu(args(tg, wg, got.data()), bad, fn, ew.glu, group), std::invalid_argument);
        }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MoeGluIsa,
                         ::testing::Values(Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AVX512VNNI),
                         [](const ::testing::TestParamInfo<Isa> &i) { return std::string(isaName(i.param)); });

TEST(MoeGluOps, MergedGateUpExpertShareAndAliasedOutput) {
  const int64_t k = 256, f = 48, eAll = 4, t = 40;
  const GGMLType type = GGMLType::Q8_0;
  // [E][2F] rows: gate rows then up rows per expert (a device's slice of a merged gate_up weight).
  std::vector<uint8_t> w = expertWeights(type, eAll, 2 * f, k, 21);
  std::vector<int32_t> ids(t * 2);
  for (int64_t i = 0; i < t; ++i) {
    ids[2 * i] = 1;
    ids[2 * i + 1] = static_cast<int32_t>(i % 4 == 1 ? 2 : i % 4);
  }
  const std::vector<float> xv = randomFloats(t * k, 22);
  ThreadGroup group(2);
  for (int64_t first : {int64_t(0), int64_t(2)}) // all experts, or the share [2, 4) of expert parallelism
    for (bool merged : {true, false})
      for (bool aliased : {false, true}) {
        SCOPED_TRACE(std::string(merged ? "merged" : "gate, up") + (aliased ? " aliased" : "") + " first " +
                     std::to_string(first));
        const int64_t e = first == 0 ? eAll : 2;
        const size_t rb = rowBytes(type, k);
        const uint8_t *wBase = w.data() + rb * static_cast<size_t>(first * 2 * f);
        // Separate gate and up weights: copies of the merged halves.
        std::vector<uint8_t> wg, wu;
        for (int64_t ex = 0; ex < e; ++ex) {
          const uint8_t *p = wBase + rb * static_cast<size_t>(ex * 2 * f);
          wg.insert(wg.end(), p, p + rb * f);
          wu.insert(wu.end(), p + rb * f, p + rb * 2 * f);
        }
        std::vector<float> xBuf = xv, xCopy = xv;
        TensorRef idr{ids.data(), DType::I32, false, GGMLType::I32, {t, 2}};
        std::vector<float> want(t * 2 * f), gu(t * 2 * 2 * f), g(t * 2 * f), u(t * 2 * f), yOwn(t * 2 * f, NAN);
        // The unfused steps on an untouched copy of x.
        TensorRef xc{xCopy.data(), DType::F32, false, GGMLType::F32, {t, k}};
        if (merged) {
          TensorRef wr{const_cast<uint8_t *>(wBase), DType::F32, true, type, {e, 2 * f, k}};
          TensorRef gur{gu.data(), DType::F32, false, GGMLType::F32, {t, 2, 2 * f}};
          opMulMatId(xc, wr, idr, gur, first, group);
          opGlu(UnaryFn::Silu, gur, nullptr, TensorRef{want.data(), DType::F32, false, GGMLType::F32, {t, 2, f}},
                group);
        } else {
          TensorRef gr{g.data(), DType::F32, false, GGMLType::F32, {t, 2, f}};
          TensorRef ur{u.data(), DType::F32, false, GGMLType::F32, {t, 2, f}};
          opMulMatId(xc, TensorRef{wg.data(), DType::F32, true, type, {e, f, k}}, idr, gr, first, group);
          opMulMatId(xc, TensorRef{wu.data(), DType::F32, true, type, {e, f, k}}, idr, ur, first, group);
          opGlu(UnaryFn::Silu, gr, &ur, TensorRef{want.data(), DType::F32, false, GGMLType::F32, {t, 2, f}},
                group);
        }
        // The fused op; its y either its own buffer or over x (2F <= k floats per token fit).
        TensorRef x{xBuf.data(), DType::F32, false, GGMLType::F32, {t, k}};
        TensorRef y{aliased ? xBuf.data() : yOwn.data(), DType::F32, false, GGMLType::F32, {t, 2, f}};
        std::vector<float> sg(t * 2 * 2 * f), su(t * 2 * f);
        std::vector<std::vector<TensorRef>> ins, outs;
        if (merged) {
          ins = {{x, TensorRef{const_cast<uint8_t *>(wBase), DType::F32, true, type, {e, 2 * f, k}}, idr}};
          outs = {{TensorRef{sg.data(), DType::F32, false, GGMLType::F32, {t, 2, 2 * f}}}};
        } else {
          ins = {{x, TensorRef{wg.data(), DType::F32, true, type, {e, f, k}}, idr},
                 {x, TensorRef{wu.data(), DType::F32, true, type, {e, f, k}}, idr}};
          outs = {{TensorRef{sg.data(), DType::F32, false, GGMLType::F32, {t, 2, f}}},
                  {TensorRef{su.data(), DType::F32, false, GGMLType::F32, {t, 2, f}}}};
        }
        ActivationCache cache;
        opGateUpGlu(OpKind::MulMatId, ins, outs, {first, first}, UnaryFn::Silu, y, group, &cache);
        const float *got = static_cast<const float *>(y.data);
        int64_t zeros = 0;
        for (int64_t j = 0; j < t * 2 * f; ++j) {
          ASSERT_EQ(floatToBits(got[j]), floatToBits(want[j])) << "element " << j;
          zeros += got[j] == 0.0f;
        }
        // Experts 0 and 1 belong to another device in the share: their slots must be zeros.
        if (first == 2)
          EXPECT_GE(zeros, (t + t / 4) * f); // slot 0 (expert 1) and every fourth slot 1 (expert 0)
      }
}

TEST(MoeGluOps, DenseGateUpEqualsMatmulThenGlu) {
  const int64_t k = 256, f = 72;
  for (GGMLType type : {GGMLType::Q4_K, GGMLType::Q8_0})
    for (int64_t t : {int64_t(1), int64_t(5), int64_t(40)}) // decode, row kernels, panels
      for (bool merged : {false, true}) {
        SCOPED_TRACE(std::string(ggmlTypeName(type)) + " tokens " + std::to_string(t) + (merged ? " merged" : ""));
        std::vector<uint8_t> w = expertWeights(type, 1, 2 * f, k, 31); // [gate rows | up rows]
        const size_t half = rowBytes(type, k) * f;
        std::vector<uint8_t> wg(w.begin(), w.begin() + half), wu(w.begin() + half, w.end());
        std::vector<float> xv = randomFloats(t * k, 32), g(t * f), u(t * f), gu(t * 2 * f), want(t * f),
                           got(t * f, NAN);
        ThreadGroup group(2);
        TensorRef x{xv.data(), DType::F32, false, GGMLType::F32, {t, k}};
        TensorRef wgr{wg.data(), DType::F32, true, type, {f, k}}, wur{wu.data(), DType::F32, true, type, {f, k}};
        TensorRef wr{w.data(), DType::F32, true, type, {2 * f, k}};
        TensorRef gr{g.data(), DType::F32, false, GGMLType::F32, {t, f}};
        TensorRef ur{u.data(), DType::F32, false, GGMLType::F32, {t, f}};
        TensorRef gur{gu.data(), DType::F32, false, GGMLType::F32, {t, 2 * f}};
        TensorRef wantr{want.data(), DType::F32, false, GGMLType::F32, {t, f}};
        TensorRef y{got.data(), DType::F32, false, GGMLType::F32, {t, f}};
        ActivationCache cache;
        if (merged) {
          opMatmul(x, wr, gur, group);
          opGlu(UnaryFn::GeluTanh, gur, nullptr, wantr, group);
          opGateUpGlu(OpKind::Matmul, {{x, wr}}, {{gur}}, {}, UnaryFn::GeluTanh, y, group, &cache);
        } else {
          opMatmul(x, wgr, gr, group);
          opMatmul(x, wur, ur, group);
          opGlu(UnaryFn::GeluTanh, gr, &ur, wantr, group);
          opGateUpGlu(OpKind::Matmul, {{x, wgr}, {x, wur}}, {{gr}, {ur}}, {}, UnaryFn::GeluTanh, y, group, &cache);
        }
        for (int64_t j = 0; j < t * f; ++j)
          ASSERT_EQ(floatToBits(got[j]), floatToBits(want[j])) << "element " << j;
      }
}

// The session's fusion decision: gate/up (or merged gate_up) MulMatIds directly followed by their GLU, whose
// outputs nothing else reads.
TEST(MoeGluSteps, PairsOnlyAGluThatIsTheSoleReader) {
  const auto step = planStep;
  DevicePlan dp;
  // 0: x, 1: ids, 2/3: expert weights, 4: g, 5: u, 6: glu out, 7: merged weight, 8: gu, 9: glu out.
  dp.steps = {step(OpKind::MulMatId, {0, 2, 1}, {4}), step(OpKind::MulMatId, {0, 3, 1}, {5}),
              step(OpKind::Glu, {4, 5}, {6}),        step(OpKind::MulMatId, {6, 7, 1}, {8}),
              step(OpKind::Glu, {8}, {9})};
  std::vector<size_t> glu = gateUpGluSteps(dp, matmulBatchEnds(dp));
  EXPECT_EQ(glu, (std::vector<size_t>{2, 0, 0, 4, 0}));
  dp.steps[0].op = dp.steps[1].op = OpKind::Matmul; // a dense FFN's gate and up
  dp.steps[0].inputs.pop_back();
  dp.steps[1].inputs.pop_back();
  EXPECT_EQ(gateUpGluSteps(dp, matmulBatchEnds(dp))[0], 2u);
  dp.steps.push_back(step(OpKind::Add, {9, 5}, {10})); // u read again: gate/up must be written
  glu = gateUpGluSteps(dp, matmulBatchEnds(dp));
  EXPECT_EQ(glu, (std::vector<size_t>{0, 0, 0, 4, 0, 0}));
  std::swap(dp.steps[3], dp.steps[4]); // the GLU before its input's producer: no pair
  dp.steps[3].inputs = {6};
  glu = gateUpGluSteps(dp, matmulBatchEnds(dp));
  EXPECT_EQ(glu[4], 0u);
}

} // namespace
